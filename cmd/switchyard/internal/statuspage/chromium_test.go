package statuspage

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chromium returns the path of Debian's chromium, failing the test under CI
// when it is missing (test/setup.sh installs it) and skipping loudly
// elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; test/setup.sh installs it")
		}
		t.Skip("SKIPPING: chromium is not installed (apt-get install chromium)")
	}
	return path
}

// runChromium runs headless Chromium with the flags that work on these
// machines (no network besides loopback) and returns its stdout.
func runChromium(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000",
	}
	cmd := exec.CommandContext(ctx, chromium(t), append(base, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v", args, err)
	}
	return string(out)
}

// serve starts h on a loopback port and returns its URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/"
}

// TestPageRendersInChromium loads the page in a real headless Chromium and
// checks the DOM its script built: backends, endpoints, servers, events and
// errors are shown, and cluster-supplied text is never interpreted as HTML.
func TestPageRendersInChromium(t *testing.T) {
	hist := &History{}
	hist.Record(Event{Time: time.Now(), Kind: "reload", Reason: "server demo.example.com added", Duration: 35 * time.Millisecond})
	h := New(Config{History: hist, Snapshot: func() Snapshot {
		return Snapshot{
			Version: 42, Ready: true,
			Servers: []Server{{Host: "demo.example.com", TLS: true, Paths: []Path{{Path: "/api", PathType: "Prefix", Backend: "demo-api-80"}}}},
			Backends: []Backend{{
				Name: "demo-api-80", Algorithm: "ewma", Alternatives: []string{"demo-api-canary-80"},
				Endpoints: []Endpoint{
					{Address: "10.0.0.1:8080", Picks: 1200, InFlight: 3, EWMA: 0.0042},
					{Address: "10.0.0.2:8080", Picks: 1100, Failures: 2, EWMA: 0.0051},
				},
			}},
			Errors: []ObjError{{Object: "Ingress demo/bad", Field: "nginx.ingress.kubernetes.io/proxy-body-size", Message: `invalid size "<img src=x onerror=alert(1)>"`}},
		}
	}})
	url := serve(t, h)

	dom := runChromium(t, "--dump-dom", url)
	for _, want := range []string{
		"demo-api-80", "10.0.0.1:8080", "10.0.0.2:8080", "ewma", "demo.example.com", "/api",
		"canary: demo-api-canary-80", "server demo.example.com added", "4.20", ">ready<", ">42<",
		"&lt;img src=x onerror=alert(1)&gt;",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %q", want)
		}
	}
	if strings.Contains(dom, "<img src=x") {
		t.Error("cluster-supplied text was rendered as HTML")
	}

	// A screenshot for the docs, refreshed on every run.
	shot := filepath.Join(t.TempDir(), "status-page.png")
	runChromium(t, "--window-size=1280,800", "--screenshot="+shot, url)
	st, err := os.Stat(shot)
	if err != nil || st.Size() < 1000 {
		t.Fatalf("screenshot not written: %v", err)
	}
	if dst := os.Getenv("SWITCHYARD_SCREENSHOT_DIR"); dst != "" {
		data, _ := os.ReadFile(shot)
		if err := os.WriteFile(filepath.Join(dst, "status-page.png"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
