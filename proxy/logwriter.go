package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
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
// The buffer is striped (stripes.go): a line goes to the stripe of the P
// that serves its request, under that stripe's mutex (no I/O under it), so
// requests on different CPUs do not write the same cache lines. Each line
// is stamped with the monotonic clock under its stripe's mutex; the drain
// takes every stripe at once and merges them by stamp, so lines reach the
// destination in the order Write was called, across stripes too (a
// connection's lines in the order of its requests).
type LogWriter struct {
	dst io.Writer
	// raw is dst when it is the raw-syscall writer made here
	// (rawconn_linux.go), closed with the LogWriter.
	raw       *rawFile
	flushSize int // per stripe
	// shared bounds each write(2) at pipeAtomic bytes, cut at line ends
	// (NewSharedLogWriter).
	shared bool

	stripes []logStripe

	wake    chan struct{} // one pending wake-up: a batch started
	full    chan struct{} // one pending wake-up: write the batch now
	done    chan struct{} // closed when the drain goroutine ends
	dropped atomic.Uint64
	written atomic.Uint64
}

// logStripe is one stripe of a LogWriter's buffer.
type logStripe struct {
	mu      sync.Mutex
	pending []byte // guarded by mu; lines, each after its logStamp
	closed  bool   // guarded by mu
	limit   int    // bytes pending at most; set before the drain starts
	_       [64]byte
}

// logStamp is the header of a line in a stripe: the monotonic time of its
// Write (8 bytes) and its length (4 bytes), little-endian.
const logStamp = 12

// flushDelay is how long a line may wait for others to share its write;
// flushSize is the batch that is written at once.
const (
	flushDelay = 10 * time.Millisecond
	flushSize  = 64 << 10
)

// NewLogWriter starts a LogWriter draining to dst, buffering at most limit
// bytes (zero means 1 MiB), shared equally by its stripes. Close flushes
// what is buffered and stops it.
// When dst is a regular file or a pipe, batches are written with raw
// system calls (rawconn_linux.go), which keep the runtime's monitor asleep.
func NewLogWriter(dst io.Writer, limit int) *LogWriter {
	if limit <= 0 {
		limit = 1 << 20
	}
	n := stripeCount()
	w := &LogWriter{dst: dst, flushSize: min(flushSize, limit/n/2), stripes: make([]logStripe, n),
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1), done: make(chan struct{})}
	for i := range w.stripes {
		w.stripes[i].limit = limit / n
		w.stripes[i].pending = make([]byte, 0, min(64<<10, limit/n))
	}
	if f, ok := dst.(*os.File); ok {
		if raw, ok := rawLogDestination(f); ok {
			w.dst, w.raw = raw, raw
		}
	}
	go w.drain()
	return w
}

// pipeAtomic is PIPE_BUF on Linux: POSIX makes a write of at most this
// many bytes to a pipe atomic, never interleaved with other writers'.
const pipeAtomic = 4096

// NewSharedLogWriter is NewLogWriter for a destination other processes
// write too (the access log of worker processes on one standard output):
// each write(2) carries whole lines and at most 4096 bytes (PIPE_BUF), so
// lines from different processes never mix on a pipe, as nginx's workers
// write a line per write. A line longer than that is written alone.
func NewSharedLogWriter(dst io.Writer, limit int) *LogWriter {
	w := NewLogWriter(dst, limit)
	w.shared = true
	return w
}

// Write buffers p (one line) and reports it written, or drops it when the
// buffer is full or the writer closed.
func (w *LogWriter) Write(p []byte) (int, error) {
	st := &w.stripes[stripeOf(len(w.stripes))]
	st.mu.Lock()
	if st.closed || len(st.pending)+logStamp+len(p) > st.limit || uint64(len(p)) > math.MaxUint32 {
		st.mu.Unlock()
		w.dropped.Add(1)
		return len(p), nil
	}
	before := len(st.pending)
	st.pending = binary.LittleEndian.AppendUint64(st.pending, uint64(monoNow()))
	st.pending = binary.LittleEndian.AppendUint32(st.pending, uint32(len(p)))
	st.pending = append(st.pending, p...)
	after := len(st.pending)
	st.mu.Unlock()
	// The drain goroutine takes everything pending, so only the first
	// line of a stripe's batch wakes it, and only the line that fills a
	// stripe's batch hurries it: most Writes touch no channel.
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
	for i := range w.stripes {
		st := &w.stripes[i]
		st.mu.Lock()
		st.closed = true
		st.mu.Unlock()
	}
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

// drain takes the stripes' buffers and writes their lines in stamp order,
// until Close.
func (w *LogWriter) drain() {
	defer close(w.done)
	spares := make([][]byte, len(w.stripes))
	for i := range spares {
		spares[i] = make([]byte, 0, min(64<<10, w.stripes[i].limit))
	}
	batches := make([][]byte, len(w.stripes))
	var out []byte
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
		// Every stripe at once: a line stamped before another is in this
		// batch if the other is.
		for i := range w.stripes {
			w.stripes[i].mu.Lock()
		}
		closed := true
		for i := range w.stripes {
			st := &w.stripes[i]
			batches[i] = st.pending
			st.pending, spares[i] = spares[i][:0], nil
			closed = closed && st.closed
		}
		for i := range w.stripes {
			w.stripes[i].mu.Unlock()
		}
		out = mergeLogLines(out[:0], batches)
		if w.shared {
			w.writeLines(out)
		} else if len(out) > 0 {
			n, _ := w.dst.Write(out)
			w.written.Add(uint64(n))
		}
		copy(spares, batches)
		if closed {
			return
		}
	}
}

// writeLines writes out in pieces of whole lines of at most pipeAtomic
// bytes each (a longer line alone).
func (w *LogWriter) writeLines(out []byte) {
	for len(out) > 0 {
		end := len(out)
		if end > pipeAtomic {
			end = bytes.LastIndexByte(out[:pipeAtomic], '\n') + 1
			if end == 0 {
				// One line longer than pipeAtomic: alone, to its end.
				end = len(out)
				if i := bytes.IndexByte(out, '\n'); i >= 0 {
					end = i + 1
				}
			}
		}
		n, _ := w.dst.Write(out[:end])
		w.written.Add(uint64(n))
		out = out[end:]
	}
}

// mergeLogLines appends the lines of the stripes' batches to out without
// their stamps, oldest first.
func mergeLogLines(out []byte, batches [][]byte) []byte {
	var at [maxStripes + 1]int
	offs := at[:0]
	if len(batches) > len(at) {
		offs = make([]int, 0, len(batches))
	}
	offs = offs[:len(batches)]
	for {
		next, stamp := -1, uint64(0)
		for i, b := range batches {
			if o := offs[i]; o < len(b) {
				if t := binary.LittleEndian.Uint64(b[o:]); next < 0 || t < stamp {
					next, stamp = i, t
				}
			}
		}
		if next < 0 {
			return out
		}
		b, o := batches[next], offs[next]
		n := int(binary.LittleEndian.Uint32(b[o+8:]))
		out = append(out, b[o+logStamp:o+logStamp+n]...)
		offs[next] = o + logStamp + n
	}
}
