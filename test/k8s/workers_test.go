package k8s

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestGoWorkersFollowTheCluster runs the switchyard binary with
// --go-workers=2 against the real API server: the workers serve the
// Ingress, an EndpointSlice update reaches both (every request on a fresh
// connection, so on either worker, goes to the new address and none to the
// old), and /metrics sums the workers' request counts.
func TestGoWorkersFollowTheCluster(t *testing.T) {
	harness.RequireNetNS(t)
	c := Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Two backends on TEST-NET-1 addresses that exist only in the
	// namespace, each answering with its address.
	var port int
	for _, n := range []int{21, 22} {
		addr := harness.TestIP(n)
		ln, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port // the second on the same port
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, addr)
		}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
	}

	a := newApplier(t, c.AdminConfig())
	for _, m := range readManifests(t, filepath.Join(RepoRoot(), "deploy", "base", "ingressclass.yaml")) {
		if err := a.apply(ctx, m, false); err != nil {
			t.Fatalf("apply %s: %v", m, err)
		}
	}
	ing, svc, slice := demoObjects(ns)
	ing.Spec.Rules[0].Host = "workers.example"
	slice.Ports[0].Port = ptrInt32(int32(port))
	slice.Endpoints = slice.Endpoints[:1]
	slice.Endpoints[0].Addresses = []string{harness.TestIP(21)}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if slice, err = admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	ip := harness.TestIP(2)
	httpPort, httpsPort, statusPort := harness.FreePort(t, ip), harness.FreePort(t, ip), harness.FreePort(t, ip)
	args := []string{"controller", "--data-plane=go", "--go-workers=2", "--watch-namespace=" + ns,
		"--kubeconfig=" + c.WriteKubeconfig(t, c.AdminConfig()),
		"--listen-address=" + ip, "--http-port=" + strconv.Itoa(httpPort), "--https-port=" + strconv.Itoa(httpsPort),
		"--status-address=" + ip, "--status-port=" + strconv.Itoa(statusPort)}
	ctrl := harness.StartProcess(t, harness.Cmd{Name: "switchyard", Path: buildSwitchyard(t, dir), Args: args, LogDir: dir})
	status := "http://" + net.JoinHostPort(ip, strconv.Itoa(statusPort))
	harness.WaitFor(t, time.Minute, "switchyard /readyz", ctrl, harness.HTTPReady(status+"/readyz", http.StatusOK, nil, nil))

	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(httpPort)) + "/"
	get := func(ctx context.Context) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		req.Host = "workers.example"
		req.Close = true // a connection per request: either worker
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return string(b), err
	}
	harness.WaitFor(t, 30*time.Second, "the first backend", ctrl, func(ctx context.Context) (bool, error) {
		got, err := get(ctx)
		return err == nil && got == harness.TestIP(21), nil
	})

	slice.Endpoints[0].Addresses = []string{harness.TestIP(22)}
	if _, err := admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "the second backend", ctrl, func(ctx context.Context) (bool, error) {
		got, err := get(ctx)
		return err == nil && got == harness.TestIP(22), nil
	})
	// Both workers have it: no fresh connection reaches the old address.
	for i := range 40 {
		got, err := get(ctx)
		if err != nil || got != harness.TestIP(22) {
			t.Fatalf("request %d after the update: %q %v\n%s", i, got, err, ctrl.Tail(2000))
		}
	}

	resp, err := http.Get(status + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "nginx_ingress_controller_requests{") && strings.Contains(line, `ingress="web"`) {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			total += v
		}
	}
	if total < 41 {
		t.Errorf("/metrics counts %v requests of the Ingress, want at least the 41 sent after the first answer", total)
	}
}
