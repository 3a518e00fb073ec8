package tcpproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/tcpproxy/proxyproto"
)

// Picker is what the L4 proxy needs of the balancer; *balancer.Registry
// implements it.
type Picker interface {
	Pick(backend string, req balancer.Request, a *balancer.Attempt) (*balancer.Pick, error)
	Done(p *balancer.Pick, info balancer.DoneInfo)
}

var _ Picker = (*balancer.Registry)(nil)

// Routes is one immutable routing snapshot.
type Routes struct {
	// Passthrough maps an SNI host name ("a.example.com" or
	// "*.example.com") to the backend that receives the raw TLS stream.
	Passthrough map[string]string
	// TCP maps a listen port to its TCP service.
	TCP map[int]model.L4Service
	// UDP maps a listen port to its UDP service.
	UDP map[int]model.L4Service
}

// RoutesFrom derives the L4 routes of a Configuration.
func RoutesFrom(cfg *model.Configuration) *Routes {
	r := &Routes{Passthrough: map[string]string{}, TCP: map[int]model.L4Service{}, UDP: map[int]model.L4Service{}}
	for _, p := range cfg.PassthroughBackends {
		r.Passthrough[p.Hostname] = p.Backend
	}
	for _, s := range cfg.TCPServices {
		r.TCP[s.Port] = s
	}
	for _, s := range cfg.UDPServices {
		r.UDP[s.Port] = s
	}
	return r
}

// lookup finds the passthrough backend for an SNI name: exact, then the
// wildcard for its parent domain.
func (r *Routes) lookup(sni string) (string, bool) {
	if b, ok := r.Passthrough[sni]; ok {
		return b, true
	}
	if i := strings.IndexByte(sni, '.'); i > 0 {
		b, ok := r.Passthrough["*"+sni[i:]]
		return b, ok
	}
	return "", false
}

// Config configures a Proxy.
type Config struct {
	// Picker chooses peers. Required.
	Picker Picker
	// HTTPSFallback is the address of the local HTTPS data plane that gets
	// every TLS connection not routed by passthrough (with a PROXY v2
	// header, so the client address survives). Empty closes them.
	HTTPSFallback string
	// HelloTimeout bounds reading the ClientHello; zero means 5s.
	HelloTimeout time.Duration
	// ConnectTimeout bounds each upstream dial; zero means 5s.
	ConnectTimeout time.Duration
	// IdleTimeout closes a connection with no client bytes for this long,
	// and ends a UDP session with no datagram either way for this long;
	// zero means 10 minutes (nginx proxy_timeout for streams).
	IdleTimeout time.Duration
	// Tries is how many peers a connection may try; zero means 3.
	Tries int
	// Registerer receives the switchyard_tcpproxy_* metrics; nil means they
	// are kept but not exported. Never the global registry by default.
	Registerer prometheus.Registerer
	// EventLoops, on Linux, serves TCP service ports and SNI listeners on
	// this many event loops (loop_linux.go) instead of a goroutine per
	// connection. Each running loop keeps a P of the runtime while it
	// waits and raises GOMAXPROCS by one for it. Zero, or another system,
	// means a goroutine per connection. UDP services are not affected.
	EventLoops int
	// BusyPoll is the longest an event loop with a connection open keeps
	// looking for the next event without sleeping after one arrived,
	// yielding its CPU to anything else runnable there meanwhile. A sleeping loop is woken by
	// an interrupt to its CPU, which on a virtual machine whose idle CPUs
	// halt is an exit to the hypervisor on both sides; during a transfer or
	// a handshake the next event is usually microseconds to a few hundred
	// microseconds away, and a loop that is still looking takes it without
	// that cost. How long a loop looks adapts between 20 µs and BusyPoll:
	// longer while events come soon after it fell asleep, shorter while
	// they come later than BusyPoll. A loop polls for at most a tenth of
	// each 100 ms, so it costs at most a tenth of a core however the
	// events fall. Zero never polls; DefaultBusyPoll is what the
	// controller runs with.
	BusyPoll time.Duration
	// LoopProcs, if set, is called with +1 when an event loop starts
	// keeping a P of its own and with -1 when it stops (GOMAXPROCS moves
	// with them): the controller tells the Go runtime's idle spin, which
	// does not count those Ps as work in flight. Nil: nobody is told.
	LoopProcs func(delta int)

	// pollBudget replaces that tenth in tests; zero means the default.
	pollBudget time.Duration
	// pollLeast replaces minPollWindow in tests; zero means the default.
	pollLeast time.Duration
}

// DefaultBusyPoll is the controller's --l4-busy-poll. On two vCPUs of a
// VM whose idle CPUs halt (no guest halt polling), 500 µs took the setup
// each L4 path adds to 0.32–0.64× the better of HAProxy's and nginx
// stream's with the loop on a CPU of its own and 0.67–0.90× on shared
// CPUs, and the added 1-byte round trip to 0.2–0.3× theirs pinned, where
// 20 µs added about what they add: the legs of a handshake come a few
// hundred microseconds apart, and a loop still looking takes each without
// a CPU to wake. It costs CPU per connection (1.4–1.5 ms pinned for a
// connection moving 1 MiB, against about 1.2 ms at 20 µs), within the
// tenth of a core a loop may poll (docs/benchmarks/tcpproxy.md).
const DefaultBusyPoll = 500 * time.Microsecond

// Proxy is the L4 data plane: SNI passthrough, TCP and UDP services.
type Proxy struct {
	// immutable
	cfg     Config
	metrics *metrics
	dialer  net.Dialer

	// atomic
	routes atomic.Pointer[Routes]

	// sniPolicy is what the SNI listeners do with PROXY headers.
	sniPolicy atomic.Pointer[proxyproto.Policy]
	loops     *loopGroup // nil: a goroutine per connection

	mu        sync.Mutex // guards listeners, udp, sni, sniLoop and sniPP
	listeners map[int]io.Closer
	udp       map[int]context.CancelFunc    // stops a UDP service port
	sni       map[net.Listener]struct{}     // ServeSNI's listeners, for setDeferAccept
	sniLoop   map[*loopListener]struct{}    // the same, served by the event loops
	sniPP     map[*proxyproto.Listener]bool // ServeSNI's PROXY header readers, for SetSNIProxyProtocol
	conns     inflight
}

// New returns a Proxy with no routes.
func New(cfg Config) (*Proxy, error) {
	if cfg.Picker == nil {
		return nil, errors.New("tcpproxy: Config.Picker is required")
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 5 * time.Second
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if cfg.Tries <= 0 {
		cfg.Tries = 3
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, metrics: m, dialer: upstreamDialer(cfg.ConnectTimeout), listeners: map[int]io.Closer{}, udp: map[int]context.CancelFunc{},
		sni: map[net.Listener]struct{}{}, sniLoop: map[*loopListener]struct{}{}, sniPP: map[*proxyproto.Listener]bool{}}
	p.routes.Store(&Routes{Passthrough: map[string]string{}, TCP: map[int]model.L4Service{}, UDP: map[int]model.L4Service{}})
	p.sniPolicy.Store(&proxyproto.Policy{})
	if cfg.EventLoops > 0 {
		if p.loops, err = newLoopGroup(p, cfg.EventLoops); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// SetSNIProxyProtocol sets what ServeSNI's listeners do with PROXY
// headers (use-proxy-protocol on the SSL passthrough router), for the
// connections they accept from now on. The zero Policy reads none.
func (p *Proxy) SetSNIProxyProtocol(pol proxyproto.Policy) {
	if pol.Timeout <= 0 {
		pol.Timeout = 5 * time.Second
	}
	if pol.MaxPending <= 0 {
		pol.MaxPending = 16384
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sniPolicy.Store(&pol)
	for l := range p.sniPP {
		l.SetPolicy(pol)
	}
}

// upstreamDialer dials peers and the HTTPS fallback without TCP keep-alive,
// as nginx's stream proxy (proxy_socket_keepalive off) and HAProxy (no
// option srvtcpka) do by default: Go's default keep-alive is four
// setsockopt calls on every upstream connection (issue 23). Idle
// connections end by IdleTimeout either way.
func upstreamDialer(timeout time.Duration) net.Dialer {
	return net.Dialer{Timeout: timeout, KeepAlive: -1}
}

// tcpServiceListen opens TCP service ports; accepted connections get no TCP
// keep-alive, as nginx's "listen" without so_keepalive (ingress-nginx's
// stream servers), instead of Go's four setsockopt calls per accept
// (issue 23).
var tcpServiceListen = net.ListenConfig{KeepAlive: -1}

// Update swaps in new routes. Established connections are never reset.
func (p *Proxy) Update(r *Routes) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes.Store(r)
	for ln := range p.sni {
		p.deferAccept(ln, r)
	}
	for ln := range p.sniLoop {
		p.deferAcceptLoop(ln, r)
	}
}

// awaitsHello reports whether SNI connections must wait for the
// ClientHello under r: yes while some host is routed by passthrough (or
// there is nowhere else to go); otherwise every connection goes to the
// HTTPS fallback, whose dial is best started at accept, while the client is
// still building its hello.
func (p *Proxy) awaitsHello(r *Routes) bool {
	return len(r.Passthrough) > 0 || p.cfg.HTTPSFallback == ""
}

// deferAccept makes the kernel hold new connections on an SNI listener
// until their first bytes arrive when the hello is awaited anyway.
func (p *Proxy) deferAccept(ln net.Listener, r *Routes) {
	if p.awaitsHello(r) {
		setDeferAccept(ln, p.cfg.HelloTimeout)
		return
	}
	setDeferAccept(ln, 0)
}

// deferAcceptLoop is deferAccept for a listener the event loops hold.
func (p *Proxy) deferAcceptLoop(ln *loopListener, r *Routes) {
	if p.awaitsHello(r) {
		deferAcceptFD(ln.fd, p.cfg.HelloTimeout)
		return
	}
	deferAcceptFD(ln.fd, 0)
}

// connView answers the nginx variables an L4 pick may read.
type connView struct {
	sni    string
	remote string
	// src and dst are the client's original addresses: from a decoded
	// PROXY header, else the connection's own.
	src, dst netip.AddrPort
}

func (v *connView) Var(name string) ([]byte, bool) {
	switch name {
	case "ssl_preread_server_name":
		return []byte(v.sni), v.sni != ""
	case "remote_addr":
		return []byte(v.remote), true
	}
	return nil, false
}

// ServeSNI accepts TLS connections on ln until ctx ends: passthrough hosts go
// to their backend unterminated, everything else to the HTTPS fallback.
// On Linux it sets TCP_DEFER_ACCEPT on ln while the hello is awaited
// (passthrough hosts exist, or no fallback is set): the kernel then hands
// over a connection once its first bytes are in, or, for a client that
// sends nothing, after about HelloTimeout, which then applies again.
//
// PROXY headers are read per SetSNIProxyProtocol. With EventLoops, ln is
// handed to the loops (and closed here; they hold a duplicate); it must
// then be a *net.TCPListener.
func (p *Proxy) ServeSNI(ctx context.Context, ln net.Listener) error {
	if p.loops != nil {
		return p.serveSNILoops(ctx, ln)
	}
	p.mu.Lock()
	p.sni[ln] = struct{}{}
	p.deferAccept(ln, p.routes.Load())
	pl := proxyproto.NewListener(ln, *p.sniPolicy.Load())
	p.sniPP[pl] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.sni, ln)
		delete(p.sniPP, pl)
		p.mu.Unlock()
	}()
	return p.serve(ctx, pl, p.handleSNI)
}

// serveSNILoops is ServeSNI on the event loops.
func (p *Proxy) serveSNILoops(ctx context.Context, ln net.Listener) error {
	p.mu.Lock()
	ll, err := p.loops.listen(ln, true, 0)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	p.sniLoop[ll] = struct{}{}
	p.deferAcceptLoop(ll, p.routes.Load())
	p.mu.Unlock()
	<-ctx.Done()
	p.mu.Lock()
	delete(p.sniLoop, ll)
	p.mu.Unlock()
	_ = ll.Close()
	return nil
}

func (p *Proxy) serve(ctx context.Context, ln net.Listener, handle func(net.Conn)) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var pause time.Duration // grows while accept keeps failing for want of resources
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if outOfResources(err) {
				// Out of descriptors or memory: the connections wait in
				// the backlog until some are free, as nginx waits.
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(pause):
				case <-ctx.Done():
					return nil
				}
				continue
			}
			return err
		}
		pause = 0
		p.conns.add()
		go func() {
			defer p.conns.done()
			handle(c)
		}()
	}
}

func (p *Proxy) handleSNI(c net.Conn) {
	routes := p.routes.Load()
	if !p.awaitsHello(routes) {
		// Every connection goes to the fallback whatever its SNI, so the
		// hello is not awaited: the dial overlaps the client building it.
		// Issue 7 / ingress-nginx #7827: enabling passthrough no longer
		// taxes clusters that have no passthrough host.
		p.toFallback(c, nil)
		return
	}
	br := getReader(c)
	_ = c.SetReadDeadline(time.Now().Add(p.cfg.HelloTimeout))
	sni, isTLS := readClientHello(br)
	_ = c.SetReadDeadline(time.Time{})
	if backend, ok := routes.lookup(sni); ok && isTLS {
		p.toBackend(c, br, backend, &connView{sni: sni, remote: remoteIP(c)}, false)
		return
	}
	if p.cfg.HTTPSFallback == "" {
		putReader(br)
		_ = c.Close()
		return
	}
	p.toFallback(c, br)
}

// toFallback pipes c to the local HTTPS data plane behind a PROXY v2 header
// carrying the client's address. br, if not nil, holds the peeked hello; it
// is returned to the pool.
func (p *Proxy) toFallback(c net.Conn, br *bufio.Reader) {
	up, err := dial(&p.dialer, p.cfg.HTTPSFallback, p.cfg.ConnectTimeout)
	if err != nil {
		if br != nil {
			putReader(br)
		}
		p.metrics.fail(fallbackService, reasonConnect)
		_ = c.Close()
		return
	}
	hdr := proxyproto.AppendV2(nil, proxyproto.AddrPortOf(c.RemoteAddr()), proxyproto.AddrPortOf(c.LocalAddr()))
	first, err := sendFirst(up, hdr, br)
	if err != nil {
		p.metrics.fail(fallbackService, reasonConnect)
		_ = c.Close()
		_ = up.Close()
		return
	}
	n, m := pipe(c, up, p.cfg.IdleTimeout)
	p.metrics.done(fallbackService, first+n, m)
}

// toBackend picks a peer (retrying on connect failure) and pipes the
// connection to it, optionally announcing the client with PROXY v1 (as
// ingress-nginx's stream "proxy_protocol on"). br, if not nil, holds bytes
// already read from c; it is returned to the pool.
func (p *Proxy) toBackend(c net.Conn, br *bufio.Reader, backend string, view *connView, sendProxy bool) {
	p.toBackendFrom(c, br, backend, view, sendProxy, nil, &balancer.Attempt{})
}

// toBackendFrom is toBackend starting from a peer an event loop picked
// (first, with its attempt a; nil: none yet).
func (p *Proxy) toBackendFrom(c net.Conn, br *bufio.Reader, backend string, view *connView, sendProxy bool, first *balancer.Pick, a *balancer.Attempt) {
	reason := reasonConnect
	for try := 0; try < p.cfg.Tries; try++ {
		pick := first
		first = nil
		if pick == nil {
			var err error
			if pick, err = p.cfg.Picker.Pick(backend, view, a); err != nil {
				if try == 0 {
					reason = reasonNoPeer
				}
				break
			}
		}
		start := time.Now()
		up, err := dial(&p.dialer, pick.Peer, p.cfg.ConnectTimeout)
		if err != nil {
			p.cfg.Picker.Done(pick, balancer.DoneInfo{ConnectTime: time.Since(start), Failed: true})
			a.LastFailure = balancer.FailureFailed
			continue
		}
		connect := time.Since(start)
		var hdr []byte
		if sendProxy {
			hdr = proxyproto.AppendV1(nil, view.src, view.dst)
		}
		first, err := sendFirst(up, hdr, br)
		br = nil // back in the pool, even on error
		if err != nil {
			_ = up.Close()
			p.cfg.Picker.Done(pick, balancer.DoneInfo{ConnectTime: connect, Failed: true})
			break // the peeked bytes are gone; another peer cannot get them
		}
		n, m := pipe(c, up, p.cfg.IdleTimeout)
		p.cfg.Picker.Done(pick, balancer.DoneInfo{ConnectTime: connect, ResponseTime: time.Since(start)})
		p.metrics.done(backend, first+n, m)
		return
	}
	if br != nil {
		putReader(br)
	}
	p.metrics.fail(backend, reason)
	_ = c.Close()
}

// SyncTCP makes the proxy listen on exactly the ports of the current TCP
// services on addr (an IP, "" for all): new ports are opened, removed ports
// closed (their established connections continue). Errors name the ports
// that could not be opened; the others are served.
func (p *Proxy) SyncTCP(ctx context.Context, addr string) error {
	routes := p.routes.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for port, ln := range p.listeners {
		if _, ok := routes.TCP[port]; !ok {
			_ = ln.Close()
			delete(p.listeners, port)
		}
	}
	for port := range routes.TCP {
		if _, ok := p.listeners[port]; ok {
			continue
		}
		ln, err := tcpServiceListen.Listen(ctx, "tcp", net.JoinHostPort(addr, fmt.Sprint(port)))
		if err != nil {
			errs = append(errs, fmt.Errorf("tcp service port %d: %w", port, err))
			continue
		}
		if p.loops != nil {
			ll, err := p.loops.listen(ln, false, port)
			if err != nil {
				_ = ln.Close()
				errs = append(errs, fmt.Errorf("tcp service port %d: %w", port, err))
				continue
			}
			p.listeners[port] = ll
			context.AfterFunc(ctx, func() { _ = ll.Close() })
			continue
		}
		p.listeners[port] = ln
		go p.serveTCP(ctx, ln, port)
	}
	return errors.Join(errs...)
}

// serveTCP is the accept loop of one TCP service port.
func (p *Proxy) serveTCP(ctx context.Context, ln net.Listener, port int) {
	_ = p.serve(ctx, ln, func(c net.Conn) { p.handleTCP(c, port) })
}

func (p *Proxy) handleTCP(c net.Conn, port int) {
	svc, ok := p.routes.Load().TCP[port]
	if !ok {
		_ = c.Close()
		return
	}
	var br *bufio.Reader
	view := &connView{remote: remoteIP(c), src: proxyproto.AddrPortOf(c.RemoteAddr()), dst: proxyproto.AddrPortOf(c.LocalAddr())}
	if svc.DecodeProxyProtocol {
		br = getReader(c)
		_ = c.SetReadDeadline(time.Now().Add(p.cfg.HelloTimeout))
		h, err := proxyproto.Read(br)
		_ = c.SetReadDeadline(time.Time{})
		if err != nil {
			putReader(br)
			p.metrics.fail(svc.Backend, reasonProxyProtocol)
			_ = c.Close() // strict: a malformed header closes the connection
			return
		}
		if !h.Local {
			view.remote = h.Source.Addr().String()
			view.src, view.dst = h.Source, h.Destination
		}
	}
	p.toBackend(c, br, svc.Backend, view, svc.EncodeProxyProtocol)
}

// Wait blocks until every connection handler has returned.
func (p *Proxy) Wait() { p.conns.wait() }

// inflight counts connection handlers. Unlike a sync.WaitGroup it may go up
// from zero while wait runs: handlers start whenever a client connects, and
// wait is called by whoever saw the connections finish (over the network,
// which the race detector cannot see), so WaitGroup's rule that an Add from
// zero happen before Wait cannot be kept. One uncontended lock per
// connection, never per byte.
type inflight struct {
	mu   sync.Mutex
	n    int        // guarded by mu
	zero *sync.Cond // signalled when n drops to 0; lazily made under mu
}

func (f *inflight) add() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

func (f *inflight) done() {
	f.mu.Lock()
	f.n--
	if f.n == 0 && f.zero != nil {
		f.zero.Broadcast()
	}
	f.mu.Unlock()
}

func (f *inflight) wait() {
	f.mu.Lock()
	if f.zero == nil {
		f.zero = sync.NewCond(&f.mu)
	}
	for f.n > 0 {
		f.zero.Wait()
	}
	f.mu.Unlock()
}

// outOfResources reports whether err is accept's want of descriptors or
// memory, which passes.
func outOfResources(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

func remoteIP(c net.Conn) string {
	ap := proxyproto.AddrPortOf(c.RemoteAddr())
	if !ap.IsValid() {
		return ""
	}
	return ap.Addr().String()
}
