package proxyproto

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// defaultTestTimeout bounds every wait of these tests.
const defaultTestTimeout = 5 * time.Second

// listen starts a Listener on 127.0.0.1 under p.
func listen(t *testing.T, p Policy) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, p)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// dialFrom connects to l from the loopback address from and writes the
// parts, one write each.
func dialFrom(t *testing.T, l *Listener, from string, parts ...string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: defaultTestTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, p := range parts {
		if _, err := c.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// accept returns the next accepted connection, failing after the timeout.
func accept(t *testing.T, l *Listener) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c
	case <-time.After(defaultTestTimeout):
		t.Fatal("no connection accepted")
	}
	return nil
}

// readN reads n bytes from c.
func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(defaultTestTimeout))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

// closedByServer reports whether the server closed c without a byte
// (a read that times out is not a close).
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(defaultTestTimeout))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	return n == 0 && err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func v2(src, dst string) string {
	return string(AppendV2(nil, netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst)))
}

// nginx's listen ... proxy_protocol with set_real_ip_from: the header's
// source is the client's address for a trusted peer only; its destination
// is the local address either way; the bytes after the header arrive
// whole, whether they came with it or later.
func TestListenerAddresses(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.50/32")}
	for _, tc := range []struct {
		name, from    string
		parts         []string
		remote, local string // "" the connection's own
	}{
		{name: "v1 trusted, request in the same write", from: "127.0.0.50",
			parts: []string{"PROXY TCP4 203.0.113.7 198.51.100.1 40000 8443\r\nGET / HTTP/1.1\r\n\r\n"}, remote: "203.0.113.7:40000", local: "198.51.100.1:8443"},
		{name: "v1 trusted, request later", from: "127.0.0.50",
			parts: []string{"PROXY TCP4 203.0.113.7 198.51.100.1 40000 8443\r\n", "GET / HTTP/1.1\r\n\r\n"}, remote: "203.0.113.7:40000", local: "198.51.100.1:8443"},
		{name: "v2 trusted", from: "127.0.0.50",
			parts: []string{v2("[2001:db8::7]:40000", "[2001:db8::1]:443") + "GET / HTTP/1.1\r\n\r\n"}, remote: "[2001:db8::7]:40000", local: "[2001:db8::1]:443"},
		{name: "v1 untrusted", from: "127.0.0.1",
			parts: []string{"PROXY TCP4 203.0.113.7 198.51.100.1 40000 8443\r\nGET / HTTP/1.1\r\n\r\n"}, local: "198.51.100.1:8443"},
		{name: "v1 UNKNOWN", from: "127.0.0.50", parts: []string{"PROXY UNKNOWN\r\nGET / HTTP/1.1\r\n\r\n"}},
		{name: "v2 LOCAL", from: "127.0.0.50", parts: []string{string(AppendV2(nil, netip.AddrPort{}, netip.AddrPort{})) + "GET / HTTP/1.1\r\n\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := listen(t, Policy{On: true, Trusted: trusted})
			c := dialFrom(t, l, tc.from, tc.parts...)
			s := accept(t, l)
			remote, local := tc.remote, tc.local
			if remote == "" {
				remote = c.LocalAddr().String()
			}
			if local == "" {
				local = c.RemoteAddr().String()
			}
			if got := s.RemoteAddr().String(); got != remote {
				t.Errorf("RemoteAddr %s; want %s", got, remote)
			}
			if got := s.LocalAddr().String(); got != local {
				t.Errorf("LocalAddr %s; want %s", got, local)
			}
			if got := s.(*Conn).PeerAddr().String(); got != c.LocalAddr().String() {
				t.Errorf("PeerAddr %s; want %s", got, c.LocalAddr())
			}
			if got := readN(t, s, 18); got != "GET / HTTP/1.1\r\n\r\n" {
				t.Errorf("read %q after the header", got)
			}
		})
	}
}

// A connection without a valid header is closed without an answer; one
// slow to send its header holds up no other.
func TestListenerRefuses(t *testing.T) {
	l := listen(t, Policy{On: true, Trusted: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, Timeout: 300 * time.Millisecond})
	slow := dialFrom(t, l, "127.0.0.1", "PROXY TCP4 203.0.113.7 ")
	for _, bad := range []string{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "PROXY TCP4 203.0.113.7 198.51.100.1 40000\r\n", "\x16\x03\x01\x00\x05hello",
		"PROXY TCP4 203.0.113.7 198.51.100.1 40000 8443\n"} {
		c := dialFrom(t, l, "127.0.0.1", bad)
		if !closedByServer(t, c) {
			t.Errorf("%q: connection not closed", bad)
		}
	}
	good := dialFrom(t, l, "127.0.0.1", "PROXY TCP4 203.0.113.8 198.51.100.1 40000 80\r\nx")
	if s := accept(t, l); s.RemoteAddr().String() != "203.0.113.8:40000" {
		t.Errorf("accepted %s; want the good connection past the slow one", s.RemoteAddr())
	}
	_ = good
	if !closedByServer(t, slow) {
		t.Error("a header not finished within the timeout: connection not closed")
	}
}

// Optional (the SSL passthrough router): a connection that cannot start
// with a header passes as it came; a malformed header still closes it.
// Off: everything passes untouched, a PROXY header included.
func TestListenerOptionalAndOff(t *testing.T) {
	l := listen(t, Policy{On: true, Optional: true, Trusted: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}})
	hello := "\x16\x03\x01\x00\x05hello"
	c := dialFrom(t, l, "127.0.0.1", hello)
	s := accept(t, l)
	if s.RemoteAddr().String() != c.LocalAddr().String() || readN(t, s, len(hello)) != hello {
		t.Errorf("a TLS hello without a header: from %s", s.RemoteAddr())
	}
	bad := dialFrom(t, l, "127.0.0.1", "PROXY nonsense\r\n")
	if !closedByServer(t, bad) {
		t.Error("a malformed header under Optional: connection not closed")
	}
	c = dialFrom(t, l, "127.0.0.1", "PROXY TCP4 203.0.113.9 198.51.100.1 40000 443\r\n"+hello)
	if s := accept(t, l); s.RemoteAddr().String() != "203.0.113.9:40000" || readN(t, s, len(hello)) != hello {
		t.Errorf("a header under Optional: from %s", s.RemoteAddr())
	}
	_ = c

	l.SetPolicy(Policy{})
	raw := "PROXY TCP4 203.0.113.9 198.51.100.1 40000 443\r\n"
	dialFrom(t, l, "127.0.0.1", raw)
	s = accept(t, l)
	if _, ok := s.(*Conn); ok || readN(t, s, len(raw)) != raw {
		t.Errorf("policy off: the header was read (%T)", s)
	}
}

// Close ends Accept.
func TestListenerClose(t *testing.T) {
	l := listen(t, Policy{On: true})
	done := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		done <- err
	}()
	_ = l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v; want net.ErrClosed", err)
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("Accept did not return after Close")
	}
}

// MaxPending: past it, the connection waiting longest for its header is
// closed, and a new one is served.
func TestListenerMaxPending(t *testing.T) {
	l := listen(t, Policy{On: true, MaxPending: 2, Timeout: time.Minute})
	first := dialFrom(t, l, "127.0.0.1")
	second := dialFrom(t, l, "127.0.0.1")
	// The accept loop counts each connection as it accepts it, in the
	// order they connected: the first two are pending when the third
	// comes.
	dialFrom(t, l, "127.0.0.1", "PROXY TCP4 203.0.113.8 198.51.100.1 40000 80\r\nx")
	if got := readN(t, accept(t, l), 1); got != "x" {
		t.Errorf("the third connection: read %q; want x", got)
	}
	if !closedByServer(t, first) {
		t.Error("the oldest pending connection was not closed")
	}
	_ = second.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := second.Read(make([]byte, 1)); n != 0 || !isTimeout(err) {
		t.Errorf("the second pending connection: read %d, %v; want it still waiting", n, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
