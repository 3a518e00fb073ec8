//go:build !linux

package tcpproxy

import (
	"net"
	"time"
)

// dial connects to an upstream with d (on Linux, a leaner non-blocking
// connect; see dial_linux.go).
func dial(d *net.Dialer, addr string, _ time.Duration) (net.Conn, error) {
	return d.Dial("tcp", addr)
}
