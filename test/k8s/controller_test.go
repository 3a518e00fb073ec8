package k8s

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// daemonSetArgs returns the controller container's args from
// deploy/base/daemonset.yaml with $(POD_NAMESPACE) expanded, as the kubelet
// would.
func daemonSetArgs(t *testing.T, podNamespace string) []string {
	t.Helper()
	for _, m := range readManifests(t, filepath.Join(RepoRoot(), "deploy", "base", "daemonset.yaml")) {
		if m.obj.GetKind() != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.obj.Object, &ds); err != nil {
			t.Fatal(err)
		}
		args := ds.Spec.Template.Spec.Containers[0].Args
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "$(POD_NAMESPACE)", podNamespace)
		}
		return args
	}
	t.Fatal("no DaemonSet in deploy/base/daemonset.yaml")
	return nil
}

// buildSwitchyard compiles ./cmd/switchyard into dir.
func buildSwitchyard(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "switchyard")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/switchyard")
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/switchyard: %v\n%s", err, out)
	}
	return bin
}

// TestControllerBinaryWithDeployRBAC runs the real switchyard binary with the
// DaemonSet's args as the DaemonSet's ServiceAccount, holding exactly what
// deploy/base/rbac.yaml binds to it (applied for real; the binary's client
// impersonates system:serviceaccount:switchyard:switchyard): it must become ready (every informer synced, so
// every list and watch it needs is allowed) and proxy a request to a
// TEST-NET-1 backend named by an EndpointSlice, without a single Forbidden.
func TestControllerBinaryWithDeployRBAC(t *testing.T) {
	harness.RequireNetNS(t)
	c := Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}

	// The backend, on a TEST-NET-1 address that exists only in the namespace.
	backendLn, err := net.Listen("tcp", harness.TestIP(20)+":0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "backend %s host %s path %s", harness.TestIP(20), r.Host, r.URL.Path)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = backend.Serve(backendLn) }()
	t.Cleanup(func() { backend.Close() })
	backendPort := backendLn.Addr().(*net.TCPAddr).Port

	// The cluster side: deploy/base's IngressClass and ConfigMap for real,
	// plus an Ingress, a selector-less Service and its EndpointSlice.
	a := newApplier(t, c.AdminConfig())
	for _, f := range []string{"rbac.yaml", "ingressclass.yaml", "configmap.yaml"} {
		for _, m := range readManifests(t, filepath.Join(RepoRoot(), "deploy", "base", f)) {
			if err := a.apply(ctx, m, false); err != nil {
				t.Fatalf("apply %s: %v", m, err)
			}
		}
	}
	ing, svc, slice := demoObjects(ns)
	slice.Ports[0].Port = ptrInt32(int32(backendPort))
	slice.Endpoints = slice.Endpoints[:1]
	slice.Endpoints[0].Addresses = []string{harness.TestIP(20)}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The controller: the DaemonSet's args, then this test's ports and
	// kubeconfig (later flags win).
	dir := t.TempDir()
	ip := harness.TestIP(2)
	httpPort, httpsPort, statusPort := harness.FreePort(t, ip), harness.FreePort(t, ip), harness.FreePort(t, ip)
	asSA := c.AdminConfig()
	asSA.Impersonate.UserName = "system:serviceaccount:switchyard:switchyard"
	args := append(daemonSetArgs(t, "switchyard"),
		"--kubeconfig="+c.WriteKubeconfig(t, asSA),
		"--listen-address="+ip, "--http-port="+strconv.Itoa(httpPort), "--https-port="+strconv.Itoa(httpsPort),
		"--status-address="+ip, "--status-port="+strconv.Itoa(statusPort))
	ctrl := harness.StartProcess(t, harness.Cmd{Name: "switchyard", Path: buildSwitchyard(t, dir), Args: args, LogDir: dir})
	status := "http://" + net.JoinHostPort(ip, strconv.Itoa(statusPort))
	harness.WaitFor(t, time.Minute, "switchyard /readyz", ctrl, harness.HTTPReady(status+"/readyz", http.StatusOK, nil, nil))

	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(httpPort)) + "/hello"
	want := fmt.Sprintf("backend %s host web.example path /hello", harness.TestIP(20))
	var got string
	harness.WaitFor(t, 30*time.Second, "a proxied response from the backend", ctrl, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		req.Host = "web.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got = string(b)
		return err == nil && resp.StatusCode == http.StatusOK && got == want, nil
	})
	if log, err := os.ReadFile(ctrl.LogPath()); err != nil {
		t.Fatal(err)
	} else if strings.Contains(strings.ToLower(string(log)), "forbidden") {
		t.Errorf("the controller hit a Forbidden with deploy/base's RBAC:\n%s", ctrl.Tail(4000))
	}
}

func ptrInt32(v int32) *int32 { return &v }
