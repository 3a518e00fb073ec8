package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5" // #nosec G501 -- RFC 2617's algorithm
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/basicauth"
	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/proxy"
)

// startWorkersController runs the controller with --go-workers=2 on yaml
// (a manifests directory of one file) and returns the workers.
func startWorkersController(t *testing.T, yaml string, accessLog io.Writer) (context.Context, listening, *goWorkers) {
	t.Helper()
	// The quickstart's IngressClass (and demo app, whose backends are
	// not started) with yaml beside it.
	dir := quickstartDir(t, freePort(t), freePort(t))
	if err := os.WriteFile(filepath.Join(dir, "10-workers.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan *goWorkers, 1)
	testHookGoWorkers = func(g *goWorkers) { got <- g }
	t.Cleanup(func() { testHookGoWorkers = nil })
	ctx, l := startControllerLogging(t, []string{"--manifests", dir, "--go-workers", "2",
		"--http-port", strconv.Itoa(freePort(t)), "--https-port", strconv.Itoa(freePort(t)), "--status-port", strconv.Itoa(freePort(t)), "--listen-address", "127.0.0.1"}, accessLog)
	return ctx, l, <-got
}

// get sends GET host/path on a connection of its own.
func getFresh(t *testing.T, addr, host, path string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(string(b), "\r\n\r\n")
	f := strings.Fields(head)
	if len(f) < 2 {
		t.Fatalf("no status line in %q", b)
	}
	code, _ := strconv.Atoi(f[1])
	return code, body
}

// workerRequests is the nginx_ingress_controller_requests total one worker
// counted.
func workerRequests(t *testing.T, g *goWorkers, p *workerProc) float64 {
	t.Helper()
	b, _, err := g.scrape(p)
	if err != nil {
		t.Fatalf("scrape worker %d: %v", p.index, err)
	}
	dec := expfmt.NewDecoder(bytes.NewReader(b), expfmt.NewFormat(expfmt.TypeProtoDelim))
	total := 0.0
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				return total
			}
			t.Fatal(err)
		}
		if mf.GetName() == "nginx_ingress_controller_requests" {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
}

// scrapeTotal is the sum of a family's samples on the status port's
// /metrics (counters: their values).
func scrapeTotal(t *testing.T, status, family string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + status + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, family+"{") && !strings.HasPrefix(line, family+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		total += v
	}
	return total
}

// TestGoWorkersServe runs two workers and checks that both serve, that
// /metrics sums them, that the access log has every line whole, and that a
// killed worker is replaced while the other serves.
func TestGoWorkersServe(t *testing.T) {
	port := freePort(t)
	srv, err := startEchoBackend("app", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	var log syncBuffer
	_, l, g := startWorkersController(t, localBackendYAML("app", "app.example", port, "", ""), &log)

	// 40 connections: all on one worker by chance once in 2^39 runs.
	const n = 40
	for i := range n {
		code, body := getFresh(t, l.HTTP, "app.example", "/r/"+strconv.Itoa(i))
		if code != 200 || body != "app: GET /r/"+strconv.Itoa(i)+"\n" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	// Each worker served some: the kernel spread the connections.
	var sum float64
	for _, p := range g.procs {
		r := workerRequests(t, g, p)
		if r == 0 {
			t.Errorf("worker %d served nothing of %d connections", p.index, n)
		}
		sum += r
	}
	if sum != n {
		t.Errorf("workers counted %v requests, want %d", sum, n)
	}
	if got := scrapeTotal(t, l.Status, "nginx_ingress_controller_requests"); got != n {
		t.Errorf("/metrics: nginx_ingress_controller_requests sums to %v, want %d", got, n)
	}
	// The process metrics count the controller and its two workers.
	if got := scrapeTotal(t, l.Status, "nginx_ingress_controller_nginx_process_num_procs"); got != 3 {
		t.Errorf("nginx_process_num_procs: %v, want 3 (the controller and two workers)", got)
	}
	// The access log: one whole line per request, from both workers.
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(log.String(), "\n") < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d access log lines, want %d", len(lines), n)
	}
	seen := map[string]bool{}
	for _, line := range lines {
		i := strings.Index(line, `"GET /r/`)
		if i < 0 || !strings.Contains(line[i:], ` HTTP/1.1" 200 `) {
			t.Fatalf("access log line not whole: %q", line)
		}
		seen[strings.Fields(line[i:])[1]] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct requests logged, want %d", len(seen), n)
	}

	// Kill a worker: the other serves at once, and one takes its place.
	victim := g.procs[0]
	pid := int(victim.pid.Load())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if code, _ := getFresh(t, l.HTTP, "app.example", "/after-kill"); code != 200 {
			t.Fatalf("request %d after the kill: %d", i, code)
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for (int(victim.pid.Load()) == pid || g.ready() != nil) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := g.ready(); err != nil || int(victim.pid.Load()) == pid {
		t.Fatalf("the killed worker was not replaced: %v", err)
	}
	before := workerRequests(t, g, victim)
	for range 40 {
		if code, _ := getFresh(t, l.HTTP, "app.example", "/replaced"); code != 200 {
			t.Fatal(code)
		}
	}
	if workerRequests(t, g, victim) == before {
		t.Error("the replacement worker served none of 40 connections")
	}
	// The killed worker's requests stay counted: /metrics reads no reset.
	if got := scrapeTotal(t, l.Status, "nginx_ingress_controller_requests"); got != n+20+40 {
		t.Errorf("/metrics after the replacement: nginx_ingress_controller_requests sums to %v, want %d", got, n+20+40)
	}
}

// TestGoWorkersShareLimits checks that limit-rps counts a client once
// across the workers, as nginx's shared zone does: with burst 5 (rps 1 ×
// the default burst multiplier 5), six requests in quick succession pass
// and the rest are refused, whichever worker serves each.
func TestGoWorkersShareLimits(t *testing.T) {
	// The backend holds /hold's answer until release closes.
	release := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		_, _ = io.WriteString(w, "ok\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	yaml := localBackendYAML("limited", "limited.example", port, `{nginx.ingress.kubernetes.io/limit-rps: "1"}`, "") +
		localBackendYAML("conns", "conns.example", port, `{nginx.ingress.kubernetes.io/limit-connections: "1"}`, "")
	_, l, g := startWorkersController(t, yaml, nil)

	passed := 0
	start := time.Now()
	for range 30 {
		if code, _ := getFresh(t, l.HTTP, "limited.example", "/"); code == 200 {
			passed++
		} else if code != 503 {
			t.Fatalf("status %d", code)
		}
	}
	// One more request drains per second that passes.
	if want := 6 + int(time.Since(start)/time.Second); passed < 6 || passed > want {
		t.Errorf("%d of 30 requests passed limit-rps 1 (burst 5) in %v; want 6 to %d", passed, time.Since(start), want)
	}
	for _, p := range g.procs {
		if workerRequests(t, g, p) == 0 {
			t.Errorf("worker %d served none of the 30: the test proves nothing", p.index)
		}
	}

	// limit-connections 1: while one request is held open on one
	// worker, a request reaching the other is refused.
	hold, err := net.Dial("tcp", l.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	fmt.Fprintf(hold, "GET /hold HTTP/1.1\r\nHost: conns.example\r\n\r\n")
	time.Sleep(200 * time.Millisecond)
	refused := 0
	for range 20 {
		if code, _ := getFresh(t, l.HTTP, "conns.example", "/"); code == 503 {
			refused++
		}
	}
	if refused != 20 {
		t.Errorf("%d of 20 requests refused while another is in progress, want all (limit-connections 1)", refused)
	}
	close(release) // before the workers stop: they drain what is in progress
}

// TestGoWorkersResumeTLS checks that a client resumes its TLS session on
// any worker: they share the session ticket keys.
func TestGoWorkersResumeTLS(t *testing.T) {
	_, l, _ := startWorkersController(t, localBackendYAML("app", "app.example", freePort(t), "", ""), nil)
	cfg := &tls.Config{InsecureSkipVerify: true, ServerName: "app.example", //nolint:gosec // the fake certificate
		ClientSessionCache: tls.NewLRUClientSessionCache(8)}
	resumed := 0
	for i := range 40 {
		c, err := tls.Dial("tcp", l.HTTPS, cfg)
		if err != nil {
			t.Fatal(err)
		}
		// TLS 1.3 tickets arrive after the handshake: read until the
		// server answers.
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
		_, _ = io.ReadAll(c)
		if c.ConnectionState().DidResume {
			resumed++
		} else if i > 0 {
			t.Errorf("connection %d did not resume", i)
		}
		c.Close()
	}
	if resumed != 39 {
		t.Errorf("%d of 39 connections resumed", resumed)
	}
}

// TestWorkerFrames checks the control socket's frames: a configuration
// the worker cannot read whole, or keys of the wrong size, are errors.
// (controlplane/builder's TestConfigurationJSONRoundTrip checks that JSON
// carries every field.)
func TestWorkerFrames(t *testing.T) {
	if _, err := encodeWorkerConfig(&workerConfig{Version: 3}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{``, `{}`, `{"version":1}`, `{"version":0,"config":{}}`, `{"version":1,"config":{},"change":{"Backends":[0]}}`, `[`} {
		if _, err := decodeWorkerConfig([]byte(bad)); err == nil {
			t.Errorf("%q: decoded", bad)
		}
	}
	// Password hashes travel beside the JSON, which never carries them,
	// and come back checked against the digest it does carry.
	basic, err := basicauth.Parse([]byte("alice:{PLAIN}s3cret\n"))
	if err != nil {
		t.Fatal(err)
	}
	digest, err := digestauth.Parse([]byte("bob:Staff:" + md5Hex("bob:Staff:hunter2") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &model.Configuration{Servers: []model.Server{{Hostname: "a.example", Locations: []model.Location{
		{Path: "/", LocationSettings: &model.LocationSettings{BasicAuth: &model.BasicAuth{Realm: "r", Credentials: basic}}},
		{Path: "/d", LocationSettings: &model.LocationSettings{DigestAuth: &model.DigestAuth{Realm: "Staff", Credentials: digest}}},
	}}}}
	frame, err := encodeWorkerConfig(&workerConfig{Version: 1, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeWorkerConfig(frame[5:])
	if err != nil {
		t.Fatal(err)
	}
	locs := back.Config.Servers[0].Locations
	if !locs[0].Settings().BasicAuth.Credentials.Verify("alice", "s3cret") || locs[0].Settings().BasicAuth.Credentials.Verify("alice", "x") {
		t.Error("basic credentials did not come back")
	}
	if got := locs[1].Settings().DigestAuth.Credentials; got.Digest() != digest.Digest() || got.Users() != 1 {
		t.Errorf("digest credentials did not come back: %d users", got.Users())
	}
	if len(back.Credentials) != 2 {
		t.Errorf("%d credential files, want 2", len(back.Credentials))
	}
	for key := range back.Credentials {
		bad := *back
		bad.Credentials = maps.Clone(back.Credentials)
		bad.Credentials[key] = []byte("alice:{PLAIN}0pen\n")
		js, _ := json.Marshal(&bad)
		if _, err := decodeWorkerConfig(js); err == nil {
			t.Errorf("%s: credentials that do not match their digest were read", key)
		}
		delete(bad.Credentials, key)
		js, _ = json.Marshal(&bad)
		if _, err := decodeWorkerConfig(js); err == nil {
			t.Errorf("%s: missing credentials were not noticed", key)
		}
	}

	if _, err := decodeTicketKeys(make([]byte, 33)); err == nil {
		t.Error("33 bytes of keys decoded")
	}
	keys, err := decodeTicketKeys(encodeTicketKeys([][32]byte{{1}, {2}})[5:])
	if err != nil || len(keys) != 2 || keys[1][0] != 2 {
		t.Errorf("keys: %v %v", keys, err)
	}
}

// TestGoWorkersShareDigest checks auth-type: digest across workers: a
// nonce one worker issues is good on the other, as nginx's workers share
// the module's zone. Each challenge and answer go on connections of their
// own, so about half the logins cross workers.
func TestGoWorkersShareDigest(t *testing.T) {
	port := freePort(t)
	srv, err := startEchoBackend("app", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ha1 := md5Hex("alice:Staff only:s3cret")
	yaml := localBackendYAML("digest", "digest.example", port,
		`{nginx.ingress.kubernetes.io/auth-type: digest, nginx.ingress.kubernetes.io/auth-secret: users, nginx.ingress.kubernetes.io/auth-realm: "Staff only"}`, "") +
		"---\napiVersion: v1\nkind: Secret\nmetadata: {name: users, namespace: demo}\nstringData:\n  auth: |\n    alice:Staff only:" + ha1 + "\n"
	_, l, _ := startWorkersController(t, yaml, nil)
	nonceRE := regexp.MustCompile(`nonce="([0-9a-f]{16})"`)
	for i := range 12 {
		req, _ := http.NewRequest(http.MethodGet, "http://"+l.HTTP+"/x", nil)
		req.Host = "digest.example"
		req.Close = true // every request on a connection of its own
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		m := nonceRE.FindStringSubmatch(resp.Header.Get("WWW-Authenticate"))
		if resp.StatusCode != 401 || m == nil {
			t.Fatalf("login %d: no challenge: %d %q", i, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		answer := md5Hex(ha1 + ":" + m[1] + ":00000001:0a4f113b:auth:" + md5Hex("GET:/x"))
		req, _ = http.NewRequest(http.MethodGet, "http://"+l.HTTP+"/x", nil)
		req.Host = "digest.example"
		req.Close = true
		req.Header.Set("Authorization", fmt.Sprintf(`Digest username="alice", realm="Staff only", nonce="%s", uri="/x", qop=auth, nc=00000001, cnonce="0a4f113b", response="%s"`, m[1], answer))
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("login %d: the answer got %d %q", i, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s)) // #nosec G401 -- RFC 2617's algorithm
	return hex.EncodeToString(sum[:])
}

// TestWorkerLoopKeepsServingOnBadConfig checks that a worker which cannot
// read a configuration keeps the one before and goes on answering.
func TestWorkerLoopKeepsServingOnBadConfig(t *testing.T) {
	reg := balancer.NewRegistry(balancer.Config{})
	px, err := proxy.New(proxy.Config{Picker: reg})
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := net.Pipe()
	defer ours.Close()
	started := 0
	w := &workerLoop{control: theirs, reg: reg, px: px, pp: &proxyProtocolListeners{}, registry: prometheus.NewRegistry(),
		start: func() { started++ }}
	done := make(chan error, 1)
	go func() { done <- w.run(context.Background()) }()
	good, err := encodeWorkerConfig(&workerConfig{Version: 1, Config: &model.Configuration{Backends: []*model.Backend{{Name: "b"}}}})
	if err != nil {
		t.Fatal(err)
	}
	bad := appendFrame(nil, frameConfig, []byte(`{"version":2,"config":{"backends":[]},"change":{"Backends":[3]}}`))
	scrape := appendFrame(nil, frameScrape, binary.BigEndian.AppendUint64(nil, 7))
	go func() {
		for _, f := range [][]byte{good, bad, appendFrame(nil, frameKeys, []byte{1, 2, 3}), scrape} {
			if _, err := ours.Write(f); err != nil {
				return
			}
		}
	}()
	r := bufio.NewReader(ours)
	typ, p, err := readFrame(r, nil)
	if err != nil || typ != frameApplied || binary.BigEndian.Uint64(p) != 1 {
		t.Fatalf("first answer: %q %v %v", typ, p, err)
	}
	// The bad configuration and keys get no answer; the scrape does.
	typ, p, err = readFrame(r, nil)
	if err != nil || typ != frameMetrics || binary.BigEndian.Uint64(p) != 7 {
		t.Fatalf("second answer: %q %v", typ, err)
	}
	if started != 1 {
		t.Errorf("started %d times", started)
	}
	ours.Close()
	if err := <-done; !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("run: %v", err)
	}
}
