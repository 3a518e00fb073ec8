package k8s

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// manifest is one object of a file under deploy/.
type manifest struct {
	file string
	obj  *unstructured.Unstructured
}

func (m manifest) String() string {
	return filepath.Base(m.file) + ": " + m.obj.GetKind() + " " + m.obj.GetNamespace() + "/" + m.obj.GetName()
}

// readManifests decodes every Kubernetes object in the YAML files of dir
// (recursively), skipping kustomization.yaml, which is kustomize's input and
// not an API object.
func readManifests(t *testing.T, dir string) []manifest {
	t.Helper()
	var out []manifest
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") || d.Name() == "kustomization.yaml" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		ms, err := decodeManifests(path, data)
		out = append(out, ms...)
		return err
	})
	if err != nil {
		t.Fatalf("read manifests under %s: %v", dir, err)
	}
	if len(out) == 0 {
		t.Fatalf("no manifests under %s", dir)
	}
	return out
}

// decodeManifests splits a multi-document YAML stream into objects.
func decodeManifests(name string, data []byte) ([]manifest, error) {
	var out []manifest
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("split %s: %w", name, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return out, fmt.Errorf("decode %s: %w", name, err)
		}
		if len(bytes.TrimSpace(js)) == 0 || string(js) == "null" {
			continue // an empty document (comments only)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			return out, fmt.Errorf("decode %s: %w", name, err)
		}
		out = append(out, manifest{file: name, obj: obj})
	}
}

// applier applies objects with server-side apply through the dynamic client.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// apply server-side-applies m; dryRun leaves the cluster unchanged but runs
// defaulting, validation and admission.
func (a *applier) apply(ctx context.Context, m manifest, dryRun bool) error {
	gvk := m.obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	data, err := m.obj.MarshalJSON()
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = a.dyn.Resource(mapping.Resource).Namespace(m.obj.GetNamespace())
	}
	opts := metav1.PatchOptions{FieldManager: "switchyard-deploy-test", Force: ptrTrue()}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Patch(ctx, m.obj.GetName(), types.ApplyPatchType, data, opts)
	return err
}

func ptrTrue() *bool { b := true; return &b }

// ensureNamespaces creates, for real, the namespaces the objects live in
// (a dry-run Namespace does not exist for the objects after it).
func ensureNamespaces(t *testing.T, c *Cluster, ms []manifest) {
	t.Helper()
	for _, m := range ms {
		if ns := m.obj.GetNamespace(); ns != "" {
			if err := c.createNamespace(context.Background(), ns); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestDeployBaseDryRun applies every object of deploy/base with server-side
// dry-run against the real API server: all must be valid and admitted.
func TestDeployBaseDryRun(t *testing.T) {
	c := Shared(t)
	ms := readManifests(t, filepath.Join(RepoRoot(), "deploy", "base"))
	ensureNamespaces(t, c, ms)
	a := newApplier(t, c.AdminConfig())
	kinds := map[string]bool{}
	for _, m := range ms {
		kinds[m.obj.GetKind()] = true
		if err := a.apply(context.Background(), m, true); err != nil {
			t.Errorf("%s: server-side dry-run: %v", m, err)
		}
	}
	var got []string
	for k := range kinds {
		got = append(got, k)
	}
	slices.Sort(got)
	want := []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "IngressClass", "Namespace",
		"PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kinds in deploy/base (-want +got):\n%s", diff)
	}
}

// TestKustomizationListsEveryFile: kubectl apply -k deploy/base applies
// exactly the files the dry-run test checks.
func TestKustomizationListsEveryFile(t *testing.T) {
	dir := filepath.Join(RepoRoot(), "deploy", "base")
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Namespace string   `json:"namespace"`
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Clone(k.Resources)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kustomization resources (-files +listed):\n%s", diff)
	}
	for _, m := range readManifests(t, dir) {
		if ns := m.obj.GetNamespace(); ns != "" && ns != k.Namespace {
			t.Errorf("%s: namespace %q; kustomize would rewrite it to %q", m, ns, k.Namespace)
		}
	}
}

// TestDeployServiceAccountRBAC applies deploy/base/rbac.yaml for real and
// impersonates its ServiceAccount: the bindings in the file reach the
// account that the DaemonSet runs as.
func TestDeployServiceAccountRBAC(t *testing.T) {
	c := Shared(t)
	ctx := context.Background()
	ms := readManifests(t, RBACFile())
	ensureNamespaces(t, c, ms)
	a := newApplier(t, c.AdminConfig())
	for _, m := range ms {
		if err := a.apply(ctx, m, false); err != nil {
			t.Fatalf("%s: apply: %v", m, err)
		}
	}
	cfg := c.AdminConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:switchyard:switchyard"}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the ServiceAccount lists Ingresses: %v; want success", err)
	}
	if _, err := sa.CoordinationV1().Leases("switchyard").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the ServiceAccount lists Leases: %v; want Forbidden (only get, create, update)", err)
	}
	// Allowed: found when a controller in this test binary already won the
	// election, NotFound before that; never Forbidden.
	if _, err := sa.CoordinationV1().Leases("switchyard").Get(ctx, "switchyard-leader", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("the ServiceAccount gets its Lease: %v; want allowed (found or NotFound)", err)
	}
	if _, err := sa.CoreV1().Secrets("switchyard").Create(ctx, secretNamed("x"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the ServiceAccount creates a Secret: %v; want Forbidden", err)
	}
}

// TestQuickstartManifestsDryRun: the no-cluster quickstart's objects are
// valid Kubernetes objects too, except that a real API server refuses its
// EndpointSlices' loopback addresses (which is why the e2e tests use
// TEST-NET-1 addresses inside a network namespace).
func TestQuickstartManifestsDryRun(t *testing.T) {
	c := Shared(t)
	ms := readManifests(t, filepath.Join(RepoRoot(), "deploy", "quickstart"))
	ensureNamespaces(t, c, ms)
	a := newApplier(t, c.AdminConfig())
	for _, m := range ms {
		err := a.apply(context.Background(), m, true)
		loopback := m.obj.GetKind() == "EndpointSlice" && strings.Contains(string(mustJSON(t, m.obj)), `"127.`)
		switch {
		case loopback && !apierrors.IsInvalid(err):
			t.Errorf("%s: dry-run with loopback addresses: %v; want Invalid", m, err)
		case !loopback && err != nil:
			t.Errorf("%s: server-side dry-run: %v", m, err)
		}
	}
}

func mustJSON(t *testing.T, o *unstructured.Unstructured) []byte {
	t.Helper()
	b, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
