package h2srv

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server holds the settings of the connections it serves. Its zero value
// serves with the defaults documented on each field, but for Handler,
// which must be set.
type Server struct {
	// Handler answers each request.
	Handler http.Handler
	// MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS: a stream
	// opened past it is refused (REFUSED_STREAM). 0 means 128.
	MaxConcurrentStreams uint32
	// MaxHeaderBytes bounds a request's header list (its fields' lengths
	// plus 32 each, RFC 9113 §6.5.2); a longer one is answered 431.
	// 0 means 1 MiB.
	MaxHeaderBytes int
	// MaxRequests ends a connection gracefully (GOAWAY) once this many
	// streams have been opened on it, as nginx's keepalive_requests
	// does. 0 means no limit.
	MaxRequests int
	// IdleTimeout closes a connection with no open stream for this long
	// (GOAWAY first). 0 means none.
	IdleTimeout time.Duration
	// WriteTimeout bounds each write to the connection; a client that
	// does not read for this long loses the connection. 0 means none.
	WriteTimeout time.Duration
	// ConnContext, when set, derives each connection's base context (the
	// parent of its requests' contexts) from the one ServeConn was given.
	ConnContext func(context.Context, net.Conn) context.Context
	// StreamsChanged, when set, is called with a connection's number of
	// open streams each time it changes (from its reading goroutine or a
	// handler's), for a reaper that closes idle connections first.
	StreamsChanged func(c net.Conn, open int)

	// idle holds the goroutines waiting to run a handler (workers).
	idle     chan *worker
	idleOnce sync.Once
}

// maxIdleWorkers bounds the handler goroutines kept between requests.
const maxIdleWorkers = 256

// worker is a goroutine that runs handlers one after another: a stream's
// handler starts on an idle one rather than on a new goroutine, whose
// stack would grow (copied at each doubling) on every request, as
// fasthttp's worker pool spares HTTP/1.1's.
type worker struct{ jobs chan job }

// job is one stream's handler call, or, with st nil, a flush of what the
// connection's reading goroutine queued (its control frames).
type job struct {
	c   *conn
	st  *stream
	rw  *responseWriter
	req *http.Request
	h   http.Handler
}

// idleWorkers is the channel of idle workers, made on first use.
func (s *Server) idleWorkers() chan *worker {
	s.idleOnce.Do(func() { s.idle = make(chan *worker, maxIdleWorkers) })
	return s.idle
}

// run starts j on an idle worker, or on a new one. It never blocks.
func (s *Server) run(j job) {
	select {
	case w := <-s.idleWorkers():
		w.jobs <- j
	default:
		w := &worker{jobs: make(chan job, 1)}
		w.jobs <- j
		go s.work(w)
	}
}

// idleCount is how many workers wait for a job.
func (s *Server) idleCount() int { return len(s.idleWorkers()) }

// work runs w's jobs; it ends when maxIdleWorkers others are idle.
func (s *Server) work(w *worker) {
	for j := range w.jobs {
		if j.st == nil {
			j.c.flushQueued()
		} else {
			j.c.runHandler(j.st, j.rw, j.req, j.h)
		}
		select {
		case s.idle <- w:
		default:
			return
		}
	}
}

const (
	defaultMaxStreams     = 128
	defaultMaxHeaderBytes = 1 << 20
	// streamWindow and connWindow are the receive windows advertised for
	// request bodies: a stream may have 1 MiB in flight, the connection
	// 1 MiB in all (what x/net/http2 advertises by default).
	streamWindow = 1 << 20
	connWindow   = 1 << 20
	// initialPeerWindow is the send window a stream starts with until
	// the client's SETTINGS say otherwise (RFC 9113 §6.9.2).
	initialPeerWindow = 65535
	// maxReadFrame is the largest frame a client may send: the default of
	// SETTINGS_MAX_FRAME_SIZE, which the server does not raise.
	maxReadFrame = 16384
	// maxControlQueued bounds the control frames (PING and SETTINGS
	// acknowledgements, window updates, resets) waiting for a write the
	// client is not reading: past it the connection is closed, as
	// x/net/http2 closes one flooding it (CVE-2019-9512, -9515).
	maxControlQueued = 10000
	// maxPending bounds the response bytes waiting to be written; a
	// handler past it waits for the write to drain.
	maxPending = 256 << 10
	// maxKeptBuffer is the largest write buffer a connection keeps for
	// reuse; a larger one, grown by a burst, is left to the collector.
	maxKeptBuffer = 32 << 10
	// resetBudget and resetWindow bound the streams a client may reset
	// before their answer (CVE-2023-44487, "rapid reset"): past resetBudget
	// in resetWindow, the connection ends with ENHANCE_YOUR_CALM.
	resetBudget = 200
	resetWindow = time.Second
	// lingerTime is how long a connection closed after GOAWAY reads what
	// the client still sends, so that the GOAWAY is not lost to a reset.
	lingerTime = time.Second
)

func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams == 0 {
		return defaultMaxStreams
	}
	return s.MaxConcurrentStreams
}

func (s *Server) maxHeaderBytes() uint32 {
	if s.MaxHeaderBytes <= 0 {
		return defaultMaxHeaderBytes
	}
	return uint32(min(s.MaxHeaderBytes, 1<<30))
}

// ServeConn serves c until the client closes it, an error ends it, ctx
// ends (GOAWAY, then the open streams' end), or a limit of s closes it.
// The client's preface must come first; a connection accepted after an
// HTTP/1.1 peek passes the bytes it peeked through c. ServeConn closes c.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) {
	if s.ConnContext != nil {
		ctx = s.ConnContext(ctx, c)
	}
	sc := newConn(s, ctx, c)
	sc.serve(ctx)
}
