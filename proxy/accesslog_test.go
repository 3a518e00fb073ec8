package proxy

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// lockedBuffer is a bytes.Buffer safe for the proxy's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSuffix(l.b.String(), "\n"), "\n")
}

// TestAccessLog: one line per request in ingress-nginx's upstreaminfo
// format, for a proxied request (upstream fields filled) and for one the
// default backend answers (upstream fields "-").
func TestAccessLog(t *testing.T) {
	a := backend(t, "a")
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "default-a-80", Endpoints: endpoints(a)}},
		Servers: []model.Server{
			{Hostname: "_", Locations: []model.Location{{Path: "/", PathType: model.PathTypePrefix, Backend: model.DefaultBackendName, IsDefaultBackend: true}}},
			{Hostname: "log.example.com", Locations: []model.Location{loc("/", model.PathTypePrefix, "default-a-80")}},
		},
	}
	var log lockedBuffer
	p, _ := newProxy(t, cfg, Config{AccessLog: &log})
	base := "http://" + serve(t, p.Serve)
	get(t, base+"/shop?q=1", "log.example.com", map[string]string{"User-Agent": "tester/1.0", "Referer": "http://ref.example/", "X-Request-ID": "rid-42"})
	get(t, base+"/nowhere", "unknown.example.com", map[string]string{"User-Agent": "tester/1.0"})

	lines := log.lines()
	if len(lines) != 2 {
		t.Fatalf("got %d lines %q; want 2", len(lines), lines)
	}
	ts := `\[\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}\]`
	for i, want := range []string{
		`^127\.0\.0\.1 - - ` + ts + ` "GET /shop\?q=1 HTTP/1\.1" 200 \d+ "http://ref\.example/" "tester/1\.0" \d+ \d+\.\d{3} \[default-a-80\] \[\] ` +
			regexp.QuoteMeta(a) + ` \d+ \d+\.\d{3} 200 rid-42$`,
		`^127\.0\.0\.1 - - ` + ts + ` "GET /nowhere HTTP/1\.1" 404 21 "-" "tester/1\.0" \d+ \d+\.\d{3} \[\] \[\] - - - - -$`,
	} {
		if !regexp.MustCompile(want).MatchString(lines[i]) {
			t.Errorf("line %d: got %q; want it to match %s", i, lines[i], want)
		}
	}
}

// The time fields as nginx prints them: $time_local formatted once per
// second but always the line's own second, durations in seconds truncated
// to the millisecond.
func TestAccessLogTimes(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{0, "0.000"}, {999 * time.Microsecond, "0.000"}, {time.Millisecond, "0.001"}, {1234567 * time.Microsecond, "1.234"},
		{61*time.Second + 50*time.Millisecond, "61.050"}, {-time.Second, "0.000"}} {
		if got := string(appendMillis(nil, c.d)); got != c.want {
			t.Errorf("appendMillis(%v) = %q; want %q", c.d, got, c.want)
		}
	}
	loc := time.FixedZone("", -7*3600)
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, loc)
	for _, tt := range []time.Time{t0, t0.Add(300 * time.Millisecond), t0.Add(time.Second), t0.Add(time.Hour)} {
		if got, want := string(appendLogTime(nil, tt)), tt.Format("02/Jan/2006:15:04:05 -0700"); got != want {
			t.Errorf("appendLogTime(%v) = %q; want %q", tt, got, want)
		}
	}
}
