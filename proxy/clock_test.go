package proxy

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

func TestRearm(t *testing.T) {
	const s = time.Second
	for _, tt := range []struct {
		name        string
		armed, want time.Duration
		rearm       bool
	}{
		{"none armed", 0, 10 * s, true},
		{"same", 10 * s, 10 * s, false},
		{"later within slack", 10 * s, 10*s + s/2, false},
		{"later by slack exactly", 10 * s, 11 * s, false},
		{"later beyond slack", 10 * s, 11*s + 1, true},
		{"earlier", 10 * s, 10*s - 1, true},
	} {
		if got := rearm(tt.armed, tt.want, s); got != tt.rearm {
			t.Errorf("%s: rearm(%v, %v) = %v; want %v", tt.name, tt.armed, tt.want, got, tt.rearm)
		}
	}
}

func TestSkipDeadline(t *testing.T) {
	base := time.Now()
	const slack = time.Second
	for _, tt := range []struct {
		name        string
		armed, want time.Time
		skip        bool
	}{
		{"none armed, none asked", time.Time{}, time.Time{}, true},
		{"none armed", time.Time{}, base, false},
		{"cleared", base, time.Time{}, false},
		{"same", base, base, true},
		{"later within slack", base, base.Add(slack / 2), true},
		{"later beyond slack", base, base.Add(slack + 1), false},
		{"earlier", base, base.Add(-1), false},
	} {
		if got := skipDeadline(tt.armed, tt.want, slack); got != tt.skip {
			t.Errorf("%s: skipDeadline = %v; want %v", tt.name, got, tt.skip)
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

// A timeoutConn still times out a silent peer within its read timeout
// (never later, at most a sixteenth early), also after reads that did
// not re-arm the deadline, and an earlier deadline (a shorter timeout) is
// applied at once.
func TestTimeoutConnReadTimeout(t *testing.T) {
	server, client := tcpPair(t)
	const timeout = 160 * time.Millisecond
	tc := &timeoutConn{Conn: client, read: timeout, write: time.Second}
	buf := make([]byte, 1)
	for range 3 { // data ready: reads succeed, the deadline is armed once
		if _, err := server.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := tc.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, err := tc.Read(buf)
	took := time.Since(start)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a silent peer: %v; want a deadline error", err)
	}
	if took > timeout+2*time.Second || took < timeout-timeout/16-10*time.Millisecond {
		t.Errorf("timed out after %v; want about %v (at most %v early)", took, timeout, timeout/16)
	}

	// A shorter timeout on a reused connection (an hour's deadline armed)
	// re-arms at once.
	tc.read = time.Hour
	if _, err := server.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Read(buf); err != nil {
		t.Fatal(err)
	}
	tc.read = 20 * time.Millisecond
	start = time.Now()
	if _, err := tc.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with the shorter timeout: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("shorter timeout took %v; want about 20ms, not the hour armed before", took)
	}
}

// fasthttp's idle and read deadlines land on lazyDeadlineConn: moving the
// deadline a little later is skipped, an earlier one or a cleared one is
// applied, and a silent client still times out.
func TestLazyDeadlineConn(t *testing.T) {
	server, client := tcpPair(t)
	c := &lazyDeadlineConn{Conn: server, slack: 50 * time.Millisecond}
	now := time.Now()
	if err := c.SetReadDeadline(now.Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	armed := c.readArmed
	if err := c.SetReadDeadline(now.Add(120 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if c.readArmed != armed {
		t.Errorf("a deadline 20ms later was applied; want it skipped (slack 50ms)")
	}
	buf := make([]byte, 1)
	start := time.Now()
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v; want a deadline error", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("timed out after %v; want about 100ms", took)
	}
	// Cleared: a read waits for data again.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if !c.readArmed.IsZero() {
		t.Fatal("clearing the deadline was skipped")
	}
	go func() { time.Sleep(60 * time.Millisecond); _, _ = client.Write([]byte("y")) }()
	if _, err := c.Read(buf); err != nil || buf[0] != 'y' {
		t.Fatalf("read after clearing: %q %v", buf, err)
	}
	// Earlier is always applied.
	if err := c.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	soon := time.Now().Add(10 * time.Millisecond)
	if err := c.SetReadDeadline(soon); err != nil {
		t.Fatal(err)
	}
	if !c.readArmed.Equal(soon) {
		t.Fatal("an earlier deadline was skipped")
	}
	start = time.Now()
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after moving the deadline earlier: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the earlier deadline was not applied: the read took %v", took)
	}
}
