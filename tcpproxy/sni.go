package tcpproxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"time"
)

// errHelloRead aborts the TLS handshake once the ClientHello is parsed.
var errHelloRead = errors.New("tcpproxy: client hello read")

// maxHello bounds how much of a connection is buffered to find the SNI.
const maxHello = 16 << 10

// TLS record and handshake constants (RFC 8446 §5.1, §4).
const (
	recordHeaderLen     = 5
	recordTypeHandshake = 22
	typeClientHello     = 1
	extServerName       = 0
	serverNameHostName  = 0
)

// sniOfRecord reads the server name of the ClientHello in rec, one whole TLS
// record, header included (RFC 8446 §4.1.2; server_name: RFC 6066 §3). ok
// is false when rec is not a well-formed ClientHello; decided is false when
// the hello continues in a later record or its server_name is one crypto/tls
// treats specially (several host names, a trailing dot), so the caller must
// parse it with crypto/tls. Only the lengths are checked on the way to the
// extension; the other extensions are not parsed, as in nginx's
// ssl_preread: a hello routed here is still refused by the backend's TLS
// stack if it is malformed elsewhere.
func sniOfRecord(rec []byte) (sni string, ok, decided bool) {
	msg := rec[recordHeaderLen:]
	if len(msg) < 4 || msg[0] != typeClientHello {
		return "", false, true
	}
	n := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
	if 4+n > len(msg) {
		return "", false, false // continues in the next record
	}
	r := helloReader(msg[4 : 4+n])
	if !r.skip(2+32) || !r.skipVec8() || !r.skipVec16() || !r.skipVec8() {
		return "", false, true
	}
	if len(r) == 0 {
		return "", true, true // no extensions
	}
	exts, okv := r.vec16()
	if !okv || len(r) != 0 {
		return "", false, true
	}
	found := false
	for len(exts) > 0 {
		typ, okt := exts.uint16()
		data, okd := exts.vec16()
		if !okt || !okd {
			return "", false, true
		}
		if typ != extServerName {
			continue
		}
		if found {
			return "", false, false // a duplicate: let crypto/tls judge
		}
		found = true
		list, okl := data.vec16()
		if !okl || len(data) != 0 || len(list) == 0 {
			return "", false, true
		}
		nameType, okn := list.uint8()
		name, okh := list.vec16()
		if !okn || !okh || len(name) == 0 || nameType != serverNameHostName || len(list) != 0 {
			return "", false, false
		}
		if name[len(name)-1] == '.' {
			return "", false, false
		}
		sni = strings.ToLower(string(name))
	}
	return sni, true, true
}

// helloReader consumes a ClientHello from the front.
type helloReader []byte

func (r *helloReader) skip(n int) bool {
	if len(*r) < n {
		return false
	}
	*r = (*r)[n:]
	return true
}

func (r *helloReader) uint8() (uint8, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return v, true
}

func (r *helloReader) uint16() (uint16, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := uint16((*r)[0])<<8 | uint16((*r)[1])
	*r = (*r)[2:]
	return v, true
}

// vec16 consumes a vector with a 2-byte length.
func (r *helloReader) vec16() (helloReader, bool) {
	n, ok := r.uint16()
	if !ok || len(*r) < int(n) {
		return nil, false
	}
	v := (*r)[:n]
	*r = (*r)[n:]
	return v, true
}

func (r *helloReader) skipVec8() bool {
	n, ok := r.uint8()
	return ok && r.skip(int(n))
}

func (r *helloReader) skipVec16() bool {
	_, ok := r.vec16()
	return ok
}

// readClientHello peeks the TLS ClientHello from br without consuming it and
// returns the server name (lower case, no trailing dot); ok is false when the
// bytes are not a ClientHello. The bytes stay buffered in br for replay.
//
// Issue 23: a ClientHello that fits in its first record (all of them in
// practice) is read by sniOfRecord, which walks only the lengths down to
// the server_name extension, as nginx's ssl_preread and HAProxy's
// req.ssl_sni do; crypto/tls's full parse cost 55–82 µs p50 per connection
// under the bench, a third of what passthrough added to setup over them.
// Anything sniOfRecord does not decide (a hello spread over records, an
// unusual server_name) goes through crypto/tls as before.
func readClientHello(br *bufio.Reader) (sni string, ok bool) {
	if hdr, err := br.Peek(recordHeaderLen); err == nil {
		if hdr[0] != recordTypeHandshake || hdr[1] != 3 {
			return "", false
		}
		if n := recordHeaderLen + (int(hdr[3])<<8 | int(hdr[4])); n <= maxHello {
			rec, err := br.Peek(n)
			if err != nil {
				return "", false
			}
			if sni, ok, decided := sniOfRecord(rec); decided {
				return sni, ok
			}
		}
	}
	return helloByCryptoTLS(br)
}

// helloByCryptoTLS is readClientHello through crypto/tls's own parser.
func helloByCryptoTLS(br *bufio.Reader) (sni string, ok bool) {
	rc := &readOnlyConn{r: peekReader{br: br}}
	err := tls.Server(rc, helloConfig).Handshake()
	if !rc.hello || !errors.Is(err, errHelloRead) {
		return "", false
	}
	return strings.TrimSuffix(strings.ToLower(rc.sni), "."), true
}

// helloConfig is shared by every peek: its hook records the server name on
// the readOnlyConn it was called for and aborts the handshake, so no
// per-connection tls.Config or closure is built.
var helloConfig = &tls.Config{
	GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		if rc, ok := h.Conn.(*readOnlyConn); ok {
			rc.hello, rc.sni = true, h.ServerName
		}
		return nil, errHelloRead
	},
}

// peekReader reads from a bufio.Reader without consuming: each Read returns
// the next bytes after those already returned, peeking more as needed.
type peekReader struct {
	br  *bufio.Reader
	off int
}

func (p *peekReader) Read(b []byte) (int, error) {
	if p.off >= maxHello {
		return 0, io.EOF
	}
	if p.br.Buffered() <= p.off {
		// Block for at least one more byte; fill returns what the socket
		// has, so a short hello never waits for a full buffer.
		if _, err := p.br.Peek(p.off + 1); err != nil {
			return 0, err
		}
	}
	buf, _ := p.br.Peek(min(p.br.Buffered(), maxHello))
	n := copy(b, buf[p.off:])
	p.off += n
	return n, nil
}

// readOnlyConn is the net.Conn the TLS server reads the hello from; writes
// (a handshake alert) are discarded. helloConfig's hook fills hello and sni.
type readOnlyConn struct {
	r     peekReader
	hello bool
	sni   string
}

func (c *readOnlyConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (*readOnlyConn) Write(p []byte) (int, error)      { return len(p), nil }
func (*readOnlyConn) Close() error                     { return nil }
func (*readOnlyConn) LocalAddr() net.Addr              { return nil }
func (*readOnlyConn) RemoteAddr() net.Addr             { return nil }
func (*readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (*readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (*readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
