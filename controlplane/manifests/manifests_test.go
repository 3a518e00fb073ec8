package manifests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

const defaultTestTimeout = 10 * time.Second

const ingressYAML = `# an Ingress and its Service
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: echo
  namespace: demo
  annotations:
    nginx.ingress.kubernetes.io/load-balance: ewma
spec:
  rules:
  - host: echo.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: echo
            port:
              number: 80
---
apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: demo
spec:
  ports:
  - port: 80
`

func writeFile(t testing.TB, dir, name, content string) {
	t.Helper()
	// Write then rename, as editors and kubectl-style tools do, so the
	// watcher never sees a half-written file.
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func TestLoadDecodesSupportedKinds(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "echo.yaml", ingressYAML)
	writeFile(t, dir, "notes.txt", "not a manifest, ignored")

	s, err := Load(Config{Dir: dir})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	ctx := context.Background()
	ing, err := s.Client().NetworkingV1().Ingresses("demo").Get(ctx, "echo", getOpts)
	if err != nil {
		t.Fatalf("get ingress: %v", err)
	}
	if got, want := ing.Annotations["nginx.ingress.kubernetes.io/load-balance"], "ewma"; got != want {
		t.Errorf("annotation = %q; want %q", got, want)
	}
	if ing.ResourceVersion == "" || ing.UID == "" || ing.CreationTimestamp.IsZero() {
		t.Errorf("ingress lacks resourceVersion/uid/creationTimestamp: %+v", ing.ObjectMeta)
	}
	if _, err := s.Client().CoreV1().Services("demo").Get(ctx, "echo", getOpts); err != nil {
		t.Errorf("get service: %v", err)
	}
}

func TestLoadRejectsBadFilesAndKeepsTheRest(t *testing.T) {
	tests := []struct {
		name, content, wantErr string
	}{
		{"no kind", "apiVersion: v1\nmetadata:\n  name: x\n", "document 1"},
		{"no name", "apiVersion: v1\nkind: Service\nmetadata: {}\n", "no metadata.name"},
		{"not yaml", "apiVersion: v1\nkind: Service\nmetadata: [\n", "document 1"},
		{"namespaced cluster object", "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  name: a\n  namespace: b\n", "cluster-scoped"},
		{"duplicate in one file", "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: a\n", "appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "good.yaml", ingressYAML)
			writeFile(t, dir, "bad.yaml", tt.content)
			var reported []string
			s, err := Load(Config{Dir: dir, OnError: func(path string, err error) {
				reported = append(reported, filepath.Base(path)+": "+err.Error())
			}})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Load error = %v; want one containing %q", err, tt.wantErr)
			}
			if len(reported) != 1 || !strings.HasPrefix(reported[0], "bad.yaml: ") {
				t.Errorf("reported = %q; want one report for bad.yaml", reported)
			}
			if _, err := s.Client().NetworkingV1().Ingresses("demo").Get(context.Background(), "echo", getOpts); err != nil {
				t.Errorf("good file not served: %v", err)
			}
		})
	}
}

// TestOtherKindsSkipped: a file that holds a Deployment and a custom
// resource beside its Service and Ingress (as most examples do) serves its
// Service and Ingress; the other kinds are reported once per kind, and not
// again on a reload that reads the same file.
func TestOtherKindsSkipped(t *testing.T) {
	dir := t.TempDir()
	deployment := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: echo\n  namespace: demo\nspec:\n  selector: {matchLabels: {app: echo}}\n" +
		"  template:\n    metadata: {labels: {app: echo}}\n    spec: {containers: [{name: echo, image: echo}]}\n"
	custom := "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"
	writeFile(t, dir, "all.yaml", deployment+"---\n"+ingressYAML+"---\n"+deployment[:len("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ")]+"echo2\n---\n"+custom)
	var skipped []string
	s, err := Load(Config{Dir: dir, OnSkip: func(path, kind string, n int) {
		skipped = append(skipped, fmt.Sprintf("%s %s %d", filepath.Base(path), kind, n))
	}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	ctx := context.Background()
	if _, err := s.Client().NetworkingV1().Ingresses("demo").Get(ctx, "echo", getOpts); err != nil {
		t.Errorf("Ingress not served: %v", err)
	}
	if _, err := s.Client().CoreV1().Services("demo").Get(ctx, "echo", getOpts); err != nil {
		t.Errorf("Service not served: %v", err)
	}
	want := []string{"all.yaml apps/v1 Deployment 2", "all.yaml example.com/v1 Widget 1"}
	if diff := cmp.Diff(want, skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 2 {
		t.Errorf("a reload of the same file reported again: %q", skipped)
	}
}

// TestReloadFilesReadsOnlyThem: an edit re-reads the files it names, not
// the directory; the first file in name order still wins a name two files
// define, and a file removed hands the name to the next.
func TestReloadFilesReadsOnlyThem(t *testing.T) {
	dir := t.TempDir()
	svc := func(name, port string) string {
		return "apiVersion: v1\nkind: Service\nmetadata: {name: " + name + ", namespace: demo}\nspec:\n  ports: [{name: http, port: " + port + "}]\n"
	}
	for i := range 40 {
		writeFile(t, dir, fmt.Sprintf("svc-%02d.yaml", i), svc(fmt.Sprintf("s%d", i), "80"))
	}
	writeFile(t, dir, "a-shared.yaml", svc("shared", "81"))
	writeFile(t, dir, "b-shared.yaml", svc("shared", "82"))
	s, err := Load(Config{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "also defined") {
		t.Fatalf("Load: %v; want the duplicate reported", err)
	}
	port := func(name string) int32 {
		t.Helper()
		got, err := s.Client().CoreV1().Services("demo").Get(context.Background(), name, getOpts)
		if err != nil {
			t.Fatal(err)
		}
		return got.Spec.Ports[0].Port
	}
	reads := s.reads
	writeFile(t, dir, "svc-07.yaml", svc("s7", "8080"))
	writeFile(t, dir, "b-shared.yaml", svc("shared", "83"))
	if err := s.reloadFiles([]string{filepath.Join(dir, "svc-07.yaml"), filepath.Join(dir, "b-shared.yaml")}); err == nil {
		t.Error("the duplicate is not reported again")
	}
	if n := s.reads - reads; n != 2 {
		t.Errorf("an edit of 2 files decoded %d files", n)
	}
	if p := port("s7"); p != 8080 {
		t.Errorf("s7 port %d after its edit", p)
	}
	if p := port("shared"); p != 81 {
		t.Errorf("shared port %d; want the first file's 81", p)
	}
	if err := os.Remove(filepath.Join(dir, "a-shared.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := s.reloadFiles([]string{filepath.Join(dir, "a-shared.yaml")}); err != nil {
		t.Fatal(err)
	}
	if p := port("shared"); p != 83 {
		t.Errorf("shared port %d after the first file went; want the other file's 83", p)
	}
	if err := os.Remove(filepath.Join(dir, "b-shared.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := s.reloadFiles([]string{filepath.Join(dir, "b-shared.yaml")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().CoreV1().Services("demo").Get(context.Background(), "shared", getOpts); err == nil {
		t.Error("shared still served after both files went")
	}
	if p := port("s8"); p != 80 {
		t.Errorf("an untouched file's Service changed: port %d", p)
	}
}

// TestRunFollowsFileChanges drives a real informer off the Source and edits
// files on disk: the informer must see the update, keep the last good state
// through a broken edit, and see the delete.
func TestRunFollowsFileChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "echo.yaml", ingressYAML)
	reported := make(chan string, 16)
	s, err := Load(Config{Dir: dir, Debounce: 10 * time.Millisecond, OnError: func(path string, err error) {
		reported <- err.Error()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()

	factory := informers.NewSharedInformerFactory(s.Client(), 0)
	inf := factory.Networking().V1().Ingresses()
	changed := make(chan struct{}, 16)
	_, err = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, _ any) { changed <- struct{}{} },
		DeleteFunc: func(any) { changed <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		t.Fatal("informer did not sync")
	}
	lister := inf.Lister()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	annotation := func() string {
		ing, err := lister.Ingresses("demo").Get("echo")
		if err != nil {
			return "<missing>"
		}
		return ing.Annotations["nginx.ingress.kubernetes.io/load-balance"]
	}

	writeFile(t, dir, "echo.yaml", strings.Replace(ingressYAML, "ewma", "round_robin", 1))
	waitFor("update to round_robin", func() bool { return annotation() == "round_robin" })

	writeFile(t, dir, "echo.yaml", "apiVersion: v1\nkind: [broken\n")
	// The broken edit is reported and the last good object keeps serving.
	select {
	case msg := <-reported:
		if !strings.Contains(msg, "echo.yaml") {
			t.Errorf("report %q does not name the file", msg)
		}
	case <-ctx.Done():
		t.Fatal("broken file was not reported")
	}
	if got := annotation(); got != "round_robin" {
		t.Errorf("after broken edit annotation = %q; want the last good round_robin", got)
	}

	if err := os.Remove(filepath.Join(dir, "echo.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor("delete", func() bool {
		all, _ := lister.List(labels.Everything())
		return len(all) == 0
	})
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run: %v", err)
	}
}

var getOpts = metav1.GetOptions{}

// A Secret's stringData is stored into data, as the API server stores it.
func TestLoadSecretStringData(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "secret.yaml", `apiVersion: v1
kind: Secret
metadata: {name: staff, namespace: demo}
data: {kept: a2VwdA==, over: b2xk}
stringData: {auth: "alice:{PLAIN}pw\n", over: new}
`)
	s, err := Load(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := s.Client().CoreV1().Secrets("demo").Get(context.Background(), "staff", getOpts)
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["auth"]) != "alice:{PLAIN}pw\n" || string(sec.Data["kept"]) != "kept" || string(sec.Data["over"]) != "new" || len(sec.StringData) != 0 {
		t.Errorf("data %q, stringData %q", sec.Data, sec.StringData)
	}
}

// TestSourceKeepsDigests: the Source keeps a digest of each object, not
// the object (the tracker and the informers hold theirs); an edit is
// still applied, an unchanged file is not, and when the file that shadowed
// a key goes, the next file holding it is decoded again and wins.
func TestSourceKeepsDigests(t *testing.T) {
	dir := t.TempDir()
	for i := range 5 {
		writeFile(t, dir, fmt.Sprintf("svc-%d.yaml", i), fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: s%d, namespace: demo}\nspec:\n  ports: [{name: http, port: 80}]\n", i))
	}
	// s0 again, later in name order: shadowed by svc-0.yaml.
	writeFile(t, dir, "z-s0.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: s0, namespace: demo}\nspec:\n  ports: [{name: http, port: 9090}]\n")
	s, err := Load(Config{Dir: dir})
	if err == nil {
		t.Fatal("Load: no error for s0 defined twice")
	}
	port := func(name string) (int32, string) {
		t.Helper()
		got, err := s.Client().CoreV1().Services("demo").Get(context.Background(), name, getOpts)
		if err != nil {
			t.Fatal(err)
		}
		return got.Spec.Ports[0].Port, got.ResourceVersion
	}
	if p, _ := port("s0"); p != 80 {
		t.Errorf("s0 port %d; want 80 from svc-0.yaml, the first file", p)
	}
	if len(s.applied) != 5 {
		t.Fatalf("%d objects applied, want 5", len(s.applied))
	}

	// An edit is applied; rewriting a file unchanged applies nothing.
	_, v4 := port("s4")
	writeFile(t, dir, "svc-3.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: s3, namespace: demo}\nspec:\n  ports: [{name: http, port: 8080}]\n")
	writeFile(t, dir, "svc-4.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: s4, namespace: demo}\nspec:\n  ports: [{name: http, port: 80}]\n")
	if err := s.reloadFiles([]string{filepath.Join(dir, "svc-3.yaml"), filepath.Join(dir, "svc-4.yaml")}); err != nil {
		t.Fatal(err)
	}
	if p, v := port("s3"); p != 8080 || v == "" {
		t.Errorf("s3 served with port %d, version %q; want 8080 and a version", p, v)
	}
	if _, v := port("s4"); v != v4 {
		t.Errorf("s4 rewritten unchanged: version %s -> %s; want it untouched", v4, v)
	}

	// The shadowing file goes: z-s0.yaml, not read in this call, wins.
	if err := os.Remove(filepath.Join(dir, "svc-0.yaml")); err != nil {
		t.Fatal(err)
	}
	reads := s.reads
	if err := s.reloadFiles([]string{filepath.Join(dir, "svc-0.yaml")}); err != nil {
		t.Fatal(err)
	}
	if p, _ := port("s0"); p != 9090 {
		t.Errorf("s0 port %d after svc-0.yaml went; want 9090 from z-s0.yaml", p)
	}
	if s.reads != reads+1 {
		t.Errorf("%d files read for the removal; want 1 (z-s0.yaml, decoded again)", s.reads-reads)
	}
}

// BenchmarkLoadRetained loads 10,000 Ingresses with their Services and
// EndpointSlices (30,000 objects in 10 files) and reports the heap the
// Source retains, its clientset's tracker included, after a GC.
//
//	go test -run '^$' -bench LoadRetained -benchtime 3x ./controlplane/manifests/
func BenchmarkLoadRetained(b *testing.B) {
	dir := b.TempDir()
	for f := range 10 {
		var buf strings.Builder
		for i := f * 1000; i < (f+1)*1000; i++ {
			fmt.Fprintf(&buf, `---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i%[1]d, namespace: demo, annotations: {nginx.ingress.kubernetes.io/proxy-read-timeout: "30"}}
spec:
  ingressClassName: switchyard
  rules:
  - host: h%[1]d.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: s%[1]d, port: {name: http}}}}
---
apiVersion: v1
kind: Service
metadata: {name: s%[1]d, namespace: demo}
spec:
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: s%[1]d-1, namespace: demo, labels: {kubernetes.io/service-name: s%[1]d}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [192.0.2.1], conditions: {ready: true}}
- {addresses: [192.0.2.2], conditions: {ready: true}}
`, i)
		}
		writeFile(b, dir, fmt.Sprintf("f%02d.yaml", f), buf.String())
	}
	var retained float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s, err := Load(Config{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(s)
		retained = float64(after.HeapAlloc) - float64(before.HeapAlloc)
	}
	b.ReportMetric(retained/(1<<20), "retained-MiB")
}
