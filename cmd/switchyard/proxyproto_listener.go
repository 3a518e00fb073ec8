package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/switchyard-proxy/switchyard/tcpproxy/proxyproto"
	"k8s.io/klog/v2"
)

// proxyProtoListener is the loopback listener behind the SNI router with
// --enable-ssl-passthrough (ingress-nginx's 442 with proxy_protocol): every
// connection starts with the PROXY header tcpproxy writes, which is read
// before the connection is handed on, so the HTTPS data plane sees the
// client's address as RemoteAddr (X-Forwarded-For, whitelist-source-range,
// the access log). A connection without a valid header within headerTimeout
// is closed: the listener is loopback-only, so only tcpproxy should dial it.
type proxyProtoListener struct {
	ln            net.Listener
	headerTimeout time.Duration
	conns         chan net.Conn
	done          chan struct{}
	closeOnce     sync.Once
	acceptErr     error // set before done is closed
}

func newProxyProtoListener(ln net.Listener, headerTimeout time.Duration) *proxyProtoListener {
	l := &proxyProtoListener{ln: ln, headerTimeout: headerTimeout, conns: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

// acceptLoop accepts and reads each header in its own goroutine, so a client
// slow to send its header delays nobody else.
func (l *proxyProtoListener) acceptLoop() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.acceptErr = err
			l.closeOnce.Do(func() { close(l.done) })
			return
		}
		go l.readHeader(c)
	}
}

func (l *proxyProtoListener) readHeader(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(l.headerTimeout))
	br := bufio.NewReader(c)
	h, err := proxyproto.Read(br)
	if err != nil {
		klog.V(2).InfoS("connection without a valid PROXY header closed", "from", c.RemoteAddr().String(), "err", err)
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &proxiedConn{Conn: c, r: br}
	if !h.Local {
		pc.remote, pc.local = net.TCPAddrFromAddrPort(h.Source), net.TCPAddrFromAddrPort(h.Destination)
	}
	select {
	case l.conns <- pc:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *proxyProtoListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		if l.acceptErr != nil {
			return nil, fmt.Errorf("accept behind the SNI router: %w", l.acceptErr)
		}
		return nil, net.ErrClosed
	}
}

func (l *proxyProtoListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.ln.Close()
}

func (l *proxyProtoListener) Addr() net.Addr { return l.ln.Addr() }

// proxiedConn is a connection whose header was consumed: reads continue with
// what the header reader buffered, and the addresses are the client's.
type proxiedConn struct {
	net.Conn
	r             *bufio.Reader
	remote, local net.Addr // nil: the connection's own (a LOCAL header)
}

func (c *proxiedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *proxiedConn) RemoteAddr() net.Addr {
	if c.remote != nil {
		return c.remote
	}
	return c.Conn.RemoteAddr()
}

func (c *proxiedConn) LocalAddr() net.Addr {
	if c.local != nil {
		return c.local
	}
	return c.Conn.LocalAddr()
}

// serveBehindSNI starts the HTTPS data plane on a loopback listener that
// takes PROXY-protocol connections, and returns its address for tcpproxy's
// HTTPSFallback. serve runs until ctx ends; its error goes to errc.
func serveBehindSNI(ctx context.Context, serve func(context.Context, net.Listener) error, errc chan<- error) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen for HTTPS behind the SNI router: %w", err)
	}
	pl := newProxyProtoListener(ln, 5*time.Second)
	go func() { errc <- serve(ctx, pl) }()
	return ln.Addr().String(), nil
}
