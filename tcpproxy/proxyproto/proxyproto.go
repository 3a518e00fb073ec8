// Package proxyproto reads and writes the PROXY protocol, versions 1 (text)
// and 2 (binary), as specified by HAProxy's proxy-protocol.txt. Parsing is
// strict: anything malformed is an error, and the caller closes the
// connection.
//
// In: the first bytes of a connection. Out: the original source and
// destination addresses. Listener (listener.go) reads the header of every
// connection a net.Listener accepts, for use-proxy-protocol on the data
// planes' ports and the SSL passthrough router, and behind the router. It
// imports nothing from this module.
package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
)

// v2Signature starts every version 2 header.
var v2Signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

// maxV1 is the longest version 1 header, CRLF included.
const maxV1 = 107

// ErrNoHeader means the connection does not start with a PROXY header.
var ErrNoHeader = errors.New("proxyproto: no PROXY protocol header")

// Header is a parsed PROXY header.
type Header struct {
	// Version is 1 or 2.
	Version int
	// Local is true for "PROXY UNKNOWN" (v1) or the LOCAL command (v2): the
	// connection was made by the proxy itself and carries no addresses.
	Local bool
	// Source and Destination are the original client and server addresses.
	Source, Destination netip.AddrPort
}

// Read parses one header from r, consuming exactly its bytes.
func Read(r *bufio.Reader) (Header, error) {
	peek, err := r.Peek(1)
	if err != nil {
		return Header{}, fmt.Errorf("proxyproto: read: %w", err)
	}
	switch peek[0] {
	case 'P':
		return readV1(r)
	case '\r':
		return readV2(r)
	}
	return Header{}, ErrNoHeader
}

// ErrIncomplete means the bytes given to Parse start a header that they do
// not hold all of: more bytes from the connection may complete it.
var ErrIncomplete = errors.New("proxyproto: header incomplete")

// Parse parses the header at the start of b, for callers that read the
// connection themselves (tcpproxy's event loops) and so hold what arrived
// so far in a buffer: n is the header's length in b. The rules are Read's;
// a b too short to decide gives ErrIncomplete.
func Parse(b []byte) (h Header, n int, err error) {
	src := bytes.NewReader(b)
	// Big enough for either version's fixed part; a longer version 2
	// header (TLVs) is read through it.
	br := bufio.NewReaderSize(src, max(len(b), 256))
	h, err = Read(br)
	if errors.Is(err, io.EOF) {
		return Header{}, 0, ErrIncomplete
	}
	if err != nil {
		return Header{}, 0, err
	}
	return h, len(b) - br.Buffered() - src.Len(), nil
}

func readV1(r *bufio.Reader) (Header, error) {
	if r.Size() < maxV1 {
		return Header{}, errors.New("proxyproto: v1: reader buffer smaller than 107 bytes")
	}
	// The line stays in r's buffer: no copy (Issue 19: a header per
	// connection on the HTTP listeners).
	line, err := r.ReadSlice('\n')
	if len(line) > maxV1 || (err != nil && len(line) >= maxV1) {
		return Header{}, errors.New("proxyproto: v1: header not terminated by CRLF within 107 bytes")
	}
	if err != nil {
		return Header{}, fmt.Errorf("proxyproto: v1: %w", err)
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return Header{}, errors.New("proxyproto: v1: header not terminated by CRLF within 107 bytes")
	}
	// Fields separated by single blanks, as bytes.Split cuts them; only
	// the first six are kept (PROXY UNKNOWN may have more).
	var f [6][]byte
	nf := 0
	for rest := line[:len(line)-2]; ; {
		i := bytes.IndexByte(rest, ' ')
		if nf < len(f) {
			f[nf] = rest
			if i >= 0 {
				f[nf] = rest[:i]
			}
		}
		nf++
		if i < 0 {
			break
		}
		rest = rest[i+1:]
	}
	if string(f[0]) != "PROXY" || nf < 2 {
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
	if nf != 6 {
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

// parsePort accepts 0-65535 without leading zeros or signs.
func parsePort(b []byte) (uint16, error) {
	if len(b) == 0 || len(b) > 5 || (len(b) > 1 && b[0] == '0') {
		return 0, fmt.Errorf("bad port %q", b)
	}
	n, err := strconv.ParseUint(string(b), 10, 16)
	if err != nil {
		return 0, fmt.Errorf("bad port %q", b)
	}
	return uint16(n), nil
}

func readV2(r *bufio.Reader) (Header, error) {
	if r.Size() < 16+36 {
		return Header{}, errors.New("proxyproto: v2: reader buffer smaller than 52 bytes")
	}
	hdr, err := r.Peek(16)
	if err != nil {
		_, _ = r.Discard(len(hdr))
		return Header{}, fmt.Errorf("proxyproto: v2: %w", err)
	}
	if !bytes.Equal(hdr[:12], v2Signature) {
		_, _ = r.Discard(16)
		return Header{}, ErrNoHeader
	}
	if hdr[12]>>4 != 2 {
		_, _ = r.Discard(16)
		return Header{}, fmt.Errorf("proxyproto: v2: version %d", hdr[12]>>4)
	}
	cmd := hdr[12] & 0x0f
	fam := hdr[13]
	n := int(binary.BigEndian.Uint16(hdr[14:16]))
	// The address block (at most 36 bytes) is what is read; TLVs after it
	// are skipped.
	var addrs [36]byte
	_, _ = r.Discard(16)
	m := min(n, len(addrs))
	// Peeked, not read into addrs, which would then escape to the heap.
	got, err := r.Peek(m)
	copy(addrs[:], got)
	_, _ = r.Discard(len(got))
	if err != nil {
		return Header{}, fmt.Errorf("proxyproto: v2: %w", err)
	}
	if _, err := r.Discard(n - m); err != nil {
		return Header{}, fmt.Errorf("proxyproto: v2: %w", err)
	}
	body := addrs[:m]
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

// AppendV1 appends a version 1 header for a connection from src to dst.
func AppendV1(b []byte, src, dst netip.AddrPort) []byte {
	if !src.IsValid() || !dst.IsValid() || src.Addr().Is4() != dst.Addr().Is4() {
		return append(b, "PROXY UNKNOWN\r\n"...)
	}
	proto := "TCP6"
	if src.Addr().Is4() {
		proto = "TCP4"
	}
	b = append(b, "PROXY "+proto+" "...)
	b = src.Addr().WithZone("").AppendTo(b)
	b = append(b, ' ')
	b = dst.Addr().WithZone("").AppendTo(b)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(src.Port()), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(dst.Port()), 10)
	return append(b, "\r\n"...)
}

// AppendV2 appends a version 2 header (PROXY command, TCP) for a connection
// from src to dst; addresses of different families give a LOCAL header.
func AppendV2(b []byte, src, dst netip.AddrPort) []byte {
	b = append(b, v2Signature...)
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	switch {
	case src.IsValid() && dst.IsValid() && src.Addr().Is4() && dst.Addr().Is4():
		b = append(b, 0x21, 0x11, 0, 12)
		s, d := src.Addr().As4(), dst.Addr().As4()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	case src.IsValid() && dst.IsValid() && src.Addr().Is6() && dst.Addr().Is6():
		b = append(b, 0x21, 0x21, 0, 36)
		s, d := src.Addr().As16(), dst.Addr().As16()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	default:
		return append(b, 0x20, 0x00, 0, 0)
	}
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, dst.Port())
}

// AddrPortOf converts a net.Addr from a TCP or UDP connection.
func AddrPortOf(a net.Addr) netip.AddrPort {
	switch v := a.(type) {
	case *net.TCPAddr:
		return v.AddrPort()
	case *net.UDPAddr:
		return v.AddrPort()
	}
	return netip.AddrPort{}
}
