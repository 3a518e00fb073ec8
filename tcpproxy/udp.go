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
	"syscall"
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

// udpTries bounds the peers one session tries: a peer that refuses its
// first datagram (an ICMP port unreachable, as a dead endpoint gives) is
// replaced by the next pick, as proxy_next_upstream's 3 tries replace a peer
// that refuses a TCP connection.
const udpTries = 3

// udpSession is one client address bound to one upstream socket.
type udpSession struct {
	// immutable
	backend string
	client  netip.AddrPort

	// up is the upstream socket; replaced (by replies) when the peer
	// refuses the session's first datagram.
	up atomic.Pointer[net.UDPConn]

	// owned by replies once the session is stored
	pick    balancer.Pick
	attempt balancer.Attempt
	tries   int
	// first is a copy of the session's first datagram, kept until the
	// peer answers, to send to the next peer if this one refuses it.
	first []byte

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
			_ = s.(*udpSession).up.Load().Close()
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
			s, err := u.newSession(client, buf[:n])
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
		if w, err := s.up.Load().Write(buf[:n]); err == nil {
			s.sent.Add(int64(w))
		}
	}
}

func (u *udpService) newSession(client netip.AddrPort, first []byte) (*udpSession, error) {
	backend, ok := u.backend()
	if !ok {
		return nil, errors.New("udp service removed")
	}
	s := &udpSession{backend: backend, client: client, first: append([]byte(nil), first...)}
	up, err := u.dial(s)
	if err != nil {
		return nil, err
	}
	s.up.Store(up)
	s.last.Store(time.Now().UnixNano())
	return s, nil
}

// dial picks the session's next peer (its attempt remembers the ones
// tried) and returns a socket connected to it, s.pick set.
func (u *udpService) dial(s *udpSession) (*net.UDPConn, error) {
	view := &connView{remote: s.client.Addr().String(), src: s.client}
	pick, err := u.picker.Pick(s.backend, view, &s.attempt)
	if err != nil {
		u.metrics.fail(s.backend, reasonNoPeer)
		return nil, fmt.Errorf("pick udp peer: %w", err)
	}
	s.tries++
	raddr, err := net.ResolveUDPAddr("udp", pick.Peer)
	if err != nil {
		u.picker.Done(pick, balancer.DoneInfo{Failed: true})
		u.metrics.fail(s.backend, reasonConnect)
		return nil, fmt.Errorf("resolve udp peer: %w", err)
	}
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		u.picker.Done(pick, balancer.DoneInfo{Failed: true})
		u.metrics.fail(s.backend, reasonConnect)
		return nil, fmt.Errorf("dial udp peer: %w", err)
	}
	s.pick = *pick
	return up, nil
}

// retry replaces a peer that refused the session's first datagram with the
// session's next pick and sends it that datagram; false when the session
// has no more tries or no peer.
func (u *udpService) retry(s *udpSession) bool {
	if s.first == nil || s.tries >= udpTries {
		return false
	}
	u.picker.Done(&s.pick, balancer.DoneInfo{Failed: true})
	u.metrics.fail(s.backend, reasonConnect)
	s.attempt.LastFailure = balancer.FailureFailed
	up, err := u.dial(s)
	if err != nil {
		s.pick = balancer.Pick{}
		return false
	}
	old := s.up.Swap(up)
	_ = old.Close()
	if w, err := up.Write(s.first); err == nil {
		s.sent.Add(int64(w))
	}
	return true
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
	refused := false
	for {
		up := s.up.Load()
		_ = up.SetReadDeadline(time.Unix(0, s.last.Load()).Add(u.idle))
		n, err := up.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, s.last.Load())) < u.idle {
				continue // a client datagram arrived meanwhile
			}
			// A dead peer: the kernel's ICMP port unreachable.
			if refused = errors.Is(err, syscall.ECONNREFUSED); refused && u.retry(s) {
				continue
			}
			break
		}
		s.first = nil
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
	_ = s.up.Load().Close()
	if s.pick.Peer != "" {
		u.picker.Done(&s.pick, balancer.DoneInfo{Failed: refused})
		if refused {
			u.metrics.fail(s.backend, reasonConnect)
		}
	}
	u.metrics.done(s.backend, s.sent.Load(), s.recv.Load())
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if u, ok := a.(*net.UDPAddr); ok {
		return u.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
