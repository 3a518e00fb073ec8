package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
	f.Add([]byte("PROXY TCP4 192.0.2.1 192.0.2.2 1 2 extra\r\nGET"))
	f.Add([]byte("PROXY TCP6 2001:db8::1  2001:db8::2 1 2\r\n"))
	f.Add([]byte("PROXY UNKNOWN " + strings.Repeat("x", 92) + "\r\nGET"))
	// A v2 header with a TLV after its IPv4 addresses, then a request.
	tlv := AppendV2(nil, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2"))
	tlv[15] += 4
	f.Add(append(tlv, 0x04, 0x00, 0x01, 0xff, 'G', 'E', 'T'))
	f.Fuzz(func(t *testing.T, in []byte) {
		// The same answer as the byte-at-a-time reader it replaced, from
		// a listener's small buffer and a large one.
		for _, size := range []int{readerSize, 4096} {
			r, ref := bufio.NewReaderSize(bytes.NewReader(in), size), bufio.NewReader(bytes.NewReader(in))
			h, err := Read(r)
			hr, errr := refRead(ref)
			if (err == nil) != (errr == nil) || errors.Is(err, ErrNoHeader) != errors.Is(errr, ErrNoHeader) || h != hr {
				t.Fatalf("buffer %d: %+v, %v; the reference reads %+v, %v", size, h, err, hr, errr)
			}
			if err == nil {
				rest, _ := io.ReadAll(r)
				restr, _ := io.ReadAll(ref)
				if !bytes.Equal(rest, restr) {
					t.Fatalf("buffer %d: %d bytes left after the header; the reference leaves %d", size, len(rest), len(restr))
				}
			}
		}
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

// refRead is Read as it was first written, reading a byte at a time and
// copying the header: the fuzz test's reference.
func refRead(r *bufio.Reader) (Header, error) {
	peek, err := r.Peek(1)
	if err != nil {
		return Header{}, fmt.Errorf("proxyproto: read: %w", err)
	}
	switch peek[0] {
	case 'P':
		return refReadV1(r)
	case '\r':
		return refReadV2(r)
	}
	return Header{}, ErrNoHeader
}

func refReadV1(r *bufio.Reader) (Header, error) {
	line := make([]byte, 0, maxV1)
	for len(line) < maxV1 {
		b, err := r.ReadByte()
		if err != nil {
			return Header{}, fmt.Errorf("proxyproto: v1: %w", err)
		}
		line = append(line, b)
		if b == '\n' {
			break
		}
	}
	if len(line) < 2 || !bytes.HasSuffix(line, []byte("\r\n")) {
		return Header{}, errors.New("proxyproto: v1: header not terminated by CRLF within 107 bytes")
	}
	f := bytes.Split(line[:len(line)-2], []byte(" "))
	if string(f[0]) != "PROXY" || len(f) < 2 {
		return Header{}, ErrNoHeader
	}
	h := Header{Version: 1}
	switch string(f[1]) {
	case "UNKNOWN":
		h.Local = true
		return h, nil
	case "TCP4", "TCP6":
	default:
		return Header{}, fmt.Errorf("proxyproto: v1: unknown protocol %q", f[1])
	}
	if len(f) != 6 {
		return Header{}, errors.New("proxyproto: v1: want PROXY TCP4|TCP6 src dst sport dport")
	}
	src, err1 := netip.ParseAddr(string(f[2]))
	dst, err2 := netip.ParseAddr(string(f[3]))
	sp, err3 := parsePort(f[4])
	dp, err4 := parsePort(f[5])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Header{}, fmt.Errorf("proxyproto: v1: %w", err)
	}
	v4 := string(f[1]) == "TCP4"
	if src.Is4() != v4 || dst.Is4() != v4 || src.Zone() != "" || dst.Zone() != "" {
		return Header{}, fmt.Errorf("proxyproto: v1: addresses do not match %s", f[1])
	}
	h.Source, h.Destination = netip.AddrPortFrom(src, sp), netip.AddrPortFrom(dst, dp)
	return h, nil
}

func refReadV2(r *bufio.Reader) (Header, error) {
	hdr := make([]byte, 16)
	if _, err := ioReadFull(r, hdr); err != nil {
		return Header{}, fmt.Errorf("proxyproto: v2: %w", err)
	}
	if !bytes.Equal(hdr[:12], v2Signature) {
		return Header{}, ErrNoHeader
	}
	if hdr[12]>>4 != 2 {
		return Header{}, fmt.Errorf("proxyproto: v2: version %d", hdr[12]>>4)
	}
	cmd := hdr[12] & 0x0f
	fam := hdr[13]
	n := int(binary.BigEndian.Uint16(hdr[14:16]))
	body := make([]byte, n)
	if _, err := ioReadFull(r, body); err != nil {
		return Header{}, fmt.Errorf("proxyproto: v2: %w", err)
	}
	h := Header{Version: 2}
	switch cmd {
	case 0x0: // LOCAL
		h.Local = true
		return h, nil
	case 0x1: // PROXY
	default:
		return Header{}, fmt.Errorf("proxyproto: v2: unknown command %#x", cmd)
	}
	switch fam {
	case 0x11, 0x12: // TCP or UDP over IPv4
		if n < 12 {
			return Header{}, errors.New("proxyproto: v2: short IPv4 address block")
		}
		h.Source = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[0:4])), binary.BigEndian.Uint16(body[8:10]))
		h.Destination = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[4:8])), binary.BigEndian.Uint16(body[10:12]))
	case 0x21, 0x22: // TCP or UDP over IPv6
		if n < 36 {
			return Header{}, errors.New("proxyproto: v2: short IPv6 address block")
		}
		h.Source = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[0:16])), binary.BigEndian.Uint16(body[32:34]))
		h.Destination = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[16:32])), binary.BigEndian.Uint16(body[34:36]))
	case 0x00: // UNSPEC: addresses ignored
		h.Local = true
	default:
		return Header{}, fmt.Errorf("proxyproto: v2: unsupported family/protocol %#x", fam)
	}
	return h, nil
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// FuzzParse checks Parse against Read: the same header and length for the
// whole input, and for every shorter prefix of a header Read accepts,
// ErrIncomplete (more bytes could complete it) and never another answer.
func FuzzParse(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.1 192.0.2.2 56324 443\r\n\x16\x03\x01"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(AppendV2(nil, netip.MustParseAddrPort("[2001:db8::1]:5"), netip.MustParseAddrPort("[2001:db8::9]:80")))
	tlv := AppendV2(nil, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2"))
	tlv[15] += 4
	f.Add(append(tlv, 0x04, 0x00, 0x01, 0xff, 'G', 'E', 'T'))
	f.Add([]byte("\x16\x03\x01\x00\x05hello"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		want, werr := Read(r)
		h, n, err := Parse(in)
		if errors.Is(werr, io.EOF) {
			if !errors.Is(err, ErrIncomplete) {
				t.Fatalf("Read ran out of bytes (%v) but Parse says %+v, %v", werr, h, err)
			}
			return
		}
		if (err == nil) != (werr == nil) || errors.Is(err, ErrNoHeader) != errors.Is(werr, ErrNoHeader) || h != want {
			t.Fatalf("Parse: %+v, %v; Read: %+v, %v", h, err, want, werr)
		}
		if err != nil {
			return
		}
		if rest, _ := io.ReadAll(r); n != len(in)-len(rest) {
			t.Fatalf("Parse says the header is %d bytes; Read consumed %d", n, len(in)-len(rest))
		}
		for i := range n {
			if _, _, err := Parse(in[:i]); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("the first %d of the header's %d bytes: %v, want ErrIncomplete", i, n, err)
			}
		}
	})
}
