package tcpproxy

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// closeWriter is a connection that can half-close (TCP, TLS, unix).
type closeWriter interface {
	CloseWrite() error
}

// copyBufSize is the buffer each direction of every connection holds,
// also while it waits for bytes. Issue 7: splice(2) through
// (*net.TCPConn).ReadFrom used less CPU on loopback but was no faster
// (0.60–0.75× direct throughput against 0.69–0.74× for this read/write
// loop in the same runs); see docs/benchmarks/tcpproxy.md.
const copyBufSize = 32 << 10

// bulkBufSize is the buffer a direction borrows while a bulk transfer is
// under way, i.e. while reads fill the buffer (more bytes are waiting). It
// goes back to the pool after the first short read, so an idle connection
// holds copyBufSize per direction, not this. Issue 7: per 1 MiB
// passthrough connection this made half the reads and 38 % of the writes of
// the fixed 32 KiB buffer, 22 % less proxy CPU (perf stat), and 0.71–0.81×
// direct throughput instead of 0.63–0.73× in the same runs (with the
// TCP_DEFER_ACCEPT change); see docs/benchmarks/tcpproxy.md.
const bulkBufSize = 256 << 10

// maxBulkBufs bounds the bulk buffers lent out at once (64 MiB); past it a
// direction goes on with its copyBufSize buffer.
const maxBulkBufs = 256

// copyBufs and bulkBufs recycle copy buffers between connections; bulkOut
// counts the bulk buffers lent out.
var (
	copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}
	bulkBufs = sync.Pool{New: func() any { b := make([]byte, bulkBufSize); return &b }}
	bulkOut  atomic.Int32
)

// getBulk lends a bulk buffer, or nil when maxBulkBufs are out.
func getBulk() *[]byte {
	if bulkOut.Add(1) > maxBulkBufs {
		bulkOut.Add(-1)
		return nil
	}
	return bulkBufs.Get().(*[]byte)
}

// putBulk takes back a buffer from getBulk.
func putBulk(b *[]byte) {
	bulkBufs.Put(b)
	bulkOut.Add(-1)
}

// proxyCopy copies src to dst until EOF, an error, or idle without a byte
// from src, then half-closes dst so the peer sees the end of the stream
// while the other direction keeps flowing. It returns the bytes copied.
func proxyCopy(dst, src net.Conn, idle time.Duration) int64 {
	small := copyBufs.Get().(*[]byte)
	var bulk *[]byte // borrowed while reads fill the buffer
	buf := *small
	var total int64
	// The read deadline is re-armed only when it has moved by more than
	// 1/64 of idle, so a busy stream does not reset a timer per read; it
	// fires between idle·63/64 and idle after the last byte.
	var armed time.Time
	slack := idle / 64
	for {
		if idle > 0 {
			if now := time.Now(); now.Add(idle).Sub(armed) > slack {
				armed = now.Add(idle)
				_ = src.SetReadDeadline(armed)
			}
		}
		n, err := src.Read(buf)
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			total += int64(w)
			if werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
		switch {
		case n == len(buf) && bulk == nil:
			if bulk = getBulk(); bulk != nil {
				buf = *bulk
			}
		case n < copyBufSize && bulk != nil:
			putBulk(bulk)
			bulk = nil
			buf = *small
		}
	}
	if bulk != nil {
		putBulk(bulk)
	}
	copyBufs.Put(small)
	if cw, ok := dst.(closeWriter); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
	return total
}

// downstreamCopy is the named goroutine copying upstream to client.
func downstreamCopy(wg *sync.WaitGroup, client, upstream net.Conn, idle time.Duration, counted *int64) {
	defer wg.Done()
	*counted = proxyCopy(client, upstream, idle)
}

// pipe joins a client and an upstream connection and returns the bytes
// copied each way once both directions are done: client to upstream in the
// calling goroutine, upstream to client in downstreamCopy. Both are closed
// on return.
func pipe(client, upstream net.Conn, idle time.Duration) (up, down int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go downstreamCopy(&wg, client, upstream, idle, &down)
	up = proxyCopy(upstream, client, idle)
	wg.Wait()
	_ = client.Close()
	_ = upstream.Close()
	return up, down
}

// readers recycles the buffered readers that hold a peeked ClientHello or
// PROXY header; maxHello bytes each.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, maxHello) }}

func getReader(c net.Conn) *bufio.Reader {
	br := readers.Get().(*bufio.Reader)
	br.Reset(c)
	return br
}

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readers.Put(br)
}

// sendFirst writes hdr (a PROXY header, may be nil) and the bytes buffered
// in br (the peeked ClientHello or what followed a PROXY header) to
// upstream in one write, then returns br to the pool: from here on the
// client socket is read directly. It returns the client bytes written.
func sendFirst(upstream net.Conn, hdr []byte, br *bufio.Reader) (int64, error) {
	var peeked []byte
	if br != nil {
		peeked, _ = br.Peek(br.Buffered())
	}
	var err error
	switch {
	case len(hdr) > 0 && len(peeked) > 0:
		// One write, so the header and the hello leave in one segment
		// (the upstream is an *os.File-backed upstreamConn, which
		// net.Buffers would write in two calls). A PROXY header and a
		// hello of at most maxHello fit in a copy buffer.
		buf := copyBufs.Get().(*[]byte)
		_, err = upstream.Write(append(append((*buf)[:0], hdr...), peeked...))
		copyBufs.Put(buf)
	case len(hdr) > 0:
		_, err = upstream.Write(hdr)
	case len(peeked) > 0:
		_, err = upstream.Write(peeked)
	}
	n := int64(len(peeked))
	if br != nil {
		putReader(br)
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}
