package nginxcompat

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

const defaultTestTimeout = 20 * time.Second

// freePort reserves a free TCP port on ip and releases it.
func freePort(t testing.TB, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// echoBackend serves "<path> <host>" on ip and returns the stand-in
// balancer's backend name for it ("ip-port").
func echoBackend(t testing.TB, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.URL.RequestURI(), r.Host)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ip + "-" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

type counter struct{ n int }

func (c *counter) Sync([]balancer.Backend) error { c.n++; return nil }

func (c *counter) Apply([]*model.Backend) error { c.n++; return nil }

// client does not follow redirects; TLS trusts anything (the test checks
// the certificate itself).
func testClient() *http.Client {
	return &http.Client{
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			ForceAttemptHTTP2: true,
			DisableKeepAlives: true,
		},
	}
}

func get(c *http.Client, url, host string) (*http.Response, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, "", err
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// waitServing polls url until it answers 200 with want, or the deadline.
func waitServing(t testing.TB, c *http.Client, deadline time.Time, url, host, want string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last string
	for time.Now().Before(deadline) {
		resp, body, err := get(c, url, host)
		if err == nil && resp.StatusCode == 200 && body == want {
			return
		}
		last = fmt.Sprint(err, body)
		<-tick.C
	}
	t.Fatalf("%s (Host %s) not serving %q by the deadline; last: %s", url, host, want, last)
}

// Real nginx on a rendered file proxies to real backends on loopback: plain
// HTTP, rewrite-target, ssl-redirect 308, TLS by SNI over HTTP/2; an
// unchanged file or a backends-only change does not reload; a broken
// certificate fails nginx -t, names the Ingress and leaves the old file
// serving; a killed master serves again within 2 s; cancel drains and exits.
func TestControllerRealNginx(t *testing.T) {
	nginx := requireNginx(t)
	if os.Geteuid() != 0 && os.Getenv("CI") == "" {
		t.Skip("SKIPPED LOUDLY: needs root for nginx's worker user switch")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	be := echoBackend(t, "127.0.0.3")
	httpAddr := "127.0.0.2:" + freePort(t, "127.0.0.2")
	httpsAddr := "127.0.0.2:" + freePort(t, "127.0.0.2")
	rc := testDirs(t, dir, "")
	rc.HTTPListen, rc.HTTPSListen = []string{httpAddr}, []string{httpsAddr}
	rc.StatusListen = "127.0.0.1:" + freePort(t, "127.0.0.1")

	cfg := loadCase(t, "testdata/render/tls.json")
	ing := model.ObjectRef{Kind: "Ingress", Namespace: "default", Name: "web"}
	cfg.Servers[1].Locations[0].Backend = be
	cfg.Servers = append(cfg.Servers, model.Server{Hostname: "app.example.com", Locations: []model.Location{
		{Path: "/rw(/|)(.*)", PathType: model.PathTypeImplementationSpecific, Regex: true, Ingress: ing, Backend: be, LocationSettings: &model.LocationSettings{Rewrite: model.Rewrite{Target: "/$2"}}},
		{Path: "/", PathType: model.PathTypePrefix, Ingress: ing, Backend: be},
	}})

	reg := prometheus.NewRegistry()
	syncs := &counter{}
	c, err := NewController(ControllerConfig{Nginx: nginx, ConfPath: dir + "/nginx.conf", Render: rc,
		Backends: syncs, Registerer: reg, Logf: t.Logf, Stderr: tlog{t}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*defaultTestTimeout)
	defer cancel()
	if err := c.Update(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Logf("nginx controller stopped: %v", err)
		}
	}()

	cl := testClient()
	base := "http://" + httpAddr
	waitServing(t, cl, time.Now().Add(defaultTestTimeout), base+"/hello", "app.example.com", "/hello app.example.com")

	if _, body, err := get(cl, base+"/rw/deep/x?q=1", "app.example.com"); err != nil || body != "/deep/x?q=1 app.example.com" {
		t.Errorf("rewrite-target: got %q, %v; want %q", body, err, "/deep/x?q=1 app.example.com")
	}
	resp, _, err := get(cl, base+"/p?a=b", "tls.example.com")
	if err != nil || resp.StatusCode != 308 || resp.Header.Get("Location") != "https://tls.example.com/p?a=b" {
		t.Errorf("ssl-redirect: got %v %v; want 308 to https://tls.example.com/p?a=b", resp, err)
	}
	tc := testClient()
	tc.Transport.(*http.Transport).TLSClientConfig.ServerName = "tls.example.com"
	resp, body, err := get(tc, "https://"+httpsAddr+"/s", "tls.example.com")
	if err != nil {
		t.Fatalf("https: %v", err)
	}
	if resp.ProtoMajor != 2 || body != "/s tls.example.com" || resp.TLS == nil ||
		resp.TLS.PeerCertificates[0].Subject.CommonName != "tls.example.com" {
		t.Errorf("https: proto %s body %q; want HTTP/2, the tls.example.com certificate and %q", resp.Proto, body, "/s tls.example.com")
	}
	if resp.Header.Get("Strict-Transport-Security") != "max-age=31536000; includeSubDomains" {
		t.Errorf("HSTS header %q", resp.Header.Get("Strict-Transport-Security"))
	}

	// Unchanged file, and a change of backends only: no reload.
	if err := c.Update(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	cfg2 := *cfg
	cfg2.Backends = []*model.Backend{{Name: "x"}}
	if err := c.Update(ctx, &cfg2); err != nil {
		t.Fatal(err)
	}
	if got := c.Reloads(); got != 0 {
		t.Errorf("reloads after unchanged updates: got %d; want 0", got)
	}
	if syncs.n != 3 {
		t.Errorf("backend syncs: got %d; want 3", syncs.n)
	}

	// A structural change reloads once, detected by checksum.
	cfg3 := *cfg
	cfg3.Servers = append(append([]model.Server(nil), cfg.Servers...), model.Server{Hostname: "new.example.com",
		Locations: []model.Location{{Path: "/", Ingress: ing, Backend: be}}})
	if err := c.Update(ctx, &cfg3); err != nil {
		t.Fatal(err)
	}
	if got := c.Reloads(); got != 1 {
		t.Errorf("reloads: got %d; want 1", got)
	}
	// Every new connection after Update returns gets the new file: no old
	// worker still accepts (each request below is its own connection).
	for i := range 20 {
		if _, body, err := get(cl, base+"/n", "new.example.com"); err != nil || body != "/n new.example.com" {
			t.Fatalf("new host after reload, request %d: got %q, %v", i, body, err)
		}
	}
	if got := testutil.ToFloat64(c.success); got != 1 {
		t.Errorf("nginx_ingress_controller_success = %v; want 1", got)
	}

	// A broken certificate: nginx -t fails, the old file keeps serving.
	bad := cfg3
	bad.Certificates = map[string]model.Certificate{"cert-1": {UID: "cert-1", PEM: "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"}}
	bad.Servers = append(append([]model.Server(nil), cfg3.Servers...), model.Server{Hostname: "later.example.com",
		Locations: []model.Location{{Path: "/", Ingress: ing, Backend: be}}})
	err = c.Update(ctx, &bad)
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("broken certificate: got %v; want a *ConfigError", err)
	}
	if ce.Ingress != ing {
		t.Errorf("offending Ingress: got %+v; want %+v (nginx said %s)", ce.Ingress, ing, ce.Output)
	}
	if oe := ce.ObjectErrors(); len(oe) != 1 || oe[0].Object != ing || !strings.Contains(oe[0].Message, "nginx -t refused") {
		t.Errorf("ObjectErrors (the Event's content) = %+v", oe)
	}
	if got := testutil.ToFloat64(c.lastOK); got != 0 {
		t.Errorf("config_last_reload_successful = %v; want 0", got)
	}
	if _, body, err := get(cl, base+"/n", "new.example.com"); err != nil || body != "/n new.example.com" {
		t.Errorf("old config after a refused one: got %q, %v", body, err)
	}
	if _, body, _ := get(cl, base+"/n", "later.example.com"); body == "/n later.example.com" {
		t.Errorf("refused config is serving")
	}

	// kill -9 the master: serving again within 2 s.
	c.mu.Lock()
	pid := c.master.Process.Pid
	c.mu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Wait for the new master, then for service.
	tick := time.NewTicker(5 * time.Millisecond)
	for {
		c.mu.Lock()
		newPid := 0
		if c.master != nil {
			newPid = c.master.Process.Pid
		}
		c.mu.Unlock()
		if newPid != 0 && newPid != pid {
			break
		}
		if time.Since(killed) > 2*time.Second {
			t.Fatal("no new master 2 s after kill -9")
		}
		<-tick.C
	}
	tick.Stop()
	waitServing(t, cl, killed.Add(2*time.Second), base+"/back", "new.example.com", "/back new.example.com")
	t.Logf("serving again %v after kill -9", time.Since(killed))

	// Graceful stop: Run returns, the port is closed.
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	done <- nil
	if _, _, err := get(cl, base+"/", "app.example.com"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("after stop: got %v; want connection refused", err)
	}
}

// tlog writes nginx's output to the test log.
type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestServingAfterSlowFirstStart: a first generation that answers only
// after the wait for it gave up (ReloadTimeout) still counts as serving
// once the periodic recheck finds it: Serving closes and Ready is nil.
// Before, Serving stayed open for good and every sync failed.
func TestServingAfterSlowFirstStart(t *testing.T) {
	f := newFaultSetup(t)
	// A wait that always gives up before nginx answers.
	c, err := NewController(ControllerConfig{Nginx: f.nginx, ConfPath: f.dir + "/nginx.conf", Render: f.rc,
		Logf: t.Logf, Stderr: tlog{t}, ReloadTimeout: time.Nanosecond, ReassertInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Update(context.Background(), f.config("slow.example", "/")); err != nil {
		t.Fatal(err)
	}
	run(t, c)
	select {
	case <-c.Serving():
	case <-time.After(defaultTestTimeout):
		t.Fatalf("Serving not closed %v after the start; Ready: %v", defaultTestTimeout, c.Ready())
	}
	if err := c.Ready(); err != nil {
		t.Errorf("Ready after Serving: %v; want nil", err)
	}
}
