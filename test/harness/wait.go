package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// PollInterval is how often the Wait helpers check their condition.
const PollInterval = 50 * time.Millisecond

// Poll checks cond every PollInterval until it reports true, returns an
// error, or ctx ends. The error names what was awaited and the last reason
// cond gave.
func Poll(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("wait for %s: %w (last: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// WaitFor is Poll for a test: it fails the test when the deadline passes.
// A process that exits while waited on ends the wait early (pass it as
// watch; nil watches nothing).
func WaitFor(t testing.TB, timeout time.Duration, what string, watch *Process, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := WaitUntil(context.Background(), timeout, what, watch, cond); err != nil {
		t.Fatal(err)
	}
}

// WaitUntil is WaitFor without a test, for TestMain.
func WaitUntil(ctx context.Context, timeout time.Duration, what string, watch *Process, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if watch != nil {
		go func() {
			select {
			case <-watch.Exited():
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	err := Poll(ctx, what, cond)
	if err != nil && watch != nil {
		select {
		case <-watch.Exited():
			return fmt.Errorf("%w: %s exited; its output ends with:\n%s", err, watch.Name(), watch.Tail(3000))
		default:
		}
	}
	return err
}

// TCPReady returns a condition that holds once addr accepts connections.
func TCPReady(addr string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return false, err
		}
		c.Close()
		return true, nil
	}
}

// HTTPReady returns a condition that holds once GET url answers want. A
// non-nil tlsConfig is used for https; header entries are added to the
// request.
func HTTPReady(url string, want int, tlsConfig *tls.Config, header http.Header) func(context.Context) (bool, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	return func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			return false, fmt.Errorf("GET %s: status %d; want %d", url, resp.StatusCode, want)
		}
		return true, nil
	}
}

// FreePort returns a TCP port the kernel just handed out on ip (listen on
// ip:0, then close), never one it returned before in this process: the
// kernel may hand out a port it just handed out, and a test that takes two
// ports (say an HTTP port and nginx's status port) would then get the same
// one twice. Another process could take it before the caller binds; with
// per-test addresses inside the namespace that does not happen in practice.
func FreePort(t testing.TB, ip string) int {
	t.Helper()
	p, err := FreePortErr(ip)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// handedOut holds the ports FreePortErr has returned.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePortErr is FreePort without a test.
func FreePortErr(ip string) (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 100 {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return 0, fmt.Errorf("find a free port on %s: %w", ip, err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("find a free port on %s: 100 tries gave ports handed out before", ip)
}

// FreeAddr returns ip:port with a free port.
func FreeAddr(t testing.TB, ip string) string {
	t.Helper()
	return net.JoinHostPort(ip, strconv.Itoa(FreePort(t, ip)))
}
