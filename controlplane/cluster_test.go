package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/test/k8s"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestMain runs the package inside the harness's network namespace (so
// EndpointSlices may name 192.0.2.x) with one API server for all tests.
func TestMain(m *testing.M) { k8s.Main(m) }

// clusterObjects creates the IngressClass (once) and the Service,
// EndpointSlice and Ingress of objects() in a fresh namespace, as admin.
func clusterObjects(t testing.TB, c *k8s.Cluster) (admin *kubernetes.Clientset, ns string) {
	t.Helper()
	admin = kubernetes.NewForConfigOrDie(c.AdminConfig())
	ns = c.Namespace(t)
	ctx := context.Background()
	class, svc, slice, ing := objects()
	if _, err := admin.NetworkingV1().IngressClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	svc.Namespace, slice.Namespace, ing.Namespace, ing.UID = ns, ns, ns, ""
	mustCreate(t, func() error {
		_, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{})
		return err
	})
	return admin, ns
}

// clusterController runs a controller with the controller's own,
// least-privilege identity (deploy/base/rbac.yaml), watching ns.
func clusterController(t testing.TB, c *k8s.Cluster, ns string, cfg Config) (<-chan update, *Controller, func()) {
	t.Helper()
	cfg.Build.WatchNamespace = ns
	return runController(t, kubernetes.NewForConfigOrDie(c.ControllerConfig()), cfg)
}

func mustCreate(t testing.TB, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
}

// expected is what the pure builder makes of the objects as the API server
// now holds them: the controller's pipeline (informers, snapshot, build)
// must hand exactly this to its sinks.
func expected(t testing.TB, admin kubernetes.Interface, opt builder.Options) *model.Configuration {
	t.Helper()
	ctx := context.Background()
	ns := opt.WatchNamespace
	var in builder.Input
	ings, err := admin.NetworkingV1().Ingresses(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range ings.Items {
		in.Ingresses = append(in.Ingresses, &ings.Items[i])
	}
	classes, err := admin.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range classes.Items {
		in.IngressClasses = append(in.IngressClasses, &classes.Items[i])
	}
	svcs, err := admin.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		in.Services = append(in.Services, &svcs.Items[i])
	}
	slices, err := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range slices.Items {
		in.EndpointSlices = append(in.EndpointSlices, &slices.Items[i])
	}
	return builder.Build(in, opt)
}

// ignoreVersion compares Configurations apart from the sync counter.
var ignoreVersion = cmpopts.IgnoreFields(model.Configuration{}, "Version")

// TestAgainstAPIServer drives the controller through a real kube-apiserver
// with its own RBAC identity: create, scale, canary, invalid annotation,
// wrong class, delete.
func TestAgainstAPIServer(t *testing.T) {
	c := k8s.Shared(t)
	admin, ns := clusterObjects(t, c)
	updates, ctrl, _ := clusterController(t, c, ns, Config{})
	ctx := context.Background()
	primary := ns + "-echo-http"
	canary := ns + "-echo-canary-http"

	// Create: the whole Configuration, as the builder makes it.
	first := next(t, updates, func(u update) bool { return len(endpointsOf(u.cfg, primary)) == 1 })
	if diff := cmp.Diff(expected(t, admin, builder.Options{WatchNamespace: ns}), first.cfg, ignoreVersion); diff != "" {
		t.Errorf("first Configuration (-want +got):\n%s", diff)
	}
	if got := endpointsOf(first.cfg, primary); !cmp.Equal(got, []string{"192.0.2.10:8080"}) {
		t.Errorf("endpoints = %v", got)
	}
	var hosts []string
	for _, s := range first.cfg.Servers {
		hosts = append(hosts, s.Hostname)
	}
	if !cmp.Equal(hosts, []string{model.CatchAllHost, "echo.example.com"}) {
		t.Errorf("servers = %v", hosts)
	}

	// Scale the EndpointSlice: dynamic only, and refreshed without a
	// build. Events of the objects' creation may still be arriving; a
	// quiet spell first, so the scale is the only change of its sync.
	// Tests running beside this one on the shared API server write
	// cluster-scoped objects (IngressClasses) this controller watches; one
	// landing in the scale's sync makes it a full build. So the scale is
	// tried up to three times (back down to one endpoint in between); a
	// controller that never refreshes still fails.
	scale := func(eps ...string) update {
		t.Helper()
		slice, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, "echo-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := true
		slice.Endpoints = nil
		for _, ip := range eps {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
		}
		if _, err := admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return next(t, updates, func(u update) bool { return len(endpointsOf(u.cfg, primary)) == len(eps) })
	}
	var u update
	for attempt := 1; ; attempt++ {
		quiet(updates, 300*time.Millisecond)
		refreshed := ctrl.Refreshed()
		u = scale("192.0.2.10", "192.0.2.11")
		if ctrl.Refreshed() != refreshed {
			break
		}
		if attempt == 3 {
			t.Fatal("scaling an EndpointSlice made a full build 3 times; want the endpoints refreshed alone")
		}
		t.Logf("scale attempt %d was built in full (another event in its sync); again", attempt)
		scale("192.0.2.10")
	}
	if c := u.change; c.Reload || c.Certificates || !c.Dynamic || len(c.Backends) != 1 || u.cfg.Backends[c.Backends[0]].Name != primary {
		t.Errorf("scaling change = %+v; want dynamic only, naming backend %s alone", c, primary)
	}
	if diff := cmp.Diff(expected(t, admin, builder.Options{WatchNamespace: ns}), u.cfg, ignoreVersion); diff != "" {
		t.Errorf("scaled Configuration (-want +got):\n%s", diff)
	}

	// A canary Ingress: an alternative backend with its weight.
	_, svc, cslice, ing := objects()
	svc.Name, svc.Namespace = "echo-canary", ns
	cslice.Name, cslice.Namespace, cslice.Labels[discoveryv1.LabelServiceName] = "echo-canary-1", ns, "echo-canary"
	cslice.Endpoints[0].Addresses = []string{"192.0.2.20"}
	ing.Name, ing.Namespace, ing.UID = "echo-canary", ns, ""
	ing.Annotations = map[string]string{"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-weight": "30"}
	ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "echo-canary"
	mustCreate(t, func() error {
		_, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, cslice, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{})
		return err
	})
	u = next(t, updates, func(u update) bool {
		return len(endpointsOf(u.cfg, canary)) == 1 && len(endpointsOf(u.cfg, primary)) == 2
	})
	found := 0
	for _, b := range u.cfg.Backends {
		switch b.Name {
		case primary:
			found++
			if !cmp.Equal(b.Alternatives, []string{canary}) {
				t.Errorf("primary alternatives = %v; want [%s]", b.Alternatives, canary)
			}
		case canary:
			found++
			if !b.NoServer || b.Canary.Weight != 30 || b.Canary.WeightTotal != 100 {
				t.Errorf("canary backend = %+v; want noServer, weight 30/100", b)
			}
		}
	}
	if found != 2 {
		t.Errorf("found %d of the primary and canary backends", found)
	}
	if u.change.Reload {
		t.Errorf("canary change = %+v; want dynamic only (no new server or location)", u.change)
	}

	// An invalid annotation: a Warning Event on the Ingress, the rest served.
	ping, err := admin.NetworkingV1().Ingresses(ns).Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ping.Annotations = map[string]string{"nginx.ingress.kubernetes.io/load-balance": "fastest"}
	if _, err := admin.NetworkingV1().Ingresses(ns).Update(ctx, ping, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, admin, ns, "echo", "load-balance")
	// The Event is emitted during the sync that stored this Configuration.
	cur := ctrl.Current()
	if got := endpointsOf(cur, primary); len(got) != 2 {
		t.Errorf("after the invalid annotation %s endpoints = %v; want still served", primary, got)
	}
	if len(cur.Errors) != 1 || cur.Errors[0].Object.Name != "echo" {
		t.Errorf("errors = %+v; want one about Ingress echo", cur.Errors)
	}

	// Another class: ignored.
	other := ping.DeepCopy()
	other.ObjectMeta = metav1.ObjectMeta{Name: "theirs", Namespace: ns}
	nginx := "nginx"
	other.Spec.IngressClassName = &nginx
	other.Spec.Rules[0].Host = "theirs.example.com"
	mustCreate(t, func() error {
		_, err := admin.NetworkingV1().Ingresses(ns).Create(ctx, other, metav1.CreateOptions{})
		return err
	})

	// Delete the canary: gone. (The other-class Ingress never appears.)
	if err := admin.NetworkingV1().Ingresses(ns).Delete(ctx, "echo-canary", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	u = next(t, updates, func(u update) bool { return len(endpointsOf(u.cfg, canary)) == 0 })
	for _, s := range u.cfg.Servers {
		if s.Hostname == "theirs.example.com" {
			t.Error("an Ingress of another class was served")
		}
	}
	if diff := cmp.Diff(expected(t, admin, builder.Options{WatchNamespace: ns}), u.cfg, ignoreVersion); diff != "" {
		t.Errorf("final Configuration (-want +got):\n%s", diff)
	}
}

// TestClusterFailsClosed: an Ingress gains an access annotation Switchyard
// cannot carry out (an invalid limit-connections); through the real API server, its locations become
// denied (503 on both planes) with a FailedClosed Warning Event naming the
// annotation, and removing it serves the Ingress again.
func TestClusterFailsClosed(t *testing.T) {
	c := k8s.Shared(t)
	admin, ns := clusterObjects(t, c)
	updates, _, _ := clusterController(t, c, ns, Config{})
	ctx := context.Background()
	denied := func(cfg *model.Configuration) []string {
		var out []string
		for _, s := range cfg.Servers {
			for _, l := range s.Locations {
				if l.Denied != nil {
					out = append(out, s.Hostname+l.Path+" "+l.Denied.Field)
				}
			}
		}
		return out
	}
	next(t, updates, func(u update) bool { return len(u.cfg.Servers) == 2 && len(denied(u.cfg)) == 0 })
	ing, err := admin.NetworkingV1().Ingresses(ns).Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ing.Annotations = map[string]string{"nginx.ingress.kubernetes.io/limit-connections": "ten"} // invalid
	if _, err := admin.NetworkingV1().Ingresses(ns).Update(ctx, ing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := next(t, updates, func(u update) bool { return len(denied(u.cfg)) > 0 })
	if got, want := denied(u.cfg), []string{"echo.example.com/ nginx.ingress.kubernetes.io/limit-connections"}; !cmp.Equal(got, want) {
		t.Errorf("denied locations %q; want %q", got, want)
	}
	if !u.change.Reload {
		t.Errorf("change %+v: a denial changes the structure (nginx reloads)", u.change)
	}
	waitEvent(t, admin, ns, "echo", "FailedClosed nginx.ingress.kubernetes.io/limit-connections: ")
	ing, err = admin.NetworkingV1().Ingresses(ns).Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ing.Annotations = nil
	if _, err := admin.NetworkingV1().Ingresses(ns).Update(ctx, ing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, updates, func(u update) bool { return len(denied(u.cfg)) == 0 })
}

// TestClusterOneLeaderWritesStatus: two controllers with the controller
// identity campaign for one Lease; only the leader's addresses reach the
// Ingress status, and the other takes over when the leader stops.
func TestClusterOneLeaderWritesStatus(t *testing.T) {
	c := k8s.Shared(t)
	admin, ns := clusterObjects(t, c)
	a := fastElection(Config{PublishStatusAddress: "192.0.2.100", Identity: "a", ElectionNamespace: ns})
	b := fastElection(Config{PublishStatusAddress: "192.0.2.200", Identity: "b", ElectionNamespace: ns})
	_, ca, stopA := clusterController(t, c, ns, a)
	readyOrFail(t, ca)
	waitStatus(t, admin, ns, "echo", []networkingv1.IngressLoadBalancerIngress{{IP: "192.0.2.100"}})
	_, cb, _ := clusterController(t, c, ns, b)
	readyOrFail(t, cb)
	if !ca.IsLeader() || cb.IsLeader() {
		t.Fatalf("IsLeader a=%v b=%v; want only a", ca.IsLeader(), cb.IsLeader())
	}
	lease, err := admin.CoordinationV1().Leases(ns).Get(context.Background(), "switchyard-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != "a" {
		t.Errorf("lease holder = %v; want a", h)
	}
	stopA() // releases the Lease
	waitStatus(t, admin, ns, "echo", []networkingv1.IngressLoadBalancerIngress{{IP: "192.0.2.200"}})
	if !cb.IsLeader() {
		t.Error("b wrote status without leading")
	}
}

// TestClusterPublishService: the leader copies the --publish-service
// Service's load-balancer address into Ingress status, through RBAC.
func TestClusterPublishService(t *testing.T) {
	c := k8s.Shared(t)
	admin, ns := clusterObjects(t, c)
	ctx := context.Background()
	lb, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "switchyard"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.5"}}
	if _, err := admin.CoreV1().Services(ns).UpdateStatus(ctx, lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, ctrl, _ := clusterController(t, c, ns, fastElection(Config{PublishService: ns + "/switchyard"}))
	waitStatus(t, admin, ns, "echo", []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.5"}})
	if !ctrl.IsLeader() {
		t.Error("status written but IsLeader() = false")
	}
}

// TestClusterRBAC: the controller's identity may do its job (the other
// tests run with it) and nothing more.
func TestClusterRBAC(t *testing.T) {
	c := k8s.Shared(t)
	_, ns := clusterObjects(t, c)
	ctrl := kubernetes.NewForConfigOrDie(c.ControllerConfig())
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"create service", func() error {
			_, err := ctrl.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
			return err
		}},
		{"update ingress spec", func() error {
			ing, err := ctrl.NetworkingV1().Ingresses(ns).Get(ctx, "echo", metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get (allowed): %w", err)
			}
			ing.Spec.Rules[0].Host = "hijack.example.com"
			_, err = ctrl.NetworkingV1().Ingresses(ns).Update(ctx, ing, metav1.UpdateOptions{})
			return err
		}},
		{"delete endpointslice", func() error {
			return ctrl.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "echo-1", metav1.DeleteOptions{})
		}},
		{"list pods", func() error { _, err := ctrl.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); return err }},
		{"lease in another namespace", func() error {
			_, err := ctrl.CoordinationV1().Leases("default").Get(ctx, "x", metav1.GetOptions{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !apierrors.IsForbidden(err) {
				t.Errorf("got %v; want Forbidden", err)
			}
		})
	}
}

func waitEvent(t *testing.T, client kubernetes.Interface, ns, object, contains string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	w, err := client.CoreV1().Events(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The Event may predate the watch: look at what exists, then watch.
	match := func(e *corev1.Event) bool {
		return e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == object && strings.Contains(e.Reason+" "+e.Message, contains)
	}
	evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs.Items {
		if match(&evs.Items[i]) {
			return
		}
	}
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("event watch closed before a Warning about %s on %s", contains, object)
			}
			if e, ok := ev.Object.(*corev1.Event); ok && match(e) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no Warning Event about %s on %s", contains, object)
		}
	}
}

// BenchmarkConvergence measures EndpointSlice update in the API server →
// Configuration at the sink, over 200 updates per iteration, and reports
// p50/p99/max in ms. The baseline, measured on the same updates at the same
// time, is a plain watch on the EndpointSlices (the API server's own share
// of the latency). The controller runs with its default holdoff (50 ms, max
// 500 ms) and with 5 ms. For comparison, ingress-nginx needs up to 1 s (the
// Lua worker's poll) plus its 0.3/s sync rate limit.
//
//	go test -run '^$' -bench Convergence -benchtime 1x ./controlplane/
func BenchmarkConvergence(b *testing.B) {
	for _, h := range []struct {
		name             string
		holdoff, maxHold time.Duration
	}{
		{"holdoff=50ms(default)", 50 * time.Millisecond, 500 * time.Millisecond},
		{"holdoff=5ms", 5 * time.Millisecond, 50 * time.Millisecond},
	} {
		b.Run(h.name, func(b *testing.B) {
			c := k8s.Shared(b)
			admin, ns := clusterObjects(b, c)
			updates, _, _ := clusterController(b, c, ns, Config{Holdoff: h.holdoff, MaxHoldoff: h.maxHold})
			primary := ns + "-echo-http"
			next(b, updates, func(u update) bool { return len(endpointsOf(u.cfg, primary)) == 1 })
			watched := watchSlices(b, admin, ns)
			ctx := context.Background()
			ready := true
			var sink, watch []time.Duration
			n := 0
			for b.Loop() {
				for range 200 {
					n++
					slice, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, "echo-1", metav1.GetOptions{})
					if err != nil {
						b.Fatal(err)
					}
					addr := fmt.Sprintf("192.0.2.%d", 1+n%40)
					slice.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
					want := addr + ":8080"
					start := time.Now()
					if _, err := admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
						b.Fatal(err)
					}
					u := next(b, updates, func(u update) bool {
						e := endpointsOf(u.cfg, primary)
						return len(e) == 1 && e[0] == want
					})
					sink = append(sink, u.at.Sub(start))
					for w := range watched {
						if w.addr == want {
							watch = append(watch, w.at.Sub(start))
							break
						}
					}
				}
			}
			b.StopTimer()
			slices.Sort(sink)
			slices.Sort(watch)
			p := func(l []time.Duration, q int) float64 { return float64(l[(len(l)-1)*q/100]) / 1e6 }
			b.ReportMetric(p(sink, 50), "p50-ms")
			b.ReportMetric(p(sink, 99), "p99-ms")
			b.ReportMetric(p(sink, 100), "max-ms")
			b.ReportMetric(p(watch, 50), "watch-p50-ms")
			b.ReportMetric(p(watch, 99), "watch-p99-ms")
			b.ReportMetric(float64(len(sink)), "updates")
		})
	}
}

// sliceSeen is an EndpointSlice's single address:8080 and when a watch saw it.
type sliceSeen struct {
	addr string
	at   time.Time
}

// watchSlices stamps every EndpointSlice event in ns as it arrives.
func watchSlices(b *testing.B, admin kubernetes.Interface, ns string) <-chan sliceSeen {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	w, err := admin.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	out := make(chan sliceSeen, 1024)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*discoveryv1.EndpointSlice); ok && len(s.Endpoints) == 1 && len(s.Endpoints[0].Addresses) == 1 {
				out <- sliceSeen{s.Endpoints[0].Addresses[0] + ":8080", time.Now()}
			}
		}
		close(out)
	}()
	return out
}

// quiet returns once no update has come for d.
func quiet(updates <-chan update, d time.Duration) {
	for {
		select {
		case <-updates:
		case <-time.After(d):
			return
		}
	}
}
