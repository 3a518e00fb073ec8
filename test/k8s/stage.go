package k8s

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// StageLabel marks every object Stage creates; its value is "1". The final
// count check lists by it.
const StageLabel = "switchyard.dev/staged"

// StageOptions configure Stage. Zero values have the documented defaults.
type StageOptions struct {
	// Namespace receives the objects; required. Stage creates it if it does
	// not exist.
	Namespace string
	// Ingresses is how many Ingresses to create, each with its Service and
	// EndpointSlice (3 objects each); required.
	Ingresses int
	// Workers is how many objects are created in parallel; zero means 24.
	Workers int
	// QPS and Burst of the client; zero means 400 and 800 (client-go's
	// default of 5/10 turns 30,000 creates into 100 minutes of client-side
	// throttling).
	QPS   float32
	Burst int
	// Attempts per object before it counts as failed; zero means 10.
	Attempts int
	// RequestTimeout bounds one create call; zero means 30 s.
	RequestTimeout time.Duration
	// IngressClass of the Ingresses; zero means "switchyard"
	// (deploy/base/ingressclass.yaml).
	IngressClass string
	// EndpointIP is the address in every EndpointSlice; zero means
	// 192.0.2.40. API validation rejects loopback addresses.
	EndpointIP string
	// Port is the Service's target port in every EndpointSlice; zero means
	// 8080.
	Port int32
}

// StageResult is what Stage did.
type StageResult struct {
	// Objects is how many objects were created (or found already there after
	// an ambiguous failure), Failed how many were given up on.
	Objects, Failed int
	// Retries counts the create calls repeated after a retryable error.
	Retries int64
	// Elapsed is the wall time of the creates; CountElapsed that of the
	// final count check.
	Elapsed, CountElapsed time.Duration
	// Reused says the namespace already held exactly the objects asked
	// for, and nothing was created.
	Reused bool
}

// StageName is the name of the i-th staged Ingress, Service and
// EndpointSlice's Service; StageHost its host.
func StageName(i int) string { return fmt.Sprintf("s%05d", i) }

// StageHost is the host of the i-th staged Ingress.
func StageHost(i int) string { return StageName(i) + ".stage.example" }

// Stage creates opts.Ingresses Ingresses, each routing its own host to a
// selector-less Service with one EndpointSlice (the Service first, then the
// slice, then the Ingress, so a watching controller sees each Ingress with
// its backend), with bounded parallelism and a raised client rate limit.
// Each create is retried with jittered exponential backoff on throttling,
// timeouts, conflicts and connection errors; AlreadyExists after a retry
// counts as created (the earlier attempt reached etcd). Finally it lists the
// namespace by StageLabel and fails unless exactly opts.Ingresses of each
// kind exist. A namespace that already holds exactly opts.Ingresses staged
// objects of each kind is left as it is (StageResult.Reused).
func Stage(ctx context.Context, cfg *rest.Config, opts StageOptions) (StageResult, error) {
	if opts.Namespace == "" || opts.Ingresses <= 0 {
		return StageResult{}, fmt.Errorf("stage: need a Namespace and Ingresses > 0, got %q and %d", opts.Namespace, opts.Ingresses)
	}
	opts.Workers = cmp.Or(opts.Workers, 24)
	opts.QPS = cmp.Or(opts.QPS, 400)
	opts.Burst = cmp.Or(opts.Burst, 800)
	opts.Attempts = cmp.Or(opts.Attempts, 10)
	opts.RequestTimeout = cmp.Or(opts.RequestTimeout, 30*time.Second)
	opts.IngressClass = cmp.Or(opts.IngressClass, "switchyard")
	opts.EndpointIP = cmp.Or(opts.EndpointIP, "192.0.2.40")
	opts.Port = cmp.Or(opts.Port, 8080)

	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	// Protobuf, as kube-controller-manager talks to the API server: a
	// fraction of JSON's encoding and decoding cost on both sides.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return StageResult{}, fmt.Errorf("stage: make a client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return StageResult{}, fmt.Errorf("stage: create namespace %s: %w", opts.Namespace, err)
	}

	s := &stager{cs: cs, opts: opts}
	// A namespace staged before (a cluster on a kept data directory, see
	// Options.DataDir) is used as it is.
	start := time.Now()
	if err := s.countCheck(ctx); err == nil {
		return StageResult{Reused: true, CountElapsed: time.Since(start)}, nil
	}
	start = time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	for range opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				s.stageOne(ctx, i)
			}
		}()
	}
feed:
	for i := range opts.Ingresses {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	res := StageResult{Objects: int(s.created.Load()), Failed: int(s.failed.Load()), Retries: s.retries.Load(), Elapsed: time.Since(start)}
	s.mu.Lock()
	errs := errors.Join(s.errs...)
	s.mu.Unlock()
	if errs != nil {
		return res, fmt.Errorf("stage: %d of %d objects failed, first errors: %w", res.Failed, 3*opts.Ingresses, errs)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("stage: %w", err)
	}

	start = time.Now()
	err = s.countCheck(ctx)
	res.CountElapsed = time.Since(start)
	return res, err
}

// stager creates the objects of one Stage call.
type stager struct {
	// immutable
	cs   kubernetes.Interface
	opts StageOptions

	// atomic
	created, failed atomic.Int64
	retries         atomic.Int64

	// guarded by mu
	mu   sync.Mutex
	errs []error // the first few
}

func (s *stager) stageOne(ctx context.Context, i int) {
	ns, name := s.opts.Namespace, StageName(i)
	labels := map[string]string{StageLabel: "1"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		// Headless: the controller routes to the EndpointSlice's
		// addresses either way, and 50,000 ClusterIP allocations would
		// only slow the API server down.
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	sliceLabels := map[string]string{StageLabel: "1", discoveryv1.LabelServiceName: name}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: ns, Labels: sliceLabels},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(s.opts.Port), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{s.opts.EndpointIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptr.To(s.opts.IngressClass),
			Rules: []networkingv1.IngressRule{{Host: StageHost(i), IngressRuleValue: networkingv1.IngressRuleValue{
				HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &prefix,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
						Name: name, Port: networkingv1.ServiceBackendPort{Name: "http"}}},
				}}}}}},
		},
	}
	s.create(ctx, "Service "+name, func(ctx context.Context) error {
		_, err := s.cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		return err
	})
	s.create(ctx, "EndpointSlice "+slice.Name, func(ctx context.Context) error {
		_, err := s.cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
		return err
	})
	s.create(ctx, "Ingress "+name, func(ctx context.Context) error {
		_, err := s.cs.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{})
		return err
	})
}

// create runs do until it succeeds, fails for good, or runs out of
// attempts, backing off 50 ms, 100 ms, ... up to 5 s with ±50 % jitter (or
// the server's Retry-After when it sends one).
func (s *stager) create(ctx context.Context, what string, do func(context.Context) error) {
	backoff := 50 * time.Millisecond
	var err error
	for attempt := 1; attempt <= s.opts.Attempts; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
		err = do(rctx)
		cancel()
		if err == nil || (attempt > 1 && apierrors.IsAlreadyExists(err)) {
			s.created.Add(1)
			return
		}
		if ctx.Err() != nil || !retryable(err) || attempt == s.opts.Attempts {
			break
		}
		s.retries.Add(1)
		wait := backoff/2 + rand.N(backoff)
		if secs, ok := apierrors.SuggestsClientDelay(err); ok && secs > 0 {
			wait = time.Duration(secs) * time.Second
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	s.failed.Add(1)
	s.mu.Lock()
	if len(s.errs) < 5 {
		s.errs = append(s.errs, fmt.Errorf("create %s: %w", what, err))
	}
	s.mu.Unlock()
}

// retryable reports whether a create may succeed when repeated: throttling
// (429), server-side timeouts and overload (504, 503, 500 "etcdserver:
// request timed out"), conflicts, and client-side timeouts or dropped
// connections.
func retryable(err error) bool {
	var netErr net.Error
	switch {
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsConflict(err),
		apierrors.IsUnexpectedServerError(err):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr):
		return true
	}
	return false
}

// countCheck lists each kind by StageLabel, 500 at a time, and compares
// with opts.Ingresses.
func (s *stager) countCheck(ctx context.Context) error {
	ns := s.opts.Namespace
	sel := StageLabel + "=1"
	kinds := []struct {
		kind string
		list func(context.Context, metav1.ListOptions) (int, string, error)
	}{
		{"Service", func(ctx context.Context, o metav1.ListOptions) (int, string, error) {
			l, err := s.cs.CoreV1().Services(ns).List(ctx, o)
			if err != nil {
				return 0, "", err
			}
			return len(l.Items), l.Continue, nil
		}},
		{"EndpointSlice", func(ctx context.Context, o metav1.ListOptions) (int, string, error) {
			l, err := s.cs.DiscoveryV1().EndpointSlices(ns).List(ctx, o)
			if err != nil {
				return 0, "", err
			}
			return len(l.Items), l.Continue, nil
		}},
		{"Ingress", func(ctx context.Context, o metav1.ListOptions) (int, string, error) {
			l, err := s.cs.NetworkingV1().Ingresses(ns).List(ctx, o)
			if err != nil {
				return 0, "", err
			}
			return len(l.Items), l.Continue, nil
		}},
	}
	var errs []error
	for _, k := range kinds {
		total, cont := 0, ""
		for {
			n, next, err := k.list(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 500, Continue: cont})
			if err != nil {
				return fmt.Errorf("stage: count %s objects: %w", k.kind, err)
			}
			total += n
			if cont = next; cont == "" {
				break
			}
		}
		if total != s.opts.Ingresses {
			errs = append(errs, fmt.Errorf("stage: %d %s objects in %s; want %d", total, k.kind, ns, s.opts.Ingresses))
		}
	}
	return errors.Join(errs...)
}
