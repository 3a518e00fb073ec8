package k8s

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// HelmVersion is the helm test/tools/build-helm.sh builds.
const HelmVersion = "v3.21.4"

// helmBin finds helm: $SWITCHYARD_HELM, else the cache path build-helm.sh
// uses. Missing, the test fails under CI=true and skips loudly elsewhere.
func helmBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SWITCHYARD_HELM")
	if bin == "" {
		bin = filepath.Join(CacheDir(), "tools", "helm-"+HelmVersion)
	}
	if _, err := os.Stat(bin); err != nil {
		skipOrFail(t, fmt.Errorf("helm not found at %s: run test/setup.sh (it builds it once)", bin))
	}
	return bin
}

// helmTemplate renders the chart with extra helm arguments.
func helmTemplate(t *testing.T, args ...string) []manifest {
	t.Helper()
	chart := filepath.Join(RepoRoot(), "deploy", "helm", "switchyard")
	cmd := exec.Command(helmBin(t), append([]string{"template", "edge", chart, "--namespace", "switchyard"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	ms, err := decodeManifests("helm template", out)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestHelmChartDryRun renders deploy/helm/switchyard (defaults, and with
// --set options; TestHelmIngressNginxValues renders whole values files) and
// applies the result with server-side dry-run.
func TestHelmChartDryRun(t *testing.T) {
	c := Shared(t)
	a := newApplier(t, c.AdminConfig())
	renders := map[string][]string{
		"defaults": nil,
		"options": {"--set", "controller.ingressClassResource.default=true", "--set", "controller.dataPlane=nginx",
			"--set", "controller.extraArgs.watch-namespace=team-a", "--set", "controller.extraArgs.enable-ssl-passthrough=",
			"--set", "controller.tolerations[0].operator=Exists"},
		"deployment": {"--set", "controller.kind=Deployment", "--set", "controller.replicaCount=2",
			"--set", "controller.service.type=LoadBalancer", "--set", "controller.hostPort.enabled=false"},
		"both": {"--set", "controller.kind=Both", "--set", "controller.metrics.enabled=true",
			"--set", "controller.scope.enabled=true", "--set", "defaultBackend.enabled=true"},
		"no-rbac": {"--set", "rbac.create=false", "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=ops-managed"},
		"namespaceOverride": {"--set", "namespaceOverride=edge-system", "--set", "controller.networkPolicy.enabled=true",
			"--set", "tcp.9000=default/echo:9000", "--set", "controller.service.internal.enabled=true"},
	}
	for name, args := range renders {
		t.Run(name, func(t *testing.T) {
			ms := helmTemplate(t, args...)
			ensureNamespaces(t, c, ms)
			for _, m := range ms {
				if err := a.apply(context.Background(), m, true); err != nil {
					t.Errorf("%s: server-side dry-run: %v", m, err)
				}
				if ns := m.obj.GetNamespace(); name == "namespaceOverride" && ns != "" && ns != "edge-system" {
					t.Errorf("%s: namespace %q; want namespaceOverride's edge-system", m, ns)
				}
				switch m.obj.GetKind() {
				case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
					if name == "no-rbac" {
						t.Errorf("%s rendered; want none with rbac.create=false, serviceAccount.create=false", m)
					}
				}
			}
		})
	}
}

// TestHelmRBACMatchesBase: the chart grants exactly the rules of
// deploy/base/rbac.yaml, the ones the controller identity is tested with.
func TestHelmRBACMatchesBase(t *testing.T) {
	base, err := loadControllerRBAC()
	if err != nil {
		t.Fatal(err)
	}
	var got controllerRBAC
	for _, m := range helmTemplate(t) {
		switch m.obj.GetKind() {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.obj.Object, &cr); err != nil {
				t.Fatal(err)
			}
			got.clusterRoles = append(got.clusterRoles, cr)
		case "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.obj.Object, &r); err != nil {
				t.Fatal(err)
			}
			got.roles = append(got.roles, r)
		}
	}
	rules := func(r *controllerRBAC) (cluster, ns [][]rbacv1.PolicyRule) {
		for _, cr := range r.clusterRoles {
			cluster = append(cluster, cr.Rules)
		}
		for _, role := range r.roles {
			ns = append(ns, role.Rules)
		}
		return cluster, ns
	}
	wantC, wantR := rules(base)
	gotC, gotR := rules(&got)
	if diff := cmp.Diff(wantC, gotC); diff != "" {
		t.Errorf("chart ClusterRole rules differ from deploy/base (-base +chart):\n%s", diff)
	}
	if diff := cmp.Diff(wantR, gotR); diff != "" {
		t.Errorf("chart Role rules differ from deploy/base (-base +chart):\n%s", diff)
	}
}

// TestHelmLint: helm's own checks of the chart, strict (warnings fail), with
// the defaults and with each values file of the parity tests.
func TestHelmLint(t *testing.T) {
	chart := filepath.Join(RepoRoot(), "deploy", "helm", "switchyard")
	for _, values := range []string{"", "helm-ingress-nginx-values.yaml", "helm-deployment-values.yaml"} {
		args := []string{"lint", "--strict", chart}
		if values != "" {
			args = append(args, "-f", filepath.Join(RepoRoot(), "test", "k8s", "testdata", values))
		}
		cmd := exec.Command(helmBin(t), args...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("helm %v: %v\n%s", args, err, out)
		}
	}
}
