package tcpproxy

import (
	"bufio"
	"io"
	"net"
	"sync"
	"time"
)

// closeWriter is a connection that can half-close (TCP, TLS, unix).
type closeWriter interface {
	CloseWrite() error
}

// idleChunk is how many bytes are copied per idle-deadline refresh. Copying
// in chunks with io.CopyN keeps src an *io.LimitedReader over the socket, a
// shape (*net.TCPConn).ReadFrom still splices, where a deadline-per-Read
// wrapper would force a user-space copy.
const idleChunk = 1 << 20

// proxyCopy copies src to dst until EOF or idle seconds without a byte,
// then half-closes dst so the peer sees the end of the stream while the
// other direction keeps flowing. counted receives the bytes copied.
func proxyCopy(wg *sync.WaitGroup, dst, src net.Conn, idle time.Duration, counted *int64) {
	defer wg.Done()
	var total int64
	for {
		if idle > 0 {
			_ = src.SetReadDeadline(time.Now().Add(idle))
		}
		n, err := io.CopyN(dst, src, idleChunk)
		total += n
		if err != nil {
			break
		}
	}
	*counted = total
	if cw, ok := dst.(closeWriter); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// pipe joins a client and an upstream connection and returns the bytes
// copied each way once both directions are done. br holds bytes already
// peeked from client (a ClientHello); they are written upstream first, then
// the socket itself is copied so splice applies.
func pipe(client net.Conn, br *bufio.Reader, upstream net.Conn, idle time.Duration) (up, down int64) {
	if br != nil && br.Buffered() > 0 {
		peeked, _ := br.Peek(br.Buffered())
		n, err := upstream.Write(peeked)
		up = int64(n)
		if err != nil {
			_ = client.Close()
			_ = upstream.Close()
			return up, 0
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	var rest int64
	go proxyCopy(&wg, upstream, unwrap(client), idle, &rest)
	go proxyCopy(&wg, unwrap(client), unwrap(upstream), idle, &down)
	wg.Wait()
	_ = client.Close()
	_ = upstream.Close()
	return up + rest, down
}

// unwrap returns the *net.TCPConn under c when c is a thin wrapper that
// exposes it (NetConn), so io.Copy can splice.
func unwrap(c net.Conn) net.Conn {
	for {
		if _, ok := c.(*net.TCPConn); ok {
			return c
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = w.NetConn()
	}
}
