//go:build !linux

package tcpproxy

import (
	"net"
	"time"
)

// Event loops exist on Linux only (loop_linux.go); elsewhere every
// connection has its goroutine.

type loopGroup struct{}

type loopListener struct {
	fd   int
	done chan struct{}
}

func (*loopListener) Close() error { return nil }

func newLoopGroup(*Proxy, int) (*loopGroup, error) { return nil, nil }

func (*loopGroup) listen(net.Listener, bool, int) (*loopListener, error) {
	panic("tcpproxy: no event loops on this system")
}

func deferAcceptFD(int, time.Duration) {}
