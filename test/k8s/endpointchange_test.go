package k8s

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Issue 22: an EndpointSlice change reaches the data plane in ≤ 100 ms p99.
const endpointChangeBound = 100 * time.Millisecond

// ecBackends is how many TEST-NET-1 backends the measured Ingress rotates
// through (192.0.2.21 ...); each change swaps the one endpoint for the next.
const ecBackends = 4

// BenchmarkEndpointChangeToFirstRequest measures, through real requests,
// the delay from an EndpointSlice write on a real kube-apiserver to the
// first response from the new backend, with the real switchyard binary on
// each data plane, at 1 Ingress and at $SWITCHYARD_STAGE_INGRESSES (default
// 10000; staged with Stage). Two clients request the measured Ingress
// back to back; each change replaces the slice's one endpoint by the next
// of four backends, whose responses name their address. It also counts
// responses from the removed backend to requests sent after the first new
// response ("stale", must be 0) and more than the 100 ms bound after the
// API server acknowledged the write (the Update call returned), the
// controller's switchyard_sync_duration_seconds per change, and the CPU
// time per change of the controller's process group (controller plus
// nginx), less that of an equal quiet window just before. Env:
// SWITCHYARD_EC_CHANGES (default 20), SWITCHYARD_EC_PLANES (default
// "go,nginx"), SWITCHYARD_EC_DATA (keep etcd's data there, reusing what an
// earlier run staged). A last phase streams changes without pause
// (ecRun.stream; SWITCHYARD_EC_STREAM_CHANGES, default 100, 0 skips it,
// at SWITCHYARD_EC_STREAM_RATE a second, default 20). It fails, never
// skips, if a prerequisite is missing.
//
//	go test -count=1 -timeout 90m -run '^$' -bench EndpointChange -benchtime 1x -v ./test/k8s/
func BenchmarkEndpointChangeToFirstRequest(b *testing.B) {
	requireBenchPrereqs(b)
	if _, err := os.Stat("/usr/lib/nginx/modules/ngx_http_lua_module.so"); err != nil {
		b.Fatalf("nginx with the Lua module is not installed (run test/setup.sh): %v", err)
	}
	n := stageIngresses(b, 10000)
	changes := 20
	if v := os.Getenv("SWITCHYARD_EC_CHANGES"); v != "" {
		var err error
		if changes, err = strconv.Atoi(v); err != nil || changes < 1 {
			b.Fatalf("SWITCHYARD_EC_CHANGES=%q: want a positive integer", v)
		}
	}
	planes := strings.Split(cmp.Or(os.Getenv("SWITCHYARD_EC_PLANES"), "go,nginx"), ",")
	// $SWITCHYARD_EC_DATA keeps etcd's data (one directory per Ingress
	// count): a later run reuses what an earlier one staged.
	c := StartWith(b, Options{DataDir: os.Getenv("SWITCHYARD_EC_DATA")})
	ctx, cancel := context.WithTimeout(context.Background(), 85*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		b.Fatal(err)
	}
	createIngressClass(ctx, b, admin)
	bin := buildSwitchyard(b, b.TempDir())
	ips, port := startMarkerBackends(b)
	streamChanges, streamRate := streamSettings(b)
	targets := startStreamTargets(b, ips, streamChanges)

	// The namespaces: one with the measured Ingress alone, one with n-1
	// staged Ingresses and the measured one.
	type setup struct {
		ingresses int
		ns        string
	}
	setups := []setup{{1, "ec-1"}}
	if n > 1 {
		setups = append(setups, setup{n, "ec-" + strconv.Itoa(n)})
		res, err := Stage(ctx, c.AdminConfig(), StageOptions{Namespace: setups[1].ns, Ingresses: n - 1, EndpointIP: harness.TestIP(40)})
		b.Logf("staged %d Ingresses (%d objects, %d failed, %d retries, reused %v) in %v; count check %v",
			n-1, res.Objects, res.Failed, res.Retries, res.Reused, res.Elapsed.Round(time.Millisecond), res.CountElapsed.Round(time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, s := range setups {
		if s.ingresses == 1 {
			if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				b.Fatal(err)
			}
		}
		createMeasured(ctx, b, admin, s.ns, ips[0], port)
	}

	for _, s := range setups {
		for _, plane := range planes {
			b.Run(fmt.Sprintf("ingresses=%d/plane=%s", s.ingresses, plane), func(b *testing.B) {
				e := &ecRun{b: b, ctx: ctx, admin: admin, ns: s.ns, ips: ips, changes: changes}
				e.startController(c, bin, plane)
				e.run()
				e.stream(targets, streamRate)
			})
		}
	}
}

// createIngressClass creates deploy/base/ingressclass.yaml's IngressClass.
func createIngressClass(ctx context.Context, b *testing.B, admin kubernetes.Interface) {
	path := filepath.Join(RepoRoot(), "deploy", "base", "ingressclass.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	ms, err := decodeManifests(path, data)
	if err != nil || len(ms) != 1 {
		b.Fatalf("decode %s: %d objects, %v; want 1", path, len(ms), err)
	}
	var ic networkingv1.IngressClass
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ms[0].obj.Object, &ic); err != nil {
		b.Fatal(err)
	}
	if _, err := admin.NetworkingV1().IngressClasses().Create(ctx, &ic, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
}

// startMarkerBackends serves on ecBackends TEST-NET-1 addresses, one port;
// each answers its own address.
func startMarkerBackends(b *testing.B) ([]string, int) {
	var ips []string
	for i := range ecBackends {
		ips = append(ips, harness.TestIP(21+i))
	}
	port := harness.FreePort(b, ips[0])
	for _, ip := range ips {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			b.Fatal(err)
		}
		serveMarker(b, ln, ip)
	}
	return ips, port
}

// serveMarker answers every request on ln with body until the benchmark
// ends.
func serveMarker(b *testing.B, ln net.Listener, body string) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
}

// The measured Ingress: host ec.example to Service ec, whose slice "ec-1"
// names one of the marker backends.
const ecHost, ecName = "ec.example", "ec"

func createMeasured(ctx context.Context, b *testing.B, admin kubernetes.Interface, ns, ip string, port int) {
	ing, svc, slice := demoObjects(ns)
	ing.Name, ing.Spec.Rules[0].Host = ecName, ecHost
	ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = ecName
	svc.Name = ecName
	slice.Name, slice.Labels[discoveryv1.LabelServiceName] = ecName+"-1", ecName
	slice.Ports[0].Port = ptr.To(int32(port))
	slice.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}
	// On a kept data directory they exist already: the slice is reset.
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		cur, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, slice.Name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		cur.Ports, cur.Endpoints = slice.Ports, slice.Endpoints
		if _, err := admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	} else if err != nil {
		b.Fatal(err)
	}
	if _, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
}

// ecRun is one sub-benchmark: one controller, one plane, one namespace.
type ecRun struct {
	b       *testing.B
	ctx     context.Context
	admin   kubernetes.Interface
	ns      string
	ips     []string
	changes int

	ctrl   *harness.Process
	cur    *discoveryv1.EndpointSlice // as last written
	at     int                        // index in ips of its endpoint
	status string                     // http://ip:port of the status server
	pprof  string                     // http://127.0.0.1:port of /debug/pprof
	url    string                     // http://ip:port/ of the HTTP listener

	// guarded by mu
	mu    sync.Mutex
	log   []ecResponse
	want  string        // marker of the new backend
	since time.Time     // the write
	first time.Time     // first response from want after since
	got   chan struct{} // closed at first
}

type ecResponse struct {
	sent, recv time.Time
	body       string // the backend's address, or "<status> <body>" / an error
}

func (e *ecRun) startController(c *Cluster, bin, plane string) {
	b := e.b
	ip := harness.TestIP(5)
	httpPort, httpsPort, statusPort := harness.FreePort(b, ip), harness.FreePort(b, ip), harness.FreePort(b, ip)
	args := []string{"--data-plane=" + plane, "--kubeconfig=" + c.WriteKubeconfig(b, c.AdminConfig()),
		"--watch-namespace=" + e.ns, "--election-id=switchyard-ec-" + plane + "-" + e.ns,
		"--listen-address=" + ip, "--http-port=" + strconv.Itoa(httpPort), "--https-port=" + strconv.Itoa(httpsPort),
		"--status-address=" + ip, "--status-port=" + strconv.Itoa(statusPort)}
	pprofPort := harness.FreePort(b, "127.0.0.1")
	e.pprof = "http://127.0.0.1:" + strconv.Itoa(pprofPort)
	args = append(args, "--profiling", "--profiler-address=127.0.0.1", "--profiler-port="+strconv.Itoa(pprofPort))
	if plane == "nginx" {
		// nginx workers run as nobody: the nginx dir must be reachable.
		dir, err := os.MkdirTemp("", "switchyard-ec-nginx")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		args = append(args, "--nginx-status-port="+strconv.Itoa(harness.FreePort(b, "127.0.0.1")),
			"--nginx-dir="+dir, "--lua-dir="+filepath.Join(RepoRoot(), "lua"))
	}
	// Runs after StartProcess's cleanup has stopped the controller: its
	// nginx (own process group) must be gone with it.
	b.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			var left []string
			for _, p := range readProcs(b) {
				if p.comm == "nginx" && p.state != "Z" {
					left = append(left, fmt.Sprintf("pid %d ppid %d pgrp %d state %s", p.pid, p.ppid, p.pgrp, p.state))
				}
			}
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				b.Errorf("nginx still running 10 s after the controller was stopped: %s", strings.Join(left, "; "))
				return
			}
			pause(context.Background(), 100*time.Millisecond)
		}
	})
	start := time.Now()
	// The controller stops nginx gracefully and waits for it: at 50,000
	// Ingresses nginx takes longer than the default grace to exit.
	e.ctrl = harness.StartProcess(b, harness.Cmd{Name: "switchyard-" + plane, Path: bin, Args: args,
		Env: []string{"POD_NAMESPACE=" + e.ns}, LogDir: b.TempDir(), StopGrace: 2 * time.Minute})
	e.status = "http://" + net.JoinHostPort(ip, strconv.Itoa(statusPort))
	e.url = "http://" + net.JoinHostPort(ip, strconv.Itoa(httpPort)) + "/"
	harness.WaitFor(b, 20*time.Minute, "switchyard /readyz", e.ctrl, harness.HTTPReady(e.status+"/readyz", http.StatusOK, nil, nil))
	// Earlier sub-benchmarks moved the endpoint on: wait for the current one.
	cur, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Get(e.ctx, ecName+"-1", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	e.cur = cur
	e.at = slices.Index(e.ips, cur.Endpoints[0].Addresses[0])
	harness.WaitFor(b, 5*time.Minute, "traffic to "+e.ips[e.at], e.ctrl, func(ctx context.Context) (bool, error) {
		return e.get(ctx, http.DefaultClient) == e.ips[e.at], nil
	})
	b.Logf("controller ready and proxying %v after start", time.Since(start).Round(time.Millisecond))
}

// get requests the measured host and returns the body of a 200, or
// "<status> <body>", or the error.
func (e *ecRun) get(ctx context.Context, cl *http.Client) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url, nil)
	if err != nil {
		return err.Error()
	}
	req.Host = ecHost
	resp, err := cl.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("%d %s", resp.StatusCode, body)
	}
	return string(body)
}

// client requests back to back until ctx ends, logging every response.
func (e *ecRun) client(ctx context.Context) {
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 10 * time.Second}
	defer cl.CloseIdleConnections()
	for ctx.Err() == nil {
		sent := time.Now()
		body := e.get(ctx, cl)
		recv := time.Now()
		if ctx.Err() != nil {
			return // cut short by the end of the phase, not an answer
		}
		e.mu.Lock()
		e.log = append(e.log, ecResponse{sent, recv, body})
		if e.got != nil && body == e.want && e.first.IsZero() && sent.After(e.since) {
			e.first = recv
			close(e.got)
		}
		e.mu.Unlock()
	}
}

// ecChange is what one change measured.
type ecChange struct {
	delay        time.Duration // write to first response from the new backend
	write        time.Duration // the Update call itself
	stale        int           // removed backend's responses to requests sent after the first new one
	staleBound   int           // ... sent more than endpointChangeBound after the write was acknowledged
	errors       int           // non-200 responses and errors in the window
	syncs        float64       // switchyard_sync_duration_seconds count increase
	syncSeconds  float64       // ... and sum increase
	cpu, cpuIdle time.Duration // process group CPU in the window, and in the quiet window before
}

// swap writes the slice with the next backend as its one endpoint and
// returns the old and new addresses and how long the Update call took.
func (e *ecRun) swap(before func(next string) time.Time) (old, next string, write time.Duration) {
	old, next = e.ips[e.at], e.ips[(e.at+1)%len(e.ips)]
	e.cur.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{next}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}
	t0 := before(next)
	upd, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Update(e.ctx, e.cur, metav1.UpdateOptions{})
	if err != nil {
		e.b.Fatalf("update the slice to %s: %v", next, err)
	}
	e.cur, e.at = upd, (e.at+1)%len(e.ips)
	return old, next, time.Since(t0)
}

func (e *ecRun) run() {
	b := e.b
	ctx, stop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); e.client(ctx) }()
	}
	// The latency phase: clients request back to back during the changes.
	const window = 700 * time.Millisecond
	var got []ecChange
	// /metrics is read after each change's window, then a quiet window
	// passes before the next write: at 10k Ingresses one scrape costs the
	// controller ~0.4 s of CPU (and garbage), which must not overlap a
	// change.
	syncs0, sum0 := e.syncMetric()
	for k := 0; k < e.changes; k++ {
		// A quiet spell longer than the controller's MaxHoldoff, so this
		// change is built on its own.
		pause(e.ctx, window)
		var t0 time.Time
		var gotc chan struct{}
		old, next, write := e.swap(func(next string) time.Time {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.log, e.want, e.first, e.got = e.log[:0], next, time.Time{}, make(chan struct{})
			gotc = e.got
			t0 = time.Now()
			e.since = t0
			return t0
		})
		select {
		case <-gotc:
		case <-time.After(30 * time.Second):
			b.Fatalf("change %d: no response from %s within 30 s of the write; last output:\n%s", k, next, e.ctrl.Tail(3000))
		}
		pause(e.ctx, time.Until(t0.Add(window)))
		syncs1, sum1 := e.syncMetric()

		e.mu.Lock()
		ch := ecChange{delay: e.first.Sub(t0), write: write, syncs: syncs1 - syncs0, syncSeconds: sum1 - sum0}
		syncs0, sum0 = syncs1, sum1
		for _, r := range e.log {
			switch {
			case r.body == old && r.sent.After(e.first):
				b.Logf("change %d: stale response from %s to a request sent %v after the write, answered at %v (first new response %v)",
					k, old, r.sent.Sub(t0).Round(10*time.Microsecond), r.recv.Sub(t0).Round(10*time.Microsecond), ch.delay.Round(10*time.Microsecond))
				ch.stale++
				// The bound runs from the API server's acknowledgement:
				// nothing can route by an object before it is stored.
				if r.sent.After(t0.Add(write + endpointChangeBound)) {
					ch.staleBound++
				}
			case r.body != old && r.body != next:
				ch.errors++
			}
		}
		e.mu.Unlock()
		got = append(got, ch)
		b.Logf("change %2d %s -> %s: first new response %v after the write (Update call %v); stale %d (after bound %d); errors %d; syncs %.0f (%.2f ms)",
			k, old, next, ch.delay.Round(10*time.Microsecond), ch.write.Round(10*time.Microsecond), ch.stale, ch.staleBound, ch.errors,
			ch.syncs, 1000*ch.syncSeconds)
	}
	stop()
	wg.Wait()

	// The CPU phase: the same number of changes without traffic (on the Go
	// plane the controller is the proxy, and proxying would drown a change's
	// CPU time), each window against an equal quiet window just before.
	// With $SWITCHYARD_EC_PPROF set to a directory, the controller's CPU
	// profile over this phase is written there.
	profiled := e.profile(time.Duration(len(got)) * 3 * window)
	for k := range got {
		syncs0, _ := e.syncMetric()
		pause(e.ctx, window) // the scrape's garbage collection settles
		idle0 := groupCPU(b, e.ctrl.Pid())
		pause(e.ctx, window)
		cpu0 := groupCPU(b, e.ctrl.Pid())
		var t0 time.Time
		e.swap(func(string) time.Time { t0 = time.Now(); return t0 })
		pause(e.ctx, time.Until(t0.Add(window)))
		got[k].cpu, got[k].cpuIdle = groupCPU(b, e.ctrl.Pid())-cpu0, cpu0-idle0
		if syncs1, _ := e.syncMetric(); syncs1 == syncs0 {
			b.Fatalf("CPU phase change %d: no sync within %v", k, window)
		}
	}
	if err := profiled(); err != nil {
		b.Error(err)
	}
	e.report(got)
	e.reportMemory()
}

// reportMemory reports the controller process's resident memory (VmRSS)
// and its peak (VmHWM) from /proc, after the lone and CPU phases and their /metrics
// scrapes (issue 22: RSS ≤ 1 GB at 50k Ingresses on the Go plane; on the
// nginx plane nginx's processes are not counted).
func (e *ecRun) reportMemory() {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(e.ctrl.Pid()) + "/status")
	if err != nil {
		e.b.Fatal(err)
	}
	kb := map[string]float64{}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) == 3 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			kb[f[0]], _ = strconv.ParseFloat(f[1], 64)
		}
	}
	e.b.ReportMetric(kb["VmRSS:"]/1000, "rss-MB")
	e.b.ReportMetric(kb["VmHWM:"]/1000, "peak-rss-MB")
	e.b.Logf("controller memory after the lone and CPU phases and their scrapes: RSS %.0f MB, peak %.0f MB", kb["VmRSS:"]/1000, kb["VmHWM:"]/1000)
}

// profile starts fetching a CPU profile of the controller lasting d, when
// $SWITCHYARD_EC_PPROF names a directory; the returned func waits for it.
func (e *ecRun) profile(d time.Duration) func() error {
	dir := os.Getenv("SWITCHYARD_EC_PPROF")
	if dir == "" {
		return func() error { return nil }
	}
	path := filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-").Replace(e.b.Name())+".pprof")
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			resp, err := http.Get(e.pprof + "/debug/pprof/profile?seconds=" + strconv.Itoa(int(d.Seconds())+1))
			if err != nil {
				return fmt.Errorf("fetch the CPU profile: %w", err)
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				return fmt.Errorf("fetch the CPU profile: %d, %v", resp.StatusCode, err)
			}
			return os.WriteFile(path, data, 0o644)
		}()
	}()
	return func() error {
		err := <-done
		if err == nil {
			e.b.Logf("CPU profile of the controller during the CPU phase: %s", path)
		}
		return err
	}
}

func (e *ecRun) report(got []ecChange) {
	b := e.b
	var delays, afterAck, syncMs []float64
	var stale, staleBound, errs int
	var syncs float64
	var cpu, idle time.Duration
	for _, c := range got {
		delays = append(delays, float64(c.delay)/float64(time.Millisecond))
		// The API server's own write time (the Update call) is not the
		// controller's; this is what follows it (0 when the new backend
		// answered before the call returned).
		afterAck = append(afterAck, float64(max(0, c.delay-c.write))/float64(time.Millisecond))
		if c.syncs > 0 {
			syncMs = append(syncMs, 1000*c.syncSeconds/c.syncs)
		}
		syncs += c.syncs
		stale, staleBound, errs = stale+c.stale, staleBound+c.staleBound, errs+c.errors
		cpu, idle = cpu+c.cpu, idle+c.cpuIdle
	}
	n := float64(len(got))
	cpuPer := (float64(cpu) - float64(idle)) / n / float64(time.Millisecond)
	b.ReportMetric(quantile(delays, 0.50), "p50-ms")
	b.ReportMetric(quantile(delays, 0.99), "p99-ms")
	b.ReportMetric(slices.Max(delays), "max-ms")
	b.ReportMetric(quantile(afterAck, 0.50), "after-write-p50-ms")
	b.ReportMetric(quantile(afterAck, 0.99), "after-write-p99-ms")
	b.ReportMetric(float64(stale), "stale")
	b.ReportMetric(float64(staleBound), "stale-after-bound")
	b.ReportMetric(float64(errs), "errors")
	b.ReportMetric(quantile(syncMs, 0.50), "sync-p50-ms")
	b.ReportMetric(quantile(syncMs, 0.99), "sync-p99-ms")
	b.ReportMetric(syncs/n, "syncs/change")
	b.ReportMetric(cpuPer, "cpu-ms/change")
	b.Logf("%d changes: first request p50 %.2f ms p99 %.2f ms max %.2f ms (after the Update call returned: p50 %.2f ms p99 %.2f ms); stale %d, after %v %d; errors %d; sync p50 %.2f ms p99 %.2f ms (%.2f syncs/change); CPU %.2f ms/change over a %.2f ms quiet baseline",
		len(got), quantile(delays, 0.5), quantile(delays, 0.99), slices.Max(delays), quantile(afterAck, 0.5), quantile(afterAck, 0.99), stale, endpointChangeBound, staleBound, errs,
		quantile(syncMs, 0.5), quantile(syncMs, 0.99), syncs/n, cpuPer, float64(idle)/n/float64(time.Millisecond))
	if stale != 0 || staleBound != 0 || errs != 0 {
		b.Errorf("stale responses %d (after the bound %d), errors %d; want 0", stale, staleBound, errs)
	}
}

// quantile is the nearest-rank q-quantile of v (v is sorted in place).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(q*float64(len(v))+0.999999) - 1
	return v[max(0, min(i, len(v)-1))]
}

// syncMetric reads switchyard_sync_duration_seconds' count and sum.
func (e *ecRun) syncMetric() (count, sum float64) {
	resp, err := http.Get(e.status + "/metrics")
	if err != nil {
		e.b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		v := func() float64 {
			f, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			return f
		}
		switch {
		case strings.HasPrefix(l, "switchyard_sync_duration_seconds_count"):
			count = v()
		case strings.HasPrefix(l, "switchyard_sync_duration_seconds_sum"):
			sum = v()
		}
	}
	return count, sum
}

// procStat is what groupCPU and leftovers read from /proc/<pid>/stat.
type procStat struct {
	pid, ppid, pgrp int
	comm, state     string
}

// readProcs lists the processes this PID namespace shows.
func readProcs(b *testing.B) []procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var out []procStat
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// "pid (comm) state ppid pgrp ..."; comm may hold spaces.
		i, j := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
		f := strings.Fields(string(data[j+1:]))
		if i < 0 || len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		out = append(out, procStat{pid: pid, ppid: ppid, pgrp: pgrp, comm: string(data[i+1 : j]), state: f[0]})
	}
	return out
}

// groupCPU is the CPU time of every thread of the controller (pid, a
// process group leader) and of every process in its group or descended
// from it (nginx runs in a process group of its own): the first field of
// /proc/<pid>/task/<tid>/schedstat, in nanoseconds (the utime/stime of
// /proc/<pid>/stat count 10 ms ticks, too coarse for one change). Threads
// that exited are not counted.
func groupCPU(b *testing.B, pid int) time.Duration {
	ps := readProcs(b)
	parent := map[int]int{}
	for _, p := range ps {
		parent[p.pid] = p.ppid
	}
	ours := func(p procStat) bool {
		if p.pgrp == pid {
			return true
		}
		for q, n := p.pid, 0; q > 1 && n < 64; q, n = parent[q], n+1 {
			if q == pid {
				return true
			}
		}
		return false
	}
	var ns int64
	for _, p := range ps {
		if !ours(p) {
			continue
		}
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(p.pid) + "/task/*/schedstat")
		for _, t := range tasks {
			data, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			if f := strings.Fields(string(data)); len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				ns += v
			}
		}
	}
	return time.Duration(ns)
}

// pause waits d or until ctx ends; it paces the changes.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
