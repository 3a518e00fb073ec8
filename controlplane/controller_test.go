package controlplane

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

const defaultTestTimeout = 10 * time.Second

// update is one Configuration a sink saw.
type update struct {
	cfg    *model.Configuration
	change Change
	at     time.Time // when the sink got it
}

func startController(t *testing.T, client *fake.Clientset) (<-chan update, *Controller) {
	t.Helper()
	updates := make(chan update, 64)
	c, err := New(Config{
		Client: client, Holdoff: 5 * time.Millisecond, MaxHoldoff: 50 * time.Millisecond,
		Sinks: []Sink{SinkFunc(func(_ context.Context, cfg *model.Configuration, ch Change) error {
			updates <- update{cfg, ch, time.Now()}
			return nil
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return updates, c
}

func next(t testing.TB, updates <-chan update, want func(update) bool) update {
	t.Helper()
	deadline := time.After(defaultTestTimeout)
	for {
		select {
		case u := <-updates:
			if want(u) {
				return u
			}
		case <-deadline:
			t.Fatal("timed out waiting for a matching configuration")
		}
	}
}

func objects() (*networkingv1.IngressClass, *corev1.Service, *discoveryv1.EndpointSlice, *networkingv1.Ingress) {
	class := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "switchyard"},
		Spec: networkingv1.IngressClassSpec{Controller: "switchyard.dev/ingress-controller"}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "demo"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}}}
	ready := true
	port := int32(8080)
	name := "http"
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "echo-1", Namespace: "demo",
		Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports:     []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.10"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
	className := "switchyard"
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "demo", UID: "ing-uid"},
		Spec: networkingv1.IngressSpec{IngressClassName: &className, Rules: []networkingv1.IngressRule{{Host: "echo.example.com",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: "echo", Port: networkingv1.ServiceBackendPort{Name: "http"}}}}}}}}}}}
	return class, svc, slice, ing
}

func endpointsOf(cfg *model.Configuration, backend string) []string {
	for _, b := range cfg.Backends {
		if b.Name == backend {
			var out []string
			for _, e := range b.Endpoints {
				out = append(out, e.HostPort())
			}
			return out
		}
	}
	return nil
}

func TestControllerSyncsAndClassifies(t *testing.T) {
	class, svc, slice, ing := objects()
	client := fake.NewSimpleClientset(class, svc, slice, ing)
	updates, c := startController(t, client)
	ctx := context.Background()

	first := next(t, updates, func(u update) bool { return true })
	if !first.change.Reload || !first.change.Dynamic || first.cfg.Version != 1 {
		t.Errorf("first change = %+v version %d; want reload+dynamic, version 1", first.change, first.cfg.Version)
	}
	if got := endpointsOf(first.cfg, "demo-echo-http"); !cmp.Equal(got, []string{"192.0.2.10:8080"}) {
		t.Errorf("endpoints = %v", got)
	}
	readyOrFail(t, c) // closed right after the sinks took the first Configuration

	// Scale the slice: a dynamic-only change.
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"192.0.2.11"}})
	slice.ResourceVersion = "2"
	if _, err := client.DiscoveryV1().EndpointSlices("demo").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := next(t, updates, func(u update) bool { return len(endpointsOf(u.cfg, "demo-echo-http")) == 2 })
	if c := u.change; c.Reload || c.Certificates || !c.Dynamic || len(c.Backends) != 1 || u.cfg.Backends[c.Backends[0]].Name != "demo-echo-http" {
		t.Errorf("scale change = %+v; want dynamic only, naming backend demo-echo-http alone", c)
	}

	// An invalid annotation: a Warning Event names the Ingress and the key,
	// and the rest is still served.
	ing.Annotations = map[string]string{"nginx.ingress.kubernetes.io/load-balance": "fastest"}
	ing.ResourceVersion = "2"
	if _, err := client.NetworkingV1().Ingresses("demo").Update(ctx, ing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, client, "demo", "echo", "load-balance")
	if got := endpointsOf(c.Current(), "demo-echo-http"); len(got) != 2 {
		t.Errorf("after invalid annotation endpoints = %v; want still served", got)
	}

	// A new host: needs a reload.
	ing2 := ing.DeepCopy()
	ing2.Name, ing2.UID, ing2.ResourceVersion, ing2.Annotations = "other", "ing2", "", nil
	ing2.Spec.Rules[0].Host = "other.example.com"
	if _, err := client.NetworkingV1().Ingresses("demo").Create(ctx, ing2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u = next(t, updates, func(u update) bool { return len(u.cfg.Servers) == 3 })
	if !u.change.Reload {
		t.Errorf("new host change = %+v; want reload", u.change)
	}

	// Delete: gone.
	if err := client.NetworkingV1().Ingresses("demo").Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, updates, func(u update) bool { return len(u.cfg.Servers) == 2 })
}

func TestControllerIgnoresOtherClasses(t *testing.T) {
	class, svc, slice, ing := objects()
	other := "nginx"
	ing.Spec.IngressClassName = &other
	client := fake.NewSimpleClientset(class, svc, slice, ing)
	updates, _ := startController(t, client)
	u := next(t, updates, func(update) bool { return true })
	if len(u.cfg.Servers) != 1 || u.cfg.Servers[0].Hostname != model.CatchAllHost {
		t.Errorf("servers = %+v; want only the catch-all", u.cfg.Servers)
	}
	var names []string
	for _, b := range u.cfg.Backends {
		names = append(names, b.Name)
	}
	if !cmp.Equal(names, []string{model.DefaultBackendName}) {
		t.Errorf("backends = %v", names)
	}
}

func TestClassify(t *testing.T) {
	base := &model.Configuration{Servers: []model.Server{{Hostname: "a"}}, Backends: []*model.Backend{{Name: "b"}}}
	endpoints := *base
	endpoints.Backends = []*model.Backend{{Name: "b", Endpoints: []model.Endpoint{{Address: "192.0.2.1", Port: 80}}}}
	servers := *base
	servers.Servers = []model.Server{{Hostname: "a"}, {Hostname: "c"}}
	errs := *base
	errs.Errors = []model.ObjectError{{Message: "x"}}
	for _, tc := range []struct {
		name string
		next *model.Configuration
		want Change
	}{
		{"same", base, Change{}},
		{"endpoints", &endpoints, Change{Dynamic: true}},
		{"servers", &servers, Change{Reload: true}},
		{"only errors", &errs, Change{}},
	} {
		if got := classify(base, tc.next); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v; want %+v", tc.name, got, tc.want)
		}
	}
}

// TestControllerCoalescesBursts: a burst of Ingress updates yields a few
// builds, the last with the final state; an isolated update after a quiet
// spell is built without waiting for the holdoff.
func TestControllerCoalescesBursts(t *testing.T) {
	class, svc, slice, ing := objects()
	client := fake.NewClientset(class, svc, slice, ing)
	updates, _, _ := runController(t, client, Config{Holdoff: 50 * time.Millisecond, MaxHoldoff: 500 * time.Millisecond})
	next(t, updates, func(update) bool { return true })
	ctx := context.Background()
	const burst = 100
	for i := 1; i <= burst; i++ {
		g := ing.DeepCopy()
		g.ResourceVersion = strconv.Itoa(i + 1)
		g.Spec.Rules[0].Host = "h" + strconv.Itoa(i) + ".example.com"
		if _, err := client.NetworkingV1().Ingresses("demo").Update(ctx, g, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	builds := 0
	next(t, updates, func(u update) bool {
		builds++
		return slices.ContainsFunc(u.cfg.Servers, func(s model.Server) bool { return s.Hostname == "h100.example.com" })
	})
	if builds > burst/10 {
		t.Errorf("%d updates made %d builds; want them coalesced", burst, builds)
	}
}

// TestEndpointChangesNotHeldOff: EndpointSlice changes alone need no build
// and are applied without the holdoff, also under a steady stream of them
// (issue 22), while a tight burst of them is still paced by
// EndpointInterval, ending in the final state.
func TestEndpointChangesNotHeldOff(t *testing.T) {
	class, svc, slice, ing := objects()
	client := fake.NewClientset(class, svc, slice, ing)
	const interval = 20 * time.Millisecond
	updates, ctrl, _ := runController(t, client, Config{Holdoff: 50 * time.Millisecond, MaxHoldoff: 500 * time.Millisecond, EndpointInterval: interval})
	next(t, updates, func(update) bool { return true })
	ctx := context.Background()
	ready := true
	rv := 1
	write := func(ip string) {
		t.Helper()
		rv++
		s := slice.DeepCopy()
		s.ResourceVersion = strconv.Itoa(rv)
		s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
		if _, err := client.DiscoveryV1().EndpointSlices("demo").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A stream 60 ms apart: with the holdoff each change after the first
	// would wait its 50 ms quiet spell.
	var delays []time.Duration
	refreshed := ctrl.Refreshed()
	for i := range 12 {
		ip := "192.0.2." + strconv.Itoa(20+i)
		at := time.Now()
		write(ip)
		u := next(t, updates, func(u update) bool { return cmp.Equal(endpointsOf(u.cfg, "demo-echo-http"), []string{ip + ":8080"}) })
		delays = append(delays, u.at.Sub(at))
		time.Sleep(60*time.Millisecond - time.Since(at))
	}
	slices.Sort(delays)
	if median := delays[len(delays)/2]; median >= 40*time.Millisecond {
		t.Errorf("endpoint changes 60 ms apart reached the sink after %v (median; all %v); want them applied without the 50 ms holdoff", median, delays)
	}
	if got := ctrl.Refreshed() - refreshed; got < 12 {
		t.Errorf("%d of 12 endpoint changes were refreshed; want all, without a build", got)
	}

	// A tight burst: at most one refresh per interval.
	time.Sleep(100 * time.Millisecond)
	for len(updates) > 0 {
		<-updates
	}
	start := time.Now()
	// Fewer than the fake watch's 100-event buffer, which panics when full.
	const burst = 60
	for i := 1; i <= burst; i++ {
		write("192.0.2." + strconv.Itoa(100+i%40))
	}
	write("192.0.2.99")
	refreshes := 0
	next(t, updates, func(u update) bool {
		refreshes++
		return cmp.Equal(endpointsOf(u.cfg, "demo-echo-http"), []string{"192.0.2.99:8080"})
	})
	if limit := 2 + int(time.Since(start)/interval); refreshes > limit {
		t.Errorf("%d endpoint changes in %v made %d refreshes; want at most %d, one per %v", burst+1, time.Since(start), refreshes, limit, interval)
	}
}

// TestSyncRateLimit: with --sync-rate-limit 2, a steady stream of endpoint
// changes for 1.5 s is built at most 1 + 2 × 1.5 times (burst 1), and the
// last build still has the final state.
func TestSyncRateLimit(t *testing.T) {
	class, svc, slice, ing := objects()
	client := fake.NewClientset(class, svc, slice, ing)
	updates, _, _ := runController(t, client, Config{Holdoff: time.Millisecond, MaxHoldoff: 2 * time.Millisecond, SyncRateLimit: 2})
	next(t, updates, func(update) bool { return true })
	ctx := context.Background()
	ready := true
	start := time.Now()
	i := 0
	for time.Since(start) < 1500*time.Millisecond {
		i++
		s := slice.DeepCopy()
		s.ResourceVersion = strconv.Itoa(i + 1)
		s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"192.0.2." + strconv.Itoa(1+i%40)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
		if _, err := client.DiscoveryV1().EndpointSlices("demo").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s := slice.DeepCopy()
	s.ResourceVersion = strconv.Itoa(i + 2)
	s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.99"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
	if _, err := client.DiscoveryV1().EndpointSlices("demo").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	builds := 0
	next(t, updates, func(u update) bool {
		builds++
		return cmp.Equal(endpointsOf(u.cfg, "demo-echo-http"), []string{"192.0.2.99:8080"})
	})
	elapsed := time.Since(start).Seconds()
	if limit := 1 + int(2*elapsed+0.5); builds > limit {
		t.Errorf("%d updates in %.1fs made %d builds; want at most %d at 2 per second", i, elapsed, builds, limit)
	}
	if builds < 2 {
		t.Errorf("only %d builds: the stream was not built at all", builds)
	}
}

type rejection struct{ refs []model.ObjectError }

func (r rejection) Error() string                     { return "nginx -t failed" }
func (r rejection) ObjectErrors() []model.ObjectError { return r.refs }

// TestSinkRejectionBecomesEvent: a sink error naming an Ingress becomes one
// Warning Event (RELOAD) on it while the sync keeps failing, and the loop
// retries; once a sync succeeds, a new rejection is reported again.
func TestSinkRejectionBecomesEvent(t *testing.T) {
	class, svc, slice, ing := objects()
	client := fake.NewClientset(class, svc, slice, ing)
	var fail atomic.Bool
	fail.Store(true)
	attempts := make(chan struct{}, 100)
	c, err := New(Config{Client: client, Holdoff: time.Millisecond, MaxHoldoff: 2 * time.Millisecond,
		Sinks: []Sink{SinkFunc(func(context.Context, *model.Configuration, Change) error {
			attempts <- struct{}{}
			if fail.Load() {
				return fmt.Errorf("render: %w", rejection{[]model.ObjectError{{Object: model.ObjectRef{Kind: "Ingress", Namespace: "demo", Name: "echo"},
					Message: "nginx -t refused the configuration: bad certificate"}}})
			}
			return nil
		})}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for range 2 { // the first attempt and one retry
		select {
		case <-attempts:
		case <-time.After(defaultTestTimeout):
			t.Fatal("no sync attempt")
		}
	}
	var events []corev1.Event
	deadline := time.Now().Add(defaultTestTimeout)
	for time.Now().Before(deadline) {
		list, err := client.CoreV1().Events("demo").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		events = list.Items
		if len(events) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(events) != 1 || events[0].Reason != "RELOAD" || events[0].Type != corev1.EventTypeWarning ||
		events[0].InvolvedObject.Name != "echo" || !strings.Contains(events[0].Message, "bad certificate") {
		t.Fatalf("events: %+v; want one Warning RELOAD on Ingress demo/echo", events)
	}
	if events[0].Count > 1 {
		t.Errorf("the rejection was recorded %d times; want once per failing streak", events[0].Count)
	}
	fail.Store(false)
	select {
	case <-c.Ready():
	case <-time.After(defaultTestTimeout):
		t.Fatal("never recovered after the sink accepted")
	}
}

// TestRecordErrorsOncePerError: an object error becomes one Warning Event,
// not one per sync; it is reported again only after it went away and came
// back.
func TestRecordErrorsOncePerError(t *testing.T) {
	rec := record.NewFakeRecorder(16)
	c := &Controller{recorder: rec, emitted: map[string]bool{}}
	bad := model.ObjectError{Object: model.ObjectRef{Kind: "Ingress", Namespace: "demo", Name: "echo", UID: "u1"},
		Field: "nginx.ingress.kubernetes.io/load-balance", Message: `"fastest" is not a balancer`}
	other := bad
	other.Field, other.Message = "nginx.ingress.kubernetes.io/canary-weight", `"x" is not an integer`
	want := func(step string, n int) {
		t.Helper()
		if got := len(rec.Events); got != n {
			t.Errorf("%s: %d events queued; want %d", step, got, n)
		}
		for range len(rec.Events) {
			e := <-rec.Events
			if !strings.HasPrefix(e, "Warning InvalidConfiguration nginx.ingress.kubernetes.io/") {
				t.Errorf("%s: event %q", step, e)
			}
		}
	}
	c.recordErrors([]model.ObjectError{bad})
	want("first sync", 1)
	c.recordErrors([]model.ObjectError{bad})
	want("same error again", 0)
	c.recordErrors([]model.ObjectError{bad, other})
	want("a second error", 1)
	c.recordErrors(nil)
	want("fixed", 0)
	c.recordErrors([]model.ObjectError{bad})
	want("broken again", 1)
}

// TestRunLeavesNoEventWatcher checks that a stopped controller leaves no
// event watcher behind: client-go's goroutine for a stopped watcher spins
// on its closed channel until the broadcaster shuts down.
func TestRunLeavesNoEventWatcher(t *testing.T) {
	class, svc, slice, ing := objects()
	c, err := New(Config{Client: fake.NewClientset(class, svc, slice, ing),
		Sinks: []Sink{SinkFunc(func(context.Context, *model.Configuration, Change) error { return nil })}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-c.Ready()
	if !strings.Contains(goroutines(), "StartEventWatcher") {
		t.Fatal("no event watcher while running: the check below proves nothing")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Contains(goroutines(), "StartEventWatcher") {
		if time.Now().After(deadline) {
			t.Fatalf("an event watcher outlived Run:\n%s", goroutines())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// goroutines is every goroutine's stack.
func goroutines() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
