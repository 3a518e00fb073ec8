//go:build !linux

package proxy

import (
	"net"
	"os"
)

// Elsewhere than Linux, proxied bytes and the access log go through
// net.Conn and os.File as they are (rawconn_linux.go says why Linux does
// otherwise).

func withRawSyscalls(c net.Conn) net.Conn { return c }

// rawFile is not made off Linux.
type rawFile struct{ *os.File }

func rawLogDestination(*os.File) (*rawFile, bool) { return nil, false }

func (*rawFile) Close() error { return nil }
