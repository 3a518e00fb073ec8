package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/tcpproxy/proxyproto"
)

// serveBehindSNI starts the HTTPS data plane on a loopback listener that
// takes PROXY-protocol connections, and returns its address for tcpproxy's
// HTTPSFallback. serve runs until ctx ends; its error goes to errc.
func serveBehindSNI(ctx context.Context, serve func(context.Context, net.Listener) error, errc chan<- error) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen for HTTPS behind the SNI router: %w", err)
	}
	// ingress-nginx's port 442 with proxy_protocol: every connection
	// starts with the PROXY header tcpproxy writes, read before the
	// connection is handed on, so the HTTPS data plane sees the client's
	// address as RemoteAddr (X-Forwarded-For, whitelist-source-range, the
	// access log). The listener is loopback-only: only tcpproxy dials it,
	// and its header is always believed; a connection without a valid
	// header within 5s is closed.
	pl := proxyproto.NewListener(ln, proxyproto.Policy{On: true, Timeout: 5 * time.Second,
		Trusted: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}})
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
	// routerTimeout bounds it on the SNI router's listener:
	// proxy-protocol-header-timeout (5s), as ingress-nginx's router.
	routerTimeout time.Duration
	// maxPending bounds the connections awaiting a header per listener:
	// max-worker-connections (16384), nginx's bound on connections,
	// pending ones included.
	maxPending int
	ls         []*proxyproto.Listener // the data planes' own
	// router receives the SSL passthrough router's policy (optional
	// headers, routerTimeout): tcpproxy reads that listener's headers
	// itself, on its event loops too.
	router func(proxyproto.Policy)
}

// update applies g's settings to every listener.
func (p *proxyProtocolListeners) update(g *model.Global) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.realIP = g.RealIP
	p.timeout = time.Duration(cmp.Or(g.ClientHeaderTimeoutSeconds, 60)) * time.Second
	p.routerTimeout = cmp.Or(g.ProxyProtocolHeaderTimeout, 5*time.Second)
	p.maxPending = cmp.Or(g.MaxWorkerConnections, 16384)
	for _, l := range p.ls {
		l.SetPolicy(p.policy(false))
	}
	if p.router != nil {
		p.router(p.policy(true))
	}
}

func (p *proxyProtocolListeners) policy(optional bool) proxyproto.Policy {
	r := p.realIP
	if r == nil || !r.ProxyProtocol {
		return proxyproto.Policy{}
	}
	pol := proxyproto.Policy{On: true, Trusted: r.From, Timeout: p.timeout, MaxPending: p.maxPending}
	if optional {
		pol.Optional, pol.Timeout = true, p.routerTimeout
	}
	return pol
}

// wrap returns ln reading PROXY headers per the current configuration.
func (p *proxyProtocolListeners) wrap(ln net.Listener) net.Listener {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := proxyproto.NewListener(ln, p.policy(false))
	p.ls = append(p.ls, l)
	return l
}
