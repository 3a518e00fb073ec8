package controlplane

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// runController starts a controller with cfg (Client and a recording sink
// filled in) and returns its updates and a stop function that waits for Run.
func runController(t testing.TB, client kubernetes.Interface, cfg Config) (<-chan update, *Controller, func()) {
	t.Helper()
	updates := make(chan update, 256)
	cfg.Client = client
	if cfg.Holdoff == 0 {
		cfg.Holdoff, cfg.MaxHoldoff = 5*time.Millisecond, 50*time.Millisecond
	}
	cfg.Sinks = append(cfg.Sinks, SinkFunc(func(_ context.Context, cfg *model.Configuration, ch Change) error {
		select {
		case updates <- update{cfg, ch, time.Now()}:
		default: // the test stopped reading
		}
		return nil
	}))
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return updates, c, stop
}

// fastElection makes leadership changes take well under a second.
func fastElection(cfg Config) Config {
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 3*time.Second, 2*time.Second, 50*time.Millisecond
	return cfg
}

// waitStatus watches the Ingress until its status.loadBalancer equals want.
func waitStatus(t testing.TB, client kubernetes.Interface, ns, name string, want []networkingv1.IngressLoadBalancerIngress) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	w, err := client.NetworkingV1().Ingresses(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []networkingv1.IngressLoadBalancerIngress
	ing, err := client.NetworkingV1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got = ing.Status.LoadBalancer.Ingress
	for !cmp.Equal(got, want) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch of ingress %s/%s closed; status %v, want %v", ns, name, got, want)
			}
			if i, ok := ev.Object.(*networkingv1.Ingress); ok && i.Name == name && ev.Type != watch.Deleted {
				got = i.Status.LoadBalancer.Ingress
			}
		case <-ctx.Done():
			t.Fatalf("ingress %s/%s status = %v; want %v", ns, name, got, want)
		}
	}
}

func TestStatusFromPublishService(t *testing.T) {
	class, svc, slice, ing := objects()
	lb := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "switchyard", Namespace: "ingress"},
		Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalIPs: []string{"198.51.100.7"}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.5"}}}}}
	theirs := ing.DeepCopy()
	nginx := "nginx"
	theirs.Name, theirs.UID, theirs.Spec.IngressClassName = "theirs", "theirs-uid", &nginx
	client := fake.NewClientset(class, svc, slice, ing, theirs, lb)
	_, c, _ := runController(t, client, fastElection(Config{PublishService: "ingress/switchyard"}))

	waitStatus(t, client, "demo", "echo", []networkingv1.IngressLoadBalancerIngress{{IP: "198.51.100.7"}, {IP: "203.0.113.5"}})
	if !c.IsLeader() {
		t.Error("status written but IsLeader() = false")
	}
	lease, err := client.CoordinationV1().Leases("ingress").Get(context.Background(), "switchyard-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("lease holder = %v; want this controller", lease.Spec.HolderIdentity)
	}

	// The load balancer moves: status follows.
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example.net"}}
	lb.ResourceVersion = "2"
	if _, err := client.CoreV1().Services("ingress").UpdateStatus(context.Background(), lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, client, "demo", "echo", []networkingv1.IngressLoadBalancerIngress{{Hostname: "lb.example.net"}, {IP: "198.51.100.7"}})

	got, err := client.NetworkingV1().Ingresses("demo").Get(context.Background(), "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("ingress of another class got status %v", got.Status.LoadBalancer.Ingress)
	}
}

// TestOneLeaderWritesStatus runs two controllers that would publish
// different addresses: the status is always the leader's, and when the
// leader stops, the other takes the Lease and rewrites it.
func TestOneLeaderWritesStatus(t *testing.T) {
	class, svc, slice, ing := objects()
	client := fake.NewClientset(class, svc, slice, ing)
	a := fastElection(Config{PublishStatusAddress: "192.0.2.100", Identity: "a", ElectionNamespace: "ingress"})
	b := fastElection(Config{PublishStatusAddress: "lb.example.net, 192.0.2.200", Identity: "b", ElectionNamespace: "ingress"})
	_, ca, stopA := runController(t, client, a)
	<-readyOrFail(t, ca)
	waitStatus(t, client, "demo", "echo", []networkingv1.IngressLoadBalancerIngress{{IP: "192.0.2.100"}})
	_, cb, _ := runController(t, client, b)
	<-readyOrFail(t, cb)
	if !ca.IsLeader() || cb.IsLeader() {
		t.Fatalf("IsLeader a=%v b=%v; want only a", ca.IsLeader(), cb.IsLeader())
	}

	stopA()                                                                                              // releases the Lease
	want := []networkingv1.IngressLoadBalancerIngress{{Hostname: "lb.example.net"}, {IP: "192.0.2.200"}} // sorted by IP, as ingress-nginx
	waitStatus(t, client, "demo", "echo", want)
	if !cb.IsLeader() {
		t.Error("b wrote status without leading")
	}
}

func readyOrFail(t testing.TB, c *Controller) <-chan struct{} {
	t.Helper()
	select {
	case <-c.Ready():
	case <-time.After(defaultTestTimeout):
		t.Fatal("controller not ready")
	}
	return c.Ready()
}

func TestNoStatusWithoutPublishing(t *testing.T) {
	class, svc, slice, ing := objects()
	client := fake.NewClientset(class, svc, slice, ing)
	updates, c, stop := runController(t, client, Config{})
	next(t, updates, func(update) bool { return true })
	stop()
	if c.IsLeader() {
		t.Error("IsLeader without status publishing")
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" || a.GetResource().Resource == "leases" {
			t.Errorf("unexpected %s %s/%s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
}

func TestServiceAddresses(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  corev1.Service
		want []networkingv1.IngressLoadBalancerIngress
	}{
		{"cluster ip", corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.5"}},
			[]networkingv1.IngressLoadBalancerIngress{{IP: "10.0.0.5"}}},
		{"headless", corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}, nil},
		{"external name", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "up.example.com"}},
			[]networkingv1.IngressLoadBalancerIngress{{Hostname: "up.example.com"}}},
		{"node port with external ips", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.0.0.5", ExternalIPs: []string{"198.51.100.1"}}},
			[]networkingv1.IngressLoadBalancerIngress{{IP: "198.51.100.1"}}},
		{"node port", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.0.0.5"}},
			[]networkingv1.IngressLoadBalancerIngress{{IP: "10.0.0.5"}}},
		{"load balancer pending", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.0.0.5"}}, nil},
		{"load balancer", corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.1"}, {Hostname: "lb.example.net"}}}}},
			[]networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.1"}, {Hostname: "lb.example.net"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := serviceAddresses(&tc.svc); !cmp.Equal(got, tc.want) {
				t.Errorf("got %v; want %v", got, tc.want)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	client := fake.NewClientset()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no client", Config{}},
		{"configmap without namespace", Config{Client: client, ConfigMap: "nginx"}},
		{"tcp configmap without name", Config{Client: client, TCPServicesConfigMap: "ns/"}},
		{"publish service", Config{Client: client, PublishService: "lb"}},
		{"publish status address", Config{Client: client, PublishStatusAddress: "192.0.2.1,bad host"}},
		{"election id", Config{Client: client, ElectionID: "Not_A_Name"}},
		{"lease order", Config{Client: client, LeaseDuration: time.Second, RenewDeadline: 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil {
				t.Errorf("New(%+v) = nil error; want one", tc.cfg)
			}
		})
	}
	if _, err := New(Config{Client: client, PublishStatusAddress: "192.0.2.1, lb.example.net", PublishService: "ingress/lb"}); err != nil {
		t.Errorf("valid config: %v", err)
	}
}
