package proxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// stuckWriter blocks every Write until release is closed, as a log
// collector that stopped reading does.
type stuckWriter struct {
	release chan struct{}
	mu      sync.Mutex
	b       bytes.Buffer
}

func (s *stuckWriter) Write(p []byte) (int, error) {
	<-s.release
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestLogWriterNeverBlocks: with the destination stuck, Write still returns
// at once; lines beyond the buffer are dropped whole and counted; once the
// destination reads again, every kept line arrives whole and in order, and
// Close flushes the rest.
func TestLogWriterNeverBlocks(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one stripe: the whole limit
	dst := &stuckWriter{release: make(chan struct{})}
	const line = "0123456789012345678901234567890123456789012345678\n" // 50 bytes
	w := NewLogWriter(dst, 1000)
	start := time.Now()
	for i := range 100 {
		if _, err := w.Write([]byte(fmt.Sprintf("%02d%s", i, line[2:]))); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("100 writes to a stuck destination took %v", took)
	}
	// The drain goroutine holds at most one batch (up to 1000 bytes, 16
	// lines with their stamps) in its blocked Write; the buffer holds up
	// to 1000 more.
	if d := w.Dropped(); d < 60 || d > 90 {
		t.Errorf("dropped %d of 100 lines; want the ones beyond two buffers of 1000 bytes", d)
	}
	close(dst.release)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(dst.b.String(), "\n"), "\n")
	if len(got) != 100-int(w.Dropped()) {
		t.Fatalf("%d lines arrived; want the %d kept", len(got), 100-w.Dropped())
	}
	prev := -1
	for _, l := range got {
		var n int
		if _, err := fmt.Sscanf(l[:2], "%d", &n); err != nil || len(l) != len(line)-1 || n <= prev {
			t.Fatalf("line %q: torn or out of order after %d", l, prev)
		}
		prev = n
	}
	if _, err := w.Write([]byte(line)); err != nil || w.Dropped() == 0 {
		t.Errorf("a write after Close was not dropped")
	}
}

// TestLogWriterConcurrent: lines written from many goroutines, on as many
// Ps as the writer has stripes, all arrive, whole, when the buffer is large
// enough.
func TestLogWriterConcurrent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(maxStripes))
	var dst bytes.Buffer
	w := NewLogWriter(&dst, 1<<20)
	if len(w.stripes) != maxStripes {
		t.Fatalf("%d stripes with GOMAXPROCS=%d; want %d", len(w.stripes), maxStripes, maxStripes)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				_, _ = w.Write([]byte(fmt.Sprintf("g%d line %03d\n", g, i)))
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(dst.String(), "\n"), "\n")
	if len(lines) != 4000 || w.Dropped() != 0 {
		t.Fatalf("%d lines arrived, %d dropped; want 4000 and 0", len(lines), w.Dropped())
	}
	for _, l := range lines {
		if len(l) != len("g0 line 000") {
			t.Fatalf("torn line %q", l)
		}
	}
}

// countingWriter counts Write calls.
type countingWriter struct {
	mu     sync.Mutex
	writes int
	b      bytes.Buffer
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	return c.b.Write(p)
}

func (c *countingWriter) state() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.b.Len()
}

// TestLogWriterBatches: lines written close together share a write to the
// destination; a lone line still arrives promptly, without Close; a batch
// that reaches the flush size is written without waiting.
func TestLogWriterBatches(t *testing.T) {
	dst := &countingWriter{}
	w := NewLogWriter(dst, 0)
	defer func() { _ = w.Close() }()
	const line = "127.0.0.1 - - [26/Nov/2026:09:00:00 +0000] \"GET / HTTP/1.1\" 200 2\n"
	for range 1000 {
		_, _ = w.Write([]byte(line))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		writes, n := dst.state()
		if n == 1000*len(line) {
			// 1000 lines are 67 KB: one flush when the batch filled,
			// the rest after the delay (or a few more on a slow machine).
			if writes > 10 {
				t.Errorf("1000 lines took %d writes; want them batched", writes)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d bytes arrived in 5s", n, 1000*len(line))
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	_, _ = w.Write([]byte(line))
	for {
		if _, n := dst.state(); n == 1001*len(line) {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("a lone line did not arrive within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMergeLogLines: the stripes' lines come out by stamp, whole, without
// their stamps, whichever stripe holds the oldest.
func TestMergeLogLines(t *testing.T) {
	stamp := func(b []byte, t uint64, line string) []byte {
		b = binary.LittleEndian.AppendUint64(b, t)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(line)))
		return append(b, line...)
	}
	var a, b, c []byte
	a = stamp(a, 2, "two\n")
	a = stamp(a, 5, "five\n")
	b = stamp(b, 1, "one\n")
	b = stamp(b, 3, "three\n")
	b = stamp(b, 6, "six\n")
	c = stamp(c, 4, "four\n")
	got := string(mergeLogLines([]byte("kept\n"), [][]byte{a, b, nil, c}))
	if want := "kept\none\ntwo\nthree\nfour\nfive\nsix\n"; got != want {
		t.Errorf("merged %q; want %q", got, want)
	}
	if got := mergeLogLines(nil, [][]byte{nil, {}}); len(got) != 0 {
		t.Errorf("merged %q from empty stripes", got)
	}
}

// writesRecorder keeps every Write's bytes apart.
type writesRecorder struct {
	mu     sync.Mutex
	writes [][]byte
}

func (r *writesRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, append([]byte(nil), p...))
	r.mu.Unlock()
	return len(p), nil
}

// TestSharedLogWriterPieces checks that a shared log writer's writes carry
// whole lines, at most PIPE_BUF bytes each unless one line is longer, and
// lose or reorder nothing.
func TestSharedLogWriterPieces(t *testing.T) {
	rec := &writesRecorder{}
	w := NewSharedLogWriter(rec, 8<<20)
	var want bytes.Buffer
	for i := range 3000 {
		n := 40 + i*7%300
		if i%997 == 0 {
			n = 9000 // longer than PIPE_BUF
		}
		line := append(bytes.Repeat([]byte{'a' + byte(i%26)}, n), '\n')
		want.Write(line)
		if _, err := w.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	for i, p := range rec.writes {
		if p[len(p)-1] != '\n' {
			t.Fatalf("write %d does not end a line", i)
		}
		if len(p) > pipeAtomic && bytes.Count(p, []byte{'\n'}) != 1 {
			t.Fatalf("write %d: %d bytes in %d lines, over PIPE_BUF", i, len(p), bytes.Count(p, []byte{'\n'}))
		}
		got.Write(p)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("lines differ: got %d bytes, want %d", got.Len(), want.Len())
	}
	if len(rec.writes) < want.Len()/pipeAtomic {
		t.Fatalf("%d writes for %d bytes", len(rec.writes), want.Len())
	}
}
