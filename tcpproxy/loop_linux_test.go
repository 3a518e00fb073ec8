package tcpproxy

import (
	"bytes"
	"testing"
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
