package tcpproxy

import (
	"bytes"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
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

// cpuTime is the CPU time this process has used.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// After an event a loop with BusyPoll keeps looking for the next one
// without sleeping, for BusyPoll and no longer; without it the loop
// sleeps at once. Seen in the CPU time the otherwise idle process uses
// while nothing happens: a polling loop burns it (it only yields to
// whatever else is runnable), a sleeping one does not. The thresholds are
// a tenth of the window either way, far from both.
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
		// polling: whether the loop should be polling during the window
		// that starts right after the exchange, and then during the
		// window after that.
		polling, thenPolling bool
	}{
		{"none", 0, false, false},
		{"longer than the window", 2 * window, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := tcpService(t, Config{EventLoops: 1, BusyPoll: tt.busyPoll}, model.L4Service{Backend: "busy-poll"}, backend)
			if got := exchange(t, addr, []byte("ping")); got != "ping" {
				t.Fatalf("answered %q", got)
			}
			for i, want := range []bool{tt.polling, tt.thenPolling} {
				start := cpuTime(t)
				time.Sleep(window)
				if i == 0 && tt.busyPoll > window {
					time.Sleep(tt.busyPoll - window) // let the poll run out before the second window
				}
				used := cpuTime(t) - start
				switch {
				case want && used < window/10:
					t.Errorf("window %d: the process used %v of CPU; want the loop polling (at least %v)", i+1, used, window/10)
				case !want && used > window/10:
					t.Errorf("window %d: the process used %v of CPU; want the loop asleep (at most %v)", i+1, used, window/10)
				}
			}
		})
	}
}
