package proxy

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/nettest"
)

// pollPair is a loopback connection with both ends in the poller: the
// accepted one (accepted) and the dialled one, adopted (dialled).
func pollPair(t testing.TB) (accepted, dialled net.Conn) {
	t.Helper()
	p := sharedPoller()
	if p == nil {
		t.Fatal("no poller")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	pl, err := p.listen(ln.(*net.TCPListener))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.close()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := pl.accept()
	if err != nil {
		t.Fatal(err)
	}
	dialled = p.adopt(d)
	if _, ok := dialled.(*pollConn); !ok {
		t.Fatalf("adopt gave a %T", dialled)
	}
	return a, dialled
}

// TestPollConnConformance runs x/net's net.Conn conformance suite (I/O,
// deadlines past, present and future, Close during calls, concurrent
// methods) over connections in the poller: both ends in it, and one end
// in it with the other in Go's poller.
func TestPollConnConformance(t *testing.T) {
	t.Run("both", func(t *testing.T) {
		nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
			a, d := pollPair(t)
			return a, d, func() { _ = a.Close(); _ = d.Close() }, nil
		})
	})
	t.Run("accepted", func(t *testing.T) {
		nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, nil, nil, err
			}
			defer func() { _ = ln.Close() }()
			pl, err := sharedPoller().listen(ln.(*net.TCPListener))
			if err != nil {
				return nil, nil, nil, err
			}
			defer pl.close()
			d, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return nil, nil, nil, err
			}
			a, err := pl.accept()
			if err != nil {
				return nil, nil, nil, err
			}
			return a, d, func() { _ = a.Close(); _ = d.Close() }, nil
		})
	})
}

// TestPollerWakesInOrder: connections whose bytes come while the only P is
// busy are served in the order the bytes came (Go's poller serves them
// last first; poller_linux.go says why that matters).
func TestPollerWakesInOrder(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector's scheduler runs woken goroutines in a random order; `make test` runs this without it")
	}
	const n = 24
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	pl, err := sharedPoller().listen(ln.(*net.TCPListener))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.close()
	clients := make([]*net.TCPConn, n)
	servers := make([]net.Conn, n)
	fds := make([]uintptr, n)
	for i := range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c.(*net.TCPConn)
		defer func() { _ = c.Close() }()
		if servers[i], err = pl.accept(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = servers[i].Close() }()
		rc, err := clients[i].SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		_ = rc.Control(func(fd uintptr) { fds[i] = fd })
	}
	for round := range 3 {
		prev := runtime.GOMAXPROCS(1)
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		parked := make(chan struct{}, n)
		for i := range n {
			wg.Go(func() {
				parked <- struct{}{}
				var b [1]byte
				if _, err := servers[i].Read(b[:]); err != nil {
					t.Error(err)
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			})
		}
		for range n {
			<-parked
		}
		time.Sleep(20 * time.Millisecond) // each in its Read, waiting
		// Send to each in turn without giving up the P (raw system
		// calls, then a busy wait), so every byte is in before the
		// scheduler looks for events.
		for i := range n {
			one := byte(i)
			_, _, _ = syscall.RawSyscall(syscall.SYS_WRITE, fds[i], uintptr(unsafe.Pointer(&one)), 1)
		}
		for end := time.Now().Add(2 * time.Millisecond); time.Now().Before(end); {
		}
		wg.Wait()
		runtime.GOMAXPROCS(prev)
		for i, got := range order {
			if got != i {
				t.Fatalf("round %d: served in the order %v; want the order the bytes came, 0 to %d", round, order, n-1)
			}
		}
	}
}

// TestPollConnCloseWaitsForCalls: Close during a call leaves the
// descriptor open until the call has returned (a number reused by the
// next accept is never read by a call that began on the old one); then
// it closes, and the peer sees the end of the stream.
func TestPollConnCloseWaitsForCalls(t *testing.T) {
	a, d := pollPair(t)
	defer func() { _ = d.Close() }()
	pc := a.(*pollConn)
	peerSees := func() error {
		_ = d.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		var b [1]byte
		_, err := d.Read(b[:])
		return err
	}
	if !pc.begin() { // a call in progress
		t.Fatal("begin on an open connection failed")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := peerSees(); !errors.Is(err, syscall.ETIMEDOUT) && !isDeadline(err) {
		t.Fatalf("peer read %v while a call was in progress; want a timeout (descriptor still open)", err)
	}
	if pc.begin() {
		t.Fatal("begin on a closed connection succeeded")
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v; want net.ErrClosed", err)
	}
	pc.end() // the call returns: the descriptor closes
	if err := peerSees(); err != io.EOF {
		t.Fatalf("peer read %v after the last call; want io.EOF", err)
	}
	if err := a.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v; want net.ErrClosed", err)
	}
}

// TestPollConnCloseWakesReader: a Read waiting for bytes returns
// net.ErrClosed when another goroutine closes the connection.
func TestPollConnCloseWakesReader(t *testing.T) {
	a, d := pollPair(t)
	defer func() { _ = d.Close() }()
	done := make(chan error, 1)
	go func() {
		_, err := a.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = a.Close()
	select {
	case err := <-done:
		var oe *net.OpError
		if !errors.Is(err, net.ErrClosed) || !errors.As(err, &oe) || oe.Op != "read" {
			t.Fatalf("Read: %v; want a *net.OpError read with net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still waiting 5 s after Close")
	}
}

// TestPollListenerClose: an Accept waiting for a connection returns
// net.ErrClosed when the tracking listener closes; its slot is free again.
func TestPollListenerClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := newConnTracker(nil).listener(ln)
	if tl.poll == nil {
		t.Fatal("a TCP listener was not put in the poller")
	}
	done := make(chan error, 1)
	go func() {
		_, err := tl.acceptConn()
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = tl.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waiting 5 s after Close")
	}
	if c := sharedPoller().lookup(tl.poll.entry.slot); c == &tl.poll.entry {
		t.Fatal("the closed listener still holds its slot")
	}
}

// TestPollConnAddrs: the addresses are a net.TCPConn's, each side's
// local address the other's remote one.
func TestPollConnAddrs(t *testing.T) {
	a, d := pollPair(t)
	defer func() { _ = a.Close(); _ = d.Close() }()
	for _, x := range []net.Addr{a.LocalAddr(), a.RemoteAddr(), d.LocalAddr(), d.RemoteAddr()} {
		if _, ok := x.(*net.TCPAddr); !ok {
			t.Fatalf("address %v is a %T; want *net.TCPAddr", x, x)
		}
	}
	if a.LocalAddr().String() != d.RemoteAddr().String() || a.RemoteAddr().String() != d.LocalAddr().String() {
		t.Fatalf("accepted %v→%v, dialled %v→%v: not each other's", a.LocalAddr(), a.RemoteAddr(), d.LocalAddr(), d.RemoteAddr())
	}
}
