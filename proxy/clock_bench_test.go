package proxy

import (
	"net"
	"testing"
	"time"
)

var (
	sinkTime time.Time
	sinkDur  time.Duration
)

// BenchmarkClock: what one clock read and one deadline cost here, the
// figures clock.go's design rests on.
func BenchmarkClock(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sinkTime = time.Now()
		}
	})
	b.Run("monoNow", func(b *testing.B) {
		for b.Loop() {
			sinkDur = monoNow()
		}
	})
	b.Run("SetReadDeadline", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		for b.Loop() {
			if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lazy SetReadDeadline", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		c := &lazyDeadlineConn{Conn: nc, lag: time.Minute}
		defer c.Close()
		for b.Loop() {
			if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
