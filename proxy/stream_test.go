package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// bodyBackend is a real upstream that counts what it is sent (POST) and
// sends n zero bytes when asked (GET /download?n=...).
func bodyBackend(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "got %d", n)
			return
		}
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		_, _ = io.Copy(w, io.LimitReader(zeros{}, n))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// memPeak samples the heap in use and the resident set until stop is
// called, and returns their growth over the values at the start.
func memPeak(t *testing.T) (stop func() (heap, rss int64)) {
	t.Helper()
	runtime.GC()
	heap0, rss0 := heapInuse(), rss(t)
	var heapMax, rssMax int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			heapMax, rssMax = max(heapMax, heapInuse()), max(rssMax, rss(t))
			select {
			case <-done:
				return
			default:
				runtime.Gosched()
			}
		}
	})
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return heapMax - heap0, rssMax - rss0
	}
}

func heapInuse() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Error(err)
		return 0
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// TestGiBBodiesStream sends 1 GiB up (chunked, so the proxy cannot know
// its length) with proxy-request-buffering off and 1 GiB down through the
// proxy to a real backend, and 256 MiB up with buffering on (held in a
// temporary file); the process's heap and RSS must grow by less than
// 64 MiB: nothing holds a whole body in memory.
func TestGiBBodiesStream(t *testing.T) {
	const size, bound = 1 << 30, 64 << 20
	be := bodyBackend(t)
	l := loc("/", model.PathTypePrefix, "big")
	l.Proxy.BodySizeBytes = 0 // unlimited
	l.Proxy.NoRequestBuffering = true
	buffered := l.Clone()
	buffered.Proxy.NoRequestBuffering = false
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "big", Endpoints: endpoints(be)}},
		Servers: []model.Server{{Hostname: "big.example.com", Locations: []model.Location{l}},
			{Hostname: "buffered.example.com", Locations: []model.Location{buffered}}},
	}
	p, _ := newProxy(t, cfg, Config{BodyTempDir: t.TempDir()})
	base := "http://" + serve(t, p.Serve)

	for _, up := range []struct {
		host string
		size int64
	}{{"big.example.com", size}, {"buffered.example.com", 256 << 20}} {
		t.Run("upload "+up.host, func(t *testing.T) {
			stop := memPeak(t)
			req, _ := http.NewRequest(http.MethodPost, base+"/upload", io.NopCloser(io.LimitReader(zeros{}, up.size)))
			req.Host = up.host
			req.ContentLength = -1 // chunked
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			heap, rss := stop()
			if want := fmt.Sprintf("got %d", up.size); resp.StatusCode != 200 || string(b) != want {
				t.Fatalf("got %d %q; want 200 %q", resp.StatusCode, b, want)
			}
			t.Logf("heap growth %d MiB, RSS growth %d MiB", heap>>20, rss>>20)
			if heap > bound || rss > bound {
				t.Errorf("heap grew %d bytes, RSS %d; want both under %d", heap, rss, bound)
			}
		})
	}
	t.Run("download", func(t *testing.T) {
		stop := memPeak(t)
		req, _ := http.NewRequest(http.MethodGet, base+"/download?n="+strconv.Itoa(size), nil)
		req.Host = "big.example.com"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		heap, rss := stop()
		if err != nil || resp.StatusCode != 200 || n != size {
			t.Fatalf("got %d, %d bytes, %v; want 200, %d bytes", resp.StatusCode, n, err, size)
		}
		t.Logf("heap growth %d MiB, RSS growth %d MiB", heap>>20, rss>>20)
		if heap > bound || rss > bound {
			t.Errorf("heap grew %d bytes, RSS %d; want both under %d", heap, rss, bound)
		}
	})
}

// TestBodySizeLimit: proxy-body-size answers 413 for a declared length over
// the limit (the upstream never sees it) and for a chunked body that runs
// over while streaming; a body of exactly the limit passes either way.
func TestBodySizeLimit(t *testing.T) {
	const limit = 100 << 10 // over BodyBufferBytes, so chunked bodies stream
	be := bodyBackend(t)
	l := loc("/", model.PathTypePrefix, "small")
	l.Proxy.BodySizeBytes = limit
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "small", Endpoints: endpoints(be)}},
		Servers:  []model.Server{{Hostname: "small.example.com", Locations: []model.Location{l}}},
	}
	base, _ := start(t, cfg)
	for _, tc := range []struct {
		name    string
		n       int
		chunked bool
		want    int
	}{
		{"length at limit", limit, false, 200},
		{"length over limit", limit + 1, false, 413},
		{"chunked at limit", limit, true, 200},
		{"chunked over limit", 4 * limit, true, 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(make([]byte, tc.n))
			if tc.chunked {
				body = io.NopCloser(body) // hides the length from net/http
			}
			req, _ := http.NewRequest(http.MethodPost, base+"/up", body)
			req.Host = "small.example.com"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("got %d %q; want %d", resp.StatusCode, b, tc.want)
			}
			if want := fmt.Sprintf("got %d", tc.n); tc.want == 200 && string(b) != want {
				t.Errorf("got body %q; want %q", b, want)
			}
		})
	}
}

// TestHTTPSUpstream: backend-protocol HTTPS speaks TLS to the peer (its
// self-signed certificate accepted, as proxy_ssl_verify off), streaming a
// 3 MiB request body over it.
func TestHTTPSUpstream(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "tls=%t got %d", r.TLS != nil, n)
	}))
	t.Cleanup(srv.Close)
	peer := strings.TrimPrefix(srv.URL, "https://")
	secure := loc("/", model.PathTypePrefix, "tls")
	secure.BackendProtocol = model.ProtocolHTTPS
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "tls", Endpoints: endpoints(peer)}},
		Servers: []model.Server{
			{Hostname: "secure.example.com", Locations: []model.Location{secure}},
		},
	}
	base, _ := start(t, cfg)
	const n = 3 << 20 // over BodyBufferBytes: streamed over TLS
	req, _ := http.NewRequest(http.MethodPost, base+"/", io.NopCloser(io.LimitReader(zeros{}, n)))
	req.Host = "secure.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("tls=true got %d", n); resp.StatusCode != 200 || string(b) != want {
		t.Errorf("HTTPS: got %d %q; want 200 %q", resp.StatusCode, b, want)
	}
}
