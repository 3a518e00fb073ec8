package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// UDPConfig configures one UDP service run by ServeUDP.
type UDPConfig struct {
	// Picker chooses the peer of each new session. Required.
	Picker Picker
	// Backend is the balancer backend (udp-<ns>-<svc>-<port>). Required.
	Backend string
	// IdleTimeout ends a session with no datagram either way for this long;
	// zero means 10 minutes (nginx stream proxy_timeout).
	IdleTimeout time.Duration
}

// ServeUDP relays datagrams from pc to cfg.Backend until ctx ends, with
// unexported metrics. Proxy.SyncUDP runs the --udp-services-configmap
// services with the Proxy's metrics and follows route updates; ServeUDP is
// for a single fixed service.
func ServeUDP(ctx context.Context, pc net.PacketConn, cfg UDPConfig) error {
	if cfg.Picker == nil || cfg.Backend == "" {
		return errors.New("tcpproxy: UDPConfig.Picker and Backend are required")
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	m, err := newMetrics(nil)
	if err != nil {
		return err
	}
	u := &udpService{
		pc:      pc,
		picker:  cfg.Picker,
		idle:    cfg.IdleTimeout,
		metrics: m,
		backend: func() (string, bool) { return cfg.Backend, true },
	}
	return u.serve(ctx)
}

// SyncUDP makes the proxy listen on exactly the ports of the current UDP
// services on addr (an IP, "" for all), like SyncTCP. Each new session
// (client address) picks its peer through the balancer from the backend the
// current routes give its port, so an Update or an endpoint change applies
// to new sessions while established ones keep their peer until IdleTimeout.
// A removed port is closed, which ends its sessions. Errors name the ports
// that could not be opened; the others are served.
func (p *Proxy) SyncUDP(ctx context.Context, addr string) error {
	routes := p.routes.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for port, stop := range p.udp {
		if _, ok := routes.UDP[port]; !ok {
			stop()
			delete(p.udp, port)
		}
	}
	for port := range routes.UDP {
		if _, ok := p.udp[port]; ok {
			continue
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort(addr, strconv.Itoa(port)))
		if err != nil {
			errs = append(errs, fmt.Errorf("udp service port %d: %w", port, err))
			continue
		}
		u := &udpService{
			pc:      pc,
			picker:  p.cfg.Picker,
			idle:    p.cfg.IdleTimeout,
			metrics: p.metrics,
			conns:   &p.conns,
			backend: func() (string, bool) {
				s, ok := p.routes.Load().UDP[port]
				return s.Backend, ok
			},
		}
		sctx, stop := context.WithCancel(ctx)
		p.udp[port] = stop
		go u.run(sctx)
	}
	return errors.Join(errs...)
}

// udpService relays one UDP listening socket: each client address gets a
// session with its own connected upstream socket, chosen once through the
// balancer; replies go back from pc to that client.
type udpService struct {
	// immutable
	pc      net.PacketConn
	picker  Picker
	idle    time.Duration
	metrics *metrics
	conns   *inflight             // counts session goroutines; may be nil
	backend func() (string, bool) // the port's backend for new sessions

	// sessions maps netip.AddrPort to *udpSession; lock-free lookups per
	// datagram.
	sessions sync.Map
}

// udpSession is one client address bound to one upstream socket.
type udpSession struct {
	// immutable
	up      *net.UDPConn
	pick    balancer.Pick
	backend string
	client  netip.AddrPort

	// atomic
	last       atomic.Int64 // unix nanos of the last datagram either way
	sent, recv atomic.Int64 // bytes client to peer, peer to client
}

// run is the accept loop of one SyncUDP port.
func (u *udpService) run(ctx context.Context) { _ = u.serve(ctx) }

func (u *udpService) serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = u.pc.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer func() {
		u.sessions.Range(func(_, s any) bool {
			_ = s.(*udpSession).up.Close()
			return true
		})
		wg.Wait()
	}()
	uc, _ := u.pc.(*net.UDPConn)
	buf := make([]byte, 64<<10)
	for {
		var n int
		var client netip.AddrPort
		var err error
		if uc != nil {
			n, client, err = uc.ReadFromUDPAddrPort(buf)
		} else {
			var from net.Addr
			n, from, err = u.pc.ReadFrom(buf)
			client = addrPortOf(from)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read udp service %s: %w", u.pc.LocalAddr(), err)
		}
		client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
		v, ok := u.sessions.Load(client)
		if !ok {
			s, err := u.newSession(client)
			if err != nil {
				continue // no peer: drop the datagram, as nginx does
			}
			v = s
			u.sessions.Store(client, s)
			wg.Add(1)
			if u.conns != nil {
				u.conns.add()
			}
			go u.replies(&wg, s)
		}
		s := v.(*udpSession)
		s.last.Store(time.Now().UnixNano())
		if w, err := s.up.Write(buf[:n]); err == nil {
			s.sent.Add(int64(w))
		}
	}
}

func (u *udpService) newSession(client netip.AddrPort) (*udpSession, error) {
	backend, ok := u.backend()
	if !ok {
		return nil, errors.New("udp service removed")
	}
	view := &connView{remote: client.Addr().String(), src: client}
	var a balancer.Attempt
	pick, err := u.picker.Pick(backend, view, &a)
	if err != nil {
		u.metrics.fail(backend, reasonNoPeer)
		return nil, fmt.Errorf("pick udp peer: %w", err)
	}
	raddr, err := net.ResolveUDPAddr("udp", pick.Peer)
	if err != nil {
		u.picker.Done(pick, balancer.DoneInfo{Failed: true})
		u.metrics.fail(backend, reasonConnect)
		return nil, fmt.Errorf("resolve udp peer: %w", err)
	}
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		u.picker.Done(pick, balancer.DoneInfo{Failed: true})
		u.metrics.fail(backend, reasonConnect)
		return nil, fmt.Errorf("dial udp peer: %w", err)
	}
	s := &udpSession{up: up, pick: *pick, backend: backend, client: client}
	s.last.Store(time.Now().UnixNano())
	return s, nil
}

// replies is the named goroutine of one session: it copies upstream
// datagrams back to the client until the session has been idle (no
// datagram either way) for u.idle or the service stops, then removes the
// session and counts it.
func (u *udpService) replies(wg *sync.WaitGroup, s *udpSession) {
	defer wg.Done()
	if u.conns != nil {
		defer u.conns.done()
	}
	uc, _ := u.pc.(*net.UDPConn)
	to := net.UDPAddrFromAddrPort(s.client)
	buf := make([]byte, 64<<10)
	for {
		_ = s.up.SetReadDeadline(time.Unix(0, s.last.Load()).Add(u.idle))
		n, err := s.up.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, s.last.Load())) < u.idle {
				continue // a client datagram arrived meanwhile
			}
			break
		}
		s.last.Store(time.Now().UnixNano())
		if uc != nil {
			_, err = uc.WriteToUDPAddrPort(buf[:n], s.client)
		} else {
			_, err = u.pc.WriteTo(buf[:n], to)
		}
		if err != nil {
			break
		}
		s.recv.Add(int64(n))
	}
	// Remove the session before closing its socket, so a datagram arriving
	// now starts a new session instead of writing to a closed one.
	u.sessions.CompareAndDelete(s.client, s)
	_ = s.up.Close()
	u.picker.Done(&s.pick, balancer.DoneInfo{})
	u.metrics.done(s.backend, s.sent.Load(), s.recv.Load())
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if u, ok := a.(*net.UDPAddr); ok {
		return u.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
