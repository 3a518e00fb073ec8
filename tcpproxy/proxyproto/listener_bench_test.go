package proxyproto

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// memConn is a connection reading from a string, for measuring Handshake
// alone.
type memConn struct {
	net.Conn
	r strings.Reader
}

var benchPeer = &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 40000}

func (c *memConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) RemoteAddr() net.Addr             { return benchPeer }
func (c *memConn) LocalAddr() net.Addr              { return benchPeer }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkHandshake reads a v1 and a v2 header followed by a request, from
// a trusted peer, and the request after it: the cost per connection of
// use-proxy-protocol on the Go plane.
func BenchmarkHandshake(b *testing.B) {
	req := "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	p := &Policy{On: true, Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Timeout: time.Second}
	for name, hdr := range map[string]string{
		"v1": "PROXY TCP4 203.0.113.7 192.0.2.1 40000 443\r\n",
		"v2": string(AppendV2(nil, netip.MustParseAddrPort("203.0.113.7:40000"), netip.MustParseAddrPort("192.0.2.1:443"))),
	} {
		in := hdr + req
		b.Run(name, func(b *testing.B) {
			c := &memConn{}
			buf := make([]byte, 64)
			b.ReportAllocs()
			for b.Loop() {
				c.r.Reset(in)
				pc, err := Handshake(c, p)
				if err != nil {
					b.Fatal(err)
				}
				if n, _ := pc.Read(buf); n != len(req) {
					b.Fatalf("read %d bytes after the header", n)
				}
				_, _ = pc.Read(buf) // returns the reader to the pool
			}
		})
	}
}
