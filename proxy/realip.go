package proxy

import (
	"net/http"
	"net/netip"
	"strconv"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// realIP finds the client's address behind trusted proxies as nginx's realip
// module does with real_ip_recursive on (model.RealIP, ingress-nginx's
// use-forwarded-headers / enable-real-ip). Immutable; part of a table.
type realIP struct {
	// name is the field read, in net/http's canonical form.
	name string
	// all: the field is exactly "X-Forwarded-For", whose every occurrence
	// nginx reads (the last first); any other name is read from its first
	// occurrence only.
	all  bool
	from *model.RealIP
}

// newRealIP is nil when no field is read: without real IP settings, or
// with use-proxy-protocol alone, where the listener already made the PROXY
// header's source the connection's address (tcpproxy/proxyproto.Listener).
func newRealIP(r *model.RealIP, useForwardedHeaders bool) *realIP {
	if r == nil || !r.HeaderRead(useForwardedHeaders) {
		return nil
	}
	return &realIP{name: http.CanonicalHeaderKey(r.Header), all: r.Header == "X-Forwarded-For", from: r}
}

// client is the client's address of a request that came over a connection
// from conn, given the field's values in the order sent (one, or every
// occurrence when all). A nil realIP, or none of the values, leaves conn.
func (r *realIP) client(conn netip.Addr, values [][]byte) netip.Addr {
	if r == nil || len(values) == 0 || !conn.IsValid() {
		return conn
	}
	return forwardedAddr(conn, values, r.from.Trusted)
}

// forwardedAddr walks the fields right to left from the connection's
// address, as nginx's ngx_http_get_forwarded_addr (recursive): while the
// address at hand is trusted, the next address of the field to its left
// replaces it. A field read to its start passes on to the field before it;
// an address that does not parse ends the walk with the last one taken. No
// address taken at all: conn.
func forwardedAddr(conn netip.Addr, fields [][]byte, trusted func(netip.Addr) bool) netip.Addr {
	addr := conn
	found := false
	for i := len(fields) - 1; i >= 0; i-- {
		next, rc := forwardedInField(addr, fields[i], trusted)
		addr = next
		if rc == walkDeclined {
			break
		}
		found = true
		if rc == walkDone {
			break
		}
	}
	if !found {
		return conn
	}
	return addr
}

// The outcomes of walking one field.
const (
	walkDeclined = iota // no address taken from the field
	walkDone            // some taken, then the walk stopped inside it
	walkOK              // read to its start
)

// forwardedInField walks one field (ngx_http_get_forwarded_addr_internal):
// addresses are separated by blanks and commas; each may carry a port
// (1.2.3.4:80, [::1]:80), which is dropped.
func forwardedInField(addr netip.Addr, xff []byte, trusted func(netip.Addr) bool) (netip.Addr, int) {
	found := false
	end := len(xff) // the part of the field not read yet is xff[:end]
	for {
		if !trusted(addr) {
			break
		}
		if end == 0 {
			break // an empty field, or one read to a separator at its start
		}
		p := end - 1
		for p > 0 && isXFFSep(xff[p]) {
			p--
			end--
		}
		for p > 0 {
			if isXFFSep(xff[p]) {
				p++
				break
			}
			p--
		}
		a, ok := parseNginxAddrPort(xff[p:end])
		if !ok {
			break
		}
		addr, found = a, true
		if p == 0 {
			return addr, walkOK
		}
		end = p - 1
	}
	if found {
		return addr, walkDone
	}
	return addr, walkDeclined
}

func isXFFSep(c byte) bool { return c == ' ' || c == ',' }

// parseNginxAddrPort reads an address as nginx's ngx_parse_addr_port: an
// IPv4 or IPv6 address, or either with a port (1-65535) after a colon, the
// IPv6 one then in brackets.
func parseNginxAddrPort(b []byte) (netip.Addr, bool) {
	if a, ok := parseNginxAddr(b); ok {
		return a, true
	}
	var host, port []byte
	if len(b) > 0 && b[0] == '[' {
		i := indexByte(b, ']')
		if i < 0 || i == len(b)-1 || b[i+1] != ':' {
			return netip.Addr{}, false
		}
		host, port = b[1:i], b[i+2:]
	} else {
		i := indexByte(b, ':')
		if i < 0 {
			return netip.Addr{}, false
		}
		host, port = b[:i], b[i+1:]
	}
	if n, ok := nginxAtoi(port); !ok || n < 1 || n > 65535 {
		return netip.Addr{}, false
	}
	return parseNginxAddr(host)
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// nginxAtoi is ngx_atoi: decimal digits only, at least one. Values past
// 65535 read as 65536 (no port).
func nginxAtoi(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int(c-'0'), 65536)
	}
	return n, true
}

// parseNginxAddr reads an address as nginx's ngx_parse_addr: IPv4 as
// ngx_inet_addr, else IPv6 as ngx_inet6_addr.
func parseNginxAddr(b []byte) (netip.Addr, bool) {
	if v4, ok := parseNginxIPv4(b); ok {
		return netip.AddrFrom4(v4), true
	}
	if v6, ok := parseNginxIPv6(b); ok {
		return netip.AddrFrom16(v6), true
	}
	return netip.Addr{}, false
}

// parseNginxIPv4 is ngx_inet_addr: exactly three dots, each part a decimal
// number up to 255 (leading zeros and empty parts read as numbers, 0 for
// empty); 255.255.255.255 is its "none" and so refused.
func parseNginxIPv4(b []byte) ([4]byte, bool) {
	var out [4]byte
	var addr uint32
	octet, dots := uint32(0), 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			octet = octet*10 + uint32(c-'0')
			if octet > 255 {
				return out, false
			}
		case c == '.':
			addr = addr<<8 + octet
			octet = 0
			dots++
		default:
			return out, false
		}
	}
	if dots != 3 {
		return out, false
	}
	addr = addr<<8 + octet
	if addr == 0xffffffff {
		return out, false
	}
	out[0], out[1], out[2], out[3] = byte(addr>>24), byte(addr>>16), byte(addr>>8), byte(addr)
	return out, true
}

// parseNginxIPv6 is ngx_inet6_addr: groups of up to four hex digits, one
// "::", an IPv4 address in the last 32 bits; a single leading ':' is
// skipped, no zone.
func parseNginxIPv6(b []byte) ([16]byte, bool) {
	var out [16]byte
	if len(b) == 0 {
		return out, false
	}
	if b[0] == ':' {
		b = b[1:]
	}
	at := 0     // next byte of out to write
	zero := -1  // where "::" stood, in out
	digit := -1 // start of the group being read, in b
	nibbles, word := 0, 0
	words := 8 // groups still to write
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == ':' {
			if nibbles > 0 {
				digit = i + 1
				out[at], out[at+1] = byte(word>>8), byte(word)
				at += 2
				words--
				if words > 0 {
					nibbles, word = 0, 0
					continue
				}
			} else if zero < 0 {
				digit = i + 1
				zero = at
				continue
			}
			return out, false
		}
		if c == '.' && nibbles > 0 {
			if words < 2 || digit < 0 {
				return out, false
			}
			v4, ok := parseNginxIPv4(b[digit:])
			if !ok {
				return out, false
			}
			out[at], out[at+1] = v4[0], v4[1]
			at += 2
			words--
			word = int(v4[2])<<8 | int(v4[3])
			nibbles = 1 // what follows writes word as the last group
			break
		}
		nibbles++
		if nibbles > 4 {
			return out, false
		}
		switch {
		case c >= '0' && c <= '9':
			word = word*16 + int(c-'0')
		case c|0x20 >= 'a' && c|0x20 <= 'f':
			word = word*16 + int(c|0x20-'a') + 10
		default:
			return out, false
		}
	}
	if nibbles == 0 && zero < 0 {
		return out, false
	}
	out[at], out[at+1] = byte(word>>8), byte(word)
	at += 2
	words--
	if words > 0 {
		if zero < 0 {
			return out, false
		}
		// Move what followed "::" to the end, zeros in between.
		n := words * 2
		copy(out[zero+n:at+n], out[zero:at])
		for i := zero; i < zero+n; i++ {
			out[i] = 0
		}
		return out, true
	}
	return out, zero < 0
}

// appendNginxAddr appends an address as nginx prints $remote_addr
// (ngx_sock_ntop, ngx_inet6_ntop): IPv4 dotted; IPv6 in lower-case hex with
// the first longest run of two or more zero groups as "::", and the last 32
// bits dotted for IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible
// (::a.b.c.d) addresses, as nginx writes them.
func appendNginxAddr(b []byte, a netip.Addr) []byte {
	if !a.Is6() || a.Is4In6() {
		return a.AppendTo(b)
	}
	p := a.As16()
	zero, max, n, last := -1, 1, 0, -1
	for i := 0; i < 16; i += 2 {
		if p[i] != 0 || p[i+1] != 0 {
			if max < n {
				zero, max = last, n
			}
			n = 0
			continue
		}
		if n == 0 {
			last = i
		}
		n++
	}
	if max < n {
		zero, max = last, n
	}
	end := 16
	if zero == 0 {
		if max == 6 || (max == 7 && p[14] != 0 && p[15] != 1) {
			end = 12
		}
		b = append(b, ':')
	}
	for i := 0; i < end; i += 2 {
		if i == zero {
			b = append(b, ':')
			i += (max - 1) * 2
			continue
		}
		b = strconv.AppendUint(b, uint64(p[i])<<8|uint64(p[i+1]), 16)
		if i < 14 {
			b = append(b, ':')
		}
	}
	if end == 12 {
		for i := 12; i < 16; i++ {
			b = strconv.AppendUint(b, uint64(p[i]), 10)
			if i < 15 {
				b = append(b, '.')
			}
		}
	}
	return b
}
