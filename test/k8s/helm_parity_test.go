package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/test/harness"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// helmChartDir is the chart under test.
func helmChartDir() string { return filepath.Join(RepoRoot(), "deploy", "helm", "switchyard") }

// helmRender runs helm template with release name release and returns
// stdout, or the error and stderr: for renders that must fail.
func helmRender(t *testing.T, release string, args ...string) ([]byte, string, error) {
	t.Helper()
	return helmRenderIn(t, "switchyard", release, args...)
}

// helmRenderIn is helmRender into namespace ns.
func helmRenderIn(t *testing.T, ns, release string, args ...string) ([]byte, string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), append([]string{"template", release, helmChartDir(), "--namespace", ns}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	return out, stderr.String(), err
}

func helmValuesFile(name string) string {
	return filepath.Join(RepoRoot(), "test", "k8s", "testdata", name)
}

// find returns the only object of kind and name in ms.
func find(t *testing.T, ms []manifest, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var got []*unstructured.Unstructured
	for _, m := range ms {
		if m.obj.GetKind() == kind && m.obj.GetName() == name {
			got = append(got, m.obj)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d objects %s %s in the render; want 1 (have %v)", len(got), kind, name, kindNames(ms))
	}
	return got[0]
}

func kindNames(ms []manifest) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.obj.GetKind()+"/"+m.obj.GetName())
	}
	slices.Sort(out)
	return out
}

// typed converts a rendered object into its Go API type.
func typed[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	v := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, v, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return v
}

// applyStrict server-side-applies m as a dry run with fieldValidation=Strict,
// so a field the API server (or a CRD's schema) does not know is an error.
func (a *applier) applyStrict(ctx context.Context, m manifest) error {
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
	_, err = ri.Patch(ctx, m.obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
		FieldManager: "switchyard-helm-test", Force: ptrTrue(), DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict",
	})
	return err
}

// installTestCRDs creates, for real, the stand-in CRDs of
// testdata/helm-crds.yaml (ServiceMonitor, PrometheusRule, Certificate,
// Issuer) and waits until the API server serves them.
func installTestCRDs(t *testing.T, c *Cluster) *applier {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	data, err := os.ReadFile(helmValuesFile("helm-crds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crds, err := decodeManifests("helm-crds.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	a := newApplier(t, c.AdminConfig())
	for _, m := range crds {
		if err := a.apply(ctx, m, false); err != nil {
			t.Fatalf("%s: apply: %v", m, err)
		}
	}
	crdRes := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, m := range crds {
			got, err := a.dyn.Resource(crdRes).Get(ctx, m.obj.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			established := false
			for _, c := range conds {
				if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
					established = true
				}
			}
			if !established {
				return false, nil
			}
		}
		a.mapper.(meta.ResettableRESTMapper).Reset()
		for _, m := range crds {
			group, _, _ := unstructured.NestedString(m.obj.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(m.obj.Object, "spec", "names", "kind")
			if _, err := a.mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind}, "v1"); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the test CRDs are not served: %v", err)
	}
	return a
}

// containerArgs is the controller container's args, with $(POD_NAMESPACE)
// left as written.
func containerArgs(spec corev1.PodSpec) []string {
	for _, c := range spec.Containers {
		if len(c.Args) > 0 && c.Args[0] == "controller" {
			return c.Args
		}
	}
	return nil
}

func wantArgs(t *testing.T, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("controller args lack %q; got %q", w, got)
		}
	}
}

// TestHelmIngressNginxValues renders the chart with ingress-nginx-style
// values files (testdata/helm-*-values.yaml, written with ingress-nginx's
// value names), server-side dry-runs every object with strict field
// validation against the real API server (the CRD-backed kinds against the
// stand-in CRDs of testdata/helm-crds.yaml), and checks that each value
// reached its object.
func TestHelmIngressNginxValues(t *testing.T) {
	c := Shared(t)
	a := installTestCRDs(t, c)
	cases := map[string]struct {
		file  string
		kinds []string
		check func(t *testing.T, ms []manifest)
	}{
		"daemonset-hostnetwork-loadbalancer-certmanager": {
			file: "helm-ingress-nginx-values.yaml",
			kinds: []string{"Certificate", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Deployment", "IngressClass",
				"Issuer", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "Role", "RoleBinding", "Service", "ServiceAccount",
				"ServiceMonitor", "ValidatingWebhookConfiguration"},
			check: checkIngressNginxValues,
		},
		"deployment-scoped-hpa-webhook-secret": {
			file: "helm-deployment-values.yaml",
			kinds: []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "HorizontalPodAutoscaler", "IngressClass",
				"PodDisruptionBudget", "Role", "RoleBinding", "Service", "ValidatingWebhookConfiguration"},
			check: checkDeploymentValues,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ms := helmTemplate(t, "-f", helmValuesFile(tc.file))
			ensureNamespaces(t, c, ms)
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			kinds := map[string]bool{}
			for _, m := range ms {
				kinds[m.obj.GetKind()] = true
				if err := a.applyStrict(ctx, m); err != nil {
					t.Errorf("%s: server-side dry-run (strict): %v", m, err)
				}
			}
			var got []string
			for k := range kinds {
				got = append(got, k)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.kinds, got); diff != "" {
				t.Errorf("kinds rendered (-want +got):\n%s", diff)
			}
			tc.check(t, ms)
		})
	}
}

func checkIngressNginxValues(t *testing.T, ms []manifest) {
	ds := typed[appsv1.DaemonSet](t, find(t, ms, "DaemonSet", "edge-switchyard-controller"))
	pod := ds.Spec.Template
	if !pod.Spec.HostNetwork || pod.Spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %q; want true, ClusterFirstWithHostNet", pod.Spec.HostNetwork, pod.Spec.DNSPolicy)
	}
	if pod.Annotations["example.com/team"] != "edge" || pod.Labels["example.com/tier"] != "ingress" {
		t.Errorf("pod annotations %v, labels %v; want podAnnotations and podLabels", pod.Annotations, pod.Labels)
	}
	if a := pod.Spec.Affinity; a == nil || a.NodeAffinity == nil || a.PodAntiAffinity == nil ||
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels["app.kubernetes.io/instance"] != "edge" {
		t.Errorf("affinity %+v; want the values' node and pod anti-affinity, the template expanded", pod.Spec.Affinity)
	}
	if got := ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue(); got != 2 {
		t.Errorf("updateStrategy maxUnavailable %d; want 2", got)
	}
	if pod.Spec.PriorityClassName != "system-node-critical" || *pod.Spec.TerminationGracePeriodSeconds != 120 || ds.Spec.MinReadySeconds != 5 {
		t.Errorf("priorityClassName %q, terminationGracePeriodSeconds %d, minReadySeconds %d; want the values'",
			pod.Spec.PriorityClassName, *pod.Spec.TerminationGracePeriodSeconds, ds.Spec.MinReadySeconds)
	}
	if len(pod.Spec.Containers) != 2 || len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Command[2] != "echo edge" {
		t.Errorf("containers %d, init containers %+v; want extraContainers and extraInitContainers (templated)", len(pod.Spec.Containers), pod.Spec.InitContainers)
	}
	wantArgs(t, containerArgs(pod.Spec),
		"--controller-class=k8s.io/ingress-nginx", "--ingress-class=nginx", "--election-id=ingress-nginx-leader",
		"--watch-ingress-without-class=true", "--default-ssl-certificate=ingress-nginx/default-cert", "--enable-ssl-passthrough",
		"--update-status=true", "--tcp-services-configmap=$(POD_NAMESPACE)/edge-switchyard-tcp",
		"--udp-services-configmap=$(POD_NAMESPACE)/edge-switchyard-udp",
		"--default-backend-service=$(POD_NAMESPACE)/edge-switchyard-defaultbackend",
		"--publish-service=$(POD_NAMESPACE)/edge-switchyard-controller",
		"--validating-webhook=:8443", "--validating-webhook-certificate=/usr/local/certificates/cert",
		"--validating-webhook-key=/usr/local/certificates/key")
	ctr := pod.Spec.Containers[0]
	ports := map[string]corev1.ContainerPort{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p
	}
	for name, want := range map[string]corev1.ContainerPort{
		"http":     {Name: "http", ContainerPort: 80, HostPort: 80, Protocol: corev1.ProtocolTCP},
		"9000-tcp": {Name: "9000-tcp", ContainerPort: 9000, HostPort: 9000, Protocol: corev1.ProtocolTCP},
		"53-udp":   {Name: "53-udp", ContainerPort: 53, HostPort: 53, Protocol: corev1.ProtocolUDP},
		"webhook":  {Name: "webhook", ContainerPort: 8443, Protocol: corev1.ProtocolTCP},
		"metrics":  {Name: "metrics", ContainerPort: 10254, Protocol: corev1.ProtocolTCP},
	} {
		if diff := cmp.Diff(want, ports[name]); diff != "" {
			t.Errorf("container port %s (-want +got):\n%s", name, diff)
		}
	}
	if ctr.ReadinessProbe.HTTPGet.Path != "/readyz" || ctr.LivenessProbe.HTTPGet.Path != "/healthz" || ctr.LivenessProbe.HTTPGet.Port.IntValue() != 10254 {
		t.Errorf("probes %+v / %+v; want /healthz and /readyz on the status port 10254", ctr.LivenessProbe.HTTPGet, ctr.ReadinessProbe.HTTPGet)
	}
	if len(ctr.Env) != 3 || ctr.Env[2].Name != "GODEBUG" {
		t.Errorf("env %+v; want POD_NAME, POD_NAMESPACE and the extraEnvs", ctr.Env)
	}

	svc := typed[corev1.Service](t, find(t, ms, "Service", "edge-switchyard-controller"))
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal ||
		svc.Spec.LoadBalancerIP != "203.0.113.10" || !slices.Equal(svc.Spec.LoadBalancerSourceRanges, []string{"198.51.100.0/24"}) ||
		svc.Annotations["service.beta.kubernetes.io/aws-load-balancer-type"] != "nlb" {
		t.Errorf("controller Service %+v, annotations %v; want the LoadBalancer of the values", svc.Spec, svc.Annotations)
	}
	var svcPorts []string
	for _, p := range svc.Spec.Ports {
		svcPorts = append(svcPorts, fmt.Sprintf("%s %s %d->%s node %d", p.Name, p.Protocol, p.Port, p.TargetPort.String(), p.NodePort))
	}
	if diff := cmp.Diff([]string{"http TCP 80->http node 30080", "https TCP 443->https node 0", "5432-tcp TCP 5432->5432-tcp node 0",
		"9000-tcp TCP 9000->9000-tcp node 30900", "53-udp UDP 53->53-udp node 0"}, svcPorts); diff != "" {
		t.Errorf("controller Service ports (-want +got):\n%s", diff)
	}
	find(t, ms, "Service", "edge-switchyard-controller-internal")

	tcp := typed[corev1.ConfigMap](t, find(t, ms, "ConfigMap", "edge-switchyard-tcp"))
	if diff := cmp.Diff(map[string]string{"9000": "default/tcp-echo:9000", "5432": "db/postgres:5432:PROXY"}, tcp.Data); diff != "" {
		t.Errorf("TCP services ConfigMap (-want +got):\n%s", diff)
	}
	cfg := typed[corev1.ConfigMap](t, find(t, ms, "ConfigMap", "edge-switchyard-controller"))
	if cfg.Data["proxy-body-size"] != "16m" || cfg.Data["log-format-upstream"] != "$remote_addr - edge" {
		t.Errorf("controller ConfigMap %v; want the values' config, templates expanded", cfg.Data)
	}

	adm := typed[corev1.Service](t, find(t, ms, "Service", "edge-switchyard-controller-admission"))
	if len(adm.Spec.Ports) != 1 || adm.Spec.Ports[0].Port != 443 || adm.Spec.Ports[0].TargetPort.String() != "webhook" {
		t.Errorf("admission Service ports %+v; want 443 -> webhook (8443)", adm.Spec.Ports)
	}
	vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, find(t, ms, "ValidatingWebhookConfiguration", "edge-switchyard-admission"))
	if vwc.Annotations["cert-manager.io/inject-ca-from"] != "switchyard/edge-switchyard-admission" {
		t.Errorf("webhook annotations %v; want cert-manager's CA injection from the Certificate", vwc.Annotations)
	}
	if s := vwc.Webhooks[0].ClientConfig.Service; s == nil || s.Name != "edge-switchyard-controller-admission" || *s.Port != 443 || *vwc.Webhooks[0].TimeoutSeconds != 10 {
		t.Errorf("webhook %+v; want the admission Service on 443, timeout 10", vwc.Webhooks[0])
	}
	cert := find(t, ms, "Certificate", "edge-switchyard-admission")
	if dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames"); !slices.Contains(dns, "edge-switchyard-controller-admission.switchyard.svc") {
		t.Errorf("Certificate dnsNames %v; want the admission Service's name", dns)
	}
	if secret := ds.Spec.Template.Spec.Volumes[0].Secret; secret == nil || secret.SecretName != "edge-switchyard-admission" {
		t.Errorf("webhook-cert volume %+v; want the Certificate's Secret", ds.Spec.Template.Spec.Volumes[0])
	}

	sm := find(t, ms, "ServiceMonitor", "edge-switchyard-controller")
	if port, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints"); len(port) != 1 || port[0].(map[string]any)["port"] != "metrics" {
		t.Errorf("ServiceMonitor endpoints %v; want the metrics port", port)
	}
	if sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v; want additionalLabels", sm.GetLabels())
	}
	metrics := typed[corev1.Service](t, find(t, ms, "Service", "edge-switchyard-controller-metrics"))
	if metrics.Spec.Ports[0].Port != 10254 || metrics.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v; want 10254 -> metrics", metrics.Spec.Ports)
	}

	db := typed[appsv1.Deployment](t, find(t, ms, "Deployment", "edge-switchyard-defaultbackend"))
	if *db.Spec.Replicas != 2 || db.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort != 8080 {
		t.Errorf("default backend %+v; want 2 replicas on 8080", db.Spec)
	}
	find(t, ms, "Service", "edge-switchyard-defaultbackend")
	find(t, ms, "PodDisruptionBudget", "edge-switchyard-defaultbackend")
	ic := typed[networkingv1.IngressClass](t, find(t, ms, "IngressClass", "nginx"))
	if ic.Spec.Controller != "k8s.io/ingress-nginx" || ic.Annotations["ingressclass.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("IngressClass nginx %+v; want controller k8s.io/ingress-nginx, default", ic)
	}
	alias := typed[networkingv1.IngressClass](t, find(t, ms, "IngressClass", "nginx-internal"))
	if alias.Annotations["ingressclass.kubernetes.io/is-default-class"] != "" {
		t.Errorf("alias IngressClass annotations %v; want not default", alias.Annotations)
	}
	sa := find(t, ms, "ServiceAccount", "edge-switchyard")
	if sa.GetAnnotations()["example.com/role"] != "ingress" || pod.Spec.ServiceAccountName != "edge-switchyard" {
		t.Errorf("ServiceAccount annotations %v, pod's account %q; want serviceAccount.annotations, edge-switchyard", sa.GetAnnotations(), pod.Spec.ServiceAccountName)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("imagePullSecrets %v; want regcred", pod.Spec.ImagePullSecrets)
	}
}

func checkDeploymentValues(t *testing.T, ms []manifest) {
	dep := typed[appsv1.Deployment](t, find(t, ms, "Deployment", "edge-switchyard-controller"))
	if dep.Spec.Replicas != nil {
		t.Errorf("replicas %d; want none (the HPA owns them)", *dep.Spec.Replicas)
	}
	ctr := dep.Spec.Template.Spec.Containers[0]
	if ctr.Image != "registry.example/mirror/switchyard:v0.1.0@sha256:0000000000000000000000000000000000000000000000000000000000000000" || ctr.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %q pull %q; want registry/image:tag@digest, Always", ctr.Image, ctr.ImagePullPolicy)
	}
	wantArgs(t, ctr.Args, "--data-plane=nginx", "--watch-namespace=$(POD_NAMESPACE)", "--publish-service=edge/external-lb",
		"--election-ttl=45s", "--ingress-class-by-name=true", "--http-port=8080", "--https-port=8444", "--status-port=10300",
		"--sync-rate-limit=0.3")
	for _, p := range ctr.Ports {
		if p.HostPort != 0 {
			t.Errorf("port %+v has a hostPort; want none with hostPort.enabled=false", p)
		}
	}
	if ctr.SecurityContext.AllowPrivilegeEscalation == nil || *ctr.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v; want containerSecurityContext's", ctr.SecurityContext)
	}
	if sc := dep.Spec.Template.Spec.SecurityContext; sc.FSGroup == nil || len(sc.Sysctls) != 1 {
		t.Errorf("pod securityContext %+v; want podSecurityContext with the sysctls", sc)
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "preexisting" {
		t.Errorf("serviceAccountName %q; want preexisting", dep.Spec.Template.Spec.ServiceAccountName)
	}
	if v := dep.Spec.Template.Spec.Volumes[0]; v.Secret == nil || v.Secret.SecretName != "ingress-webhook-tls" {
		t.Errorf("webhook-cert volume %+v; want existingSecret", v)
	}
	hpa := typed[autoscalingv2.HorizontalPodAutoscaler](t, find(t, ms, "HorizontalPodAutoscaler", "edge-switchyard-controller"))
	if *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 6 || len(hpa.Spec.Metrics) != 1 || hpa.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU ||
		*hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 300 {
		t.Errorf("HPA %+v; want 2-6 replicas on CPU only, the values' behavior", hpa.Spec)
	}
	pdb := typed[policyv1.PodDisruptionBudget](t, find(t, ms, "PodDisruptionBudget", "edge-switchyard-controller"))
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PDB %+v; want minAvailable 2", pdb.Spec)
	}
	svc := typed[corev1.Service](t, find(t, ms, "Service", "edge-switchyard-controller"))
	if svc.Spec.Type != corev1.ServiceTypeNodePort || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort != 31080 || svc.Spec.ExternalTrafficPolicy != "Local" {
		t.Errorf("Service %+v; want NodePort http only on 31080, Local", svc.Spec)
	}
	vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, find(t, ms, "ValidatingWebhookConfiguration", "edge-switchyard-admission"))
	if w := vwc.Webhooks[0]; len(w.ClientConfig.CABundle) == 0 || *w.FailurePolicy != admissionregistrationv1.Ignore || w.ObjectSelector == nil {
		t.Errorf("webhook %+v; want the caBundle, failurePolicy Ignore and the objectSelector", w)
	}
	for _, m := range ms {
		if m.obj.GetKind() == "ServiceAccount" {
			t.Errorf("%s rendered; want none with serviceAccount.create=false", m)
		}
	}
	// Namespace-scoped: only IngressClasses stay cluster-wide.
	cr := typed[rbacv1.ClusterRole](t, find(t, ms, "ClusterRole", "edge-switchyard"))
	if diff := cmp.Diff([]rbacv1.PolicyRule{{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingressclasses"}, Verbs: []string{"get", "list", "watch"}}}, cr.Rules); diff != "" {
		t.Errorf("scoped ClusterRole rules (-want +got):\n%s", diff)
	}
	role := typed[rbacv1.Role](t, find(t, ms, "Role", "edge-switchyard-scoped"))
	if role.Namespace != "switchyard" || len(role.Rules) != 5 {
		t.Errorf("scoped Role %+v; want the namespaced rules in the release namespace", role)
	}
}

// TestHelmScopedRBACEqualsBase: with controller.scope.enabled the chart's
// ClusterRole and scoped Role together grant exactly deploy/base's cluster
// rules, IngressClasses staying in the ClusterRole.
func TestHelmScopedRBACEqualsBase(t *testing.T) {
	base, err := loadControllerRBAC()
	if err != nil {
		t.Fatal(err)
	}
	ms := helmTemplate(t, "--set", "controller.scope.enabled=true")
	var got []rbacv1.PolicyRule
	got = append(got, typed[rbacv1.ClusterRole](t, find(t, ms, "ClusterRole", "edge-switchyard")).Rules...)
	got = append(got, typed[rbacv1.Role](t, find(t, ms, "Role", "edge-switchyard-scoped")).Rules...)
	flatten := func(rules []rbacv1.PolicyRule) []string {
		var out []string
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out = append(out, g+"/"+res+":"+v)
					}
				}
			}
		}
		sort.Strings(out)
		return out
	}
	var want []rbacv1.PolicyRule
	for _, cr := range base.clusterRoles {
		want = append(want, cr.Rules...)
	}
	if diff := cmp.Diff(flatten(want), flatten(got)); diff != "" {
		t.Errorf("scoped chart RBAC differs from deploy/base's cluster rules (-base +chart):\n%s", diff)
	}
}

// podTemplateJSON is the pod template of the controller workload of kind.
func podTemplateJSON(t *testing.T, ms []manifest, kind string) []byte {
	t.Helper()
	tmpl, ok, err := unstructured.NestedMap(find(t, ms, kind, "edge-switchyard-controller").Object, "spec", "template")
	if err != nil || !ok {
		t.Fatalf("%s has no spec.template: %v", kind, err)
	}
	b, err := json.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHelmConfigEditKeepsPods: the controller applies ConfigMap edits live,
// so editing controller.config changes the ConfigMap and nothing in the pod
// template (no checksum/config annotation): no rollout.
func TestHelmConfigEditKeepsPods(t *testing.T) {
	for _, kind := range []string{"DaemonSet", "Deployment"} {
		t.Run(kind, func(t *testing.T) {
			a := helmTemplate(t, "--set", "controller.kind="+kind)
			b := helmTemplate(t, "--set", "controller.kind="+kind, "--set", "controller.config.hsts=false",
				"--set", "controller.config.proxy-body-size=8m")
			ca := typed[corev1.ConfigMap](t, find(t, a, "ConfigMap", "edge-switchyard-controller"))
			cb := typed[corev1.ConfigMap](t, find(t, b, "ConfigMap", "edge-switchyard-controller"))
			if cmp.Equal(ca.Data, cb.Data) {
				t.Fatalf("the ConfigMap did not change (%v): the test edits nothing", ca.Data)
			}
			if pa, pb := podTemplateJSON(t, a, kind), podTemplateJSON(t, b, kind); !bytes.Equal(pa, pb) {
				t.Errorf("a ConfigMap edit changed the pod template, which restarts every pod:\n%s\n%s", pa, pb)
			}
		})
	}
}

// TestHelmHeaderConfigMaps: controller.addHeaders and
// controller.proxySetHeaders render ConfigMaps named as ingress-nginx's
// chart names them, and the controller ConfigMap's add-headers and
// proxy-set-headers point at them; without them neither key is set.
func TestHelmHeaderConfigMaps(t *testing.T) {
	ms := helmTemplate(t, "--set", "controller.addHeaders.X-Team=edge", "--set", "controller.proxySetHeaders.X-Env=prod")
	cm := typed[corev1.ConfigMap](t, find(t, ms, "ConfigMap", "edge-switchyard-controller"))
	if got := cm.Data["add-headers"]; got != "switchyard/edge-switchyard-custom-add-headers" {
		t.Errorf("add-headers = %q", got)
	}
	if got := cm.Data["proxy-set-headers"]; got != "switchyard/edge-switchyard-custom-proxy-headers" {
		t.Errorf("proxy-set-headers = %q", got)
	}
	add := typed[corev1.ConfigMap](t, find(t, ms, "ConfigMap", "edge-switchyard-custom-add-headers"))
	proxy := typed[corev1.ConfigMap](t, find(t, ms, "ConfigMap", "edge-switchyard-custom-proxy-headers"))
	if !cmp.Equal(add.Data, map[string]string{"X-Team": "edge"}) || !cmp.Equal(proxy.Data, map[string]string{"X-Env": "prod"}) {
		t.Errorf("add %v, proxy %v", add.Data, proxy.Data)
	}
	plain := typed[corev1.ConfigMap](t, find(t, helmTemplate(t), "ConfigMap", "edge-switchyard-controller"))
	if _, ok := plain.Data["add-headers"]; ok {
		t.Error("add-headers set without controller.addHeaders")
	}
	if _, ok := plain.Data["proxy-set-headers"]; ok {
		t.Error("proxy-set-headers set without controller.proxySetHeaders")
	}
}

// TestHelmRefusedValues: keys Switchyard deliberately does not support fail
// the render with what to do instead, unknown keys fail the schema, and
// chart 0.1's top-level names say where they moved.
func TestHelmRefusedValues(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"allowSnippetAnnotations":     {[]string{"--set", "controller.allowSnippetAnnotations=true"}, "controller.allowSnippetAnnotations=true is not supported: Switchyard serves no *-snippet annotations"},
		"enableAnnotationValidations": {[]string{"--set", "controller.enableAnnotationValidations=false"}, "Switchyard always validates the annotation values"},
		"opentelemetry":               {[]string{"--set", "controller.opentelemetry.enabled=true"}, "controller.opentelemetry is not supported"},
		"maxmindLicenseKey":           {[]string{"--set", "controller.maxmindLicenseKey=abc"}, "controller.maxmindLicenseKey is not supported: Switchyard downloads no GeoIP databases"},
		"reportNodeInternalIp":        {[]string{"--set", "controller.reportNodeInternalIp=true"}, "controller.extraArgs.publish-status-address"},
		"enableTopologyAwareRouting":  {[]string{"--set", "controller.enableTopologyAwareRouting=true"}, "reads no topology hints"},
		"disableLeaderElection":       {[]string{"--set", "controller.disableLeaderElection=true"}, `update-status: "false"`},
		"healthCheckPath":             {[]string{"--set", "controller.healthCheckPath=/health"}, "the health path is always /healthz"},
		"namespaceSelector":           {[]string{"--set", "controller.scope.namespaceSelector=team=a"}, "controller.scope.namespaceSelector is not supported"},
		"scope-other-namespace":       {[]string{"--set", "controller.scope.enabled=true", "--set", "controller.scope.namespace=team-a"}, "install the release into team-a"},
		"rbac.scope":                  {[]string{"--set", "rbac.scope=true"}, "needs a ClusterRole for them; set rbac.scope=false"},
		"keda":                        {[]string{"--set", "controller.keda.enabled=true"}, "use controller.autoscaling"},
		"customTemplate":              {[]string{"--set", "controller.customTemplate.configMapName=tmpl"}, "not from an nginx.conf template"},
		"extraModules":                {[]string{"--set", "controller.extraModules[0].name=otel"}, "loads no nginx modules"},
		"chroot":                      {[]string{"--set", "controller.image.chroot=true"}, "no chroot variant"},
		"port-collision":              {[]string{"--set", "controller.metrics.port=443"}, "controller.containerPort.https and controller.metrics.port are both port 443"},
		"webhook-port-collision": {[]string{"--set", "controller.admissionWebhooks.enabled=true", "--set", "controller.admissionWebhooks.certManager.enabled=true",
			"--set", "controller.admissionWebhooks.port=80"}, "controller.admissionWebhooks.port and controller.containerPort.http are both port 80"},
		"hostNetwork-hostPort-mismatch": {[]string{"--set", "controller.hostNetwork=true", "--set", "controller.containerPort.http=8080"}, "needs controller.hostPort.ports equal to controller.containerPort"},
		"tcp-port-collision":            {[]string{"--set", "tcp.80=default/echo:80"}, "tcp.80 and controller.containerPort.http are both port 80"},
		"extraArgs-owned-flag":          {[]string{"--set", "controller.extraArgs.healthz-port=10300"}, "controller.extraArgs.healthz-port: the chart sets --healthz-port from controller.metrics.port"},
		"extraArgs-watch-namespace-with-scope": {[]string{"--set", "controller.scope.enabled=true", "--set", "controller.extraArgs.watch-namespace=team-a"},
			"controller.extraArgs.watch-namespace: the chart sets --watch-namespace from controller.scope.namespace"},
		"ingress-nginx-image":  {[]string{"--set", "controller.image.image=ingress-nginx/controller"}, "controller.image names ingress-nginx's controller image"},
		"wait-shutdown":        {[]string{"--set", "controller.lifecycle.preStop.exec.command[0]=/wait-shutdown"}, "drains on SIGTERM itself"},
		"dhParam":              {[]string{"--set", "dhParam=AAAA"}, "ssl-dh-param ConfigMap key is not implemented"},
		"webhook-without-cert": {[]string{"--set", "controller.admissionWebhooks.enabled=true"}, "kube-webhook-certgen Jobs (admissionWebhooks.patch) are not supported"},
		"webhook-secret-without-ca": {[]string{"--set", "controller.admissionWebhooks.enabled=true", "--set", "controller.admissionWebhooks.existingSecret=tls"},
			"needs controller.admissionWebhooks.caBundle"},
		"webhook-two-sources": {[]string{"--set", "controller.admissionWebhooks.enabled=true", "--set", "controller.admissionWebhooks.existingSecret=tls",
			"--set", "controller.admissionWebhooks.certManager.enabled=true"}, "set certManager.enabled or existingSecret, not both"},
		"webhook-job-env": {[]string{"--set", "controller.admissionWebhooks.enabled=true", "--set", "controller.admissionWebhooks.certManager.enabled=true",
			"--set", "controller.admissionWebhooks.extraEnvs[0].name=X"}, "admissionWebhooks.extraEnvs is not supported"},
		"defaultBackend.autoscaling": {[]string{"--set", "defaultBackend.autoscaling.enabled=true"}, "defaultBackend.autoscaling is not supported"},
		"extraArgs-not-a-flag":       {[]string{"--set", "controller.extraArgs.-x=1"}, `"-x" is not a flag name`},
		"moved-dataPlane":            {[]string{"--set", "dataPlane=nginx"}, "dataPlane moved to controller.dataPlane"},
		"moved-ingressClass":         {[]string{"--set", "ingressClass.default=true"}, "ingressClass moved to controller.ingressClassResource"},
		"moved-extraArgs-list":       {[]string{"--set", "extraArgs={--watch-namespace=a}"}, "extraArgs moved to controller.extraArgs, a map"},
		"unknown-controller-key":     {[]string{"--set", "controller.replicas=2"}, "at '/controller': additional properties 'replicas' not allowed"},
		"unknown-nested-key":         {[]string{"--set", "controller.service.loadBalancerIPs=1.2.3.4"}, "at '/controller/service': additional properties 'loadBalancerIPs' not allowed"},
		"unknown-top-level-key":      {[]string{"--set", "contoller.kind=Deployment"}, "additional properties 'contoller' not allowed"},
		"bad-kind":                   {[]string{"--set", "controller.kind=StatefulSet"}, "/controller/kind"},
		"extraArgs-list":             {[]string{"--set", "controller.extraArgs={--a}"}, "/controller/extraArgs"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			out, stderr, err := helmRender(t, "edge", tc.args...)
			if err == nil {
				t.Fatalf("helm template %v succeeded (%d bytes); want it refused with %q", tc.args, len(out), tc.want)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("helm template %v: %s\nwant the message to contain %q", tc.args, stderr, tc.want)
			}
		})
	}
}

// TestHelmArgsAreControllerFlags: every flag the chart renders, from every
// values file of these tests, is one `switchyard controller --help` lists,
// and --set controller.extraArgs.<flag>=<value> renders --<flag>=<value>.
func TestHelmArgsAreControllerFlags(t *testing.T) {
	bin := buildSwitchyard(t, t.TempDir())
	help, err := exec.Command(bin, "controller", "--help").CombinedOutput()
	if err != nil && len(help) == 0 {
		t.Fatalf("switchyard controller --help: %v", err)
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9][a-z0-9_-]*)`).FindAllStringSubmatch(string(help), -1) {
		known[m[1]] = true
	}
	if len(known) < 50 || !known["publish-service"] {
		t.Fatalf("parsed %d flags from --help; the help format changed?\n%s", len(known), help)
	}
	renders := map[string][]string{
		"defaults":        nil,
		"ingress-nginx":   {"-f", helmValuesFile("helm-ingress-nginx-values.yaml")},
		"deployment":      {"-f", helmValuesFile("helm-deployment-values.yaml")},
		"extraArgs-set":   {"--set", "controller.extraArgs.watch-namespace=team-a", "--set", "controller.extraArgs.enable-ssl-passthrough="},
		"every-flag-used": {"--set", "controller.electionTTL=1m", "--set", "controller.healthCheckHost=10.0.0.1", "--set", "controller.ingressClassByName=true", "--set", "controller.watchIngressWithoutClass=true", "--set", "controller.service.external.enabled=false", "--set", "controller.service.internal.enabled=true"},
	}
	for name, args := range renders {
		t.Run(name, func(t *testing.T) {
			ms := helmTemplate(t, args...)
			var spec *corev1.PodSpec
			for _, m := range ms {
				switch {
				case m.obj.GetKind() == "DaemonSet" && m.obj.GetName() == "edge-switchyard-controller":
					spec = &typed[appsv1.DaemonSet](t, m.obj).Spec.Template.Spec
				case m.obj.GetKind() == "Deployment" && m.obj.GetName() == "edge-switchyard-controller":
					spec = &typed[appsv1.Deployment](t, m.obj).Spec.Template.Spec
				}
			}
			if spec == nil {
				t.Fatal("no controller workload rendered")
			}
			args := containerArgs(*spec)
			if len(args) < 5 {
				t.Fatalf("controller args %q", args)
			}
			for _, a := range args[1:] {
				flag, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !strings.HasPrefix(a, "--") || !known[flag] {
					t.Errorf("rendered arg %q: not a flag of switchyard controller --help", a)
				}
			}
			switch name {
			case "extraArgs-set":
				wantArgs(t, args, "--watch-namespace=team-a", "--enable-ssl-passthrough")
			case "every-flag-used":
				wantArgs(t, args, "--election-ttl=1m", "--healthz-host=10.0.0.1", "--publish-service=$(POD_NAMESPACE)/edge-switchyard-controller-internal")
			}
		})
	}
}

// TestHelmDefaultsMatchBase: with release name "switchyard" the defaults
// render deploy/base's objects: the same kinds and names for the controller's
// objects, the same controller flags, ports, probes' paths, ConfigMap data,
// Service ports, IngressClass and budget.
func TestHelmDefaultsMatchBase(t *testing.T) {
	out, stderr, err := helmRender(t, "switchyard")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	chart, err := decodeManifests("helm template", out)
	if err != nil {
		t.Fatal(err)
	}
	base := readManifests(t, filepath.Join(RepoRoot(), "deploy", "base"))
	for _, kn := range []struct{ kind, name string }{
		{"DaemonSet", "switchyard-controller"}, {"Service", "switchyard-controller"}, {"ConfigMap", "switchyard-controller"},
		{"PodDisruptionBudget", "switchyard-controller"}, {"IngressClass", "switchyard"}, {"ServiceAccount", "switchyard"},
	} {
		b, c := find(t, base, kn.kind, kn.name), find(t, chart, kn.kind, kn.name)
		switch kn.kind {
		case "DaemonSet":
			bp, cp := typed[appsv1.DaemonSet](t, b).Spec.Template.Spec, typed[appsv1.DaemonSet](t, c).Spec.Template.Spec
			ba, ca := slices.Sorted(slices.Values(containerArgs(bp))), slices.Sorted(slices.Values(containerArgs(cp)))
			if diff := cmp.Diff(ba, ca); diff != "" {
				t.Errorf("controller args (-base +chart):\n%s", diff)
			}
			portsOf := func(s corev1.PodSpec) []string {
				var out []string
				for _, p := range s.Containers[0].Ports {
					out = append(out, fmt.Sprintf("%d/%d", p.ContainerPort, p.HostPort))
				}
				return out
			}
			if diff := cmp.Diff(portsOf(bp), portsOf(cp)); diff != "" {
				t.Errorf("container ports (-base +chart):\n%s", diff)
			}
			bc, cc := bp.Containers[0], cp.Containers[0]
			if bc.LivenessProbe.HTTPGet.Path != cc.LivenessProbe.HTTPGet.Path || bc.ReadinessProbe.HTTPGet.Path != cc.ReadinessProbe.HTTPGet.Path {
				t.Errorf("probe paths %s/%s; base has %s/%s", cc.LivenessProbe.HTTPGet.Path, cc.ReadinessProbe.HTTPGet.Path,
					bc.LivenessProbe.HTTPGet.Path, bc.ReadinessProbe.HTTPGet.Path)
			}
			// The chart's container securityContext adds runAsGroup and the
			// seccomp profile (ingress-nginx's chart sets both) to base's.
			csc := cc.SecurityContext.DeepCopy()
			if csc.RunAsGroup != nil && *csc.RunAsGroup == 10001 && csc.SeccompProfile != nil && csc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault {
				csc.RunAsGroup, csc.SeccompProfile = nil, nil
			}
			if diff := cmp.Diff(bc.SecurityContext, csc); diff != "" {
				t.Errorf("container securityContext (-base +chart):\n%s", diff)
			}
			if diff := cmp.Diff(bp.SecurityContext, cp.SecurityContext); diff != "" {
				t.Errorf("pod securityContext (-base +chart):\n%s", diff)
			}
			if diff := cmp.Diff(bc.Image, cc.Image); diff != "" {
				t.Errorf("image (-base +chart):\n%s", diff)
			}
		case "Service":
			bs, cs := typed[corev1.Service](t, b).Spec, typed[corev1.Service](t, c).Spec
			if bs.Type != cs.Type || len(bs.Ports) != len(cs.Ports) || bs.Ports[0].Port != cs.Ports[0].Port || bs.Ports[1].Port != cs.Ports[1].Port {
				t.Errorf("Service %+v; base has %+v", cs, bs)
			}
		case "ConfigMap":
			if diff := cmp.Diff(typed[corev1.ConfigMap](t, b).Data, typed[corev1.ConfigMap](t, c).Data); diff != "" {
				t.Errorf("ConfigMap data (-base +chart):\n%s", diff)
			}
		case "PodDisruptionBudget":
			bs, cs := typed[policyv1.PodDisruptionBudget](t, b).Spec, typed[policyv1.PodDisruptionBudget](t, c).Spec
			if bs.MaxUnavailable.String() != cs.MaxUnavailable.String() || cs.MinAvailable != nil {
				t.Errorf("PDB %+v; base has %+v", cs, bs)
			}
		case "IngressClass":
			if diff := cmp.Diff(typed[networkingv1.IngressClass](t, b).Spec, typed[networkingv1.IngressClass](t, c).Spec); diff != "" {
				t.Errorf("IngressClass spec (-base +chart):\n%s", diff)
			}
		}
	}
}

// TestHelmValuesTable checks docs/helm.md against the chart: every
// controller.* and top-level key of values.schema.json has exactly one row;
// a row says "refused" exactly when the schema marks the key refused (the
// templates/validate.yaml keys), "ignored" exactly when the schema says
// Ignored; every "supported" row is a key of values.yaml; and the first
// table holds ingress-nginx's 76 controller.* values.
func TestHelmValuesTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(RepoRoot(), "docs", "helm.md"))
	if err != nil {
		t.Fatal(err)
	}
	var schemaDoc struct {
		Properties map[string]struct {
			Description string `json:"description"`
			Properties  map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		} `json:"properties"`
	}
	raw, err := os.ReadFile(filepath.Join(helmChartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &schemaDoc); err != nil {
		t.Fatal(err)
	}
	valuesText, err := os.ReadFile(filepath.Join(helmChartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(valuesText, &values); err != nil {
		t.Fatal(err)
	}
	ctlValues, _ := values["controller"].(map[string]any)

	rowRE := regexp.MustCompile("(?m)^\\| `([^`]+)` \\| (supported|refused|ignored) \\|")
	rows := map[string]string{}
	for _, m := range rowRE.FindAllStringSubmatch(string(doc), -1) {
		if _, dup := rows[m[1]]; dup {
			t.Errorf("docs/helm.md: %s has two rows", m[1])
		}
		rows[m[1]] = m[2]
	}
	first, _, _ := strings.Cut(strings.SplitN(string(doc), "## `controller.*`\n", 2)[1], "\n## ")
	if n := len(rowRE.FindAllString(first, -1)); n != 76 {
		t.Errorf("the controller.* table has %d rows; want ingress-nginx's 76 values", n)
	}
	counts := map[string]int{}
	for _, m := range rowRE.FindAllStringSubmatch(first, -1) {
		counts[m[2]]++
	}
	if said := fmt.Sprintf("%d supported, %d refused, %d ignored", counts["supported"], counts["refused"], counts["ignored"]); !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), said) {
		t.Errorf("docs/helm.md does not say %q, the counts of its controller.* table", said)
	}
	statusOf := func(desc string) string {
		switch {
		case strings.HasPrefix(desc, "Refused with a message"):
			return "refused"
		case strings.HasPrefix(desc, "Ignored"):
			return "ignored"
		}
		return "supported"
	}
	want := map[string]string{}
	for k, p := range schemaDoc.Properties["controller"].Properties {
		want["controller."+k] = statusOf(p.Description)
	}
	for k, p := range schemaDoc.Properties {
		if k == "controller" || k == "nameOverride" || k == "fullnameOverride" || strings.HasPrefix(p.Description, "Chart 0.1 name") {
			continue
		}
		want[k] = statusOf(p.Description)
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("docs/helm.md rows (-schema +doc):\n%s", diff)
	}
	for key, status := range rows {
		name, isCtl := strings.CutPrefix(key, "controller.")
		if status != "supported" || !isCtl {
			continue
		}
		if _, ok := ctlValues[name]; !ok && !strings.Contains(string(valuesText), "  # "+name+":") {
			t.Errorf("docs/helm.md says %s is supported; values.yaml has no such controller key", key)
		}
	}
	for name := range ctlValues {
		if _, ok := rows["controller."+name]; !ok {
			t.Errorf("values.yaml key controller.%s has no row in docs/helm.md", name)
		}
	}
}

// TestHelmChartControllerRuns runs the real switchyard binary with the args
// of the chart's DaemonSet as the chart's ServiceAccount, holding exactly the
// RBAC the chart renders (applied for real, in a fresh namespace, the binary
// impersonating the account), cluster-wide and with controller.scope.enabled
// (a Role in the namespace, a ClusterRole for IngressClasses only): it must
// become ready and proxy a request to a TEST-NET-1 backend, without a
// Forbidden.
func TestHelmChartControllerRuns(t *testing.T) {
	harness.RequireNetNS(t)
	c := Shared(t)
	bin := buildSwitchyard(t, t.TempDir())
	for i, mode := range []string{"cluster-wide", "scoped"} {
		t.Run(mode, func(t *testing.T) {
			ns := c.Namespace(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			class := ns
			out, stderr, err := helmRenderIn(t, ns, "edge", "--set", "controller.scope.enabled="+strconv.FormatBool(mode == "scoped"),
				"--set", "controller.ingressClassResource.name="+class, "--set", "controller.ingressClass="+class,
				"--set", "controller.ingressClassResource.controllerValue=switchyard.dev/"+class,
				"--set", "fullnameOverride="+class)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderr)
			}
			ms, err := decodeManifests("helm template", out)
			if err != nil {
				t.Fatal(err)
			}
			a := newApplier(t, c.AdminConfig())
			var args []string
			for _, m := range ms {
				switch m.obj.GetKind() {
				case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "IngressClass":
					if err := a.apply(ctx, m, false); err != nil {
						t.Fatalf("apply %s: %v", m, err)
					}
				case "DaemonSet":
					for _, arg := range containerArgs(typed[appsv1.DaemonSet](t, m.obj).Spec.Template.Spec) {
						args = append(args, strings.ReplaceAll(arg, "$(POD_NAMESPACE)", ns))
					}
				}
			}
			if mode == "scoped" {
				wantArgs(t, args, "--watch-namespace="+ns)
			}

			admin, err := kubernetes.NewForConfig(c.AdminConfig())
			if err != nil {
				t.Fatal(err)
			}
			backendIP := harness.TestIP(30 + i)
			backendLn, err := net.Listen("tcp", backendIP+":0")
			if err != nil {
				t.Fatal(err)
			}
			backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "backend %s path %s", backendIP, r.URL.Path)
			}), ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = backend.Serve(backendLn) }()
			t.Cleanup(func() { backend.Close() })
			ing, svc, slice := demoObjects(ns)
			ing.Spec.IngressClassName = &class
			slice.Ports[0].Port = ptrInt32(int32(backendLn.Addr().(*net.TCPAddr).Port))
			slice.Endpoints = slice.Endpoints[:1]
			slice.Endpoints[0].Addresses = []string{backendIP}
			if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}

			dir := t.TempDir()
			ip := harness.TestIP(3)
			httpPort, httpsPort, statusPort := harness.FreePort(t, ip), harness.FreePort(t, ip), harness.FreePort(t, ip)
			asSA := c.AdminConfig()
			asSA.Impersonate.UserName = "system:serviceaccount:" + ns + ":" + class
			args = append(args, "--kubeconfig="+c.WriteKubeconfig(t, asSA),
				"--listen-address="+ip, "--http-port="+strconv.Itoa(httpPort), "--https-port="+strconv.Itoa(httpsPort),
				"--status-address="+ip, "--status-port="+strconv.Itoa(statusPort))
			ctrl := harness.StartProcess(t, harness.Cmd{Name: "switchyard", Path: bin, Args: args, LogDir: dir,
				Env: []string{"POD_NAMESPACE=" + ns, "POD_NAME=edge-0"}})
			status := "http://" + net.JoinHostPort(ip, strconv.Itoa(statusPort))
			harness.WaitFor(t, time.Minute, "switchyard /readyz", ctrl, harness.HTTPReady(status+"/readyz", http.StatusOK, nil, nil))
			url := "http://" + net.JoinHostPort(ip, strconv.Itoa(httpPort)) + "/hello"
			want := fmt.Sprintf("backend %s path /hello", backendIP)
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
				return err == nil && resp.StatusCode == http.StatusOK && string(b) == want, nil
			})
			_ = ctrl.Stop()
			if log, err := os.ReadFile(ctrl.LogPath()); err != nil {
				t.Fatal(err)
			} else if strings.Contains(strings.ToLower(string(log)), "forbidden") {
				t.Errorf("the controller hit a Forbidden with the chart's RBAC (%s):\n%s", mode, ctrl.Tail(4000))
			}
		})
	}
}

// TestHelmUpdateStatusFalseDropsStatusRBAC: with --update-status=false the
// controller writes no Ingress status, so the chart grants no update on
// ingresses/status, cluster-wide or scoped; by default it does.
func TestHelmUpdateStatusFalseDropsStatusRBAC(t *testing.T) {
	for name, tc := range map[string]struct {
		args       []string
		wantStatus bool
	}{
		"default":              {nil, true},
		"update-status=false":  {[]string{"--set", "controller.extraArgs.update-status=false"}, false},
		"scoped":               {[]string{"--set", "controller.scope.enabled=true"}, true},
		"scoped-update-status": {[]string{"--set", "controller.scope.enabled=true", "--set-string", "controller.extraArgs.update-status=false"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			got := false
			for _, m := range helmTemplate(t, tc.args...) {
				var rules []rbacv1.PolicyRule
				switch m.obj.GetKind() {
				case "ClusterRole":
					rules = typed[rbacv1.ClusterRole](t, m.obj).Rules
				case "Role":
					rules = typed[rbacv1.Role](t, m.obj).Rules
				}
				for _, r := range rules {
					got = got || slices.Contains(r.Resources, "ingresses/status")
				}
			}
			if got != tc.wantStatus {
				t.Errorf("a rule on ingresses/status: %v; want %v", got, tc.wantStatus)
			}
		})
	}
}
