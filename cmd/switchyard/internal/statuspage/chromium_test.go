package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	hist.Record(Event{Time: time.Now().Add(-8 * time.Second), Kind: "sync", Reason: "version 41: servers or locations changed", Duration: 4 * time.Millisecond})
	hist.Record(Event{Time: time.Now(), Kind: "reload", Reason: "server demo.example.com added", Duration: 35 * time.Millisecond})
	h := New(Config{History: hist, Snapshot: func() Snapshot {
		return Snapshot{
			Version: 42, Ready: true,
			Servers: []Server{{Host: "demo.example.com", TLS: true, Paths: []Path{
				{Path: "/api", PathType: "Prefix", Backend: "demo-api-80", Ingress: "Ingress demo/api"},
				{Path: "/admin", PathType: "Prefix", Backend: "demo-admin-80", Ingress: "Ingress demo/admin", Denied: "nginx.ingress.kubernetes.io/limit-whitelist"},
			}}},
			Backends: []Backend{{
				Name: "demo-api-80", Algorithm: "ewma", Alternatives: []string{"demo-api-canary-80"},
				Endpoints: []Endpoint{
					{Address: "10.0.0.1:8080", Picks: 1200, InFlight: 3, EWMA: 0.0042},
					{Address: "10.0.0.2:8080", Picks: 1100, Failures: 2, EWMA: 0.0051},
				},
			}},
			Errors: []ObjError{
				{Object: "Ingress demo/bad", Reason: ReasonInvalid, Field: "nginx.ingress.kubernetes.io/proxy-body-size", Message: `invalid size "<img src=x onerror=alert(1)>"`},
				{Object: "Ingress demo/admin", Reason: ReasonFailedClosed, Field: "nginx.ingress.kubernetes.io/limit-whitelist",
					Message: "access control Switchyard does not support yet; every path of this Ingress answers 503 rather than serve unprotected (fail closed)"},
				{Object: "Ingress demo/api", Reason: ReasonUnsupported, Field: "nginx.ingress.kubernetes.io/mirror-target",
					Message: "not supported by Switchyard; ignored (see docs/migrating-from-ingress-nginx.md)"},
			},
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

// probeScript runs in the page once it has rendered and writes what the
// tests check into <pre id="probe"> as JSON: the viewport and document
// widths, the tables wider than their section, the times shown, and the
// problems table as text.
const probeScript = `<script>
"use strict";
(function probe() {
  if (document.getElementById("version").textContent === "-") { setTimeout(probe, 20); return; }
  // A cell as text: its text, then each pill in it, joined by " | ".
  const cellText = c => {
    const pills = Array.from(c.querySelectorAll(".pill"), p => p.textContent.trim());
    const rest = Array.from(c.childNodes).filter(n => !(n.classList && n.classList.contains("pill")));
    return [rest.map(n => n.textContent).join("").trim(), ...pills].filter(s => s).join(" | ");
  };
  const byID = id => { const e = document.getElementById(id); return e ? e.textContent : "no #" + id; };
  const out = {
    innerWidth: window.innerWidth,
    clientWidth: document.documentElement.clientWidth,
    scrollWidth: document.documentElement.scrollWidth,
    overflowing: [],
    generated: byID("generated"),
    lastSync: byID("lastsync"),
    eventTimes: Array.from(document.querySelectorAll("#events tbody tr"), tr => tr.cells[0].textContent),
    problems: Array.from(document.querySelectorAll("#problems tbody"), tb => Array.from(tb.rows, tr => Array.from(tr.cells, cellText))),
  };
  for (const t of document.querySelectorAll("table")) {
    const sec = t.closest("section");
    const box = sec.getBoundingClientRect(), r = t.getBoundingClientRect();
    const right = box.right - parseFloat(getComputedStyle(sec).paddingRight);
    if (r.right > right + 0.5) out.overflowing.push(t.id + " ends at " + r.right + " px, its section's content at " + right + " px");
  }
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>`

// probeResult is what probeScript reports.
type probeResult struct {
	InnerWidth  int          `json:"innerWidth"`
	ClientWidth int          `json:"clientWidth"`
	ScrollWidth int          `json:"scrollWidth"`
	Overflowing []string     `json:"overflowing"`
	Generated   string       `json:"generated"`
	LastSync    string       `json:"lastSync"`
	EventTimes  []string     `json:"eventTimes"`
	Problems    [][][]string `json:"problems"`
}

var probeRE = regexp.MustCompile(`(?s)<pre id="probe">(.*?)</pre>`)

// probe serves h with probeScript added to its page, loads the page in
// headless Chromium with a window of width×height and returns the report.
func probe(t *testing.T, h http.Handler, width, height int) probeResult {
	t.Helper()
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		page := rec.Body.String()
		if !strings.Contains(page, "</body>") {
			t.Errorf("page has no </body> to put the probe before")
		}
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		_, _ = io.WriteString(w, strings.Replace(page, "</body>", probeScript+"</body>", 1))
	}))
	dom := runChromium(t, fmt.Sprintf("--window-size=%d,%d", width, height), "--dump-dom", url)
	m := probeRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the probe did not report: the page never rendered. DOM:\n%.3000s", dom)
	}
	var res probeResult
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &res); err != nil {
		t.Fatalf("probe report %q: %v", m[1], err)
	}
	if res.InnerWidth != width {
		t.Fatalf("window is %d px wide; want %d (--window-size not applied)", res.InnerWidth, width)
	}
	return res
}

// A message as long as the builder writes for a fail-closed list, with an
// unbroken token (a URL) longer than a phone screen.
const longMessage = `invalid value "https://auth.internal.example.com/oauth2/v1/authorize/verify/session/with/a/very/long/path/that/never/breaks/at/a/space/0123456789abcdef0123456789abcdef": the external authentication service cannot be reached over this scheme, so every path of this Ingress answers 503 until it is fixed (fail closed); see docs/migrating-from-ingress-nginx.md for the annotations Switchyard carries out and the ones it refuses`

// troubled is a snapshot with the problems an operator looks for: an
// Ingress with fail-closed and ignored annotations and the routes they deny,
// an Ingress with only an ignored one, a ConfigMap with an invalid key, and
// long names everywhere.
func troubled() Snapshot {
	const authURL = "nginx.ingress.kubernetes.io/auth-url"
	return Snapshot{
		Version: 9, Ready: true,
		Servers: []Server{
			{Host: "shop.example.com", TLS: true, Paths: []Path{
				{Path: "/checkout", PathType: "Prefix", Backend: "shop-checkout-80", Denied: authURL, Ingress: "Ingress shop/checkout"},
				{Path: "/", PathType: "Prefix", Backend: "shop-web-80", Ingress: "Ingress shop/web"},
			}},
			{Host: "a-very-long-host-name-for-the-internal-reporting-service.eu-central-1.clusters.example.com", Paths: []Path{
				{Path: "/api/v1/reports/quarterly/download/all-regions/with-a-long-path", PathType: "ImplementationSpecific", Backend: "reporting-reporting-api-long-service-name-8080"},
			}},
		},
		Backends: []Backend{{
			Name: "reporting-reporting-api-long-service-name-8080", Algorithm: "round_robin", Alternatives: []string{"reporting-reporting-api-long-service-name-canary-8080"},
			Endpoints: []Endpoint{{Address: "[fd00:1234:5678:9abc:def0:1234:5678:9abc]:8080", Picks: 123456789, Failures: 12345, InFlight: 1234, EWMA: 0.123456}},
		}},
		Errors: []ObjError{
			{Object: "Ingress shop/web", Reason: ReasonUnsupported, Field: "nginx.ingress.kubernetes.io/mirror-target", Message: "not supported by Switchyard; the annotation is ignored"},
			{Object: "Ingress shop/checkout", Reason: ReasonUnsupported, Field: "nginx.ingress.kubernetes.io/configuration-snippet", Message: "snippets are refused; the annotation is ignored"},
			{Object: "Ingress shop/checkout", Reason: ReasonFailedClosed, Field: authURL, Message: longMessage},
			{Object: "ConfigMap ingress-nginx/ingress-nginx-controller", Reason: ReasonInvalid, Field: "proxy-body-size", Message: `invalid size "12 parsecs"; the key is not used`},
		},
	}
}

// TestPageListsProblemsPerIngress checks that the page lists each object's
// problems under its name, fail-closed settings (with the routes they make
// answer 503), invalid ones and ignored ones told apart, each with its
// message (issue 21, item 7).
func TestPageListsProblemsPerIngress(t *testing.T) {
	h := New(Config{Snapshot: troubled})
	got := probe(t, h, 1280, 800).Problems
	want := [][][]string{
		{
			{"Ingress shop/checkout | 1 fail closed | 1 ignored | 1 route answers 503"},
			{"503", "nginx.ingress.kubernetes.io/auth-url", "shop.example.com/checkout answers 503"},
			{"fail closed (503)", "nginx.ingress.kubernetes.io/auth-url", longMessage},
			{"ignored", "nginx.ingress.kubernetes.io/configuration-snippet", "snippets are refused; the annotation is ignored"},
		},
		{
			{"ConfigMap ingress-nginx/ingress-nginx-controller | 1 invalid"},
			{"invalid", "proxy-body-size", `invalid size "12 parsecs"; the key is not used`},
		},
		{
			{"Ingress shop/web | 1 ignored"},
			{"ignored", "nginx.ingress.kubernetes.io/mirror-target", "not supported by Switchyard; the annotation is ignored"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems table (-want +got):\n%s", diff)
	}
}

// TestPageFitsViewport loads a page full of long names and a long error
// message at the widths operators use and checks that nothing scrolls
// sideways and no table is wider than its section (issue 21, item 7).
func TestPageFitsViewport(t *testing.T) {
	hist := &History{}
	hist.Record(Event{Time: time.Now(), Kind: "sync", Duration: 3 * time.Millisecond, Reason: "version 9: servers or locations changed", Err: longMessage})
	h := New(Config{Snapshot: troubled, History: hist})
	for _, tc := range []struct {
		name          string
		width, height int
	}{
		{"1280x800", 1280, 800},
		{"800x600", 800, 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := probe(t, h, tc.width, tc.height)
			if got.ScrollWidth > got.ClientWidth {
				t.Errorf("page is %d px wide in a %d px viewport: it scrolls sideways", got.ScrollWidth, got.ClientWidth)
			}
			if len(got.Overflowing) > 0 {
				t.Errorf("tables wider than their section: %q", got.Overflowing)
			}
		})
	}
}

// TestPageShowsTimesAsISO8601 checks every time on the page (updated, last
// sync, each sync and reload) is ISO 8601 to the second with its zone, as
// the server recorded it (issue 21, item 7).
func TestPageShowsTimesAsISO8601(t *testing.T) {
	ist := time.FixedZone("IST", 5*3600+1800)
	hist := &History{}
	hist.Record(Event{Time: time.Date(2026, 11, 25, 10, 4, 5, 123456789, time.UTC), Kind: "sync", Reason: "version 8"})
	hist.Record(Event{Time: time.Date(2026, 11, 25, 15, 34, 6, 0, ist), Kind: "reload", Reason: "nginx reloaded"})
	now := time.Date(2026, 11, 25, 10, 4, 9, 999000000, time.UTC)
	h := New(Config{Snapshot: troubled, History: hist, Now: func() time.Time { return now }})
	res := probe(t, h, 1280, 800)
	got := probeResult{Generated: res.Generated, LastSync: res.LastSync, EventTimes: res.EventTimes}
	want := probeResult{
		Generated:  "2026-11-25T10:04:09Z",
		LastSync:   "2026-11-25T10:04:05Z",
		EventTimes: []string{"2026-11-25T15:34:06+05:30", "2026-11-25T10:04:05Z"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("times shown (-want +got):\n%s", diff)
	}
}
