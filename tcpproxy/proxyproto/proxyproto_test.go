package proxyproto

import (
	"bufio"
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

func read(s string) (Header, string, error) {
	r := bufio.NewReader(strings.NewReader(s))
	h, err := Read(r)
	rest := new(bytes.Buffer)
	_, _ = rest.ReadFrom(r)
	return h, rest.String(), err
}

func TestV1(t *testing.T) {
	ap := netip.MustParseAddrPort
	tests := []struct {
		in      string
		want    Header
		rest    string
		wantErr string
	}{
		{"PROXY TCP4 192.0.2.1 192.0.2.2 56324 443\r\nGET /", Header{Version: 1, Source: ap("192.0.2.1:56324"), Destination: ap("192.0.2.2:443")}, "GET /", ""},
		{"PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n", Header{Version: 1, Source: ap("[2001:db8::1]:1"), Destination: ap("[2001:db8::2]:65535")}, "", ""},
		{"PROXY UNKNOWN\r\nrest", Header{Version: 1, Local: true}, "rest", ""},
		{"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", Header{Version: 1, Local: true}, "", ""},
		{"PROXY TCP4 192.0.2.1 192.0.2.2 56324 443\n", Header{}, "", "CRLF"},
		{"PROXY TCP4 2001:db8::1 192.0.2.2 1 2\r\n", Header{}, "", "do not match"},
		{"PROXY TCP4 192.0.2.1 192.0.2.2 065 443\r\n", Header{}, "", "bad port"},
		{"PROXY TCP4 192.0.2.1 192.0.2.2 70000 443\r\n", Header{}, "", "bad port"},
		{"PROXY UDP4 192.0.2.1 192.0.2.2 1 2\r\n", Header{}, "", "unknown protocol"},
		{"PROXY TCP4 192.0.2.1\r\n", Header{}, "", "want PROXY"},
		{"PROXY " + strings.Repeat("x", 200), Header{}, "", "within 107"},
		{"GET / HTTP/1.1\r\n", Header{}, "", "no PROXY"},
	}
	for _, tt := range tests {
		h, rest, err := read(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: err = %v; want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || h != tt.want || rest != tt.rest {
			t.Errorf("%q: got %+v rest %q err %v; want %+v rest %q", tt.in, h, rest, err, tt.want, tt.rest)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, pair := range [][2]string{{"192.0.2.1:1234", "192.0.2.9:443"}, {"[2001:db8::1]:5", "[2001:db8::9]:80"}} {
		src, dst := netip.MustParseAddrPort(pair[0]), netip.MustParseAddrPort(pair[1])
		for v, b := range map[int][]byte{1: AppendV1(nil, src, dst), 2: AppendV2(nil, src, dst)} {
			h, rest, err := read(string(b) + "payload")
			if err != nil || h.Version != v || h.Source != src || h.Destination != dst || rest != "payload" {
				t.Errorf("v%d %v→%v: got %+v rest %q err %v", v, src, dst, h, rest, err)
			}
		}
	}
	h, _, err := read(string(AppendV2(nil, netip.AddrPort{}, netip.AddrPort{})))
	if err != nil || !h.Local {
		t.Errorf("LOCAL v2: %+v %v", h, err)
	}
}

func TestV2Malformed(t *testing.T) {
	good := AppendV2(nil, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2"))
	for name, b := range map[string][]byte{
		"bad version":    append(append([]byte{}, good[:12]...), append([]byte{0x31}, good[13:]...)...),
		"bad command":    append(append([]byte{}, good[:12]...), append([]byte{0x2f}, good[13:]...)...),
		"short body":     good[:len(good)-3],
		"short v4 block": append(append([]byte{}, good[:14]...), 0, 4, 1, 2, 3, 4),
		"unknown family": append(append([]byte{}, good[:13]...), append([]byte{0x31}, good[14:]...)...),
		"bad signature":  append([]byte("\r\n\r\n\x00\r\nQUIX\n"), good[12:]...),
	} {
		if _, _, err := read(string(b)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzRead: no input panics; whatever parses re-encodes to a header that
// parses to the same addresses.
func FuzzRead(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.1 192.0.2.2 56324 443\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(AppendV2(nil, netip.MustParseAddrPort("[2001:db8::1]:5"), netip.MustParseAddrPort("[2001:db8::9]:80")))
	f.Add(AppendV2(nil, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2")))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := Read(bufio.NewReader(bytes.NewReader(in)))
		if err != nil || h.Local {
			return
		}
		for _, enc := range [][]byte{AppendV1(nil, h.Source, h.Destination), AppendV2(nil, h.Source, h.Destination)} {
			h2, err := Read(bufio.NewReader(bytes.NewReader(enc)))
			if err != nil || h2.Source != h.Source || h2.Destination != h.Destination {
				if h.Source.Addr().Is4In6() || h.Destination.Addr().Is4In6() {
					return // v4-mapped v6 addresses re-encode as IPv4
				}
				t.Fatalf("re-encoding %+v: %+v, %v", h, h2, err)
			}
		}
	})
}
