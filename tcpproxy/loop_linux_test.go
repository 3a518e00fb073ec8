package tcpproxy

import (
	"bytes"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"golang.org/x/sys/unix"
)

// What a direction keeps for a peer that would not take it all: a head
// buffer when it fits, else the read buffer itself, counted against
// maxHeldBufs until it is given back.
func TestLoopKeepsLeftovers(t *testing.T) {
	l := &loop{}
	read := func(n int) *end {
		b := make([]byte, loopBufSize)
		for i := range b {
			b[i] = byte(i)
		}
		return &end{buf: b, off: 100, n: 100 + n}
	}
	small := read(headBufSize)
	want := append([]byte(nil), small.buf[small.off:small.n]...)
	l.keep(small)
	if cap(small.buf) != headBufSize || small.big || l.held != 0 || !bytes.Equal(small.buf[small.off:small.n], want) {
		t.Fatalf("%d bytes left: kept in a %d-byte buffer (big %v, held %d), bytes equal %v; want a head buffer, nothing held",
			headBufSize, cap(small.buf), small.big, l.held, bytes.Equal(small.buf[small.off:small.n], want))
	}
	if len(l.bufs) != 1 {
		t.Errorf("the read buffer was not given back: %d free", len(l.bufs))
	}
	large := read(headBufSize + 1)
	l.keep(large)
	l.keep(large) // a second wait for the peer counts once
	if cap(large.buf) != loopBufSize || !large.big || l.held != 1 {
		t.Fatalf("%d bytes left: buffer %d, big %v, held %d; want the read buffer, held once", headBufSize+1, cap(large.buf), large.big, l.held)
	}
	l.drop(large)
	l.drop(small)
	if l.held != 0 || large.buf != nil || len(l.bufs) != 2 || len(l.heads) != 1 {
		t.Errorf("after both were written: held %d, %d read and %d head buffers free; want 0, 2, 1", l.held, len(l.bufs), len(l.heads))
	}
}

const parkAfterForTest = parkAfter

// onlyLoop is p's event loop, which must be the one running.
func onlyLoop(t *testing.T, p *Proxy) *loop {
	t.Helper()
	p.loops.mu.Lock()
	defer p.loops.mu.Unlock()
	if len(p.loops.loops) != 1 {
		t.Fatalf("%d loops running; want 1", len(p.loops.loops))
	}
	return p.loops.loops[0]
}

// loopRunnable is the time the thread of p's one event loop has spent
// runnable: running, or waiting for its CPU (the first two fields of
// /proc/self/task/TID/schedstat). A polling loop is runnable all the time
// even when it yields its CPU to others (the tests run beside other
// packages' on two CPUs); a sleeping one is not.
func loopRunnable(t *testing.T, p *Proxy) time.Duration {
	t.Helper()
	tid := onlyLoop(t, p).tid.Load()
	if tid == 0 {
		t.Fatal("the loop has not recorded its thread")
	}
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(int(tid)) + "/schedstat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		t.Fatalf("schedstat of the loop's thread: %q", b)
	}
	var ns int64
	for _, v := range f[:2] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("schedstat of the loop's thread: %q", b)
		}
		ns += n
	}
	return time.Duration(ns)
}

// After an event a loop with BusyPoll and a connection open keeps looking
// for the next one without sleeping, for BusyPoll and no longer, and for at
// most its budget in each busyPollWindow; without BusyPoll, or with no
// connection open, it sleeps at once. Seen in the
// time the loop's thread is runnable while nothing happens: a polling
// loop's thread is (yielding only to whatever else is runnable), a
// sleeping one is not.
func TestLoopBusyPoll(t *testing.T) {
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		got, _ := io.ReadAll(c)
		_, _ = c.Write(got)
	})
	const window = 400 * time.Millisecond
	tests := []struct {
		name     string
		busyPoll time.Duration
		budget   time.Duration // Config.pollBudget
		// idle: a second connection stays open, and quiet, throughout.
		idle bool
		// atLeast and atMost bound the loop thread's share of the
		// window that starts right after the exchange (which lasts
		// busyPoll when that is longer) and of the window after it.
		atLeast, atMost [2]float64
	}{
		{"none", 0, 0, true, [2]float64{0, 0}, [2]float64{0.05, 0.05}},
		{"polling for longer than the window, no budget", 2 * window, busyPollWindow, true, [2]float64{0.1, 0}, [2]float64{1, 0.05}},
		// A tenth, and room for a loop kept waiting for its CPU.
		{"polling within the default budget", 2 * window, 0, true, [2]float64{0, 0}, [2]float64{0.2, 0.05}},
		// The exchange's connection has ended and no other is open.
		{"polling, no connection open", 2 * window, busyPollWindow, false, [2]float64{0, 0}, [2]float64{0.05, 0.05}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The window starts at BusyPoll: what is seen is the poll
			// and its budget, not how the window adapts.
			cfg := Config{EventLoops: 1, BusyPoll: tt.busyPoll, pollBudget: tt.budget, pollLeast: tt.busyPoll}
			p, addr := tcpServiceProxy(t, cfg, model.L4Service{Backend: "busy-poll"}, backend)
			if tt.idle {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
			}
			if got := exchange(t, addr, []byte("ping")); got != "ping" {
				t.Fatalf("answered %q", got)
			}
			for i := range 2 {
				before, start := loopRunnable(t, p), time.Now()
				time.Sleep(window)
				if i == 0 && tt.busyPoll > window {
					// Let the poll run out before the second window, with
					// room for a loop kept from its CPU to see the last
					// event late.
					time.Sleep(tt.busyPoll - window + 200*time.Millisecond)
				}
				elapsed := time.Since(start)
				share := float64(loopRunnable(t, p)-before) / float64(elapsed)
				t.Logf("window %d: the loop's thread was runnable %.1f %%", i+1, 100*share)
				if share < tt.atLeast[i] || share > tt.atMost[i] {
					t.Errorf("window %d: the loop's thread was runnable %.0f %% of %v; want %.0f–%.0f %%",
						i+1, 100*share, elapsed.Round(time.Millisecond), 100*tt.atLeast[i], 100*tt.atMost[i])
				}
			}
		})
	}
}

// A loop that has just relayed bulk (bulkBurst or more lately, loop.burst)
// looks for the next event no longer than minPollWindow, whatever its
// window; after a few bytes it looks for the whole window. The connection
// stays open, so only what it moved tells the two apart.
func TestLoopBulkLooksBriefly(t *testing.T) {
	const window = 300 * time.Millisecond
	for _, tt := range []struct {
		name            string
		size            int
		pace            time.Duration // the backend's pause between 64 KiB reads
		atLeast, atMost float64       // the loop thread's runnable share of the window
	}{
		{"a few bytes", 4, 0, 0.1, 1.1},
		{"bulk", 4 << 20, 0, 0, 0.05},
		// The loop sleeps between chunks, each shorter than bulkBurst,
		// and wakes for room made after the last one.
		{"bulk to a slow reader", 4 << 20, time.Millisecond, 0, 0.05},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan struct{})
			backend := listen(t, func(c net.Conn) {
				defer c.Close()
				buf := make([]byte, tt.size)
				for off := 0; off < tt.size; {
					end := tt.size
					if tt.pace > 0 {
						end = min(off+64<<10, tt.size)
						time.Sleep(tt.pace)
					}
					n, err := io.ReadFull(c, buf[off:end])
					if err != nil {
						return
					}
					off += n
				}
				close(got)
				_, _ = io.Copy(io.Discard, c)
			})
			cfg := Config{EventLoops: 1, BusyPoll: 4 * window, pollBudget: busyPollWindow}
			p, addr := tcpServiceProxy(t, cfg, model.L4Service{Backend: "bulk"}, backend)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			lp := onlyLoop(t, p)
			// The window at its most: past the first byte's events, so
			// no wake-up moves it before the write below.
			time.Sleep(50 * time.Millisecond)
			lp.pollWin.Store(int64(4 * window))
			if _, err := c.Write(make([]byte, tt.size-1)); err != nil {
				t.Fatal(err)
			}
			select {
			case <-got:
			case <-time.After(defaultTestTimeout):
				t.Fatal("the backend did not get the bytes")
			}
			before, start := loopRunnable(t, p), time.Now()
			time.Sleep(window)
			share := float64(loopRunnable(t, p)-before) / float64(time.Since(start))
			t.Logf("after %d bytes the loop's thread was runnable %.1f %% of %v", tt.size, 100*share, window)
			if share < tt.atLeast || share > tt.atMost {
				t.Errorf("after %d bytes the loop's thread was runnable %.0f %%; want %.0f–%.0f %%", tt.size, 100*share, 100*tt.atLeast, 100*tt.atMost)
			}
		})
	}
}

// openPipes counts the process's pipe descriptors (two a pipe).
func openPipes(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, "pipe:") {
			n++
		}
	}
	return n
}

// A direction that has moved spliceAfter goes on through a pipe
// (splice(2)), which its loop keeps for the next bulk direction once the
// connection has ended; a small exchange takes none. TestBulkBothWays
// checks spliced bytes end to end.
func TestLoopSplicesBulk(t *testing.T) {
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		got, _ := io.ReadAll(c)
		_, _ = c.Write(got)
	})
	p, addr := tcpServiceProxy(t, Config{EventLoops: 1}, model.L4Service{Backend: "splice"}, backend)
	lp := onlyLoop(t, p)
	// The loop's own count, not the process's descriptors: another
	// test's loop may still be closing its pipes.
	pipes := func() int { return int(lp.pipesOpen.Load()) }
	// The client's end of stream can come a moment before the loop
	// closes the connection and takes its pipes back.
	settled := func(want int) int {
		for deadline := time.Now().Add(defaultTestTimeout); pipes() != want && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		return pipes()
	}
	if got := exchange(t, addr, []byte("small")); got != "small" {
		t.Fatalf("answered %q", got)
	}
	if n := pipes(); n != 0 {
		t.Errorf("a 5-byte exchange: the loop has %d pipes; want none", n)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	if got := exchange(t, addr, big); got != string(big) {
		t.Fatalf("1 MiB each way: %d bytes came back, equal %v", len(got), got == string(big))
	}
	// One pipe a direction, given back to the loop when the connection
	// closed and kept there.
	if n := settled(2); n != 2 {
		t.Errorf("1 MiB each way: the loop has %d pipes; want 2 (one each way)", n)
	}
	if got := exchange(t, addr, big); got != string(big) {
		t.Fatalf("again: %d bytes came back", len(got))
	}
	time.Sleep(50 * time.Millisecond)
	if n := pipes(); n != 2 {
		t.Errorf("a second 1 MiB exchange: the loop has %d pipes; want the same 2 reused", n)
	}
	// And they are real descriptors: each is a pipe in /proc/self/fd.
	if n := openPipes(t); n < 4 {
		t.Errorf("%d pipe descriptors open in the process; want at least the loop's 4", n)
	}
}

func TestNextPollWindow(t *testing.T) {
	const least, most = 20 * time.Microsecond, 500 * time.Microsecond
	tests := []struct {
		name          string
		win, gap, out time.Duration
	}{
		{"a gap a longer window would have caught doubles it", least, 100 * time.Microsecond, 2 * least},
		{"up to the most", 400 * time.Microsecond, 450 * time.Microsecond, most},
		{"a gap of the most exactly still grows it", 300 * time.Microsecond, most, most},
		{"a gap past the most takes a quarter off", 400 * time.Microsecond, most + 1, 300 * time.Microsecond},
		{"down to the least", 25 * time.Microsecond, time.Second, least},
		{"a gap within the window (the budget ran out) leaves it", 200 * time.Microsecond, 150 * time.Microsecond, 200 * time.Microsecond},
		{"at the most a gap it would have caught leaves it", most, 450 * time.Microsecond, most},
	}
	for _, tt := range tests {
		if got := nextPollWindow(tt.win, tt.gap, least, most); got != tt.out {
			t.Errorf("%s: nextPollWindow(%v, %v) = %v, want %v", tt.name, tt.win, tt.gap, got, tt.out)
		}
	}
}

// A loop's polling window grows while the events of a connection come a
// little after the window ran out, and shrinks once they come further apart
// than BusyPoll, down to about what catches the backend's answer to each
// of them. The events are a client's pings, each answered by the backend.
func TestLoopPollWindowAdapts(t *testing.T) {
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(c, c)
	})
	const least, most = 50 * time.Microsecond, 50 * time.Millisecond
	p, addr := tcpServiceProxy(t, Config{EventLoops: 1, BusyPoll: most, pollLeast: least}, model.L4Service{Backend: "adapt"}, backend)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lp := onlyLoop(t, p)
	window := func() time.Duration { return time.Duration(lp.pollWin.Load()) }
	ping := func(gap time.Duration) {
		time.Sleep(gap)
		b := []byte{'p'}
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
	}
	// The listener's arrival a moment after the loop started, and the
	// connection's, which finds the loop asleep (no connection was open to
	// poll for), may each have grown it once already.
	if w := window(); w > 4*least {
		t.Fatalf("the window starts at %v, want at most %v", w, 4*least)
	}
	// 10 ms apart: past any window below it, within most.
	for range 20 {
		ping(10 * time.Millisecond)
	}
	grown := window()
	t.Logf("pings 10ms apart: the window is %v", grown)
	if grown < 10*time.Millisecond {
		t.Errorf("with pings 10ms apart the window is %v, want at least 10ms", grown)
	}
	// 120 ms apart: past most every time; each such ping takes a quarter
	// off, each answer the shrunk window misses doubles it.
	for range 16 {
		ping(120 * time.Millisecond)
	}
	w := window()
	t.Logf("pings 120ms apart: the window is %v", w)
	if w > 2*time.Millisecond {
		t.Errorf("with pings 120ms apart the window is %v, want at most 2ms", w)
	}
}

// Both sockets a loop relays between carry TCP_NOTSENT_LOWAT (setSockOpts):
// found among the process's descriptors by their addresses while the
// connection is open, beside the test's own client socket, which does not.
func TestLoopSocketsNotSentLowat(t *testing.T) {
	got := make(chan struct{})
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err == nil {
			close(got)
		}
		_, _ = io.Copy(io.Discard, c)
	})
	addr := tcpService(t, Config{EventLoops: 1}, model.L4Service{Backend: "lowat"}, backend)
	client, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend never got the byte")
	}
	// The sockets by role: the proxy's end of the client's connection
	// (peer: the client), its upstream socket (peer: the backend, from a
	// port other than the proxy's listener), the client's own.
	clientAddr, serviceAddr := client.LocalAddr().String(), client.RemoteAddr().String()
	lowat := map[string]int{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		local, err1 := unix.Getsockname(fd)
		peer, err2 := unix.Getpeername(fd)
		if err1 != nil || err2 != nil {
			continue // not a connected socket
		}
		v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
		if err != nil {
			continue
		}
		switch l, p := sockaddrString(local), sockaddrString(peer); {
		case p == clientAddr && l == serviceAddr:
			lowat["proxy's client socket"] = v
		case p == backend:
			lowat["proxy's upstream socket"] = v
		case l == clientAddr && p == serviceAddr:
			lowat["test client's socket"] = v
		}
	}
	want := map[string]int{"proxy's client socket": notSentLowatBytes, "proxy's upstream socket": notSentLowatBytes, "test client's socket": 0}
	for role, w := range want {
		if v, ok := lowat[role]; !ok || v != w {
			t.Errorf("%s: TCP_NOTSENT_LOWAT %d (found %v); want %d", role, v, ok, w)
		}
	}
}

// sockaddrString is an IPv4 socket address as net.Addr.String has it.
func sockaddrString(sa unix.Sockaddr) string {
	if a, ok := sa.(*unix.SockaddrInet4); ok {
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	}
	return ""
}

// TestLoopProcs: Config.LoopProcs hears of each P a running loop keeps,
// +1 when it starts and -1 when it ends. (GOMAXPROCS itself is the
// process's, moved by the loops of other tests' proxies as they end.)
func TestLoopProcs(t *testing.T) {
	backend := listen(t, func(c net.Conn) { c.Close() })
	var held atomic.Int64
	// Cleanups run last-registered first: this one after
	// tcpServiceProxy's has ended the proxy.
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for held.Load() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := held.Load(); got != 0 {
			t.Errorf("after the proxy ended, LoopProcs summed to %d; want 0", got)
		}
	})
	cfg := Config{EventLoops: 1, LoopProcs: func(delta int) { held.Add(int64(delta)) }}
	tcpServiceProxy(t, cfg, model.L4Service{Backend: "procs"}, backend)
	if got := held.Load(); got != 1 {
		t.Errorf("with a loop running, LoopProcs summed to %d; want 1", got)
	}
}
