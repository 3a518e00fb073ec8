package chaos

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// Bounds asserted per fault. Each is a figure the design promises, not a
// measured one padded: see docs/benchmarks.md for what the runs measured.
const (
	// servedWithin bounds the time from a restart (controller, sidecar,
	// nginx master) to the first 2xx of a request sent after it.
	servedWithin = 5 * time.Second
	// orphanGoneWithin bounds how long the nginx master of a killed
	// controller may outlive it.
	orphanGoneWithin = 10 * time.Second
)

// TestChaos kills, one at a time under a steady load, each process of the
// three setups and checks what it cost (issue 20 item 9).
func TestChaos(t *testing.T) {
	harness.RequireNetNS(t)
	t.Run("go", testGoPlane)
	t.Run("nginx", testNginxPlane)
	t.Run("sidecar", testSidecar)
	t.Run("l4", testL4)
	writeReport(t)
}

// controller is a `switchyard controller` that can be killed and started
// again with the same flags.
type controller struct {
	t      *testing.T
	args   []string
	http   string // the data plane's HTTP address
	https  string // the data plane's HTTPS address
	status string // the status port's address
	starts int
	proc   *harness.Process
}

// newController starts `switchyard controller` on the manifests of bs and
// the objects in yaml, with extra flags, and waits until it proxies to a
// backend.
func newController(t *testing.T, bs []*backend, yaml string, extra ...string) *controller {
	t.Helper()
	dir := t.TempDir()
	writeManifests(t, dir, bs, yaml)
	c := &controller{t: t,
		http:   harness.FreeAddr(t, "127.0.0.1"),
		https:  harness.FreeAddr(t, "127.0.0.1"),
		status: harness.FreeAddr(t, "127.0.0.1"),
	}
	_, httpPort, _ := net.SplitHostPort(c.http)
	_, httpsPort, _ := net.SplitHostPort(c.https)
	_, statusPort, _ := net.SplitHostPort(c.status)
	c.args = append([]string{"controller", "--manifests", dir, "--http-port", httpPort,
		"--https-port", httpsPort, "--status-port", statusPort, "--listen-address", "127.0.0.1"}, extra...)
	c.start()
	harness.WaitFor(t, readyTimeout, "controller /readyz", c.proc, harness.HTTPReady("http://"+c.status+"/readyz", 200, nil, nil))
	harness.WaitFor(t, readyTimeout, "a 2xx through the data plane", c.proc, proxies(c.http))
	return c
}

// start starts the controller process (again); it does not wait.
func (c *controller) start() {
	c.starts++
	c.proc = harness.StartProcess(c.t, harness.Cmd{Name: fmt.Sprintf("controller-%d", c.starts), Path: binary, Args: c.args})
}

// kill kills the controller with SIGKILL.
func (c *controller) kill() {
	if err := c.proc.Kill(); err != nil {
		c.t.Fatal(err)
	}
}

// proxies holds once GET / with Host chaos.test answers 200 from a backend.
func proxies(addr string) func(ctx context.Context) (bool, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		if err != nil {
			return false, err
		}
		req.Host = "chaos.test"
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("status %d", resp.StatusCode)
		}
		return true, nil
	}
}

// writeManifests writes the IngressClass, a Service whose EndpointSlice
// lists the backends, routed from chaos.test/, and the objects in extra.
func writeManifests(t *testing.T, dir string, bs []*backend, extra string) {
	t.Helper()
	var ips []string
	_, p, _ := net.SplitHostPort(bs[0].addr)
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("backend port %q: %v", p, err)
	}
	for _, b := range bs {
		h, _, _ := net.SplitHostPort(b.addr)
		ips = append(ips, h)
	}
	yaml := harness.LocalServiceYAML("demo", "chaos", port, ips...) + `---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: chaos, namespace: demo}
spec:
  ingressClassName: switchyard
  rules:
  - host: chaos.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: chaos, port: {name: http}}}}
` + extra
	if err := os.WriteFile(filepath.Join(dir, "chaos.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkRecovered checks that, after a fault that stops the data plane, the
// first 2xx and the last failure came within servedWithin of the restart
// (of the kill when nothing was restarted).
func checkRecovered(t *testing.T, res result) {
	t.Helper()
	if res.Served == 0 || res.Served > servedWithin {
		t.Errorf("%s, %s: first 2xx %v after the restart; want within %v", res.Setup, res.Fault, res.Served, servedWithin)
	}
	if last := res.LastFailure - res.Down; last > servedWithin {
		t.Errorf("%s, %s: the last failure ended %v after the restart; want within %v", res.Setup, res.Fault, last, servedWithin)
	}
}

// checkWorkerKill checks the cost of an nginx worker's death: the
// connections it held fail, each at most once (a client has one at a
// time), and connections made after it reach the living workers.
func checkWorkerKill(t *testing.T, res result) {
	t.Helper()
	if res.Failed > loadClients {
		t.Errorf("%s, %s: %d requests failed (%v); want at most one per client connection (%d)", res.Setup, res.Fault, res.Failed, res.Errors, loadClients)
	}
	if res.NewConn != 0 {
		t.Errorf("%s, %s: %d requests failed on connections made after the kill (%v); want 0", res.Setup, res.Fault, res.NewConn, res.Errors)
	}
}

// killBackend kills backend b with SIGKILL.
func killBackend(t *testing.T, b *backend) func() {
	return func() {
		if err := b.proc.Kill(); err != nil {
			t.Fatal(err)
		}
	}
}

// testGoPlane: `switchyard controller --data-plane=go`.
func testGoPlane(t *testing.T) {
	bs := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	c := newController(t, bs, "")
	r := startRig(t, "go plane", loadConfig{Addr: c.http, Host: "chaos.test", Path: "/"})

	// ingress-nginx's proxy-next-upstream "error timeout" with 3 tries:
	// a refused connection goes to the next endpoint, and so does a GET
	// whose connection the killed backend reset.
	res := r.fault("kill -9 a backend", killBackend(t, bs[0]), nil)
	if res.Failed != 0 {
		t.Errorf("go plane, backend killed: %d of %d requests failed (%v); want 0: every GET is retried on the next endpoint", res.Failed, res.Sent, res.Errors)
	}

	// The controller is the data plane: everything fails until it is
	// back.
	res = r.fault("kill -9 the controller, restart it", c.kill, c.start)
	checkRecovered(t, res)
	checkNoWrongAnswers(t, res)
}

// checkNoWrongAnswers checks that a restarting data plane failed requests
// only by not answering: no status a host it serves must never get (a 404
// before its first configuration was built).
func checkNoWrongAnswers(t *testing.T, res result) {
	t.Helper()
	for kind, n := range res.Errors {
		if strings.HasPrefix(kind, "status 404") {
			t.Errorf("%s, %s: %d requests got %s; want none: a host it serves is never 404, even before the first sync", res.Setup, res.Fault, n, kind)
		}
	}
}

// nginxController is a controller on --data-plane=nginx: its nginx's
// directory, master and workers.
type nginxController struct {
	*controller
	dir string
}

// master returns the pid of the nginx master serving now (its pid file).
func (n *nginxController) master() int {
	b, err := os.ReadFile(filepath.Join(n.dir, "nginx.pid"))
	if err != nil {
		n.t.Fatalf("nginx pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !harness.Alive(pid) {
		n.t.Fatalf("nginx pid file holds %q: not a live process", b)
	}
	return pid
}

// busiestWorker returns the pid of master's worker process with the most
// open sockets: the one holding the load's connections, when nginx put them
// all on one worker.
func busiestWorker(t *testing.T, master int) int {
	t.Helper()
	best, most := 0, -1
	for _, pid := range harness.ChildPIDs(master) {
		if !strings.HasPrefix(harness.Cmdline(pid), "nginx: worker process") {
			continue
		}
		if n := sockets(pid); n > most {
			best, most = pid, n
		}
	}
	if best == 0 {
		t.Fatalf("nginx master %d has no worker process", master)
	}
	return best
}

// sockets counts pid's open sockets.
func sockets(pid int) int {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// killPID sends SIGKILL to pid and waits until it is gone (a zombie at
// most: its sockets are closed).
func killPID(t *testing.T, pid int) func() {
	return func() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 %d: %v", pid, err)
		}
		if err := harness.WaitUntil(t.Context(), readyTimeout, fmt.Sprintf("pid %d to die", pid), nil, func(context.Context) (bool, error) {
			return !harness.Alive(pid), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// killNginxIn kills, at the end of the test, every nginx master whose
// command line names dir, with its workers: the nginx of a killed
// controller lives on in a process group of its own.
func killNginxIn(t *testing.T, dir string) {
	t.Cleanup(func() {
		for _, pid := range harness.PIDsMatching(dir) {
			if !strings.HasPrefix(harness.Cmdline(pid), "nginx: master process") {
				continue
			}
			if err := harness.KillGroup(harness.PGID(pid)); err != nil {
				t.Error(err)
			}
		}
	})
}

// testNginxPlane: `switchyard controller --data-plane=nginx`.
func testNginxPlane(t *testing.T) {
	bs := startBackends(t, "127.0.0.5", "127.0.0.6", "127.0.0.7")
	args := harness.NginxPlaneArgs(t, "../../lua")
	n := &nginxController{dir: flagValue(t, args, "--nginx-dir")}
	killNginxIn(t, n.dir) // before the controller's own cleanup, so it runs after it
	n.controller = newController(t, bs, "", args...)
	r := startRig(t, "nginx plane", loadConfig{Addr: n.http, Host: "chaos.test", Path: "/"})

	// The master starts a new worker; only the connections the killed
	// worker held fail, each at most once.
	res := r.fault("kill -9 the busiest nginx worker", killPID(t, busiestWorker(t, n.master())), nil)
	checkWorkerKill(t, res)

	// The controller ends the dead master's group and starts nginx again.
	res = r.fault("kill -9 the nginx master", killPID(t, n.master()), nil)
	checkRecovered(t, res)

	res = r.fault("kill -9 a backend", killBackend(t, bs[0]), nil)
	if res.Failed != 0 {
		t.Errorf("nginx plane, backend killed: %d of %d requests failed (%v); want 0: proxy_next_upstream error retries every GET", res.Failed, res.Sent, res.Errors)
	}

	// nginx serves on from the shim's last peer list while Go is down;
	// the restarted controller must take nginx over (or replace it).
	old := n.master()
	res = r.fault("kill -9 the controller, restart it", n.kill, n.start)
	checkRecovered(t, res)
	checkNoWrongAnswers(t, res)
	harness.WaitFor(t, readyTimeout, "the restarted controller's /readyz", n.proc, harness.HTTPReady("http://"+n.status+"/readyz", 200, nil, nil))
	if err := harness.WaitUntil(t.Context(), orphanGoneWithin, "the killed controller's nginx master to go", nil, func(context.Context) (bool, error) {
		return !harness.Alive(old), nil
	}); err != nil {
		t.Errorf("nginx plane, controller restarted: the nginx master %d of the killed controller still runs after %v (%s): %v",
			old, orphanGoneWithin, harness.Cmdline(old), err)
	}
}

// flagValue returns the value after name in args.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatalf("no %s in %q", name, args)
	return ""
}

// sidecar is `switchyard balancer` beside an nginx running the lua/ shim.
type sidecar struct {
	t                      *testing.T
	dir, pickSock, apiSock string
	listen                 string
	statusPort             int
	starts                 int
	goProc, nginx          *harness.Process
	args                   []string
}

// sidecarBackend is the backend's name in the ingress-nginx payload.
const sidecarBackend = "default-chaos-80"

func newSidecar(t *testing.T, bs []*backend) *sidecar {
	t.Helper()
	nginxArgs := harness.NginxPlaneArgs(t, "../../lua") // checks nginx, its Lua module and root
	nginxBin, err := exec.LookPath("nginx")
	if err != nil {
		nginxBin = "/usr/sbin/nginx"
	}
	if _, err := os.Stat("/usr/share/lua/5.1/resty/core.lua"); err != nil {
		t.Fatalf("lua-resty-core is not installed (run test/setup.sh): %v", err)
	}
	s := &sidecar{t: t, dir: flagValue(t, nginxArgs, "--nginx-dir")}
	s.pickSock, s.apiSock = filepath.Join(s.dir, "pick.sock"), filepath.Join(s.dir, "configuration.sock")
	s.listen = harness.FreeAddr(t, "127.0.0.1")
	s.statusPort = harness.FreePort(t, "127.0.0.1")
	s.args = []string{"balancer", "--configuration-socket", s.apiSock, "--pick-socket", s.pickSock,
		"--socket-gid", "65534", "--state-file", filepath.Join(s.dir, "backends.json")}
	s.startGo()
	harness.WaitFor(t, readyTimeout, "the pick socket", s.goProc, unixReady(s.pickSock))

	lua, err := filepath.Abs("../../lua")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := template.Must(template.ParseFiles("testdata/sidecar-nginx.conf.tmpl"))
	var conf bytes.Buffer
	if err := tmpl.Execute(&conf, map[string]any{"Workers": 2, "Dir": s.dir, "LuaDir": lua, "StatusPort": s.statusPort,
		"APISocket": s.apiSock, "PickSocket": s.pickSock, "Listen": s.listen, "Backend": sidecarBackend}); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(s.dir, "nginx.conf")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o644); err != nil { //nolint:gosec // nginx's workers run as nobody
		t.Fatal(err)
	}
	s.nginx = harness.StartProcess(t, harness.Cmd{Name: "nginx", Path: nginxBin, LogDir: s.dir,
		Args: []string{"-p", s.dir, "-c", confPath, "-e", filepath.Join(s.dir, "error.log")}})
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(s.dir, "error.log"))
			t.Logf("nginx error.log (last 4 KiB):\n%s", b[max(0, len(b)-4096):])
		}
	})
	harness.WaitFor(t, readyTimeout, "nginx's status server", s.nginx,
		harness.HTTPReady(fmt.Sprintf("http://127.0.0.1:%d/healthz", s.statusPort), 200, nil, nil))

	// ingress-nginx's controller POSTs the backends through nginx's
	// status server; round robin over the three backends.
	var eps []map[string]string
	for _, b := range bs {
		h, p, _ := net.SplitHostPort(b.addr)
		eps = append(eps, map[string]string{"address": h, "port": p})
	}
	payload, err := json.Marshal([]map[string]any{{
		"name": sidecarBackend, "port": 80, "endpoints": eps, "noServer": false,
		"sessionAffinityConfig": map[string]any{"name": "", "mode": "", "cookieSessionAffinity": map[string]any{"name": ""}},
		"upstreamHashByConfig":  map[string]any{},
		"trafficShapingPolicy":  map[string]any{"weight": 0, "weightTotal": 0, "header": "", "headerValue": "", "headerPattern": "", "cookie": ""},
	}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/configuration/backends", s.statusPort), "application/json", bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /configuration/backends: %d; want 201", resp.StatusCode)
	}
	harness.WaitFor(t, readyTimeout, "a 2xx through nginx", s.nginx, proxies(s.listen))
	return s
}

// startGo starts the sidecar (again); it does not wait.
func (s *sidecar) startGo() {
	s.starts++
	s.goProc = harness.StartProcess(s.t, harness.Cmd{Name: fmt.Sprintf("balancer-%d", s.starts), Path: binary, Args: s.args, LogDir: s.dir})
}

func (s *sidecar) killGo() {
	if err := s.goProc.Kill(); err != nil {
		s.t.Fatal(err)
	}
}

// unixReady holds once the unix socket at path accepts connections.
func unixReady(path string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return false, err
		}
		c.Close()
		return true, nil
	}
}

// testSidecar: `switchyard balancer` beside nginx with the lua/ shim.
func testSidecar(t *testing.T) {
	bs := startBackends(t, "127.0.0.8", "127.0.0.9", "127.0.0.10")
	s := newSidecar(t, bs)
	r := startRig(t, "sidecar", loadConfig{Addr: s.listen, Host: "chaos.test", Path: "/"})

	// The shim serves from its last peer list while Go is down, and the
	// restarted sidecar answers from its state file: at once, as a
	// kubelet restarts it, and after an outage of sidecarDown.
	for _, f := range []struct {
		name    string
		restart func()
	}{
		{"kill -9 the sidecar, restart it", s.startGo},
		{fmt.Sprintf("kill -9 the sidecar, restart it %v later", sidecarDown), func() {
			<-time.After(sidecarDown) // the outage itself
			s.startGo()
		}},
	} {
		res := r.fault(f.name, s.killGo, f.restart)
		if res.Failed != 0 {
			t.Errorf("%s: %d of %d requests failed (%v); want 0: the shim serves round robin from its last peer list", f.name, res.Failed, res.Sent, res.Errors)
		}
	}

	res := r.fault("kill -9 the busiest nginx worker", killPID(t, busiestWorker(t, s.nginx.Pid())), nil)
	checkWorkerKill(t, res)
}

// sidecarDown is how long the sidecar stays dead in its second kill.
const sidecarDown = time.Second

// l4YAML is a tcp-services ConfigMap sending port to the chaos Service,
// and an ssl-passthrough Ingress for pass.test to the backends' TLS port.
func l4YAML(bs []*backend, port int) string {
	var ips []string
	_, tlsPort, _ := net.SplitHostPort(bs[0].tlsAddr)
	for _, b := range bs {
		h, _, _ := net.SplitHostPort(b.tlsAddr)
		ips = append(ips, strconv.Quote(h))
	}
	return fmt.Sprintf(`---
apiVersion: v1
kind: ConfigMap
metadata: {name: tcp-services, namespace: demo}
data:
  "%[1]d": demo/chaos:80
---
apiVersion: v1
kind: Service
metadata: {name: chaos-tls, namespace: demo}
spec:
  ports:
  - {name: https, port: 443, targetPort: %[2]s}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: chaos-tls-1
  namespace: demo
  labels: {kubernetes.io/service-name: chaos-tls}
addressType: IPv4
ports:
- {name: https, port: %[2]s, protocol: TCP}
endpoints:
- addresses: [%[3]s]
  conditions: {ready: true}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: pass
  namespace: demo
  annotations: {nginx.ingress.kubernetes.io/ssl-passthrough: "true"}
spec:
  ingressClassName: switchyard
  rules:
  - host: pass.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: chaos-tls, port: {name: https}}}}
`, port, tlsPort, strings.Join(ips, ", "))
}

// testL4: a TCP service (tcp-services) and SSL passthrough, both Go's
// tcpproxy on either plane, with one connection per request: after a
// backend is killed, new connections go to the living ones.
func testL4(t *testing.T) {
	bs := startBackends(t, "127.0.0.11", "127.0.0.12", "127.0.0.13")
	tcpAddr := harness.FreeAddr(t, "127.0.0.1")
	_, tcpPort, _ := net.SplitHostPort(tcpAddr)
	port, _ := strconv.Atoi(tcpPort)
	c := newController(t, bs, l4YAML(bs, port), "--enable-ssl-passthrough", "--tcp-services-configmap", "demo/tcp-services")
	harness.WaitFor(t, readyTimeout, "the TCP service", c.proc, harness.TCPReady(tcpAddr))

	for _, l := range []struct {
		setup  string
		cfg    loadConfig
		victim *backend
	}{
		{"TCP service", loadConfig{Addr: tcpAddr, Host: "chaos.test", Path: "/", Close: true}, bs[0]},
		{"SSL passthrough", loadConfig{Addr: c.https, Host: "pass.test", Path: "/", Close: true,
			TLS: &tls.Config{ServerName: "pass.test", InsecureSkipVerify: true}}, bs[1]}, //nolint:gosec // the backends' self-signed certificates
	} {
		r := startRig(t, l.setup, l.cfg)
		res := r.fault("kill -9 a backend", killBackend(t, l.victim), nil)
		r.load.stop()
		// tcpproxy dials the next endpoint when a connect fails.
		if res.NewConn != 0 {
			t.Errorf("%s, backend killed: %d requests on connections made after the kill failed (%v); want 0", l.setup, res.NewConn, res.Errors)
		}
		if res.Failed > loadClients {
			t.Errorf("%s, backend killed: %d requests failed (%v); want at most the %d in flight", l.setup, res.Failed, res.Errors, loadClients)
		}
	}
}
