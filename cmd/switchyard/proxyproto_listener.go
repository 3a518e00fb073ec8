package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
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

// proxyProtocolListeners are the client listeners that take a PROXY
// header when the ConfigMap says use-proxy-protocol (ingress-nginx's
// "listen ... proxy_protocol" on the HTTP and HTTPS ports, and its SSL
// passthrough router's header reading). The policy follows every
// configuration the controller builds.
type proxyProtocolListeners struct {
	mu     sync.Mutex // guards realIP, timeout and ls
	realIP *model.RealIP
	// timeout bounds the wait for a header on the HTTP listeners: nginx
	// reads it under client_header_timeout (client-header-timeout, 60s).
	timeout time.Duration
	ls      []proxyProtocolListener
}

type proxyProtocolListener struct {
	l *proxyproto.Listener
	// optional: the SNI router's, which takes connections without a
	// header too, as ingress-nginx's, and waits 5s for one (its
	// proxy-protocol-header-timeout default).
	optional bool
}

// update applies g's settings to every listener.
func (p *proxyProtocolListeners) update(g *model.Global) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.realIP = g.RealIP
	p.timeout = time.Duration(cmp.Or(g.ClientHeaderTimeoutSeconds, 60)) * time.Second
	for _, l := range p.ls {
		l.l.SetPolicy(p.policy(l.optional))
	}
}

func (p *proxyProtocolListeners) policy(optional bool) proxyproto.Policy {
	r := p.realIP
	if r == nil || !r.ProxyProtocol {
		return proxyproto.Policy{}
	}
	pol := proxyproto.Policy{On: true, Trusted: r.From, Timeout: p.timeout}
	if optional {
		pol.Optional, pol.Timeout = true, 5*time.Second
	}
	return pol
}

// wrap returns ln reading PROXY headers per the current configuration.
func (p *proxyProtocolListeners) wrap(ln net.Listener, optional bool) net.Listener {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := proxyproto.NewListener(ln, p.policy(optional))
	p.ls = append(p.ls, proxyProtocolListener{l: l, optional: optional})
	return l
}
