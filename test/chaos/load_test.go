package chaos

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// loadConfig is a steady load on one data plane.
type loadConfig struct {
	// Addr is the data plane's host:port.
	Addr string
	// Host is the Host field and Path the path of every request.
	Host, Path string
	// Clients is how many keep-alive clients run at once; each has one
	// connection at a time.
	Clients int
	// Rate is the total requests per second the clients try to send,
	// Rate/Clients each (a client that falls behind skips ticks).
	Rate int
	// Timeout bounds one request, dial included.
	Timeout time.Duration
	// Close sends each request on a new connection (Connection: close):
	// for TCP services and SSL passthrough, which pin a connection to one
	// backend.
	Close bool
	// TLS, when not nil, wraps each connection in a TLS client.
	TLS *tls.Config
}

// sample is one request.
type sample struct {
	start, done time.Time
	// connAt is when the request's connection was dialled.
	connAt time.Time
	client int
	// status is the response's, 0 after a transport error err.
	status int
	err    string
	// kind is err's kind, for the tally: "dial: connection refused".
	kind string
	// stale: the request went out on a kept-alive connection and no byte
	// of an answer came back. A client that replays idempotent requests
	// (Go's net/http, browsers) would have sent it again; ours does not.
	stale bool
	// body is what answered: a backend's name, or an error page.
	body string
}

func (s sample) failed() bool { return s.err != "" || s.status < 200 || s.status > 299 }

// load runs a loadConfig until stop.
type load struct {
	cfg    loadConfig
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	samples []sample // guarded by mu
}

// startLoad starts cfg's clients.
func startLoad(cfg loadConfig) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cfg: cfg, cancel: cancel}
	interval := time.Duration(int64(time.Second) * int64(cfg.Clients) / int64(cfg.Rate))
	for i := range cfg.Clients {
		l.wg.Go(func() { l.client(ctx, i, interval) })
	}
	return l
}

// stop ends the load and waits for its clients.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// snapshot returns the samples so far that ended at or after from.
func (l *load) snapshot(from time.Time) []sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sample
	for i := len(l.samples) - 1; i >= 0; i-- {
		// Samples are appended as they end, so roughly in done order;
		// a request can take up to Timeout.
		if l.samples[i].done.Before(from.Add(-l.cfg.Timeout)) {
			break
		}
		if !l.samples[i].done.Before(from) {
			out = append(out, l.samples[i])
		}
	}
	return out
}

// client sends one request per tick on a kept-alive connection, and after
// any failure closes it and dials anew for the next request: no retry, no
// replay.
func (l *load) client(ctx context.Context, id int, interval time.Duration) {
	// Spread the clients over the interval.
	select {
	case <-ctx.Done():
		return
	case <-time.After(interval * time.Duration(id) / time.Duration(l.cfg.Clients)):
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var c *conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := sample{start: time.Now(), client: id}
		var err error
		if c == nil {
			c, err = l.dial(ctx)
		}
		if err == nil {
			s.connAt = c.at
			var keep bool
			s.status, s.body, keep, err = c.roundTrip(l.cfg, time.Now().Add(l.cfg.Timeout))
			s.stale = err != nil && c.used > 0 && !c.got
			c.used++
			if err != nil || !keep || l.cfg.Close {
				c.Close()
				c = nil
			}
		}
		if err != nil {
			s.err, s.kind = err.Error(), errorKind(err)
		}
		s.done = time.Now()
		if ctx.Err() != nil && err != nil {
			return // cut short by stop, not by the data plane
		}
		l.mu.Lock()
		l.samples = append(l.samples, s)
		l.mu.Unlock()
	}
}

// conn is one client connection.
type conn struct {
	net.Conn
	r    *bufio.Reader
	at   time.Time // dialled
	used int       // requests answered on it
	// got is set once a byte of the current answer has been read.
	got bool
}

func (l *load) dial(ctx context.Context) (*conn, error) {
	at := time.Now()
	d := net.Dialer{Timeout: l.cfg.Timeout}
	nc, err := d.DialContext(ctx, "tcp", l.cfg.Addr)
	if err != nil {
		return nil, &stageError{"dial", err}
	}
	if l.cfg.TLS != nil {
		tc := tls.Client(nc, l.cfg.TLS)
		hctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, &stageError{"TLS handshake", err}
		}
		nc = tc
	}
	c := &conn{Conn: nc, at: at}
	c.r = bufio.NewReader(readNotifier{c})
	return c, nil
}

// readNotifier marks the conn once the first byte of an answer arrived.
type readNotifier struct{ c *conn }

func (r readNotifier) Read(p []byte) (int, error) {
	n, err := r.c.Conn.Read(p)
	if n > 0 {
		r.c.got = true
	}
	return n, err
}

// roundTrip sends one GET and reads its answer; keep says whether the
// connection may carry the next request.
func (c *conn) roundTrip(cfg loadConfig, deadline time.Time) (status int, body string, keep bool, err error) {
	if err := c.SetDeadline(deadline); err != nil {
		return 0, "", false, err
	}
	c.got = false
	closeField := ""
	if cfg.Close {
		closeField = "Connection: close\r\n"
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: switchyard-chaos\r\n%s\r\n", cfg.Path, cfg.Host, closeField); err != nil {
		return 0, "", false, &stageError{"write", err}
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, "", false, &stageError{"read", err}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil {
		return 0, "", false, &stageError{"read body", err}
	}
	return resp.StatusCode, string(b), !resp.Close, nil
}

// stageError says which step of a request failed.
type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.stage + ": " + e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

// errorKind is err without addresses: its stage and cause.
func errorKind(err error) string {
	stage := "request"
	var se *stageError
	if errors.As(err, &se) {
		stage = se.stage
	}
	cause := err.Error()
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		cause = "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		cause = "connection reset"
	case errors.Is(err, syscall.EPIPE):
		cause = "broken pipe"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		cause = "EOF"
	case errors.Is(err, os.ErrDeadlineExceeded):
		cause = "timeout"
	}
	return stage + ": " + cause
}
