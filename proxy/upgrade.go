package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// upgradeProtocol returns the Upgrade header of a request that asks to
// switch protocols (Connection lists "upgrade"), else "". A request that
// offers h2c is served as HTTP/1.1, its Upgrade dropped: a peer that
// switched to HTTP/2 would take every request the client sends after,
// unrouted and unchecked (h2c smuggling; RFC 9113 §3.1 retires the h2c
// upgrade, and RFC 9110 §7.8 lets a server ignore an Upgrade).
func upgradeProtocol(h *fasthttp.RequestHeader) string {
	up := peekSent(h, "Upgrade")
	if len(up) == 0 || !tokenListHas(h.Peek("Connection"), "upgrade") || tokenListHas(up, "h2c") {
		return ""
	}
	return string(up)
}

// upgrade proxies a request that asks to switch protocols (WebSocket and
// others): it dials a picked peer, sends the request with Connection:
// upgrade and the Upgrade header kept, and on 101 hijacks the client
// connection, relays the 101 and copies bytes both ways until both sides
// are done. Any other answer is relayed as a normal response. Only a failed
// dial moves on to another peer: nothing was written yet.
func (p *Proxy) upgrade(ctx *fasthttp.RequestCtx, loc *model.Location, f *clientFacts, view *requestView, protocol string, o *outcome) {
	// The head sent is a copy of the client's, edited for the upstream.
	h := new(fasthttp.RequestHeader)
	ctx.Request.Header.CopyTo(h)
	prepareHeader(h, f, loc, nil, o)
	h.Set("Connection", "upgrade")
	h.Set("Upgrade", protocol)
	h.SetContentLength(0)
	h.SetRequestURIBytes(ctx.Request.URI().RequestURI()) // after rewrite-target
	var a balancer.Attempt
	if _, err := p.attempts(loc.Backend, loc, view, &a, o, replay{}, &upgradeTry{p: p, ctx: ctx, head: h, hold: &o.hold}); err != nil {
		answerFast(ctx, verdict{status: failureStatus(err)})
	}
}

// upgradeTry is one attempt of an upgrade: a dial, then switchProtocols.
type upgradeTry struct {
	p    *Proxy
	ctx  *fasthttp.RequestCtx
	head *fasthttp.RequestHeader // what is sent upstream
	// hold is the request's limit-connections count: on 101 the tunnel
	// takes it, until both directions end.
	hold *connHold
}

func (t *upgradeTry) try(pick *balancer.Pick, loc *model.Location, _ time.Duration) (int, time.Duration, error) {
	to := timeoutsOf(loc)
	start := time.Now()
	up, err := net.DialTimeout("tcp", pick.Peer, to.connect)
	connect := time.Since(start)
	if err != nil {
		return 0, connect, fmt.Errorf("dial upstream: %w", err)
	}
	status, err := t.p.switchProtocols(t.ctx, t.head, up, to, pick.SetCookie, t.hold)
	if err != nil {
		_ = up.Close()
		t.ctx.Response.Reset()
		return 0, connect, err
	}
	return status, connect, nil
}

// discard is never called: an upgrade is not sent twice (replay{}).
func (t *upgradeTry) discard() { t.ctx.Response.Reset() }

// switchProtocols writes the request head to up and reads the answer. On
// 101 it arranges the hijack that owns up from then on; otherwise the
// answer becomes ctx's response and up is closed.
func (p *Proxy) switchProtocols(ctx *fasthttp.RequestCtx, head *fasthttp.RequestHeader, up net.Conn, t timeouts, setCookie string, hold *connHold) (int, error) {
	// Every read and write on up from here on, the relay's included, must
	// make progress within proxy-read/send-timeout.
	up = &timeoutConn{Conn: up, read: t.read, write: t.send}
	w := bufio.NewWriter(up)
	if err := head.Write(w); err != nil {
		return 0, fmt.Errorf("write upgrade request: %w", err)
	}
	if err := w.Flush(); err != nil {
		return 0, fmt.Errorf("write upgrade request: %w", err)
	}
	br := bufio.NewReader(up)
	resp := &ctx.Response
	if err := resp.Header.Read(br); err != nil {
		return 0, fmt.Errorf("read upgrade response: %w", err)
	}
	status := resp.StatusCode()
	if setCookie != "" {
		resp.Header.Add("Set-Cookie", setCookie)
	}
	if status != fasthttp.StatusSwitchingProtocols {
		stripHopHeaders(&resp.Header, false, nil)
		// A refusal is small: read it whole (up to 1 MiB), whatever its
		// framing, and drop the connection dialled for it.
		err := resp.ReadBody(br, 1<<20)
		_ = up.Close()
		if err != nil {
			return status, fmt.Errorf("read upgrade refusal: %w", err)
		}
		return status, nil
	}
	// The 101 goes to the client as the upstream sent it (its Connection
	// and Upgrade headers are the point of it), written by the hijack
	// handler rather than by fasthttp.
	answer := append([]byte(nil), resp.Header.Header()...)
	tunnel := *hold // limit-connections counts the tunnel while it is open
	*hold = connHold{}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(client net.Conn) {
		defer tunnel.release()
		defer up.Close()
		if _, err := client.Write(answer); err != nil {
			return
		}
		relayUpgraded(client, up, br)
	})
	return status, nil
}

// relayUpgraded copies bytes between the hijacked client connection and the
// upstream (whose first bytes may already sit in upBuf) until both
// directions end: one named goroutine per direction (httputil
// switchProtocolCopier). A clean end of one direction half-closes the other
// side; an error (including the upstream idle for proxy-read-timeout, or
// not taking bytes for proxy-send-timeout, as nginx applies them to
// upgraded connections) closes both connections, which ends the other
// copier too.
func relayUpgraded(client, up net.Conn, upBuf *bufio.Reader) {
	done := make(chan error, 2)
	go copyToUpstream(up, client, done)
	go copyToClient(client, upBuf, done)
	for range 2 {
		if err := <-done; err != nil {
			_ = up.Close()
			_ = rawConn(client).Close()
		}
	}
}

// copyToUpstream copies client bytes to the upstream.
func copyToUpstream(up net.Conn, client net.Conn, done chan<- error) {
	_, err := io.Copy(up, client)
	if err == nil {
		closeWrite(up)
	}
	done <- err
}

// copyToClient copies upstream bytes to the client.
func copyToClient(client net.Conn, up io.Reader, done chan<- error) {
	_, err := io.Copy(client, up)
	if err == nil {
		closeWrite(client)
	}
	done <- err
}

// rawConn reaches the real connection under fasthttp's hijacked one (whose
// Close does nothing).
func rawConn(c net.Conn) net.Conn {
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		return u.UnsafeConn()
	}
	return c
}

// closeWrite half-closes c (or closes it when it cannot half-close) so the
// peer sees the end of this direction.
func closeWrite(c net.Conn) {
	c = rawConn(c)
	if tc, ok := c.(*timeoutConn); ok {
		c = tc.Conn
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
