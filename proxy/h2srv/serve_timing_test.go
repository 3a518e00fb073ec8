package h2srv

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2" //nolint:staticcheck // SA1019: the benchmark client's framing
	"golang.org/x/net/http2/hpack"

	"github.com/switchyard-proxy/switchyard/internal/cputime"
)

// benchBody and benchHeaders are the benchmark handler's answer: shared
// slices, so that the handler itself allocates nothing.
var (
	benchBody        = []byte("hello, world\n")
	benchContentType = []string{"text/plain; charset=utf-8"}
	benchServer      = []string{"switchyard"}
)

func benchHandler(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h["Content-Type"] = benchContentType
	h["Server"] = benchServer
	_, _ = w.Write(benchBody)
}

// BenchmarkServeRequests serves GET / to a minimal HTTP/2 client over
// loopback TCP, shaped like h2load's runs (-c conns -m streams): each
// connection keeps streams requests in flight. One op is one request.
// The client allocates nothing per request: its header block is encoded
// once (indexed fields, after a first request that filled the server's
// HPACK table), and it parses frames itself into a reused buffer; so
// allocs/op are the server's.
func BenchmarkServeRequests(b *testing.B) {
	for _, bc := range []struct{ conns, streams int }{{1, 1}, {8, 8}} {
		b.Run(fmt.Sprintf("conns=%d/streams=%d", bc.conns, bc.streams), func(b *testing.B) {
			benchServe(b, bc.conns, bc.streams)
		})
	}
}

func benchServe(b *testing.B, conns, streams int) {
	addr, _ := serveH2(b, &Server{Handler: http.HandlerFunc(benchHandler)})
	clients := make([]*benchClient, conns)
	for i := range clients {
		clients[i] = newBenchClient(b, addr, streams)
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	cpu, _ := cputime.Process()
	var wg sync.WaitGroup
	errs := make(chan error, 2*conns)
	for _, bc := range clients {
		wg.Go(func() {
			if err := bc.run(&left); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	// The client's and the server's CPU time, per request.
	cpu1, _ := cputime.Process()
	b.ReportMetric(float64(cpu1-cpu)/float64(b.N), "cpu-ns/op")
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// benchClient is one connection of the benchmark's client.
type benchClient struct {
	nc      net.Conn
	br      *bufio.Reader
	streams int
	// block is the request's header block once the server's HPACK table
	// holds its fields: every field indexed.
	block  []byte
	wmu    sync.Mutex
	out    []byte // frames being written, under wmu
	nextID uint32
	slots  chan struct{}
	frame  []byte  // the payload being read
	hdr    [9]byte // the frame header being read (a field: a local would escape)
}

var benchRequest = []hpack.HeaderField{
	{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
	{Name: ":authority", Value: "bench.example.com"}, {Name: ":path", Value: "/"},
	{Name: "user-agent", Value: "h2load nghttp2/1.64.0"}, {Name: "accept", Value: "*/*"},
	{Name: "accept-encoding", Value: "gzip, deflate"},
}

// newBenchClient connects, and serves one request whose header block
// fills the server's HPACK table with the request's fields.
func newBenchClient(b testing.TB, addr string, streams int) *benchClient {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = nc.Close() })
	bc := &benchClient{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), streams: streams, nextID: 1,
		slots: make(chan struct{}, streams), frame: make([]byte, 0, 16<<10)}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	encode := func() []byte {
		hb.Reset()
		for _, f := range benchRequest {
			_ = enc.WriteField(f)
		}
		return bytes.Clone(hb.Bytes())
	}
	first := encode()
	bc.block = encode() // all indexed now
	var setup bytes.Buffer
	setup.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&setup, nil)
	_ = fr.WriteSettings()
	_ = fr.WriteWindowUpdate(0, 1<<30) // the connection's window: refilled as bodies come
	_, _ = setup.Write(bc.headersFrame(nil, bc.nextID, first))
	bc.nextID += 2
	if _, err := nc.Write(setup.Bytes()); err != nil {
		b.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for done := false; !done; {
		typ, flags, id, err := bc.readFrame()
		if err != nil {
			b.Fatal(err)
		}
		done = id == 1 && flags&0x1 != 0 && (typ == 0x0 || typ == 0x1)
	}
	_ = nc.SetReadDeadline(time.Time{})
	return bc
}

// headersFrame appends a HEADERS frame ending stream id (a GET) to dst.
func (bc *benchClient) headersFrame(dst []byte, id uint32, block []byte) []byte {
	n := len(block)
	dst = append(dst, byte(n>>16), byte(n>>8), byte(n), 0x1, 0x1|0x4) // HEADERS, END_STREAM|END_HEADERS
	dst = binary.BigEndian.AppendUint32(dst, id)
	return append(dst, block...)
}

// readFrame reads one frame into bc.frame and answers SETTINGS and PING;
// an error for RST_STREAM and GOAWAY.
func (bc *benchClient) readFrame() (typ, flags byte, id uint32, err error) {
	hdr := bc.hdr[:]
	if _, err := io.ReadFull(bc.br, hdr); err != nil {
		return 0, 0, 0, err
	}
	n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	typ, flags, id = hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&(1<<31-1)
	if n > cap(bc.frame) {
		return 0, 0, 0, fmt.Errorf("frame of %d bytes", n)
	}
	bc.frame = bc.frame[:n]
	if _, err := io.ReadFull(bc.br, bc.frame); err != nil {
		return 0, 0, 0, err
	}
	switch typ {
	case 0x3:
		return 0, 0, 0, fmt.Errorf("RST_STREAM on stream %d, code %d", id, binary.BigEndian.Uint32(bc.frame))
	case 0x7:
		return 0, 0, 0, errors.New("GOAWAY")
	case 0x4: // SETTINGS
		if flags&0x1 == 0 {
			bc.write(func(out []byte) []byte { return append(out, 0, 0, 0, 0x4, 0x1, 0, 0, 0, 0) })
		}
	case 0x6: // PING
		if flags&0x1 == 0 {
			bc.write(func(out []byte) []byte {
				out = append(out, 0, 0, 8, 0x6, 0x1, 0, 0, 0, 0)
				return append(out, bc.frame...)
			})
		}
	}
	return typ, flags, id, nil
}

// write writes the frames frame appends, under wmu.
func (bc *benchClient) write(frames func([]byte) []byte) {
	bc.wmu.Lock()
	bc.out = frames(bc.out[:0])
	_, _ = bc.nc.Write(bc.out)
	bc.wmu.Unlock()
}

// run sends requests while left allows, up to bc.streams in flight, and
// reads their answers. The sender's last frame is a PING: its ACK tells
// the reader that the count of requests sent is known.
func (bc *benchClient) run(left *atomic.Int64) error {
	sent := make(chan int, 1)
	go bc.send(left, sent)
	done, consumed, total := 0, 0, -1
	for total != done {
		typ, flags, id, err := bc.readFrame()
		if err != nil {
			return err
		}
		switch {
		case typ == 0x6 && flags&0x1 != 0: // our PING's ACK
			total = <-sent
		case typ == 0x0:
			if consumed += len(bc.frame); consumed >= 1<<20 {
				c := consumed
				bc.write(func(out []byte) []byte {
					out = append(out, 0, 0, 4, 0x8, 0, 0, 0, 0, 0)
					return binary.BigEndian.AppendUint32(out, uint32(c))
				})
				consumed = 0
			}
		}
		if id != 0 && flags&0x1 != 0 && (typ == 0x0 || typ == 0x1) {
			done++
			<-bc.slots
		}
	}
	return nil
}

// send is run's sender: HEADERS frames, several in one write when
// several streams are free.
func (bc *benchClient) send(left *atomic.Int64, sent chan<- int) {
	total := 0
	for {
		bc.slots <- struct{}{} // a stream free
		n := 1
		for n < bc.streams && len(bc.slots) < cap(bc.slots) {
			bc.slots <- struct{}{}
			n++
		}
		if got := left.Add(-int64(n)); got < 0 {
			over := int(min(-got, int64(n))) // reserved past b.N
			for range over {
				<-bc.slots
			}
			n -= over
		}
		if n <= 0 {
			break
		}
		bc.write(func(out []byte) []byte {
			for range n {
				out = bc.headersFrame(out, bc.nextID, bc.block)
				bc.nextID += 2
			}
			return out
		})
		total += n
	}
	sent <- total
	bc.write(func(out []byte) []byte { return append(out, 0, 0, 8, 0x6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) })
}

// roundTrip sends one request and reads its answer, on a client of one
// stream.
func (bc *benchClient) roundTrip() error {
	bc.write(func(out []byte) []byte { return bc.headersFrame(out, bc.nextID, bc.block) })
	bc.nextID += 2
	for {
		typ, flags, id, err := bc.readFrame()
		if err != nil {
			return err
		}
		if id != 0 && flags&0x1 != 0 && (typ == 0x0 || typ == 0x1) {
			return nil
		}
	}
}
