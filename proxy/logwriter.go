package proxy

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// LogWriter is the access log's writer for a destination that may be slow
// (a pipe to a log collector, a terminal): Write appends the line to a
// bounded buffer and returns at once; one goroutine drains the buffer to the
// destination. A line that does not fit is dropped and counted (Dropped),
// so a request never waits for the log, as nginx's buffered access_log does
// not either. Whole lines only: a line is kept or dropped whole.
//
// Lines are written in batches: at most flushDelay after the first line of
// a batch, or as soon as the batch reaches flushSize (or half the limit),
// so a busy proxy makes one write(2) per many requests where nginx's
// unbuffered access_log makes one per request.
//
// Write takes a mutex for the append only (no I/O under it).
type LogWriter struct {
	dst io.Writer
	// raw is dst when it is the raw-syscall writer made here
	// (rawconn_linux.go), closed with the LogWriter.
	raw       *rawFile
	limit     int
	flushSize int

	mu      sync.Mutex
	pending []byte // guarded by mu
	closed  bool   // guarded by mu

	wake    chan struct{} // one pending wake-up: a batch started
	full    chan struct{} // one pending wake-up: write the batch now
	done    chan struct{} // closed when the drain goroutine ends
	dropped atomic.Uint64
	written atomic.Uint64
}

// flushDelay is how long a line may wait for others to share its write;
// flushSize is the batch that is written at once.
const (
	flushDelay = 10 * time.Millisecond
	flushSize  = 64 << 10
)

// NewLogWriter starts a LogWriter draining to dst, buffering at most limit
// bytes (zero means 1 MiB). Close flushes what is buffered and stops it.
// When dst is a regular file or a pipe, batches are written with raw
// system calls (rawconn_linux.go), which keep the runtime's monitor asleep.
func NewLogWriter(dst io.Writer, limit int) *LogWriter {
	if limit <= 0 {
		limit = 1 << 20
	}
	w := &LogWriter{dst: dst, limit: limit, flushSize: min(flushSize, limit/2), pending: make([]byte, 0, 64<<10),
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1), done: make(chan struct{})}
	if f, ok := dst.(*os.File); ok {
		if raw, ok := rawLogDestination(f); ok {
			w.dst, w.raw = raw, raw
		}
	}
	go w.drain()
	return w
}

// Write buffers p (one line) and reports it written, or drops it when the
// buffer is full or the writer closed.
func (w *LogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed || len(w.pending)+len(p) > w.limit {
		w.mu.Unlock()
		w.dropped.Add(1)
		return len(p), nil
	}
	before := len(w.pending)
	w.pending = append(w.pending, p...)
	after := len(w.pending)
	w.mu.Unlock()
	// The drain goroutine takes everything pending, so only the first
	// line of a batch wakes it, and only the line that fills it hurries
	// it: most Writes touch no channel.
	if before == 0 {
		signal(w.wake)
	}
	if before < w.flushSize && after >= w.flushSize {
		signal(w.full)
	}
	return len(p), nil
}

// Dropped is how many lines were dropped because the buffer was full.
func (w *LogWriter) Dropped() uint64 { return w.dropped.Load() }

// Written is how many bytes reached the destination.
func (w *LogWriter) Written() uint64 { return w.written.Load() }

// Close writes what is buffered and stops the writer; later lines are
// dropped.
func (w *LogWriter) Close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	signal(w.wake)
	signal(w.full)
	<-w.done
	if w.raw != nil {
		return w.raw.Close()
	}
	return nil
}

// signal leaves a wake-up in c unless one is pending.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// drain swaps the buffer out and writes it, until Close.
func (w *LogWriter) drain() {
	defer close(w.done)
	spare := make([]byte, 0, 64<<10)
	delay := time.NewTimer(flushDelay)
	delay.Stop()
	for range w.wake {
		// Let the batch gather, unless it is full or the writer closing.
		delay.Reset(flushDelay)
		select {
		case <-w.full:
			delay.Stop()
		case <-delay.C:
		}
		w.mu.Lock()
		out := w.pending
		w.pending, spare = spare[:0], nil
		closed := w.closed
		w.mu.Unlock()
		if len(out) > 0 {
			n, _ := w.dst.Write(out)
			w.written.Add(uint64(n))
		}
		spare = out
		if closed {
			return
		}
	}
}
