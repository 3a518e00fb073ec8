//go:build !linux

package proxy

import "net"

// Elsewhere than Linux, client connections wait in Go's poller
// (poller_linux.go says why Linux does otherwise).

type poller struct{}

func sharedPoller() *poller { return nil }

type pollListener struct{}

func (*poller) listen(*net.TCPListener) (*pollListener, error) { return nil, net.ErrClosed }

func (*pollListener) accept() (net.Conn, error) { return nil, net.ErrClosed }

func (*pollListener) close() {}
