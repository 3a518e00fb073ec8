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

// proxyCopy copies src to dst until EOF, then half-closes dst so the peer
// sees the end of the stream while the other direction keeps flowing.
// io.Copy uses splice when both ends are *net.TCPConn.
func proxyCopy(wg *sync.WaitGroup, dst net.Conn, src io.Reader, counted *int64) {
	defer wg.Done()
	n, _ := io.Copy(dst, src)
	*counted = n
	if cw, ok := dst.(closeWriter); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// pipe joins a client and an upstream connection and returns the bytes
// copied each way once both directions are done. client may carry bytes
// already read (a peeked ClientHello) in br.
func pipe(client net.Conn, br *bufio.Reader, upstream net.Conn, idle time.Duration) (up, down int64) {
	var wg sync.WaitGroup
	wg.Add(2)
	var src io.Reader = client
	if br != nil && br.Buffered() > 0 {
		// Replay the peeked bytes, then read the socket directly (keeping
		// splice for the rest).
		peeked, _ := br.Peek(br.Buffered())
		src = io.MultiReader(bytesReader(peeked), client)
	}
	if idle > 0 {
		src = &idleReader{r: src, c: client, d: idle}
	}
	go proxyCopy(&wg, upstream, src, &up)
	go proxyCopy(&wg, client, upstream, &down)
	wg.Wait()
	_ = client.Close()
	_ = upstream.Close()
	return up, down
}

// idleReader extends a read deadline before each read, closing idle
// connections.
type idleReader struct {
	r io.Reader
	c net.Conn
	d time.Duration
}

func (i *idleReader) Read(p []byte) (int, error) {
	_ = i.c.SetReadDeadline(time.Now().Add(i.d))
	return i.r.Read(p)
}

type byteSliceReader struct{ b []byte }

func bytesReader(b []byte) *byteSliceReader { return &byteSliceReader{b: append([]byte(nil), b...)} }

func (r *byteSliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
