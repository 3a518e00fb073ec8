package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Change says what a new Configuration changed compared with the previous one
// handed to the sinks.
type Change struct {
	// Reload is true when something beyond backends and certificates changed
	// (servers, locations, settings): the nginx data plane must rewrite its
	// config. The first Configuration always has Reload set.
	Reload bool
	// Dynamic is true when backends (endpoints, algorithms, canary policy,
	// affinity) or certificates changed: applied without a reload.
	Dynamic bool
	// Certificates is true when certificates changed (Dynamic is then
	// true too). A change with only Dynamic set changed backends alone.
	Certificates bool
	// Backends, when not nil, lists the indices in the new Configuration's
	// Backends of the only backends that differ from the previous
	// Configuration's (which has as many, in the same order): an
	// endpoint change made without a build (builder.EndpointIndex).
	// Sinks can apply those alone (balancer.Registry.ApplyChanged). Nil
	// means any backend may have changed.
	Backends []int
}

// BackendsOnly reports whether only backends changed: the sinks apply
// them to their balancers and leave routes, certificates and nginx.conf
// as they are.
func (c Change) BackendsOnly() bool { return c.Dynamic && !c.Reload && !c.Certificates }

// Sink consumes Configurations. Update must not modify cfg. An error makes the
// controller retry the same Configuration later with backoff.
type Sink interface {
	Update(ctx context.Context, cfg *model.Configuration, change Change) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, cfg *model.Configuration, change Change) error

// Update calls f.
func (f SinkFunc) Update(ctx context.Context, cfg *model.Configuration, change Change) error {
	return f(ctx, cfg, change)
}

var _ Sink = SinkFunc(nil)

// secretSelector picks the Secrets an Ingress can name: TLS certificates,
// auth-secret credentials (usually Opaque) and CA bundles. Helm release
// records and service-account tokens, which are many and large, are left to
// the API server.
const secretSelector = "type!=" + "helm.sh/release.v1" + ",type!=" + string(corev1.SecretTypeServiceAccountToken)

// SyncEvent describes one completed sync, for status pages and metrics.
type SyncEvent struct {
	Time     time.Time
	Duration time.Duration
	Version  uint64
	Change   Change
	Err      error
}

// Config configures a Controller.
type Config struct {
	// Client reads the cluster (or a manifests.Source). Required.
	Client kubernetes.Interface
	// Build holds the options of the pure builder (classes, namespace,
	// default backend).
	Build builder.Options
	// ConfigMap is "namespace/name" of the controller ConfigMap; empty means
	// defaults only.
	ConfigMap string
	// TCPServicesConfigMap and UDPServicesConfigMap are "namespace/name" of
	// the --tcp-services-configmap and --udp-services-configmap ConfigMaps;
	// empty means none.
	TCPServicesConfigMap, UDPServicesConfigMap string

	// PublishService is "namespace/name" of the Service whose addresses are
	// written to Ingress status.loadBalancer (--publish-service).
	// PublishStatusAddress is a comma-separated list of IPs or hostnames
	// written instead (--publish-status-address); it wins over
	// PublishService. With both empty the controller writes no status and
	// runs no leader election.
	PublishService, PublishStatusAddress string
	// ElectionID names the Lease of the leader election; only the leader
	// writes Ingress status. Zero means "switchyard-leader".
	// ElectionNamespace is the Lease's namespace; zero means the namespace of
	// PublishService, else WatchNamespace, else "default".
	ElectionID, ElectionNamespace string
	// Identity is this controller's name in the Lease; zero means the
	// hostname plus a random suffix.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election; zero
	// means 30s, 20s and 2s (as ingress-nginx).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Sinks receive every changed Configuration, in order.
	Sinks []Sink
	// Holdoff is how long the loop waits after an event for more before it
	// builds; zero means 50ms. MaxHoldoff bounds the wait under a steady
	// stream of events; zero means 500ms. An event more than MaxHoldoff after
	// the previous build is built at once, without a holdoff.
	Holdoff, MaxHoldoff time.Duration
	// EndpointInterval paces changes of EndpointSlices alone, which need no
	// build (their backends are refreshed in O(change)): such a change is
	// applied at once, without the holdoff, but no sooner than
	// EndpointInterval after the previous sync; events meanwhile are folded
	// into it. Zero means 10ms (at most 100 refreshes a second).
	EndpointInterval time.Duration
	// SyncRateLimit caps builds per second (ingress-nginx's
	// --sync-rate-limit, burst 1); zero means only the holdoff limits them.
	SyncRateLimit float64
	// ResyncPeriod is the informers' resync; zero means none.
	ResyncPeriod time.Duration
	// OnSync, if set, is called after every sync.
	OnSync func(SyncEvent)
	// Component names the event source; zero means "switchyard".
	Component string
}

// Controller runs the informers and the single sync loop.
type Controller struct {
	cfg      Config
	factory  informers.SharedInformerFactory
	secrets  informers.SharedInformerFactory
	listers  listers
	synced   []cache.InformerSynced
	dirty    chan struct{}
	ready    chan struct{}
	readyOne sync.Once
	current  atomic.Pointer[model.Configuration]
	version  atomic.Uint64

	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster
	emitted     map[string]bool // errors already reported as Events
	sinkEmitted map[string]bool // sink rejections reported since the last good sync

	status *statusWriter // nil without status publishing
	built  atomic.Bool   // a Configuration was handed to the sinks

	// pendingMu guards what changed since the last build: full is set by
	// any event but an EndpointSlice's; slices holds the namespace/name
	// of each Service whose EndpointSlices changed.
	pendingMu     sync.Mutex
	pendingFull   bool
	pendingSlices map[string]bool
	// index is the last full build's, for applying slice changes alone
	// (builder.EndpointIndex.Refresh); only the sync loop touches it.
	index *builder.EndpointIndex
	// refreshed counts the Configurations handed to the sinks that were
	// made by Refresh, without a build.
	refreshed atomic.Uint64
}

// Refreshed is how many Configurations were made from EndpointSlice
// changes alone, without a build.
func (c *Controller) Refreshed() uint64 { return c.refreshed.Load() }

// New builds a Controller; nothing runs until Run.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil {
		return nil, errors.New("controlplane: Config.Client is required")
	}
	for _, cm := range []string{cfg.ConfigMap, cfg.TCPServicesConfigMap, cfg.UDPServicesConfigMap} {
		if cm == "" {
			continue
		}
		if ns, name, ok := strings.Cut(cm, "/"); !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("controlplane: ConfigMap %q is not namespace/name", cm)
		}
	}
	for _, f := range []struct{ flag, v string }{
		{"PublishService", cfg.PublishService},
	} {
		if f.v == "" {
			continue
		}
		if ns, name, ok := strings.Cut(f.v, "/"); !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("controlplane: %s %q is not namespace/name", f.flag, f.v)
		}
	}
	if cfg.PublishStatusAddress != "" {
		for _, a := range strings.Split(cfg.PublishStatusAddress, ",") {
			a = strings.TrimSpace(a)
			if net.ParseIP(a) == nil && len(validation.IsDNS1123Subdomain(a)) > 0 {
				return nil, fmt.Errorf("controlplane: PublishStatusAddress: %q is neither an IP address nor a hostname", a)
			}
		}
	}
	if cfg.ElectionID == "" {
		cfg.ElectionID = "switchyard-leader"
	}
	if errs := validation.IsDNS1123Subdomain(cfg.ElectionID); len(errs) > 0 {
		return nil, fmt.Errorf("controlplane: ElectionID %q: %s", cfg.ElectionID, strings.Join(errs, "; "))
	}
	if cfg.ElectionNamespace == "" {
		cfg.ElectionNamespace = "default"
		if ns, _, ok := strings.Cut(cfg.PublishService, "/"); ok {
			cfg.ElectionNamespace = ns
		} else if cfg.Build.WatchNamespace != "" {
			cfg.ElectionNamespace = cfg.Build.WatchNamespace
		}
	}
	if cfg.Identity == "" {
		cfg.Identity = defaultIdentity()
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 30 * time.Second
	}
	if cfg.RenewDeadline <= 0 {
		cfg.RenewDeadline = 20 * time.Second
	}
	if cfg.RetryPeriod <= 0 {
		cfg.RetryPeriod = 2 * time.Second
	}
	if cfg.LeaseDuration <= cfg.RenewDeadline || cfg.RenewDeadline <= cfg.RetryPeriod {
		return nil, fmt.Errorf("controlplane: need LeaseDuration (%v) > RenewDeadline (%v) > RetryPeriod (%v)",
			cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod)
	}
	if cfg.Holdoff <= 0 {
		cfg.Holdoff = 50 * time.Millisecond
	}
	if cfg.MaxHoldoff <= 0 {
		cfg.MaxHoldoff = 500 * time.Millisecond
	}
	if cfg.EndpointInterval <= 0 {
		cfg.EndpointInterval = 10 * time.Millisecond
	}
	if cfg.Component == "" {
		cfg.Component = "switchyard"
	}
	strip := informers.WithTransform(stripManagedFields)
	opts := []informers.SharedInformerOption{strip}
	if ns := cfg.Build.WatchNamespace; ns != "" {
		opts = append(opts, informers.WithNamespace(ns))
	}
	c := &Controller{
		cfg:     cfg,
		factory: informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.ResyncPeriod, opts...),
		secrets: informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.ResyncPeriod, append(opts,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = secretSelector }))...),
		dirty:   make(chan struct{}, 1),
		ready:   make(chan struct{}),
		emitted: map[string]bool{},
	}
	f := c.factory
	sliceInformer := f.Discovery().V1().EndpointSlices().Informer()
	if err := sliceInformer.AddIndexers(cache.Indexers{sliceServiceIndex: sliceService}); err != nil {
		return nil, fmt.Errorf("controlplane: index endpointslices: %w", err)
	}
	c.listers = listers{
		ingresses:       f.Networking().V1().Ingresses().Lister(),
		ingressClasses:  f.Networking().V1().IngressClasses().Lister(),
		services:        f.Core().V1().Services().Lister(),
		endpointSlices:  f.Discovery().V1().EndpointSlices().Lister(),
		slicesByService: sliceInformer.GetIndexer(),
		configMaps:      f.Core().V1().ConfigMaps().Lister(),
		secrets:         c.secrets.Core().V1().Secrets().Lister(),
	}
	handler := func(changed func(objs ...any)) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { changed(obj) },
			UpdateFunc: func(oldObj, newObj any) {
				o, err1 := meta.Accessor(oldObj)
				n, err2 := meta.Accessor(newObj)
				if err1 == nil && err2 == nil && o.GetResourceVersion() == n.GetResourceVersion() {
					return // a resync, nothing changed
				}
				changed(oldObj, newObj)
			},
			DeleteFunc: func(obj any) { changed(obj) },
		}
	}
	for _, h := range []struct {
		inf     cache.SharedIndexInformer
		changed func(objs ...any)
	}{
		{f.Networking().V1().Ingresses().Informer(), c.changedFull},
		{f.Networking().V1().IngressClasses().Informer(), c.changedFull},
		{f.Core().V1().Services().Informer(), c.changedFull},
		{f.Discovery().V1().EndpointSlices().Informer(), c.changedSlices},
		{f.Core().V1().ConfigMaps().Informer(), c.changedFull},
		{c.secrets.Core().V1().Secrets().Informer(), c.changedFull},
	} {
		if _, err := h.inf.AddEventHandler(handler(h.changed)); err != nil {
			return nil, fmt.Errorf("controlplane: add event handler: %w", err)
		}
		c.synced = append(c.synced, h.inf.HasSynced)
	}
	c.broadcaster = record.NewBroadcaster()
	c.recorder = c.broadcaster.NewRecorder(eventScheme(), corev1.EventSource{Component: cfg.Component})
	if cfg.statusEnabled() {
		c.status = &statusWriter{c: c, kick: make(chan struct{}, 1)}
	}
	return c, nil
}

// stripManagedFields drops metadata.managedFields, which the controller never
// reads, to save memory.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// changedFull records a change that needs a full build.
func (c *Controller) changedFull(...any) {
	c.needFull()
	c.markDirty()
}

// needFull makes the next build a full one, without asking for it.
func (c *Controller) needFull() {
	c.pendingMu.Lock()
	c.pendingFull = true
	c.pendingMu.Unlock()
}

// changedSlices records a change of EndpointSlices (old and new versions):
// their Services' backends are refreshed without a full build when nothing
// else changed. A slice whose Service cannot be told needs a full build.
func (c *Controller) changedSlices(objs ...any) {
	c.pendingMu.Lock()
	for _, obj := range objs {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		es, ok := obj.(*discoveryv1.EndpointSlice)
		svc := ""
		if ok {
			svc = es.Labels[discoveryv1.LabelServiceName]
		}
		if svc == "" {
			c.pendingFull = true
			continue
		}
		if c.pendingSlices == nil {
			c.pendingSlices = map[string]bool{}
		}
		c.pendingSlices[es.Namespace+"/"+svc] = true
	}
	c.pendingMu.Unlock()
	c.markDirty()
}

// takePending returns and clears what changed since the last call.
func (c *Controller) takePending() (full bool, slices []string) {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	full = c.pendingFull
	for k := range c.pendingSlices {
		slices = append(slices, k)
	}
	c.pendingFull, c.pendingSlices = false, nil
	return full, slices
}

func (c *Controller) markDirty() {
	select {
	case c.dirty <- struct{}{}:
	default:
	}
}

// drainDirty drops a pending dirty mark: the build about to start reads the
// informers' current state, which includes that event.
func (c *Controller) drainDirty() {
	select {
	case <-c.dirty:
	default:
	}
}

// Ready is closed after the first Configuration was handed to every sink.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Current returns the last Configuration handed to the sinks, or nil.
func (c *Controller) Current() *model.Configuration { return c.current.Load() }

// Run starts the informers and the sync loop and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.cfg.Client.CoreV1().Events("")})
	// Shutdown, not the watcher's Stop: client-go's watcher goroutine
	// reads the stopped watcher's closed channel in a loop, two CPUs'
	// worth, until the broadcaster itself shuts down (seen as 200 % CPU
	// in a test process after its controllers stopped).
	defer c.broadcaster.Shutdown()
	c.factory.Start(ctx.Done())
	c.secrets.Start(ctx.Done())
	defer c.factory.Shutdown()
	defer c.secrets.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return ctx.Err()
	}
	klog.V(1).InfoS("informer caches synced")
	c.changedFull()
	if c.status != nil {
		statusDone := make(chan struct{})
		go func() { defer close(statusDone); c.status.run(ctx) }()
		defer func() { <-statusDone }()
	}

	var prev *model.Configuration
	var lastBuild time.Time
	backoff := time.Duration(0)
	var limiter *rate.Limiter
	if c.cfg.SyncRateLimit > 0 {
		limiter = rate.NewLimiter(rate.Limit(c.cfg.SyncRateLimit), 1)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.dirty:
		}
		// Endpoints alone moved: refreshed without a build, so not held
		// off (issue 22: an endpoint change reaches the data planes in
		// ≤ 100 ms, also under a steady stream of them), only paced.
		// Otherwise an event after a quiet spell is built at once; one
		// within MaxHoldoff of the last build starts a burst, coalesced by
		// the holdoff (as contour's EventHandler).
		if c.endpointsOnly() {
			if !sleep(ctx, c.cfg.EndpointInterval-time.Since(lastBuild)) {
				return nil
			}
		} else if time.Since(lastBuild) < c.cfg.MaxHoldoff && !c.holdoff(ctx) {
			return nil
		}
		if limiter != nil {
			// Events arriving meanwhile are folded into this build.
			if err := limiter.Wait(ctx); err != nil {
				return nil
			}
			c.drainDirty()
		}
		lastBuild = time.Now()
		next, err := c.sync(ctx, prev)
		if err != nil {
			backoff = min(max(2*backoff, 250*time.Millisecond), 30*time.Second)
			klog.ErrorS(err, "sync failed; retrying", "in", backoff)
			// A new event ends the wait: it may be the fix (a corrected
			// Secret must not wait out a 30 s backoff).
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			case <-c.dirty:
			}
			c.changedFull() // what the failed sync took is not applied
			continue
		}
		backoff = 0
		prev = next
		if c.status != nil {
			c.status.signal() // after the build, never during it
		}
	}
}

// endpointsOnly reports whether what changed since the last sync is
// EndpointSlices alone and a full build's index is there to refresh them.
func (c *Controller) endpointsOnly() bool {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	return !c.pendingFull && len(c.pendingSlices) > 0 && c.index != nil
}

// sleep waits d (nothing when d ≤ 0); false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// holdoff waits for the burst of events to settle: Holdoff after the last
// event, MaxHoldoff at most after the first.
func (c *Controller) holdoff(ctx context.Context) bool {
	deadline := time.NewTimer(c.cfg.MaxHoldoff)
	defer deadline.Stop()
	quiet := time.NewTimer(c.cfg.Holdoff)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-c.dirty:
			quiet.Reset(c.cfg.Holdoff)
		case <-quiet.C:
			return true
		case <-deadline.C:
			return true
		}
	}
}

// sync builds a Configuration and hands it to the sinks if it changed. It
// returns the Configuration now in effect.
func (c *Controller) sync(ctx context.Context, prev *model.Configuration) (*model.Configuration, error) {
	start := time.Now()
	full, slices := c.takePending()
	if !full && len(slices) == 0 && prev != nil {
		// A dirty mark whose change an earlier sync already took.
		return prev, nil
	}
	if !full && len(slices) > 0 && prev != nil && c.index != nil {
		if cfg, changed, ok := c.index.RefreshChanged(prev, slices, c.listers.slicesOf); ok {
			if cfg == prev {
				return prev, nil // no endpoint of a served backend moved
			}
			// Only endpoints changed: no build, no hashing of the model.
			next, err := c.hand(ctx, start, prev, cfg, Change{Dynamic: true, Backends: changed})
			if err == nil {
				c.refreshed.Add(1)
			}
			return next, err
		}
	}
	in, err := c.listers.input(c.cfg.ConfigMap, c.cfg.TCPServicesConfigMap, c.cfg.UDPServicesConfigMap)
	if err != nil {
		c.needFull() // the retry builds in full
		return prev, err
	}
	cfg, index := builder.BuildIndexed(in, c.cfg.Build)
	c.recordErrors(cfg.Errors)
	change := classify(prev, cfg)
	if !change.Reload && !change.Dynamic && prev != nil {
		cfg.Version = prev.Version
		if !equalHash(prev, cfg) {
			// Only errors changed; keep the new list for status pages.
			c.current.Store(cfg)
		}
		c.index = index
		return cfg, nil
	}
	next, err := c.hand(ctx, start, prev, cfg, change)
	if err != nil {
		c.needFull() // the retry builds in full
	} else {
		c.index = index
	}
	return next, err
}

// hand gives cfg, changed from prev as change says, to every sink; it
// returns the Configuration now in effect (prev when a sink refused).
func (c *Controller) hand(ctx context.Context, start time.Time, prev, cfg *model.Configuration, change Change) (*model.Configuration, error) {
	cfg.Version = c.version.Add(1)
	for _, s := range c.cfg.Sinks {
		if err := s.Update(ctx, cfg, change); err != nil {
			var oe ObjectErrorer
			if errors.As(err, &oe) {
				c.recordRejections(oe.ObjectErrors())
			}
			c.report(SyncEvent{Time: start, Duration: time.Since(start), Version: cfg.Version, Change: change, Err: err})
			return prev, fmt.Errorf("sink update (version %d): %w", cfg.Version, err)
		}
	}
	c.sinkEmitted = nil
	c.current.Store(cfg)
	c.built.Store(true)
	c.readyOne.Do(func() { close(c.ready) })
	c.report(SyncEvent{Time: start, Duration: time.Since(start), Version: cfg.Version, Change: change})
	klog.V(2).InfoS("configuration synced", "version", cfg.Version, "reload", change.Reload, "dynamic", change.Dynamic, "took", time.Since(start))
	return cfg, nil
}

func (c *Controller) report(e SyncEvent) {
	if c.cfg.OnSync != nil {
		c.cfg.OnSync(e)
	}
}

// classify compares two Configurations: Dynamic if backends or certificates
// differ, Reload if anything else differs. Computed by hashing the parts, so
// a new field in the model is classified without code changes here.
func classify(prev, next *model.Configuration) Change {
	if prev == nil {
		return Change{Reload: true, Dynamic: true}
	}
	certs := hashOf(prev.Certificates) != hashOf(next.Certificates)
	return Change{
		Reload:       hashOf(structural(prev)) != hashOf(structural(next)),
		Dynamic:      certs || hashOf(prev.Backends) != hashOf(next.Backends),
		Certificates: certs,
	}
}

// structural is the Configuration without the parts applied dynamically and
// without bookkeeping.
func structural(c *model.Configuration) model.Configuration {
	s := *c
	s.Version = 0
	s.Backends = nil
	s.Certificates = nil
	s.Errors = nil
	return s
}

func equalHash(a, b *model.Configuration) bool { return hashOf(a) == hashOf(b) }

func hashOf(v any) [32]byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("BUG: model does not marshal: " + err.Error())
	}
	return sha256.Sum256(b)
}

// ObjectErrorer is implemented by sink errors that can name the objects at
// fault (nginx -t refusing a file names the Ingress of the offending line):
// the controller attaches a Warning Event to each.
type ObjectErrorer interface {
	ObjectErrors() []model.ObjectError
}

// recordRejections emits a Warning Event (reason RELOAD, as ingress-nginx)
// for each object a sink blamed, once until a sync succeeds again: the loop
// retries the failing sync with backoff.
func (c *Controller) recordRejections(errs []model.ObjectError) {
	if c.sinkEmitted == nil {
		c.sinkEmitted = map[string]bool{}
	}
	for _, e := range errs {
		if e.Object.Name == "" {
			continue
		}
		key := e.Object.Kind + "/" + e.Object.Namespace + "/" + e.Object.Name + "|" + e.Message
		if c.sinkEmitted[key] {
			continue
		}
		c.sinkEmitted[key] = true
		ref := &corev1.ObjectReference{Kind: e.Object.Kind, Namespace: e.Object.Namespace, Name: e.Object.Name, UID: types.UID(e.Object.UID)}
		if e.Object.Kind == "Ingress" {
			ref.APIVersion = "networking.k8s.io/v1"
		} else {
			ref.APIVersion = "v1"
		}
		c.recorder.Event(ref, corev1.EventTypeWarning, "RELOAD", e.Message)
	}
}

// recordErrors emits a Warning Event for each object error not reported yet.
func (c *Controller) recordErrors(errs []model.ObjectError) {
	seen := make(map[string]bool, len(errs))
	for _, e := range errs {
		key := e.Object.Kind + "/" + e.Object.Namespace + "/" + e.Object.Name + "/" + e.Object.UID + "|" + e.Field + "|" + e.Reason + "|" + e.Message
		seen[key] = true
		if c.emitted[key] {
			continue
		}
		reason := e.Reason
		if reason == "" {
			reason = "InvalidConfiguration"
		}
		klog.InfoS("object not served as written", "reason", reason, "kind", e.Object.Kind, "namespace", e.Object.Namespace, "name", e.Object.Name, "field", e.Field, "problem", e.Message)
		ref := &corev1.ObjectReference{Kind: e.Object.Kind, Namespace: e.Object.Namespace, Name: e.Object.Name, UID: types.UID(e.Object.UID)}
		switch e.Object.Kind {
		case "Ingress":
			ref.APIVersion = "networking.k8s.io/v1"
		default:
			ref.APIVersion = "v1"
		}
		msg := e.Message
		if e.Field != "" {
			msg = e.Field + ": " + msg
		}
		c.recorder.Event(ref, corev1.EventTypeWarning, reason, msg)
	}
	c.emitted = seen
}
