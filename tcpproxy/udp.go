package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// UDPConfig configures one UDP service (a --udp-services-configmap entry).
type UDPConfig struct {
	// Picker chooses the peer of each new session. Required.
	Picker Picker
	// Backend is the balancer backend (udp-<ns>-<svc>-<port>). Required.
	Backend string
	// IdleTimeout ends a session with no datagram either way for this long;
	// zero means 10 minutes (nginx stream proxy_timeout).
	IdleTimeout time.Duration
}

// udpSession is one client address bound to one upstream socket.
type udpSession struct {
	up   *net.UDPConn  // immutable
	pick balancer.Pick // immutable
	last atomic.Int64  // unix nanos of the last datagram either way
	once sync.Once     // guards closing
}

// ServeUDP relays datagrams from pc until ctx ends. Each client address gets
// a session with its own upstream socket, chosen once through the balancer;
// replies go back from pc to that client. Sessions end after IdleTimeout.
func ServeUDP(ctx context.Context, pc net.PacketConn, cfg UDPConfig) error {
	if cfg.Picker == nil || cfg.Backend == "" {
		return errors.New("tcpproxy: UDPConfig.Picker and Backend are required")
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	stop := context.AfterFunc(ctx, func() { _ = pc.Close() })
	defer stop()

	var mu sync.Mutex // guards sessions
	sessions := map[netip.AddrPort]*udpSession{}
	var wg sync.WaitGroup
	defer func() {
		mu.Lock()
		for _, s := range sessions {
			s.close()
		}
		mu.Unlock()
		wg.Wait()
	}()

	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read udp service %s: %w", cfg.Backend, err)
		}
		client := proxyprotoAddrPort(from)
		mu.Lock()
		s := sessions[client]
		if s == nil {
			s, err = newUDPSession(cfg, client)
			if err != nil {
				mu.Unlock()
				continue // no peer: drop the datagram, as nginx does
			}
			sessions[client] = s
			wg.Add(1)
			go func() {
				defer wg.Done()
				udpReplies(pc, s, from, cfg.IdleTimeout)
				mu.Lock()
				if sessions[client] == s {
					delete(sessions, client)
				}
				mu.Unlock()
				cfg.Picker.Done(s.pick, balancer.DoneInfo{})
			}()
		}
		mu.Unlock()
		s.last.Store(time.Now().UnixNano())
		_, _ = s.up.Write(buf[:n])
	}
}

func newUDPSession(cfg UDPConfig, client netip.AddrPort) (*udpSession, error) {
	view := &connView{remote: client.Addr().String()}
	var a balancer.Attempt
	pick, err := cfg.Picker.Pick(cfg.Backend, view, &a)
	if err != nil {
		return nil, fmt.Errorf("pick udp peer: %w", err)
	}
	raddr, err := net.ResolveUDPAddr("udp", pick.Peer)
	if err != nil {
		cfg.Picker.Done(pick, balancer.DoneInfo{Failed: true})
		return nil, fmt.Errorf("resolve udp peer: %w", err)
	}
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		cfg.Picker.Done(pick, balancer.DoneInfo{Failed: true})
		return nil, fmt.Errorf("dial udp peer: %w", err)
	}
	s := &udpSession{up: up, pick: pick}
	s.last.Store(time.Now().UnixNano())
	return s, nil
}

func (s *udpSession) close() {
	s.once.Do(func() {
		_ = s.up.Close()
	})
}

// udpReplies copies upstream datagrams back to the client until the session
// has been idle for idle.
func udpReplies(pc net.PacketConn, s *udpSession, client net.Addr, idle time.Duration) {
	defer s.close()
	buf := make([]byte, 64<<10)
	for {
		_ = s.up.SetReadDeadline(time.Unix(0, s.last.Load()).Add(idle))
		n, err := s.up.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, s.last.Load())) < idle {
				continue // a client datagram arrived meanwhile
			}
			return
		}
		s.last.Store(time.Now().UnixNano())
		if _, err := pc.WriteTo(buf[:n], client); err != nil {
			return
		}
	}
}

func proxyprotoAddrPort(a net.Addr) netip.AddrPort {
	if u, ok := a.(*net.UDPAddr); ok {
		return u.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
