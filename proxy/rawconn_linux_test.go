package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// rawPair is a loopback TCP connection: raw is the accepted side wrapped
// with withRawSyscalls, peer the dialled side as net gives it.
func rawPair(t *testing.T) (raw *rawSyscallConn, peer *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	dialed := make(chan net.Conn, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	p := <-dialed
	if p == nil {
		t.FailNow()
	}
	rc, ok := withRawSyscalls(c).(*rawSyscallConn)
	if !ok {
		t.Fatalf("withRawSyscalls(%T) did not wrap it", c)
	}
	t.Cleanup(func() { _ = rc.Close(); _ = p.Close() })
	return rc, p.(*net.TCPConn)
}

// TestRawSyscallConn: the raw connection reads and writes as net.Conn
// does, errors included: the same values, the same *net.OpError names.
func TestRawSyscallConn(t *testing.T) {
	opIs := func(t *testing.T, err error, op string) {
		t.Helper()
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != op || oe.Net != "tcp" || oe.Source == nil || oe.Addr == nil {
			t.Errorf("error %#v; want a *net.OpError %q with both addresses", err, op)
		}
	}
	tests := []struct {
		name string
		run  func(t *testing.T, c *rawSyscallConn, peer *net.TCPConn)
	}{
		{"bytes both ways, then io.EOF at the peer's end", func(t *testing.T, c *rawSyscallConn, peer *net.TCPConn) {
			if n, err := c.Write([]byte("ping")); n != 4 || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			buf := make([]byte, 16)
			if n, err := io.ReadFull(peer, buf[:4]); n != 4 || err != nil || string(buf[:4]) != "ping" {
				t.Fatalf("peer read %q, %v", buf[:n], err)
			}
			if _, err := peer.Write([]byte("pong")); err != nil {
				t.Fatal(err)
			}
			if n, err := io.ReadFull(c, buf[:4]); n != 4 || err != nil || string(buf[:4]) != "pong" {
				t.Fatalf("Read %q, %v", buf[:n], err)
			}
			if n, err := c.Read(nil); n != 0 || err != nil {
				t.Errorf("Read(nil) = %d, %v; want 0, nil", n, err)
			}
			_ = peer.CloseWrite()
			if n, err := c.Read(buf); n != 0 || err != io.EOF {
				t.Errorf("Read at the end = %d, %v; want 0, io.EOF exactly", n, err)
			}
		}},
		{"8 MiB to a slow reader arrive whole and in order", func(t *testing.T, c *rawSyscallConn, peer *net.TCPConn) {
			want := make([]byte, 8<<20)
			for i := range want {
				want[i] = byte(i * 7 / 5)
			}
			got := make(chan []byte, 1)
			go func() {
				var b bytes.Buffer
				buf := make([]byte, 4096)
				for {
					n, err := peer.Read(buf)
					b.Write(buf[:n])
					if err != nil {
						break
					}
					if b.Len()%(1<<20) < 4096 {
						time.Sleep(5 * time.Millisecond) // the writer meets a full socket
					}
				}
				got <- b.Bytes()
			}()
			if n, err := c.Write(want); n != len(want) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			_ = c.CloseWrite()
			if b := <-got; !bytes.Equal(b, want) {
				t.Fatalf("peer got %d bytes, not the %d written in order", len(b), len(want))
			}
		}},
		{"a read deadline times out as net.Conn's", func(t *testing.T, c *rawSyscallConn, _ *net.TCPConn) {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			n, err := c.Read(make([]byte, 8))
			var ne net.Error
			if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("Read = %d, %v; want a timeout", n, err)
			}
			opIs(t, err, "read")
		}},
		{"a write deadline: what Write reports written is what arrives", func(t *testing.T, c *rawSyscallConn, peer *net.TCPConn) {
			_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			chunk := make([]byte, 1<<20)
			total := 0
			var err error
			for err == nil { // until the socket buffers are full and the deadline passes
				var n int
				n, err = c.Write(chunk)
				total += n
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Write = %v after %d bytes; want a timeout", err, total)
			}
			opIs(t, err, "write")
			_ = c.Close()
			got, _ := io.Copy(io.Discard, peer)
			if int(got) != total {
				t.Fatalf("the peer got %d bytes; Write reported %d", got, total)
			}
		}},
		{"Close ends a Read that waits", func(t *testing.T, c *rawSyscallConn, _ *net.TCPConn) {
			errc := make(chan error, 1)
			go func() {
				_, err := c.Read(make([]byte, 8))
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			_ = c.Close()
			select {
			case err := <-errc:
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("Read = %v; want net.ErrClosed", err)
				}
				opIs(t, err, "read")
			case <-time.After(5 * time.Second):
				t.Fatal("Read still waits 5s after Close")
			}
			if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Write after Close = %v; want net.ErrClosed", err)
			}
		}},
		{"a reset peer: ECONNRESET on read, an error and no signal on write", func(t *testing.T, c *rawSyscallConn, peer *net.TCPConn) {
			_ = peer.SetLinger(0)
			_ = peer.Close()
			time.Sleep(20 * time.Millisecond)
			_, err := c.Read(make([]byte, 8))
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("Read = %v; want ECONNRESET", err)
			}
			opIs(t, err, "read")
			var werr error
			for range 3 { // the first write after a reset may still be taken
				if _, werr = c.Write([]byte("after")); werr != nil {
					break
				}
			}
			if !errors.Is(werr, syscall.EPIPE) && !errors.Is(werr, syscall.ECONNRESET) {
				t.Fatalf("Write = %v; want EPIPE or ECONNRESET (and the process alive)", werr)
			}
			opIs(t, werr, "write")
		}},
		{"a Read and a Write at once", func(t *testing.T, c *rawSyscallConn, peer *net.TCPConn) {
			const rounds = 2000
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { // echo
				defer wg.Done()
				_, _ = io.Copy(peer, peer)
				_ = peer.CloseWrite()
			}()
			var got bytes.Buffer
			go func() {
				defer wg.Done()
				_, _ = io.Copy(&got, c)
			}()
			var sent bytes.Buffer
			for i := range rounds {
				line := fmt.Sprintf("line %d\n", i)
				sent.WriteString(line)
				if _, err := c.Write([]byte(line)); err != nil {
					t.Fatal(err)
				}
			}
			_ = c.CloseWrite()
			wg.Wait()
			if got.String() != sent.String() {
				t.Fatalf("echoed %d bytes, sent %d", got.Len(), sent.Len())
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, peer := rawPair(t)
			tt.run(t, c, peer)
		})
	}
}

// TestRawSyscallConnNoAllocs: a Read and a Write allocate nothing.
func TestRawSyscallConnNoAllocs(t *testing.T) {
	c, peer := rawPair(t)
	out := make([]byte, 1024)
	in := make([]byte, 1024)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := c.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, in); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, in); err != nil {
			t.Fatal(err)
		}
	})
	// io.ReadFull and the peer's net.Conn calls allocate nothing either.
	if allocs != 0 {
		t.Errorf("%v allocations per round trip; want 0", allocs)
	}
}

// TestWithRawSyscallsTCPOnly: only TCP connections are wrapped, and a
// wrapped one still half-closes through the interface the upgrade relay
// and the HTTP/2 server look for.
func TestWithRawSyscallsTCPOnly(t *testing.T) {
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	if got := withRawSyscalls(a); got != a {
		t.Errorf("withRawSyscalls(net.Pipe) = %T; want it as it is", got)
	}
	c, peer := rawPair(t)
	var nc net.Conn = c
	cw, ok := nc.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("the raw connection has no CloseWrite")
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := peer.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("peer read after CloseWrite = %d, %v; want io.EOF", n, err)
	}
}

// TestLogWriterRawPipe: the access log to a pipe goes through a
// non-blocking description of its own. With one P, a pipe that stops being
// read parks the draining goroutine in the poller: other goroutines run on,
// lines are kept or dropped whole, and once the pipe is read again every
// kept line arrives whole and in order. A raw write on the blocking
// description would hold the only P: the test binary then hangs (tried),
// since not even the runtime's test timeout can run.
func TestLogWriterRawPipe(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	// A blocking pipe, as a container's standard output is (os.Pipe's
	// are non-blocking).
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(fds[0]), "pipe-r"), os.NewFile(uintptr(fds[1]), "pipe-w")
	defer func() { _ = r.Close(); _ = w.Close() }()
	lw := NewLogWriter(w, 256<<10)
	if lw.raw == nil || !lw.raw.own {
		t.Fatal("NewLogWriter(pipe) does not write through a description of its own")
	}
	const lines = 20000 // 1.2 MB: more than the pipe and the buffer hold
	for i := range lines {
		_, _ = fmt.Fprintf(lw, "%06d 0123456789012345678901234567890123456789012345678901\n", i)
	}
	// The pipe (64 KiB) is full and nobody reads it: the drain waits.
	var ticks atomic.Int32
	done := make(chan struct{})
	go func() {
		for ticks.Load() < 20 {
			time.Sleep(time.Millisecond)
			ticks.Add(1)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("another goroutine ran %d times in 10s while the pipe was full", ticks.Load())
	}
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	if err := lw.Close(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	out := <-got
	kept := lines - int(lw.Dropped())
	if lw.Dropped() == 0 || kept <= 0 {
		t.Fatalf("dropped %d of %d lines; want some dropped and some kept", lw.Dropped(), lines)
	}
	ls := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(ls) != kept {
		t.Fatalf("%d lines arrived; want the %d kept", len(ls), kept)
	}
	prev := -1
	for _, l := range ls {
		var n int
		if _, err := fmt.Sscanf(l, "%06d", &n); err != nil || len(l) != 59 || n <= prev {
			t.Fatalf("line %q: torn or out of order after %d", l, prev)
		}
		prev = n
	}
}

// TestLogWriterRawFile: the access log to a regular file is written raw,
// appended after what the file held, every line whole.
func TestLogWriterRawFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.WriteString("before\n"); err != nil {
		t.Fatal(err)
	}
	lw := NewLogWriter(f, 0)
	if lw.raw == nil || lw.raw.own {
		t.Fatal("NewLogWriter(regular file) does not write it raw")
	}
	var want strings.Builder
	want.WriteString("before\n")
	for i := range 5000 {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		_, _ = lw.Write([]byte(line))
	}
	if err := lw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("after\n"); err != nil {
		t.Fatalf("the file is not usable after Close: %v", err)
	}
	want.WriteString("after\n")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want.String() {
		t.Fatalf("the file holds %d bytes; want the %d written, in order", len(b), want.Len())
	}
	if lw.Written() != uint64(want.Len()-len("before\nafter\n")) {
		t.Errorf("Written() = %d; want %d", lw.Written(), want.Len()-len("before\nafter\n"))
	}
}
