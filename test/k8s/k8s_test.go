package k8s

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/test/harness"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// One cluster for the whole package, inside the test network namespace.
func TestMain(m *testing.M) { Main(m) }

const defaultTestTimeout = 30 * time.Second

func clients(t *testing.T, c *Cluster) (admin, ctrl, nobody kubernetes.Interface) {
	t.Helper()
	var err error
	if admin, err = kubernetes.NewForConfig(c.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	if ctrl, err = kubernetes.NewForConfig(c.ControllerConfig()); err != nil {
		t.Fatal(err)
	}
	if nobody, err = kubernetes.NewForConfig(c.UnprivilegedConfig()); err != nil {
		t.Fatal(err)
	}
	return admin, ctrl, nobody
}

// demoObjects is an Ingress routing to a selector-less Service whose
// EndpointSlice names TEST-NET-1 addresses, as e2e tests build them.
func demoObjects(ns string) (*networkingv1.Ingress, *corev1.Service, *discoveryv1.EndpointSlice) {
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptr.To("switchyard"),
			Rules: []networkingv1.IngressRule{{Host: "web.example", IngressRuleValue: networkingv1.IngressRuleValue{
				HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &prefix,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
						Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}},
				}}}}}},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{harness.TestIP(10)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{harness.TestIP(11)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		},
	}
	return ing, svc, slice
}

// TestControllerReadsWhatAdminWrote: objects created as admin read back
// identically through the controller's least-privilege identity.
func TestControllerReadsWhatAdminWrote(t *testing.T) {
	c := Shared(t)
	ns := c.Namespace(t)
	admin, ctrl, _ := clients(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	ing, svc, slice := demoObjects(ns)
	gotIng, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Ingress: %v", err)
	}
	gotSvc, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Service: %v", err)
	}
	gotSlice, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create EndpointSlice with TEST-NET-1 addresses: %v", err)
	}

	readIng, err := ctrl.NetworkingV1().Ingresses(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("controller get Ingress: %v", err)
	}
	if diff := cmp.Diff(gotIng.Spec, readIng.Spec); diff != "" {
		t.Errorf("Ingress read by the controller differs (-admin +controller):\n%s", diff)
	}
	svcs, err := ctrl.CoreV1().Services("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.namespace=" + ns})
	if err != nil {
		t.Fatalf("controller list Services: %v", err)
	}
	if len(svcs.Items) != 1 || !cmp.Equal(svcs.Items[0].Spec, gotSvc.Spec) {
		t.Errorf("controller listed Services %v; want just %s/web with the admin's spec", svcs.Items, ns)
	}
	slices, err := ctrl.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	if err != nil {
		t.Fatalf("controller list EndpointSlices: %v", err)
	}
	if len(slices.Items) != 1 {
		t.Fatalf("controller listed %d EndpointSlices; want 1", len(slices.Items))
	}
	if diff := cmp.Diff(gotSlice.Endpoints, slices.Items[0].Endpoints); diff != "" {
		t.Errorf("EndpointSlice endpoints differ (-admin +controller):\n%s", diff)
	}

	// A watch works for the controller identity too (informers need it).
	w, err := ctrl.NetworkingV1().Ingresses(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: gotIng.ResourceVersion})
	if err != nil {
		t.Fatalf("controller watch Ingresses: %v", err)
	}
	defer w.Stop()
	readIng.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: harness.TestIP(1)}}
	if _, err := ctrl.NetworkingV1().Ingresses(ns).UpdateStatus(ctx, readIng, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("controller update Ingress status: %v", err)
	}
	select {
	case ev := <-w.ResultChan():
		got, ok := ev.Object.(*networkingv1.Ingress)
		if !ok || len(got.Status.LoadBalancer.Ingress) != 1 || got.Status.LoadBalancer.Ingress[0].IP != harness.TestIP(1) {
			t.Errorf("watch event %s %T; want the Ingress with status %s", ev.Type, ev.Object, harness.TestIP(1))
		}
	case <-ctx.Done():
		t.Fatal("no watch event for the status update")
	}
}

// TestLoopbackEndpointRejected pins the API validation that makes the test
// network namespace necessary (notes, pitfall 1).
func TestLoopbackEndpointRejected(t *testing.T) {
	c := Shared(t)
	ns := c.Namespace(t)
	admin, _, _ := clients(t, c)
	_, _, slice := demoObjects(ns)
	slice.Endpoints[0].Addresses = []string{"127.0.0.2"}
	_, err := admin.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), slice, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("create EndpointSlice with 127.0.0.2: %v; want Invalid", err)
	}
}

// TestControllerRBAC: the controller identity can do its job and nothing
// more; an identity without bindings can do nothing.
func TestControllerRBAC(t *testing.T) {
	c := Shared(t)
	ns := c.Namespace(t)
	other := c.Namespace(t) // exists, but the controller's Role is not bound there
	admin, ctrl, nobody := clients(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	_, _, slice := demoObjects(ns)
	slice, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Namespace binds the Role in other too; take it away there.
	if err := admin.RbacV1().RoleBindings(other).Delete(ctx, "switchyard-controller-e2e", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lease := func(ns string) func() error {
		return func() error {
			_, err := ctrl.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "switchyard-leader"},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("test")}}, metav1.CreateOptions{})
			return err
		}
	}
	rows := []struct {
		name    string
		do      func() error
		allowed bool
	}{
		{"list ingresses in all namespaces", func() error {
			_, err := ctrl.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{})
			return err
		}, true},
		{"list ingressclasses", func() error {
			_, err := ctrl.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{})
			return err
		}, true},
		{"list secrets", func() error { _, err := ctrl.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); return err }, true},
		{"list configmaps", func() error { _, err := ctrl.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); return err }, true},
		{"create events", func() error {
			ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "e-", Namespace: ns},
				InvolvedObject: corev1.ObjectReference{Kind: "Ingress", Namespace: ns, Name: "web"},
				Reason:         "Test", Message: "m", Type: corev1.EventTypeWarning}
			_, err := ctrl.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
			return err
		}, true},
		{"create its lease where its Role is bound", lease(ns), true},
		{"create a lease elsewhere", lease(other), false},
		{"create secrets", func() error {
			_, err := ctrl.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		}, false},
		{"delete namespaces", func() error { return ctrl.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) }, false},
		{"update endpointslices", func() error {
			_, err := ctrl.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{})
			return err
		}, false},
		{"create ingresses", func() error {
			ing, _, _ := demoObjects(ns)
			_, err := ctrl.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{})
			return err
		}, false},
		{"list pods", func() error { _, err := ctrl.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }, false},
		{"list nodes", func() error { _, err := ctrl.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }, false},
		{"update configmaps", func() error {
			_, err := ctrl.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		}, false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			err := r.do()
			switch {
			case r.allowed && err != nil:
				t.Errorf("controller may %s: got %v; want success", r.name, err)
			case !r.allowed && !apierrors.IsForbidden(err):
				t.Errorf("controller must not %s: got %v; want Forbidden", r.name, err)
			}
		})
	}
	if _, err := nobody.NetworkingV1().Ingresses(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("identity without bindings listed Ingresses: got %v; want Forbidden", err)
	}
}

// TestStartStopsEverything: a private cluster from Start serves, and is
// gone (its port closed) once its test has ended.
func TestStartStopsEverything(t *testing.T) {
	var host string
	t.Run("private", func(t *testing.T) {
		c := Start(t)
		host = c.Host()
		admin, _, _ := clients(t, c)
		if _, err := admin.CoreV1().Namespaces().Get(context.Background(), "switchyard", metav1.GetOptions{}); err != nil {
			t.Errorf("the controller's namespace from rbac.yaml: %v", err)
		}
	})
	if host == "" {
		t.Fatal("the private cluster did not start")
	}
	addr := host[len("https://"):]
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after its test ended", addr)
	}
}

func TestNamespaceName(t *testing.T) {
	tests := []struct{ test, want string }{
		{"TestX", "testx-7"},
		{"TestRBAC/create_secrets", "testrbac-create-secrets-7"},
		{"Test" + string(make([]byte, 80)), "test-7"},
		{"__", "t-7"},
	}
	for _, tt := range tests {
		if got := nsName(tt.test, 7); got != tt.want {
			t.Errorf("nsName(%q) = %q; want %q", tt.test, got, tt.want)
		}
	}
}

func secretNamed(name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
