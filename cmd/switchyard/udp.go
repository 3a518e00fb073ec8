package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/tcpproxy"
)

// udpServices keeps one tcpproxy.ServeUDP running per UDP service of the
// current Configuration.
type udpServices struct {
	reg  *balancer.Registry
	addr string // listen IP, "" for all

	mu      sync.Mutex // guards running
	running map[int]udpRunning
}

type udpRunning struct {
	backend string
	stop    context.CancelFunc
}

// sync starts listeners for new ports, restarts those whose backend changed
// and stops removed ones. Errors name the ports that could not listen.
func (u *udpServices) sync(ctx context.Context, svcs []model.L4Service) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.running == nil {
		u.running = map[int]udpRunning{}
	}
	want := make(map[int]string, len(svcs))
	for _, s := range svcs {
		want[s.Port] = s.Backend
	}
	for port, r := range u.running {
		if b, ok := want[port]; !ok || b != r.backend {
			r.stop()
			delete(u.running, port)
		}
	}
	var errs []error
	for port, backend := range want {
		if _, ok := u.running[port]; ok {
			continue
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort(u.addr, strconv.Itoa(port)))
		if err != nil {
			errs = append(errs, fmt.Errorf("udp service port %d: %w", port, err))
			continue
		}
		sctx, stop := context.WithCancel(ctx)
		u.running[port] = udpRunning{backend: backend, stop: func() { stop(); _ = pc.Close() }}
		go func() {
			_ = tcpproxy.ServeUDP(sctx, pc, tcpproxy.UDPConfig{Picker: u.reg, Backend: backend})
		}()
	}
	return errors.Join(errs...)
}
