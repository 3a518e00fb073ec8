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

// readClientHello peeks the TLS ClientHello from br without consuming it and
// returns the server name (lower case, no trailing dot); ok is false when the
// bytes are not a ClientHello. The bytes stay buffered in br for replay.
func readClientHello(br *bufio.Reader) (sni string, ok bool) {
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
