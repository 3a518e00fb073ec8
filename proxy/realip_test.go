package proxy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// trustedRanges are the test's set_real_ip_from ranges.
var trustedRanges = &model.RealIP{Header: "X-Forwarded-For", From: []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}}

// The client address nginx's realip module (real_ip_recursive on) gives
// $remote_addr, for a connection from 127.0.0.1 with set_real_ip_from
// 127.0.0.0/8, 10.0.0.0/8 and 2001:db8::/32 (TestRealIPAgainstNginx checks
// these rows against the real nginx).
var realIPCases = []struct {
	name   string
	fields []string // X-Forwarded-For fields, in the order sent
	want   string   // $remote_addr
}{
	{"no field", nil, "127.0.0.1"},
	{"one client", []string{"203.0.113.7"}, "203.0.113.7"},
	{"untrusted hop stops the walk", []string{"198.51.100.1, 203.0.113.7"}, "203.0.113.7"},
	{"trusted hops skipped", []string{"203.0.113.7, 10.0.0.2, 10.0.0.1"}, "203.0.113.7"},
	{"spoofed left of the client ignored", []string{"10.9.9.9, 203.0.113.7, 10.0.0.1"}, "203.0.113.7"},
	{"all trusted: the leftmost", []string{"10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
	{"blanks and commas", []string{" ,203.0.113.7 ,, 10.0.0.1,  "}, "203.0.113.7"},
	{"no blank after comma", []string{"203.0.113.9,203.0.113.7"}, "203.0.113.7"},
	{"port dropped", []string{"203.0.113.7:8080"}, "203.0.113.7"},
	{"bracketed IPv6 with port", []string{"[2001:db8:1::7]:443, 10.0.0.1"}, "2001:db8:1::7"},
	{"IPv6", []string{"2001:db8:ffff::1, 2001:db8::2"}, "2001:db8:ffff::1"},
	{"IPv6 untrusted", []string{"2001:db9::1, 2001:db8::2"}, "2001:db9::1"},
	{"IPv4-mapped, trusted as IPv4", []string{"203.0.113.7, ::ffff:10.0.0.1"}, "203.0.113.7"},
	{"IPv4-mapped client kept mapped", []string{"::ffff:203.0.113.7"}, "::ffff:203.0.113.7"},
	{"garbage: the last address taken", []string{"nope, 10.0.0.1"}, "10.0.0.1"},
	{"garbage only: the connection", []string{"nope"}, "127.0.0.1"},
	{"empty", []string{""}, "127.0.0.1"},
	{"two fields: the last first", []string{"203.0.113.1", "10.0.0.1"}, "203.0.113.1"},
	{"two fields: untrusted in the last", []string{"203.0.113.1", "203.0.113.2"}, "203.0.113.2"},
	{"two fields: garbage before", []string{"nope", "10.0.0.1"}, "10.0.0.1"},
	{"leading zeros read as numbers", []string{"010.000.000.001, 10.0.0.1"}, "10.0.0.1"},
	{"leading zeros client", []string{"203.0.113.007"}, "203.0.113.7"},
	{"an empty octet reads 0", []string{"203..113.7"}, "203.0.113.7"},
	{"255.255.255.255 does not parse", []string{"255.255.255.255"}, "127.0.0.1"},
	{"IPv4-compatible printed dotted", []string{"::203.0.113.7"}, "::203.0.113.7"},
	{"single leading colon skipped", []string{":1::2"}, "1::2"},
	{"zone refused", []string{"fe80::1%eth0"}, "127.0.0.1"},
	{"port 0 refused", []string{"203.0.113.7:0"}, "127.0.0.1"},
	{"a leading comma is part of the first address", []string{",203.0.113.7"}, "127.0.0.1"},
	{"a leading comma before trusted hops", []string{",203.0.113.7, 10.0.0.1"}, "10.0.0.1"},
}

func TestForwardedAddr(t *testing.T) {
	ri := newRealIP(trustedRanges, false)
	conn := netip.MustParseAddr("127.0.0.1")
	for _, tc := range realIPCases {
		t.Run(tc.name, func(t *testing.T) {
			var fields [][]byte
			for _, f := range tc.fields {
				fields = append(fields, []byte(f))
			}
			got := string(appendNginxAddr(nil, ri.client(conn, fields)))
			if got != tc.want {
				t.Errorf("client(%q) = %s; want %s", tc.fields, got, tc.want)
			}
		})
	}
	// An untrusted connection's field is not read at all.
	stranger := netip.MustParseAddr("192.0.2.1")
	if got := ri.client(stranger, [][]byte{[]byte("10.0.0.1")}); got != stranger {
		t.Errorf("untrusted connection: got %s; want %s", got, stranger)
	}
	if got := (*realIP)(nil).client(stranger, [][]byte{[]byte("10.0.0.1")}); got != stranger {
		t.Errorf("no real IP settings: got %s; want %s", got, stranger)
	}
}

func TestAppendNginxAddr(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1": "192.0.2.1", "::1": "::1", "::": "::", "2001:db8::1": "2001:db8::1",
		"2001:db8:0:1:0:0:0:1": "2001:db8:0:1::1", "2001:0:0:1:0:0:1:1": "2001::1:0:0:1:1",
		"1:0:2:3:4:5:6:7": "1:0:2:3:4:5:6:7", "::ffff:192.0.2.1": "::ffff:192.0.2.1",
		"::192.0.2.1": "::192.0.2.1", "::2": "::2", "::102": "::0.0.1.2", "fe80::": "fe80::",
	} {
		if got := string(appendNginxAddr(nil, netip.MustParseAddr(in))); got != want {
			t.Errorf("appendNginxAddr(%s) = %s; want %s", in, got, want)
		}
	}
}

// FuzzForwardedAddr: the walk never panics; its answer is the connection's
// address or one parsed from the field; it agrees with net/netip on every
// address netip reads in its canonical form; what it prints parses back to
// the same address.
func FuzzForwardedAddr(f *testing.F) {
	for _, tc := range realIPCases {
		f.Add(strings.Join(tc.fields, "\n"))
	}
	ri := newRealIP(trustedRanges, false)
	conn := netip.MustParseAddr("127.0.0.1")
	f.Fuzz(func(t *testing.T, s string) {
		var fields [][]byte
		if s != "" {
			for _, x := range strings.Split(s, "\n") {
				fields = append(fields, []byte(x))
			}
		}
		got := ri.client(conn, fields)
		if got != conn {
			seen := false
			for _, tok := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\n' }) {
				for _, cand := range []string{tok, strings.TrimLeft(tok, ",")} {
					if a, ok := parseNginxAddrPort([]byte(cand)); ok && a == got {
						seen = true
					}
				}
			}
			if !seen && !strings.HasPrefix(s, ",") && !strings.HasPrefix(s, " ") {
				t.Fatalf("client %s is none of the field's addresses %q", got, s)
			}
		}
		for _, tok := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\n' }) {
			a, ok := parseNginxAddr([]byte(tok))
			if n, err := netip.ParseAddr(tok); err == nil && n.Zone() == "" && n.String() == tok && tok != "255.255.255.255" && (!n.Is4In6() || strings.Contains(tok, ".")) {
				if !ok || a != n {
					t.Fatalf("parseNginxAddr(%q) = %v, %v; netip reads %v", tok, a, ok, n)
				}
			}
			if ok {
				back, ok2 := parseNginxAddr(appendNginxAddr(nil, a))
				if !ok2 || back != a {
					t.Fatalf("%q: printed %q reads back as %v, %v", tok, appendNginxAddr(nil, a), back, ok2)
				}
			}
		}
	})
}
