package proxy

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

func TestDeadlineArm(t *testing.T) {
	const s = time.Second
	for _, tt := range []struct {
		name        string
		armed, want time.Duration
		arm         bool
	}{
		{"none armed", 0, 10 * s, true},
		{"same", 10 * s, 10 * s, false},
		{"armed earlier within lag", 10 * s, 10*s + s/2, false},
		{"armed earlier by lag exactly", 10 * s, 11 * s, false},
		{"armed earlier beyond lag", 10 * s, 11*s + 1, true},
		{"armed later: would fire late", 10 * s, 10*s - 1, true},
	} {
		var d lazyDeadline
		d.armed.Store(int64(tt.armed))
		if got := d.arm(int64(tt.want), s); got != tt.arm {
			t.Errorf("%s: arm(%v) with %v armed = %v; want %v", tt.name, tt.want, tt.armed, got, tt.arm)
		}
	}
}

func TestLazySet(t *testing.T) {
	const lag = time.Second
	base := int64(10 * time.Second)
	for _, tt := range []struct {
		name        string
		armed, want int64
		set         bool
	}{
		{"none armed, none asked", 0, 0, false},
		{"none armed", 0, base, true},
		{"cleared", base, 0, true},
		{"same", base, base, false},
		{"later within lag", base, base + int64(lag/2), false},
		{"later beyond lag", base, base + int64(lag) + 1, true},
		{"earlier", base, base - 1, true},
	} {
		if got := lazySet(tt.armed, tt.want, lag); got != tt.set {
			t.Errorf("%s: lazySet = %v; want %v", tt.name, got, tt.set)
		}
	}
}

// tcpPair is the two ends of a real loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	return server, client
}

// timedRead reads one byte and returns how long it took.
func timedRead(c net.Conn) (time.Duration, error) {
	start := time.Now()
	_, err := c.Read(make([]byte, 1))
	return time.Since(start), err
}

// A timeoutConn times a silent peer out after exactly its read timeout,
// also when the deadline already armed (not re-armed, being within a
// sixteenth) fires first; a shorter timeout is applied at once.
func TestTimeoutConnReadTimeout(t *testing.T) {
	server, client := tcpPair(t)
	// The early deadline fires `early` before the read's own; the read
	// sees it as early only if its goroutine runs within that margin, so
	// the margin is wide (a loaded CI machine delayed it past 40ms) and
	// the timeout large enough for it to stay within a sixteenth.
	const timeout = 3200 * time.Millisecond
	const early = 190 * time.Millisecond
	tc := &timeoutConn{Conn: client, read: timeout, write: time.Second}
	buf := make([]byte, 1)
	// An earlier read armed a deadline `early` before this read's own.
	armed := monoNow() + timeout - early
	if err := client.SetReadDeadline(monoTime(armed)); err != nil {
		t.Fatal(err)
	}
	tc.rd.armed.Store(int64(armed))
	took, err := timedRead(tc)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a silent peer: %v; want a deadline error", err)
	}
	if tc.rd.armed.Load() == int64(armed) {
		t.Error("the early deadline was not moved to the read's own")
	}
	if took < timeout-10*time.Millisecond || took > timeout+2*time.Second {
		t.Errorf("timed out after %v; want %v (not at the deadline armed %v sooner)", took, timeout, early)
	}

	// A shorter timeout on a reused connection (an hour armed) re-arms.
	tc.read = time.Hour
	if _, err := server.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Read(buf); err != nil {
		t.Fatal(err)
	}
	tc.read = 20 * time.Millisecond
	if took, err := timedRead(tc); !errors.Is(err, os.ErrDeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("read with the shorter timeout: %v after %v; want a deadline error after about 20ms", err, took)
	}
}

// fasthttp's deadlines land on lazyDeadlineConn: a later one is only
// remembered, yet a silent client times out exactly at it; an earlier or a
// cleared one is applied at once.
func TestLazyDeadlineConn(t *testing.T) {
	server, client := tcpPair(t)
	c := &lazyDeadlineConn{Conn: server, lag: time.Minute}
	if err := c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	armed := c.read.armed.Load()
	const want = 300 * time.Millisecond
	if err := c.SetReadDeadline(time.Now().Add(want)); err != nil {
		t.Fatal(err)
	}
	if c.read.armed.Load() != armed {
		t.Fatal("a later deadline within the lag was armed; want it remembered only")
	}
	took, err := timedRead(c)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v; want a deadline error", err)
	}
	if took < want-5*time.Millisecond || took > want+2*time.Second {
		t.Errorf("timed out after %v; want %v (the armed deadline woke it at 100ms)", took, want)
	}

	// Cleared: a read waits for data again.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if c.read.armed.Load() != 0 {
		t.Fatal("clearing the deadline was skipped")
	}
	go func() { time.Sleep(150 * time.Millisecond); _, _ = client.Write([]byte("y")) }()
	if took, err := timedRead(c); err != nil || took < 100*time.Millisecond {
		t.Fatalf("read after clearing: %v after %v; want the byte after about 150ms", err, took)
	}

	// Earlier is applied at once.
	if err := c.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	soon := time.Now().Add(10 * time.Millisecond)
	if err := c.SetReadDeadline(soon); err != nil {
		t.Fatal(err)
	}
	if c.read.armed.Load() != monoOf(soon) {
		t.Fatal("an earlier deadline was not armed")
	}
	if took, err := timedRead(c); !errors.Is(err, os.ErrDeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("read after moving the deadline earlier: %v after %v", err, took)
	}
}

// Deadlines may be set while another goroutine reads (net.Conn allows it;
// the HTTP/2 server does it): no data race, and the reader gets its data.
func TestLazyDeadlineConnConcurrent(t *testing.T) {
	server, client := tcpPair(t)
	c := &lazyDeadlineConn{Conn: server, lag: time.Minute}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = c.SetReadDeadline(time.Now().Add(time.Minute))
				_ = c.SetWriteDeadline(time.Now().Add(time.Minute))
			}
		}
	})
	go func() {
		for range 200 {
			_, _ = client.Write([]byte("z"))
		}
	}()
	buf := make([]byte, 1)
	for range 200 {
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}
