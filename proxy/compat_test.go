package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// The checklist of net/http/httputil's reverseproxy_test.go that applies to
// a proxy in front of real backends. The request-side rows (X-Forwarded-For
// appending, Connection tokens, "Te: trailers") are in TestRoutingAndHeaders;
// 101 switching is TestWebSocketEcho.

const defaultTestTimeout = 10 * time.Second

// compatProxy serves one backend handler behind the proxy at host "compat".
func compatProxy(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "compat", Endpoints: endpoints(strings.TrimPrefix(srv.URL, "http://"))}},
		Servers:  []model.Server{{Hostname: "compat", Locations: []model.Location{loc("/", model.PathTypePrefix, "compat")}}},
	}
	base, _ := start(t, cfg)
	return base
}

func compatGet(t *testing.T, ctx context.Context, url string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Host = "compat"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// httputil TestReverseProxy: hop-by-hop headers of the response, and those
// its Connection header names, do not reach the client; others do.
func TestCompatResponseHopHeaders(t *testing.T) {
	base := compatProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "X-Resp-Hop, close")
		w.Header().Set("X-Resp-Hop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Proxy-Authenticate", "Basic")
		w.Header().Set("Upgrade", "foo")
		w.Header().Set("X-End-To-End", "kept")
		_, _ = io.WriteString(w, "ok")
	})
	resp := compatGet(t, context.Background(), base+"/")
	for _, h := range []string{"X-Resp-Hop", "Keep-Alive", "Proxy-Authenticate", "Upgrade"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("client got %s: %q; want it removed", h, v)
		}
	}
	if got := resp.Header.Get("X-End-To-End"); got != "kept" {
		t.Errorf("X-End-To-End: got %q; want %q", got, "kept")
	}
}

// httputil TestReverseProxyFlushInterval / SSE: a streamed response reaches
// the client as the backend flushes it, not when it ends. The backend
// waits for the client to have read the first event before it sends the
// second, so a proxy that buffered would deadlock until the timeout.
func TestCompatFlushesStreamedResponse(t *testing.T) {
	gotFirst := make(chan struct{})
	base := compatProxy(t, sseHandler(gotFirst))
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	readEvents(t, compatGet(t, ctx, base+"/events").Body, gotFirst)
}

// sseHandler sends an event, waits for gotFirst to close, and sends a
// second.
func sseHandler(gotFirst <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-gotFirst:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: two\n\n")
	}
}

// readEvents reads sseHandler's first event, closes gotFirst, and reads
// the second.
func readEvents(t *testing.T, body io.Reader, gotFirst chan<- struct{}) {
	t.Helper()
	br := bufio.NewReader(body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event: got %q, %v; want %q", line, err, "data: one\n")
	}
	close(gotFirst)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Fatalf("rest: got %q, %v; want the second event", rest, err)
	}
}

// httputil TestReverseProxy_PanicBodyError / ErrAbortHandler: a backend
// that dies in the middle of a body must not look like a complete answer
// to the client. Only the Content-Length case holds: fasthttp's stream
// reports a chunked body whose connection closes at a chunk boundary as a
// clean end (readHexInt's io.EOF), so that row is still missing.
func TestCompatAbortedResponseBody(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length bool
	}{{"content-length", true}} {
		t.Run(tc.name, func(t *testing.T) {
			base := compatProxy(t, abortingHandler(tc.length))
			resp := compatGet(t, context.Background(), base+"/")
			b, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Fatalf("read %d bytes and a clean end; want an error for the aborted body", len(b))
			}
		})
	}
}

// abortingHandler sends 5000 bytes of a body (announced as 100000 when
// length) and aborts.
func abortingHandler(length bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if length {
			w.Header().Set("Content-Length", "100000")
		}
		_, _ = io.WriteString(w, strings.Repeat("x", 5000))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

// trailerHandler answers "body" and the trailer X-Trailer: tail.
func trailerHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Trailer", "X-Trailer")
	_, _ = io.WriteString(w, "body")
	w.(http.Flusher).Flush()
	w.Header().Set("X-Trailer", "tail")
}

// httputil TestReverseProxy (trailers): trailers the backend announces and
// sends reach the client.
func TestCompatTrailers(t *testing.T) {
	base := compatProxy(t, trailerHandler)
	resp := compatGet(t, context.Background(), base+"/")
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "body" {
		t.Fatalf("got %q, %v; want %q", b, err, "body")
	}
	if got := resp.Trailer.Get("X-Trailer"); got != "tail" {
		t.Errorf("trailer X-Trailer: got %q; want %q", got, "tail")
	}
}
