//go:build !linux

package tcpproxy

import (
	"net"
	"time"
)

// setDeferAccept is a no-op where TCP_DEFER_ACCEPT does not exist.
func setDeferAccept(net.Listener, time.Duration) {}
