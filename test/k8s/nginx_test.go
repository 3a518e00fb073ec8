package k8s

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// nginxEnv is a switchyard controller with --data-plane=nginx watching one
// namespace of the shared API server, with an Ingress web.example routed to
// three TEST-NET backends on one port (the slice starts with the first).
type nginxEnv struct {
	ctx      context.Context
	admin    kubernetes.Interface
	ns       string
	ips      []string
	ing      *networkingv1.Ingress
	slice    *discoveryv1.EndpointSlice
	ctrl     *harness.Process
	get      func(ctx context.Context, host string) string
	onlyFrom func(host string, want ...string) func(context.Context) (bool, error)
	reloads  func() string
	// metric is the value of a sample line of the controller's /metrics
	// ("name{labels}" or "name"), or "missing".
	metric func(sample string) string
	setEps func(s *discoveryv1.EndpointSlice, addrs ...string)
	// base is "http://ip:port/" of nginx; httpsAddr its HTTPS address.
	base, httpsAddr, nginxDir string
}

func startNginxEnv(t *testing.T, first int) *nginxEnv {
	harness.RequireNetNS(t)
	if _, err := os.Stat("/usr/lib/nginx/modules/ngx_http_lua_module.so"); err != nil {
		t.Fatalf("nginx with the Lua module is not installed (run test/setup.sh): %v", err)
	}
	c := Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	admin, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}

	// Three backends on one port, on TEST-NET-1 addresses of the namespace.
	ips := []string{harness.TestIP(first), harness.TestIP(first + 1), harness.TestIP(first + 2)}
	port := harness.FreePort(t, ips[0])
	for _, ip := range ips {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Path", r.URL.Path)
			_, _ = io.WriteString(w, ip)
		}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	}

	a := newApplier(t, c.AdminConfig())
	for _, m := range readManifests(t, filepath.Join(RepoRoot(), "deploy", "base", "ingressclass.yaml")) {
		if err := a.apply(ctx, m, false); err != nil {
			t.Fatalf("apply %s: %v", m, err)
		}
	}
	ing, svc, slice := demoObjects(ns)
	slice.Ports[0].Port = ptrInt32(int32(port))
	setEndpoints := func(s *discoveryv1.EndpointSlice, addrs ...string) {
		s.Endpoints = nil
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
	}
	setEndpoints(slice, ips[0])
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// nginx workers run as nobody: the nginx dir must be reachable.
	dir, err := os.MkdirTemp("", "switchyard-k8s-nginx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ip := harness.TestIP(2)
	httpPort, httpsPort, statusPort := harness.FreePort(t, ip), harness.FreePort(t, ip), harness.FreePort(t, ip)
	args := []string{"--data-plane=nginx", "--kubeconfig=" + c.WriteKubeconfig(t, c.AdminConfig()),
		"--watch-namespace=" + ns, "--election-id=switchyard-nginx-" + ns,
		"--listen-address=" + ip, "--http-port=" + strconv.Itoa(httpPort), "--https-port=" + strconv.Itoa(httpsPort),
		"--status-address=" + ip, "--status-port=" + strconv.Itoa(statusPort),
		"--nginx-status-port=" + strconv.Itoa(harness.FreePort(t, "127.0.0.1")),
		"--nginx-dir=" + dir, "--lua-dir=" + filepath.Join(RepoRoot(), "lua"), "--pick-timeout=2s"}
	ctrl := harness.StartProcess(t, harness.Cmd{Name: "switchyard", Path: buildSwitchyard(t, t.TempDir()), Args: args,
		Env: []string{"POD_NAMESPACE=" + ns}, LogDir: t.TempDir()})
	status := "http://" + net.JoinHostPort(ip, strconv.Itoa(statusPort))
	harness.WaitFor(t, time.Minute, "switchyard /readyz", ctrl, harness.HTTPReady(status+"/readyz", http.StatusOK, nil, nil))

	base := "http://" + net.JoinHostPort(ip, strconv.Itoa(httpPort)) + "/"
	get := func(ctx context.Context, host string) string {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
		if err != nil {
			return err.Error()
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	onlyFrom := func(host string, want ...string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			for range 8 {
				got := get(ctx, host)
				ok := false
				for _, w := range want {
					ok = ok || got == "200 "+w
				}
				if !ok {
					return false, nil
				}
			}
			return true, nil
		}
	}
	harness.WaitFor(t, time.Minute, "nginx proxying web.example to "+ips[0], ctrl, onlyFrom("web.example", ips[0]))
	metric := func(sample string) string {
		resp, err := http.Get(status + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			// The sample has no labels but ingress-nginx's constant
			// controller_class, controller_namespace and controller_pod.
			if strings.HasPrefix(l, sample+" ") || strings.HasPrefix(l, sample+"{") {
				return l[strings.LastIndexByte(l, ' ')+1:]
			}
		}
		return "missing"
	}
	reloads := func() string { return metric("nginx_ingress_controller_success") }
	if r := reloads(); r != "0" {
		t.Fatalf("reloads after start: %s; want 0", r)
	}
	return &nginxEnv{ctx: ctx, admin: admin, ns: ns, ips: ips, ing: ing, slice: slice, ctrl: ctrl, get: get,
		onlyFrom: onlyFrom, reloads: reloads, metric: metric, setEps: setEndpoints,
		base: base, httpsAddr: net.JoinHostPort(ip, strconv.Itoa(httpsPort)), nginxDir: dir}
}

// TestNginxDataPlaneAgainstAPIServer runs the real binary with
// --data-plane=nginx against the real API server: an Ingress appears and
// Debian's nginx (through the Lua shim) reaches its TEST-NET backend; 50
// EndpointSlice updates reach the balancer with zero nginx reloads and the
// traffic follows the last one; a new Ingress host is a structural change
// and reloads nginx exactly once.
func TestNginxDataPlaneAgainstAPIServer(t *testing.T) {
	e := startNginxEnv(t, 30)
	ctx, admin, ns, ips, ing, slice, ctrl := e.ctx, e.admin, e.ns, e.ips, e.ing, e.slice, e.ctrl
	onlyFrom, reloads, setEndpoints := e.onlyFrom, e.reloads, e.setEps
	// 50 endpoint changes: no reload, and the traffic follows the last.
	sets := [][]string{{ips[1]}, {ips[0], ips[1]}, {ips[2]}, {ips[1], ips[2]}, ips}
	for i := 0; i < 50; i++ {
		cur, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, slice.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		setEndpoints(cur, sets[i%len(sets)]...)
		if i == 49 {
			setEndpoints(cur, ips[2])
		}
		if _, err := admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	harness.WaitFor(t, 30*time.Second, "traffic only to the last endpoint set", ctrl, onlyFrom("web.example", ips[2]))
	t.Logf("traffic converged on the last of 50 EndpointSlice updates %v after it was written", time.Since(start).Round(time.Millisecond))
	if r := reloads(); r != "0" {
		t.Errorf("reloads after 50 endpoint changes: %s; want 0", r)
	}

	// A new host is structural: exactly one reload, and it is served.
	ing2 := ing.DeepCopy()
	ing2.Name, ing2.ResourceVersion = "web2", ""
	ing2.Spec.Rules[0].Host = "web2.example"
	if _, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "nginx serving web2.example", ctrl, onlyFrom("web2.example", ips[2]))
	// The counter moves once the old workers have stopped accepting, which
	// may come after the new ones serve.
	harness.WaitFor(t, 30*time.Second, "the reload counted", ctrl, func(context.Context) (bool, error) {
		return reloads() != "0", nil
	})
	if r := reloads(); r != "1" {
		t.Errorf("reloads after a new Ingress host: %s; want 1", r)
	}
}

// TestNginxEndpointChurn changes the EndpointSlice at 20 changes per second
// (SWITCHYARD_CHURN_DURATION long; 10 s by default, test/bench/churn.sh runs
// the 5 minutes) while clients request through nginx: zero reloads,
// zero failed requests, and the traffic follows the last change.
func TestNginxEndpointChurn(t *testing.T) {
	duration := 10 * time.Second
	if v := os.Getenv("SWITCHYARD_CHURN_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SWITCHYARD_CHURN_DURATION: %v", err)
		}
		duration = d
	}
	e := startNginxEnv(t, 34)
	ctx, cancel := context.WithTimeout(e.ctx, duration)
	defer cancel()

	var ok, failed atomic.Int64
	var firstFailure atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				got := e.get(ctx, "web.example")
				if strings.HasPrefix(got, "200 ") {
					ok.Add(1)
				} else if ctx.Err() == nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, got)
				}
			}
		}()
	}
	sets := [][]string{{e.ips[1]}, {e.ips[0], e.ips[1]}, {e.ips[2]}, {e.ips[1], e.ips[2]}, e.ips}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	changes := 0
	for ctx.Err() == nil {
		cur, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Get(e.ctx, e.slice.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.setEps(cur, sets[changes%len(sets)]...)
		if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Update(e.ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		changes++
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
	// The last set written was sets[(changes-1)%len(sets)].
	last := sets[(changes-1)%len(sets)]
	harness.WaitFor(t, 30*time.Second, "traffic on the last endpoint set", e.ctrl, e.onlyFrom("web.example", last...))
	reloads := e.reloads()
	t.Logf("churn: %d EndpointSlice changes in %v (%.1f/s), %s nginx reloads, %d requests ok, %d failed",
		changes, duration, float64(changes)/duration.Seconds(), reloads, ok.Load(), failed.Load())
	if reloads != "0" {
		t.Errorf("%s reloads during endpoint churn; want 0", reloads)
	}
	if failed.Load() != 0 {
		t.Errorf("%d requests failed during churn (first: %v)", failed.Load(), firstFailure.Load())
	}
	if ok.Load() == 0 {
		t.Error("no request succeeded")
	}
}

// TestNginxTLSRedirectRewriteRestart: through the real API server and
// --data-plane=nginx, a TLS Ingress is served over HTTPS with its Secret's
// certificate by SNI and HTTP/2, plain HTTP to it is redirected with 308,
// rewrite-target reaches the backend rewritten, and a killed nginx master is
// replaced and serving again within 2 s.
func TestNginxTLSRedirectRewriteRestart(t *testing.T) {
	e := startNginxEnv(t, 37)
	ctx := e.ctx
	certPEM, keyPEM := harness.SelfSignedPEM(t, "secure.example")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secure-tls", Namespace: e.ns}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
	if _, err := e.admin.CoreV1().Secrets(e.ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ing := e.ing.DeepCopy()
	ing.Name, ing.ResourceVersion = "secure", ""
	ing.Spec.Rules[0].Host = "secure.example"
	ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"secure.example"}, SecretName: "secure-tls"}}
	if _, err := e.admin.NetworkingV1().Ingresses(e.ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rw := e.ing.DeepCopy()
	rw.Name, rw.ResourceVersion = "rw", ""
	rw.Annotations = map[string]string{"nginx.ingress.kubernetes.io/rewrite-target": "/$2", "nginx.ingress.kubernetes.io/use-regex": "true"}
	rw.Spec.Rules[0].Host = "rw.example"
	rw.Spec.Rules[0].HTTP.Paths[0].Path = "/api(/|$)(.*)"
	impl := networkingv1.PathTypeImplementationSpecific
	rw.Spec.Rules[0].HTTP.Paths[0].PathType = &impl
	if _, err := e.admin.NetworkingV1().Ingresses(e.ns).Create(ctx, rw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// HTTPS by SNI with HTTP/2 and the Secret's certificate.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "secure.example"}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var proto, body string
	harness.WaitFor(t, 30*time.Second, "HTTPS for secure.example", e.ctrl, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+e.httpsAddr+"/", nil)
		req.Host = "secure.example"
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		proto, body = resp.Proto, string(b)
		return resp.StatusCode == 200, nil
	})
	if proto != "HTTP/2.0" || !strings.HasPrefix(body, "192.0.2.") {
		t.Errorf("HTTPS: %s %q; want HTTP/2.0 from a backend", proto, body)
	}

	// Plain HTTP to a TLS host: 308 to https.
	noFollow := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var resp *http.Response
	var redirect string
	harness.WaitFor(t, 30*time.Second, "308 for plain HTTP to secure.example", e.ctrl, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"p?q=1", nil)
		req.Host = "secure.example"
		r, err := noFollow.Do(req)
		if err != nil {
			return false, nil
		}
		r.Body.Close()
		redirect = fmt.Sprintf("%d %s", r.StatusCode, r.Header.Get("Location"))
		return r.StatusCode == http.StatusPermanentRedirect, nil
	})
	if redirect != "308 https://secure.example/p?q=1" {
		t.Errorf("ssl-redirect: %s; want 308 to https://secure.example/p?q=1", redirect)
	}

	// rewrite-target: the backend sees /x/y for /api/x/y.
	var rb []byte
	harness.WaitFor(t, 30*time.Second, "rw.example served", e.ctrl, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"api/x/y", nil)
		req.Host = "rw.example"
		var err error
		if resp, err = http.DefaultClient.Do(req); err != nil {
			return false, nil
		}
		rb, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
	if got := resp.Header.Get("X-Path"); resp.StatusCode != 200 || got != "/x/y" {
		t.Errorf("rewrite-target: %d, backend saw %q (%s); want /x/y", resp.StatusCode, got, rb)
	}

	// Kill the nginx master: serving again within 2 s.
	pidb, err := os.ReadFile(filepath.Join(e.nginxDir, "nginx.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidb)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	harness.WaitFor(t, 5*time.Second, "nginx serving again", e.ctrl, func(ctx context.Context) (bool, error) {
		return strings.HasPrefix(e.get(ctx, "web.example"), "200 "), nil
	})
	if took := time.Since(killed); took > 2*time.Second {
		t.Errorf("nginx served again %v after its master was killed; want within 2 s", took)
	} else {
		t.Logf("nginx served again %v after its master was killed", took.Round(time.Millisecond))
	}
}

// weakRSASelfSigned returns a PEM certificate for host with a 1024-bit RSA
// key: Go's crypto/tls accepts the pair (so the builder does too), but
// Debian's OpenSSL refuses it at its default security level ("ee key too
// small"), which makes `nginx -t` fail on the rendered file.
func weakRSASelfSigned(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	return harness.SelfSignedPEMWithKey(t, host, key)
}

// TestNginxRejectedConfigKeepsServing: a TLS Ingress whose Secret nginx
// refuses (a 1024-bit RSA key) makes `nginx -t` fail. The running nginx keeps
// serving the previous configuration, no reload is counted, the reload gauge
// drops to 0, and the offending Ingress gets a Warning Event (reason RELOAD,
// as ingress-nginx). Replacing the Secret with a good certificate recovers:
// one reload, and the new host is served.
func TestNginxRejectedConfigKeepsServing(t *testing.T) {
	e := startNginxEnv(t, 24)
	ctx := e.ctx
	certPEM, keyPEM := weakRSASelfSigned(t, "weak.example")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "weak-tls", Namespace: e.ns}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
	if _, err := e.admin.CoreV1().Secrets(e.ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ing := e.ing.DeepCopy()
	ing.Name, ing.ResourceVersion = "weak", ""
	ing.Spec.Rules[0].Host = "weak.example"
	ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"weak.example"}, SecretName: "weak-tls"}}
	if _, err := e.admin.NetworkingV1().Ingresses(e.ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The Warning Event on the Ingress names nginx's complaint.
	var event string
	harness.WaitFor(t, 30*time.Second, "a Warning RELOAD Event on Ingress weak", e.ctrl, func(ctx context.Context) (bool, error) {
		evs, err := e.admin.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=weak"})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning && ev.Reason == "RELOAD" && ev.InvolvedObject.Kind == "Ingress" {
				event = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if !strings.Contains(event, "key too small") {
		t.Errorf("Event message %q; want nginx's 'ee key too small'", event)
	}
	if got := e.metric("nginx_ingress_controller_config_last_reload_successful"); got != "0" {
		t.Errorf("config_last_reload_successful after a refused config: %s; want 0", got)
	}
	if got := e.reloads(); got != "0" {
		t.Errorf("reloads after a refused config: %s; want 0", got)
	}
	// The old configuration still serves; the refused host is not served.
	for range 20 {
		if got := e.get(ctx, "web.example"); got != "200 "+e.ips[0] {
			t.Fatalf("web.example while the new config is refused: %q; want 200 from %s", got, e.ips[0])
		}
	}
	// Its host is unknown to the running nginx: the default server's 404
	// (once served, plain HTTP to it would be ssl-redirect's 308).
	if got := e.get(ctx, "weak.example"); !strings.HasPrefix(got, "404 ") {
		t.Errorf("weak.example while its configuration is refused: %q; want the default server's 404", got)
	}

	// A good certificate in the Secret: the retry reloads once and serves.
	goodCert, goodKey := harness.SelfSignedPEM(t, "weak.example")
	cur, err := e.admin.CoreV1().Secrets(e.ns).Get(ctx, "weak-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Data = map[string][]byte{corev1.TLSCertKey: goodCert, corev1.TLSPrivateKeyKey: goodKey}
	if _, err := e.admin.CoreV1().Secrets(e.ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "weak.example served (ssl-redirect's 308) after the Secret is fixed", e.ctrl,
		func(ctx context.Context) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base, nil)
			if err != nil {
				return false, err
			}
			req.Host = "weak.example"
			noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := noFollow.Do(req)
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusPermanentRedirect, nil
		})
	// The new workers serve before the reload is done: the controller
	// also waits for the old workers to stop accepting, then records it.
	harness.WaitFor(t, 30*time.Second, "config_last_reload_successful 1 after the fix", e.ctrl,
		func(context.Context) (bool, error) {
			return e.metric("nginx_ingress_controller_config_last_reload_successful") == "1", nil
		})
	if got := e.reloads(); got != "1" {
		t.Errorf("reloads after the fix: %s; want 1", got)
	}
}
