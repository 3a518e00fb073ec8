// Package lua_test runs the Lua shim (balancer.lua, configuration.lua,
// switchyard/pick.lua) inside Debian's nginx against the real Go balancer
// (`switchyard balancer`) and real backends on loopback addresses.
package lua_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/switchyard-proxy/switchyard/test/harness"
)

const testTimeout = 30 * time.Second

// backend is a real HTTP server on its own loopback address that answers
// with that address, after an adjustable delay.
type backend struct {
	addr  string
	delay atomic.Int64 // nanoseconds
	hits  atomic.Int64
	srv   *http.Server
}

func startBackend(t *testing.T, ip string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("backend on %s: %v", ip, err)
	}
	b := &backend{addr: ln.Addr().String()}
	b.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		if d := b.delay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		w.Header().Set("X-Backend", b.addr)
		_, _ = io.WriteString(w, b.addr)
	})}
	go func() { _ = b.srv.Serve(ln) }()
	t.Cleanup(func() { _ = b.srv.Close() })
	return b
}

// deadAddr returns an address on ip where nothing listens (connection
// refused).
func deadAddr(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// switchydBinary builds cmd/switchyard once per test binary.
func switchyardBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "switchyard-shim-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "switchyard")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/switchyard").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func nginxBinary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("nginx")
	if err != nil {
		p = "/usr/sbin/nginx"
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("nginx is not installed (run test/setup.sh): %v", err)
		}
	}
	for _, m := range []string{"/usr/lib/nginx/modules/ngx_http_lua_module.so", "/usr/share/lua/5.1/resty/core.lua"} {
		if _, err := os.Stat(m); err != nil {
			t.Fatalf("%s missing (run test/setup.sh): %v", m, err)
		}
	}
	return p
}

type location struct{ Path, Backend string }

// env is one nginx with the shim, one Go balancer, and the sockets between.
type env struct {
	t           *testing.T
	dir         string
	bin         string
	pickSock    string
	apiSock     string
	state       string
	listen      string
	statusPort  int
	metricsAddr string // the balancer's /metrics
	goProc      *harness.Process
	nginx       *harness.Process
	client      *http.Client
	nginxBinary string
}

var locations = []location{
	{"/rr/", "default-rr-80"},
	{"/hash/", "default-hash-80"},
	{"/sticky/", "default-sticky-80"},
	{"/canary/", "default-main-80"},
	{"/weighted/", "default-wmain-80"},
	{"/dead/", "default-dead-80"},
	{"/ewma/", "default-ewma-80"},
	{"/unknown/", "default-unknown-80"},
	{"/rr-refused/", "default-rrrefused-80"},
	{"/ewma-refused/", "default-ewmarefused-80"},
	{"/generation/", "default-generation-80"},
	{"/hcanary/", "default-hmain-80"},
	{"/scanary/", "default-smain-80"},
	{"/pcanary/", "default-pmain-80"},
	// Any backend, named by the query's b (TestShimHeaderPattern).
	{"/pattern/", "$arg_b"},
}

func newEnv(t *testing.T, workers int) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the shim tests start nginx, whose workers switch to nobody: run them as root (CI does)")
	}
	e := &env{t: t, nginxBinary: nginxBinary(t), bin: switchyardBinary(t)}
	// nginx workers run as nobody:nogroup and need to reach the sockets:
	// t.TempDir's parent is private, so make a world-searchable one.
	dir, err := os.MkdirTemp("", "switchyard-shim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.dir = dir
	e.pickSock = filepath.Join(e.dir, "pick.sock")
	e.apiSock = filepath.Join(e.dir, "configuration.sock")
	e.state = filepath.Join(e.dir, "backends.json")
	e.listen = harness.FreeAddr(t, "127.0.0.1")
	e.statusPort = harness.FreePort(t, "127.0.0.1")
	e.metricsAddr = harness.FreeAddr(t, "127.0.0.1")
	e.startGo()

	luaDir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := template.Must(template.ParseFiles("testdata/nginx.conf.tmpl"))
	var conf bytes.Buffer
	if err := tmpl.Execute(&conf, map[string]any{
		"Workers": workers, "Dir": e.dir, "LuaDir": luaDir, "StatusPort": e.statusPort,
		"APISocket": e.apiSock, "PickSocket": e.pickSock, "Listen": e.listen, "Locations": locations,
	}); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(e.dir, "nginx.conf")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(e.nginxBinary, "-t", "-q", "-p", e.dir, "-c", confPath, "-e", filepath.Join(e.dir, "error.log")).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	e.nginx = harness.StartProcess(t, harness.Cmd{Name: "nginx", Path: e.nginxBinary,
		Args: []string{"-p", e.dir, "-c", confPath, "-e", filepath.Join(e.dir, "error.log")}, LogDir: e.dir})
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(e.dir, "error.log"))
			t.Logf("nginx error.log (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
		}
	})
	harness.WaitFor(t, testTimeout, "nginx status server", e.nginx,
		harness.HTTPReady(fmt.Sprintf("http://127.0.0.1:%d/healthz", e.statusPort), 200, nil, nil))
	e.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return e
}

func (e *env) startGo() {
	e.t.Helper()
	e.goProc = harness.StartProcess(e.t, harness.Cmd{Name: "switchyard-balancer", Path: e.bin, LogDir: e.dir,
		Args: []string{"balancer", "--configuration-socket", e.apiSock, "--pick-socket", e.pickSock,
			"--socket-gid", "65534", "--state-file", e.state, "--metrics-address", e.metricsAddr}})
	harness.WaitFor(e.t, testTimeout, "pick socket", e.goProc, func(context.Context) (bool, error) {
		c, err := net.Dial("unix", e.pickSock)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
}

// post sends a backends payload through nginx's /configuration location.
func (e *env) post(t testing.TB, path string, body []byte) (int, string) {
	t.Helper()
	resp, err := e.client.Post(fmt.Sprintf("http://127.0.0.1:%d%s", e.statusPort, path), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// get requests path through nginx with extra headers and returns the
// status, the answering backend and the response.
func (e *env) get(t testing.TB, path string, hdr ...string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+e.listen+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "shim.test"
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), resp
}

// wire is one backend of the ingress-nginx payload, serialized the way
// ingress-nginx's controller does (spec §1.3).
func wire(name string, eps []string, extra map[string]any) map[string]any {
	b := map[string]any{
		"name": name, "port": 80, "sslPassthrough": false, "noServer": false,
		"service":               map[string]any{"metadata": map[string]any{}, "spec": map[string]any{"type": "ClusterIP"}, "status": map[string]any{"loadBalancer": map[string]any{}}},
		"sessionAffinityConfig": map[string]any{"name": "", "mode": "", "cookieSessionAffinity": map[string]any{"name": ""}},
		"upstreamHashByConfig":  map[string]any{"upstream-hash-by-subset-size": 3},
		"trafficShapingPolicy":  map[string]any{"weight": 0, "weightTotal": 0, "header": "", "headerValue": "", "headerPattern": "", "cookie": ""},
	}
	var list []map[string]string
	for _, ep := range eps {
		host, port, _ := net.SplitHostPort(ep)
		list = append(list, map[string]string{"address": host, "port": port})
	}
	if len(list) > 0 {
		b["endpoints"] = list
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func addrs(bs ...*backend) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.addr)
	}
	return out
}

// TestShim is the test list, one nginx (2 workers) and one Go
// balancer for all of it.
func TestShim(t *testing.T) {
	b1, b2, b3 := startBackend(t, "127.0.0.2"), startBackend(t, "127.0.0.3"), startBackend(t, "127.0.0.4")
	canary := startBackend(t, "127.0.0.5")
	e := newEnv(t, 2)

	payload := []map[string]any{
		wire("default-canary-80", addrs(canary), map[string]any{"noServer": true, "trafficShapingPolicy": map[string]any{
			"weight": 0, "weightTotal": 0, "header": "X-Canary", "headerValue": "", "headerPattern": "", "cookie": "canary"}}),
		wire("default-dead-80", []string{deadAddr(t, "127.0.0.6"), b1.addr, deadAddr(t, "127.0.0.7")}, nil),
		wire("default-ewma-80", addrs(b1, b2, b3), map[string]any{"load-balance": "ewma"}),
		wire("default-hash-80", addrs(b1, b2, b3), map[string]any{"upstreamHashByConfig": map[string]any{"upstream-hash-by": "$request_uri"}}),
		wire("default-main-80", addrs(b1, b2), map[string]any{"alternativeBackends": []string{"default-canary-80"}}),
		wire("default-rr-80", addrs(b1, b2, b3), nil),
		wire("default-sticky-80", addrs(b1, b2, b3), map[string]any{"sessionAffinityConfig": map[string]any{"name": "cookie", "mode": "balanced",
			"cookieSessionAffinity": map[string]any{"name": "route", "locations": map[string][]string{"shim.test": {"/sticky/"}}}}}),
		wire("default-wcanary-80", addrs(canary), map[string]any{"noServer": true, "trafficShapingPolicy": map[string]any{
			"weight": 30, "weightTotal": 100, "header": "", "headerValue": "", "headerPattern": "", "cookie": ""}}),
		wire("default-wmain-80", addrs(b1, b2), map[string]any{"alternativeBackends": []string{"default-wcanary-80"}}),
	}
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	payloadFile := filepath.Join(e.dir, "payload.json")
	if err := os.WriteFile(payloadFile, body, 0o644); err != nil {
		t.Fatal(err)
	}

	// Before any POST the dynamic balancer is not initialized.
	if code, _ := e.post(t, "/configuration/nothing", nil); code != 404 {
		t.Errorf("POST /configuration/nothing = %d; want 404", code)
	}
	if code, b := e.post(t, "/configuration/backends", body); code != 201 {
		t.Fatalf("POST /configuration/backends through nginx = %d %q; want 201", code, b)
	}
	resp, err := e.client.Get(fmt.Sprintf("http://127.0.0.1:%d/is-dynamic-lb-initialized", e.statusPort))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/is-dynamic-lb-initialized: %v %v; want 200", resp, err)
	}
	resp.Body.Close()
	if code, b := e.post(t, "/configuration/backends", []byte(`[{"name":"x","endpoints":[{"address":"1.2.3.4","port":"nope"}]}]`)); code != 400 {
		t.Errorf("bad payload through nginx = %d %q; want 400", code, b)
	}

	t.Run("servers POSTed through nginx reach Go and ingress-nginx's certificate dicts", func(t *testing.T) {
		body := `{"servers":{"shim.test":"uid-1","other.test":"-1"},"certificates":{"uid-1":"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}`
		if code, b := e.post(t, "/configuration/servers", []byte(body)); code != 201 {
			t.Fatalf("POST /configuration/servers = %d %q; want 201", code, b)
		}
		resp, err := e.client.Get(fmt.Sprintf("http://127.0.0.1:%d/test/certificate-uid?host=shim.test", e.statusPort))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "uid-1" {
			t.Errorf("certificate_servers[shim.test] = %q; want uid-1", b)
		}
		if code, _ := e.post(t, "/configuration/servers", []byte(`{not json`)); code != 400 {
			t.Errorf("bad servers body = %d; want 400", code)
		}
	})

	t.Run("round robin spreads evenly", func(t *testing.T) {
		counts := map[string]int{}
		for i := 0; i < 300; i++ {
			code, who, _ := e.get(t, "/rr/x")
			if code != 200 {
				t.Fatalf("request %d: %d %q", i, code, who)
			}
			counts[who]++
		}
		for _, b := range []*backend{b1, b2, b3} {
			if c := counts[b.addr]; c < 90 || c > 110 {
				t.Errorf("round robin: %v; want about 100 each", counts)
				break
			}
		}
	})

	t.Run("chash matches switchyard debug pick", func(t *testing.T) {
		for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k/l?m=n"} {
			uri := "/hash/" + k
			code, who, _ := e.get(t, uri)
			want := debugPick(t, e.bin, payloadFile, "default-hash-80", "--var", "request_uri="+uri)
			if code != 200 || who != want["peer"] {
				t.Errorf("%s: nginx sent it to %q (%d); debug pick names %v", uri, who, code, want["peer"])
			}
			// The same key again goes to the same peer.
			if _, again, _ := e.get(t, uri); again != who {
				t.Errorf("%s: %q then %q", uri, who, again)
			}
		}
	})

	t.Run("sticky sets the cookie and honours it", func(t *testing.T) {
		code, who, resp := e.get(t, "/sticky/")
		cookie := resp.Header.Get("Set-Cookie")
		if code != 200 || !strings.HasPrefix(cookie, "route=") || !strings.Contains(cookie, "; Path=/sticky/; HttpOnly") {
			t.Fatalf("first request: %d %q, Set-Cookie %q", code, who, cookie)
		}
		value := strings.SplitN(strings.TrimPrefix(cookie, "route="), ";", 2)[0]
		want := debugPick(t, e.bin, payloadFile, "default-sticky-80", "--host", "shim.test", "--location-path", "/sticky/", "--cookie", "route="+value)
		if want["peer"] != who {
			t.Errorf("cookie %q served by %s; debug pick names %v", value, who, want["peer"])
		}
		for i := 0; i < 20; i++ {
			code, again, resp := e.get(t, "/sticky/", "Cookie", "route="+value)
			if code != 200 || again != who || resp.Header.Get("Set-Cookie") != "" {
				t.Fatalf("request %d with the cookie: %d %q (want %q), Set-Cookie %q", i, code, again, who, resp.Header.Get("Set-Cookie"))
			}
		}
	})

	t.Run("canary by header, cookie and weight", func(t *testing.T) {
		for _, tc := range []struct {
			hdr    []string
			canary bool
		}{
			{nil, false},
			{[]string{"X-Canary", "always"}, true},
			{[]string{"X-Canary", "never"}, false},
			{[]string{"Cookie", "canary=always"}, true},
			{[]string{"Cookie", "canary=never"}, false},
			{[]string{"X-Canary", "never", "Cookie", "canary=always"}, false},
		} {
			for i := 0; i < 10; i++ {
				code, who, resp := e.get(t, "/canary/", tc.hdr...)
				got := who == canary.addr
				if code != 200 || got != tc.canary {
					t.Fatalf("%v: served by %s (%d); canary wanted %v", tc.hdr, who, code, tc.canary)
				}
				if alt := resp.Header.Get("X-Alternative"); tc.canary && alt != "default-canary-80" || !tc.canary && alt != "" {
					t.Fatalf("%v: $proxy_alternative_upstream_name %q", tc.hdr, alt)
				}
			}
		}
		n := 0
		const total = 600
		for i := 0; i < total; i++ {
			if _, who, _ := e.get(t, "/weighted/"); who == canary.addr {
				n++
			}
		}
		// weight 30 of 100: 180 expected; 4.5 standard deviations either way.
		if n < 130 || n > 230 {
			t.Errorf("weight 30: %d of %d requests went to the canary", n, total)
		}
	})

	t.Run("a dead endpoint is retried on another peer", func(t *testing.T) {
		for i := 0; i < 60; i++ {
			code, who, _ := e.get(t, "/dead/")
			if code != 200 || who != b1.addr {
				t.Fatalf("request %d: %d %q; want 200 from %s", i, code, who, b1.addr)
			}
		}
	})

	t.Run("a backend Go does not know answers 503", func(t *testing.T) {
		if code, _, _ := e.get(t, "/unknown/"); code != 503 {
			t.Errorf("unknown backend: %d; want 503", code)
		}
	})

	t.Run("the upstream latency summary counts every proxied request on the balancer's /metrics", func(t *testing.T) {
		// Every request the subtests above sent, by service and canary.
		// /dead/ requests mostly took several attempts ("-, 0.000"): each
		// counts once, with its last attempt's connect time. /unknown/ was
		// answered 503 without an upstream: no series.
		want := map[string]uint64{
			"default-rr-80 ": 300, "default-hash-80 ": 22, "default-sticky-80 ": 21,
			"default-main-80 ": 40, "default-main-80 default-canary-80": 20, "default-dead-80 ": 60,
		}
		var got map[string]uint64
		var weighted uint64
		// The shim flushes every 100 ms.
		err := harness.WaitUntil(context.Background(), 10*time.Second, "the summary on the balancer's /metrics", e.goProc, func(context.Context) (bool, error) {
			got, weighted = map[string]uint64{}, 0
			for _, m := range e.scrape(t)["nginx_ingress_controller_ingress_upstream_latency_seconds"].GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				if len(l) != 4 || l["ingress"] != "shim" || l["namespace"] != "default" {
					return false, fmt.Errorf("series with labels %v; want ingress, namespace, service and canary of the location", l)
				}
				s := m.GetSummary()
				var qs []float64
				for _, q := range s.GetQuantile() {
					qs = append(qs, q.GetQuantile())
				}
				if d := cmp.Diff([]float64{0.5, 0.9, 0.99}, qs); d != "" || !(s.GetSampleSum() >= 0) {
					return false, fmt.Errorf("%v: quantiles %v, sum %v; want ingress-nginx's objectives and a sum >= 0", l, qs, s.GetSampleSum())
				}
				if strings.HasPrefix(l["service"], "default-wmain-80") {
					weighted += s.GetSampleCount()
					continue
				}
				got[l["service"]+" "+l["canary"]] = s.GetSampleCount()
			}
			return cmp.Equal(want, got) && weighted == 600, nil
		})
		if err != nil {
			t.Errorf("%v\nsummary counts by service and canary (-want +got):\n%s/weighted/: %d; want 600", err, cmp.Diff(want, got), weighted)
		}
	})

	t.Run("a slow endpoint loses traffic under ewma", func(t *testing.T) {
		b3.delay.Store(int64(50 * time.Millisecond))
		defer b3.delay.Store(0)
		var slow, all, sent atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		start := time.Now()
		doneBefore, countsBefore := e.frames(t, "feedback"), e.frames(t, "counts")
		load(ctx, e, "/ewma/", 8, func(code int, who string) {
			sent.Add(1)
			if time.Since(start) > 2*time.Second { // after the scores have settled
				all.Add(1)
				if who == b3.addr {
					slow.Add(1)
				}
			}
		})
		if all.Load() == 0 || float64(slow.Load())/float64(all.Load()) > 0.10 {
			t.Errorf("ewma: the slow endpoint got %d of the last %d requests; want under 10%%", slow.Load(), all.Load())
		}
		// The timings went back summed per peer and flush, not a frame per
		// request: at most a frame per peer per worker and flush (100 ms).
		done, counts := e.frames(t, "feedback")-doneBefore, e.frames(t, "counts")-countsBefore
		t.Logf("%d requests: %v per-request feedback frames, %v counts frames", sent.Load(), done, counts)
		if done != 0 || counts == 0 || counts > 3*2*45 {
			t.Errorf("%d ewma requests sent %v per-request feedback frames and %v counts frames; want none and 1..%d", sent.Load(), done, counts, 3*2*45)
		}
		_, _, resp := e.get(t, "/ewma/")
		if s := resp.Header.Get("X-Ewma-Score"); s == "" || s == "-1" {
			t.Errorf("$balancer_ewma_score = %q; want the chosen peer's score", s)
		}
	})

	t.Run("Go killed under load: the fallback serves, picks resume after restart", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
		defer cancel()
		var failed, ok atomic.Int64
		var mu sync.Mutex
		var firstErr string
		done := make(chan struct{})
		go func() {
			defer close(done)
			load(ctx, e, "/rr/", 8, func(code int, who string) {
				if code == 200 {
					ok.Add(1)
					return
				}
				failed.Add(1)
				mu.Lock()
				if firstErr == "" {
					firstErr = fmt.Sprintf("%d %s", code, who)
				}
				mu.Unlock()
			})
		}()
		time.Sleep(1 * time.Second)
		if err := syscall.Kill(-e.goProc.Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-e.goProc.Exited()
		_ = e.goProc.Stop() // reports the SIGKILL we sent; marks it stopped
		time.Sleep(1500 * time.Millisecond)
		during := ok.Load()
		e.startGo()
		<-done
		if failed.Load() != 0 || ok.Load() == 0 {
			t.Errorf("%d requests failed (first: %s), %d succeeded", failed.Load(), firstErr, ok.Load())
		}
		if during == 0 {
			t.Errorf("no request succeeded")
		}
		// Picks come from Go again: chash needs Go (the fallback is round
		// robin), so the same URI always lands on the same peer.
		harness.WaitFor(t, testTimeout, "the shim reconnected", nil, func(context.Context) (bool, error) {
			want := debugPick(t, e.bin, payloadFile, "default-hash-80", "--var", "request_uri=/hash/resume")["peer"]
			for i := 0; i < 6; i++ {
				if _, who, _ := e.get(t, "/hash/resume"); who != want {
					return false, nil
				}
			}
			return true, nil
		})
	})

	t.Run("nginx reload under load: no failed request, EWMA scores kept", func(t *testing.T) {
		// Teach ewma that b3 is slow, then check the new workers still
		// avoid it: fresh scores would give it a third of the traffic.
		b3.delay.Store(int64(30 * time.Millisecond))
		defer b3.delay.Store(0)
		harness.WaitFor(t, testTimeout, "ewma has scored the slow peer", nil, func(context.Context) (bool, error) {
			_, who, _ := e.get(t, "/ewma/")
			return who == b3.addr, nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		var failed, ok atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			load(ctx, e, "/rr/", 8, func(code int, _ string) {
				if code == 200 {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			})
		}()
		time.Sleep(time.Second)
		if out, err := exec.Command(e.nginxBinary, "-p", e.dir, "-c", filepath.Join(e.dir, "nginx.conf"), "-s", "reload").CombinedOutput(); err != nil {
			t.Fatalf("nginx -s reload: %v %s", err, out)
		}
		<-done
		if failed.Load() != 0 || ok.Load() == 0 {
			t.Errorf("across the reload: %d failed, %d succeeded", failed.Load(), ok.Load())
		}
		slow := 0
		for i := 0; i < 30; i++ {
			if _, who, _ := e.get(t, "/ewma/"); who == b3.addr {
				slow++
			}
		}
		if slow > 3 {
			t.Errorf("after the reload the slow peer got %d of 30 ewma requests; its score was lost", slow)
		}
	})
}

// scrape returns the metric families on the balancer's /metrics.
func (e *env) scrape(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := e.client.Get("http://" + e.metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// load runs conc clients against path until ctx ends, reporting each
// response (code 0 for a transport error).
func load(ctx context.Context, e *env, path string, conc int, report func(code int, who string)) {
	var wg sync.WaitGroup
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequest("GET", "http://"+e.listen+path, nil)
				req.Host = "shim.test"
				resp, err := e.client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						report(0, err.Error())
					}
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				report(resp.StatusCode, string(b))
			}
		}()
	}
	wg.Wait()
}

// debugPick runs `switchyard debug pick` on the payload and returns its
// JSON answer.
func debugPick(t *testing.T, bin, payload, backend string, args ...string) map[string]any {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"debug", "pick", "--backends", payload, "--backend", backend}, args...)...).Output()
	if err != nil {
		t.Fatalf("switchyard debug pick: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("debug pick output %q: %v", out, err)
	}
	return m
}
