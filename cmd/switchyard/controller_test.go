package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

const defaultTestTimeout = 30 * time.Second

// freePort is harness.FreePort on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	return harness.FreePort(t, "127.0.0.1")
}

// quickstartDir copies deploy/quickstart with the backends moved to the given
// ports, so the test runs beside a real quickstart.
func quickstartDir(t *testing.T, port1, port2 int) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("../../deploy/quickstart/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("quickstart manifests: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(data), "18081", strconv.Itoa(port1))
		s = strings.ReplaceAll(s, "18082", strconv.Itoa(port2))
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startQuickstartController runs two echo backends and the controller as
// the quickstart does (manifests, Go data plane) on free loopback ports, and
// stops it at the end of the test. It returns a context that ends with the
// test, the bound addresses and the backends' ports.
func startQuickstartController(t *testing.T) (ctx context.Context, l listening, p1, p2 int) {
	t.Helper()
	p1, p2 = freePort(t), freePort(t)
	for i, p := range []int{p1, p2} {
		srv, err := startEchoBackend(fmt.Sprintf("backend-%d", i+1), "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
	}
	ctx, l = startController(t, []string{"--manifests", quickstartDir(t, p1, p2), "--http-port", strconv.Itoa(freePort(t)), "--https-port", strconv.Itoa(freePort(t)),
		"--status-port", strconv.Itoa(freePort(t)), "--listen-address", "127.0.0.1"})
	return ctx, l, p1, p2
}

// localBackendYAML is a selector-less Service name in namespace demo, its
// EndpointSlice naming 127.0.0.1:port, and an Ingress routing host/ to it.
// annotations ("" for none) is the Ingress's annotations as a YAML flow map;
// tls ("" for none) is its spec.tls as a YAML flow sequence.
func localBackendYAML(name, host string, port int, annotations, tls string) string {
	meta := ""
	if annotations != "" {
		meta = "\n  annotations: " + annotations
	}
	spec := ""
	if tls != "" {
		spec = "\n  tls: " + tls
	}
	return "---\n" + harness.ServiceYAML("demo", name, port, "127.0.0.1") + fmt.Sprintf(`---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: %[1]s
  namespace: demo%[3]s
spec:
  ingressClassName: switchyard%[4]s
  rules:
  - host: %[2]s
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: %[1]s, port: {name: http}}}}
`, name, host, meta, spec)
}

// startController runs serveController with args until the end of the test
// and returns once the first configuration is served, with a context that
// ends with the test (defaultTestTimeout at most) and the bound addresses.
func startController(t *testing.T, args []string) (context.Context, listening) {
	t.Helper()
	return startControllerLogging(t, args, nil)
}

// startControllerLogging is startController with the Go plane's access log
// written to accessLog (nil: none).
func startControllerLogging(t *testing.T, args []string, accessLog io.Writer) (context.Context, listening) {
	t.Helper()
	opts, err := parseControllerFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	opts.AccessLog = accessLog
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- serveController(ctx, opts, ready) }()
	var l listening
	select {
	case l = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("controller stopped: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	return ctx, l
}

// TestControllerServesQuickstart runs the controller exactly as the
// quickstart does (manifests, Go data plane) and checks the README's curl
// lines, the status port, and the status page in headless Chromium.
func TestControllerServesQuickstart(t *testing.T) {
	ctx, l, p1, p2 := startQuickstartController(t)

	get := func(host string, hdr ...string) (string, http.Header) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.HTTP+"/", nil)
		req.Host = host
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b)), resp.Header
	}
	// Round robin alternates.
	var seq []string
	for range 4 {
		body, _ := get("echo.localhost")
		seq = append(seq, strings.SplitN(body, ":", 2)[0])
	}
	if seq[0] == seq[1] || seq[0] != seq[2] || seq[1] != seq[3] {
		t.Errorf("round robin sequence %v does not alternate", seq)
	}
	// Canary by header.
	for range 3 {
		if body, _ := get("echo.localhost", "X-Canary", "always"); !strings.HasPrefix(body, "backend-2:") {
			t.Errorf("canary answered %q", body)
		}
	}
	// Sticky cookie.
	body, h := get("sticky.localhost")
	cookie := h.Get("Set-Cookie")
	if !strings.HasPrefix(cookie, "INGRESSCOOKIE=") || !strings.Contains(cookie, "Max-Age=3600") {
		t.Fatalf("Set-Cookie = %q", cookie)
	}
	for range 5 {
		again, h2 := get("sticky.localhost", "Cookie", strings.SplitN(cookie, ";", 2)[0])
		if again != body || h2.Get("Set-Cookie") != "" {
			t.Errorf("sticky answered %q (cookie %q); want %q", again, h2.Get("Set-Cookie"), body)
		}
	}
	if body, _ := get("nothing.localhost"); body != "default backend - 404" {
		t.Errorf("unknown host answered %q", body)
	}

	// Status port.
	status := func(path string) string {
		resp, err := http.Get("http://" + l.Status + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
		return string(b)
	}
	status("/healthz")
	status("/readyz")
	metrics := withoutControllerLabels(status("/metrics"))
	for _, want := range []string{
		"nginx_ingress_controller_config_last_reload_successful 1",
		`nginx_ingress_controller_success{kind="structural"} 1`,
		"nginx_ingress_controller_errors 0",
		fmt.Sprintf(`switchyard_balancer_endpoint_requests_total{backend="demo-echo-http",endpoint="127.0.0.1:%d"} 2`, p1),
		`nginx_ingress_controller_requests{canary="",host="echo.localhost",ingress="echo",method="GET",namespace="demo",path="/",service="echo",status="200"} 4`,
		`nginx_ingress_controller_requests{canary="",host="",ingress="",method="GET",namespace="",path="",service="",status="404"} 1`,
		`nginx_ingress_controller_requests{canary="demo-echo-canary-http",host="echo.localhost",ingress="echo",method="GET",namespace="demo",path="/",service="echo",status="200"} 3`,
		`nginx_ingress_controller_ingress_upstream_latency_seconds_count{canary="",ingress="echo",namespace="demo",service="echo"} 4`,
		`nginx_ingress_controller_ingress_upstream_latency_seconds_count{canary="demo-echo-canary-http",ingress="echo",namespace="demo",service="echo"} 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q; has:\n%s", want, grepLines(metrics, "nginx_ingress_controller_requests"))
		}
	}

	// The status page in headless Chromium shows the live backends.
	if path, err := exec.LookPath("chromium"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; test/setup.sh installs it")
		}
		t.Log("SKIPPING the Chromium part: chromium is not installed")
	} else {
		args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000"}
		out, err := exec.CommandContext(ctx, path, append(args, "--dump-dom", "http://"+l.Status+"/")...).Output()
		if err != nil {
			t.Fatalf("chromium: %v", err)
		}
		dom := string(out)
		for _, want := range []string{"demo-echo-http", "sticky_balanced", fmt.Sprintf("127.0.0.1:%d", p2), "echo.localhost", ">ready<"} {
			if !strings.Contains(dom, want) {
				t.Errorf("status page DOM lacks %q", want)
			}
		}
		if dst := os.Getenv("SWITCHYARD_SCREENSHOT_DIR"); dst != "" {
			shot := filepath.Join(dst, "status-page.png")
			if err := exec.CommandContext(ctx, path, append(args, "--window-size=1280,800", "--screenshot="+shot, "http://"+l.Status+"/")...).Run(); err != nil {
				t.Errorf("screenshot: %v", err)
			}
		}
	}

}

// controllerLabelsRE matches ingress-nginx's constant labels, which every
// Switchyard metric but go_* and process_* carries (metrics_ingress.go).
var controllerLabelsRE = regexp.MustCompile(`controller_class="[^"]*",controller_namespace="[^"]*",controller_pod="[^"]*"`)

// withoutControllerLabels removes the constant labels from a scrape, so
// tests can match samples by the labels they are about.
func withoutControllerLabels(s string) string {
	s = controllerLabelsRE.ReplaceAllString(s, "")
	s = strings.NewReplacer("{,", "{", ",}", "}", ",,", ",").Replace(s)
	return strings.ReplaceAll(s, "{}", "")
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// syncBuffer is a bytes.Buffer safe for the access log's writer goroutine
// and the test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// accessLine is ingress-nginx's default log-format-upstream line, as the
// Go plane writes it for a request proxied to the quickstart's echo backend.
var accessLine = regexp.MustCompile(`^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "GET /x\?y=1 HTTP/1\.1" 200 \d+ "-" "[^"]+" \d+ \d+\.\d{3} \[demo-echo-[^\]]+\] \[\] 127\.0\.0\.1:\d+ \d+ \d+\.\d{3} 200 [0-9a-f]{32}$`)

// TestControllerAccessLog: the product's Go plane writes ingress-nginx's
// access log line for every request (to standard output when run as a
// command), through the buffered LogWriter.
func TestControllerAccessLog(t *testing.T) {
	p1, p2 := freePort(t), freePort(t)
	for i, p := range []int{p1, p2} {
		srv, err := startEchoBackend(fmt.Sprintf("backend-%d", i+1), "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
	}
	var log syncBuffer
	ctx, l := startControllerLogging(t, []string{"--manifests", quickstartDir(t, p1, p2), "--http-port", strconv.Itoa(freePort(t)),
		"--https-port", strconv.Itoa(freePort(t)), "--status-port", strconv.Itoa(freePort(t)), "--listen-address", "127.0.0.1"}, &log)
	for range 3 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.HTTP+"/x?y=1", nil)
		req.Host = "echo.localhost"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(log.String(), "\n") < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("access log has %d lines; want 3:\n%s", len(lines), log.String())
	}
	for _, line := range lines {
		if !accessLine.MatchString(line) {
			t.Errorf("access log line %q is not ingress-nginx's upstreaminfo format", line)
		}
	}
}
