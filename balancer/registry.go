package balancer

import (
	"context"
	"errors"
	"fmt"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Registry. Every zero value is usable.
type Config struct {
	// Rand returns uniformly distributed random bits. It is called on the pick
	// path from many goroutines at once and must be safe for that. Nil means a
	// ChaCha8 generator per P seeded from the OS (math/rand/v2's global).
	Rand func() uint64
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// PID is the worker id written into sticky_balanced keys (ngx.worker.pid()
	// in Lua). Zero means os.Getpid().
	PID int
	// Resolve resolves ExternalName hostnames at Sync. Nil means the system
	// resolver with a 2 s timeout. IP literals are never passed to it.
	Resolve func(ctx context.Context, host string) ([]string, error)
	// AllAlternatives makes canary routing evaluate every alternative backend
	// in order instead of only the first, as ingress-nginx does. Off by
	// default: the default behaviour is ingress-nginx's.
	AllAlternatives bool
}

// Registry holds the balancers of every backend. Pick and Done are lock-free
// and safe for concurrent use with each other and with Sync.
type Registry struct {
	// immutable after NewRegistry
	cfg  Config
	rand func() uint64
	now  func() time.Time

	// atomic
	snap    atomic.Pointer[snapshot]
	version atomic.Uint64

	mu sync.Mutex // serializes Sync; guards states and rings
	// states holds per-backend state that outlives rebuilds, by backend name.
	states map[string]*backendState
	// rings are the ring builds of the Sync in progress (see peerRing).
	rings *ringBuilds

	changedMu sync.Mutex
	changed   chan struct{} // closed by the next Sync (see Changed)

	// last and lastErr are the previous Sync's payload and answer (guarded
	// by mu): a Sync of the same payload changes nothing, not even the
	// generation, so the nginx shims keep their tables and leases.
	last    []*model.Backend
	lastErr error
	// lastPlain is true when last can take ApplyChanged: no ExternalName
	// (resolved again on every Apply), no duplicate name, and alternates
	// holds every name some backend of it names as an alternative.
	lastPlain  bool
	alternates map[string]bool
}

// snapshot is one immutable generation of balancers. Issue 22: so that
// ApplyChanged costs the backends it changes, not all of them, a
// generation shares byName with the previous ones and holds what changed
// since in overlay, a small map copied per change; ApplyChanged folds it
// into a new byName once it has maxOverlay entries. Neither map is written
// once the snapshot is published.
type snapshot struct {
	byName  map[string]*backend
	overlay map[string]*backend // a nil value: removed; nil map: none
}

// maxOverlay bounds a snapshot's overlay: an endpoint change copies at
// most this many entries, and the fold (O(backends)) runs at most once
// every maxOverlay/k changes of k backends.
const maxOverlay = 256

// get returns the balancer of the backend named name; nil: none.
func (s *snapshot) get(name string) *backend {
	if s.overlay != nil {
		if b, ok := s.overlay[name]; ok {
			return b
		}
	}
	return s.byName[name]
}

// all returns every balancer by name; the caller must not modify the map.
func (s *snapshot) all() map[string]*backend {
	if len(s.overlay) == 0 {
		return s.byName
	}
	return fold(s.byName, s.overlay)
}

// fold returns base with overlay applied, in a new map.
func fold(base, overlay map[string]*backend) map[string]*backend {
	out := maps.Clone(base)
	for name, b := range overlay {
		if b == nil {
			delete(out, name)
		} else {
			out[name] = b
		}
	}
	return out
}

// backendState is what survives a rebuild of one backend's balancer.
type backendState struct {
	endpoints map[string]*endpointState // by "ip:port"
	rr        *rrCursor                 // round-robin cursor
	rrKey     string                    // node set the cursor belongs to
	algo      string                    // algorithm of the last build
	// ring and ringIDs are the last ring built over this backend's addresses
	// (chash, sticky_balanced), reused when few addresses change; subsetRing
	// is chashsubset's ring over "set1".."setN". Immutable once built.
	ring       ring
	ringIDs    []string
	subsetRing ring
}

// endpointState is the live state of one endpoint of one backend. Keyed by
// backend and ip:port, so two backends sharing an address no longer share
// EWMA statistics (a deliberate fix; spec §4.2).
type endpointState struct {
	ewma        atomic.Uint64 // float64 bits, seconds
	lastTouched atomic.Uint64 // float64 bits, seconds since the epoch
	hasStat     atomic.Bool
	lock        atomic.Bool // try-lock for EWMA updates (Lua: resty.lock timeout 0)
	inFlight    atomic.Int64
	completed   atomic.Uint64 // attempts reported through Done or Feedback
	failures    atomic.Uint64
	// Pad to two cache lines: concurrent picks write the counters of
	// neighbouring endpoints, and the adjacent-line prefetcher pairs lines
	// (false sharing made the parallel round-robin pick ~3x slower).
	_ [128 - 6*8]byte
}

// peer is one endpoint as a balancer sees it.
type peer struct {
	addr string
	st   *endpointState
}

// algorithm is one load-balancing algorithm built for one backend.
type algorithm interface {
	// pick returns the index of the chosen peer in b.peers, a Set-Cookie value
	// or "", and the $balancer_ewma_score (-1 when not scored).
	pick(r *Registry, b *backend, req Request, a *Attempt) (idx int, cookie string, score float64, err error)
}

// backend is one immutable balancer.
type backend struct {
	// in is what it was built from: an equal backend in the next Apply
	// reuses this balancer. A copy, so it keeps no caller's slice alive.
	in       model.Backend
	name     string
	algoName string
	algo     algorithm
	// rr is algo for a round-robin backend with several peers and no
	// alternatives, whose first picks take Pick's fast path; else nil.
	rr     *roundRobin
	peers  []peer
	byAddr map[string]int
	// scored is true for ewma and peak_ewma, whose Done feeds the EWMA.
	scored bool
	peak   bool

	policy       canaryPolicy
	alternatives []string
	// sticky is set for sticky_* algorithms (used by canary affinity checks).
	sticky *sticky

	needVars []string
}

// Pick is the outcome of one pick.
type Pick struct {
	// Backend is the backend actually used: the canary's name when the request
	// was routed to the alternative backend.
	Backend string
	// Alternative is true when the request was routed to an alternative
	// (canary) backend.
	Alternative bool
	// Peer is "ip:port", IPv6 bracketed: "[fd00::1]:8080".
	Peer string
	// SetCookie is a full Set-Cookie value to add to the response, "" for none.
	SetCookie string
	// EWMAScore is $balancer_ewma_score: -1 unless ewma or peak_ewma scored it.
	EWMAScore float64

	st     *endpointState
	scored bool
	peak   bool
}

// DoneInfo is the outcome of one attempt (the after_balance feedback).
type DoneInfo struct {
	// ConnectTime, HeaderTime and ResponseTime are nginx's
	// $upstream_connect_time, $upstream_header_time and
	// $upstream_response_time for this attempt (ResponseTime includes the
	// connect time, as in nginx).
	ConnectTime, HeaderTime, ResponseTime time.Duration
	// Status is the upstream status code, 0 if none was received.
	Status int
	// Failed is true when the attempt failed (connect error, timeout, or a
	// status that proxy_next_upstream retries).
	Failed bool
}

// NewRegistry returns an empty Registry.
func NewRegistry(cfg Config) *Registry {
	r := &Registry{cfg: cfg, rand: cfg.Rand, now: cfg.Now, states: map[string]*backendState{}}
	if r.rand == nil {
		r.rand = rand.Uint64
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.cfg.PID == 0 {
		r.cfg.PID = os.Getpid()
	}
	if r.cfg.Resolve == nil {
		r.cfg.Resolve = func(ctx context.Context, host string) ([]string, error) {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return net.DefaultResolver.LookupHost(ctx, host)
		}
	}
	r.snap.Store(&snapshot{byName: map[string]*backend{}})
	return r
}

// Version is a monotonic counter bumped by every Sync.
func (r *Registry) Version() uint64 { return r.version.Load() }

// Changed returns a channel that is closed when the next Sync has published
// its generation (Version is then newer than when Changed was called). The
// pick socket pushes generations to the nginx shim with it, so that decision
// data the shim applies itself is dropped as soon as it is outdated.
func (r *Registry) Changed() <-chan struct{} {
	r.changedMu.Lock()
	defer r.changedMu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// intn returns a uniform integer in [0, n).
func (r *Registry) intn(n int) int {
	hi, _ := bits.Mul64(r.rand(), uint64(n))
	return int(hi)
}

func (r *Registry) nowSeconds() float64 {
	return float64(r.now().UnixNano()) / 1e9
}

// Sync applies a whole /configuration/backends payload in ingress-nginx's
// wire form: backends not in it are removed. Each backend is converted
// (Backend.Model) and built on its own: one that fails keeps its previous
// balancer (if any) while the others are applied. The error joins the
// per-backend failures, each naming its backend.
func (r *Registry) Sync(backends []Backend) error {
	typed := make([]*model.Backend, 0, len(backends))
	var invalid []string
	var errs []error
	for i := range backends {
		m, err := backends[i].Model()
		if err != nil {
			invalid = append(invalid, backends[i].Name)
			errs = append(errs, err)
			continue
		}
		typed = append(typed, &m)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.applyLocked(typed, invalid)
	r.lastPlain = false // a foreign payload: the next ApplyChanged applies in full
	return errors.Join(append(errs, err)...)
}

// Apply applies typed backends, the controller's own: backends not in it
// are removed; one that cannot be built keeps its previous balancer (if
// any) while the others are applied. The error joins the per-backend
// failures, each naming its backend. Apply keeps backends to compare with
// the next call: the caller must not modify them afterwards. Backends equal
// to the previous ones change nothing, not even Version.
func (r *Registry) Apply(backends []*model.Backend) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applyLocked(backends, nil)
}

// applyLocked is Apply with mu held; the backends named in keep failed
// before they got here and keep their previous balancers.
func (r *Registry) applyLocked(backends []*model.Backend, keep []string) error {
	// The controller applies on every change of its Configuration, most of
	// which leave the backends as they were. ExternalName backends are
	// resolved again every time, so a payload with one is always built.
	if r.last != nil && len(keep) == 0 && sameBackends(r.last, backends) && !hasExternalName(backends) {
		return r.lastErr
	}
	err := r.sync(backends, keep)
	r.last, r.lastErr = backends, err
	if len(keep) > 0 {
		r.last = nil // what was kept is not in backends
	}
	return err
}

// ApplyChanged is Apply for a payload that differs from the one last
// applied only at the indices in changed: the same length, the same names
// in the same places, and every other backend equal (the controller's
// endpoint changes, builder.EndpointIndex.Refresh). Only the changed
// backends are built again, and the generation is published without
// going over the others, so an endpoint change costs the backends it
// touches whatever the number of backends. When the payload cannot be
// applied that way (no previous payload, another length or name, an
// ExternalName, a changed backend with alternatives or that is one) it is
// applied in full, as Apply; so is a nil changed, which means any backend
// may have changed. The error joins the failures of the backends built.
func (r *Registry) ApplyChanged(backends []*model.Backend, changed []int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.canApplyChanged(backends, changed) {
		return r.applyLocked(backends, nil)
	}
	same := true
	for _, i := range changed {
		same = same && backends[i].Equal(r.last[i])
	}
	if same {
		// As Apply of an equal payload: not even Version changes.
		r.last = backends
		return r.lastErr
	}
	old := r.snap.Load()
	// Issue 22: the changes go into a copy of old's small overlay; the
	// large byName is shared, unless the overlay is full and is folded.
	next := &snapshot{byName: old.byName, overlay: make(map[string]*backend, len(old.overlay)+len(changed))}
	if len(old.overlay)+len(changed) > maxOverlay {
		next.byName = fold(old.byName, old.overlay)
	} else {
		maps.Copy(next.overlay, old.overlay)
	}
	r.rings = newRingBuilds(len(changed))
	var errs []error
	var recompute []*backend
	for _, i := range changed {
		b := backends[i]
		next.overlay[b.Name] = nil // removed unless built or kept below
		if prev := r.unchanged(old, b); prev != nil {
			next.overlay[b.Name] = prev // no alternatives: it serves on as it is
			continue
		}
		nb, err := r.buildOrKeep(b, old)
		if err != nil {
			errs = append(errs, err)
		}
		if nb != nil {
			next.overlay[b.Name] = nb
			recompute = append(recompute, nb)
		}
	}
	r.rings.wait()
	r.rings = nil
	// Nothing else names a changed backend as an alternative: only their
	// own variables can have changed.
	for _, b := range recompute {
		b.needVars = neededVars(next, b)
	}
	r.publish(next)
	r.last, r.lastErr = backends, errors.Join(errs...)
	return r.lastErr
}

// canApplyChanged reports whether ApplyChanged can build only changed.
// Called with mu held.
func (r *Registry) canApplyChanged(backends []*model.Backend, changed []int) bool {
	if changed == nil || r.last == nil || !r.lastPlain || len(r.last) != len(backends) {
		return false
	}
	for _, i := range changed {
		if i < 0 || i >= len(backends) {
			return false
		}
		b, was := backends[i], r.last[i]
		if b.Name != was.Name || b.ExternalName != "" || len(b.Alternatives) > 0 || len(was.Alternatives) > 0 || r.alternates[b.Name] {
			return false
		}
	}
	return true
}

// publish makes next the generation pickers see. Called with mu held.
func (r *Registry) publish(next *snapshot) {
	r.snap.Store(next)
	r.version.Add(1)
	r.changedMu.Lock()
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
	r.changedMu.Unlock()
}

// sameBackends reports whether a and b hold the same backends, canary
// patterns compared by their text.
func sameBackends(a, b []*model.Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// unchanged returns the balancer of the previous generation built from a
// backend equal to in, which can serve on as it is; nil when in must be
// built (new, changed, or an ExternalName, whose names are resolved again).
func (r *Registry) unchanged(old *snapshot, in *model.Backend) *backend {
	prev := old.get(in.Name)
	if prev == nil || in.ExternalName != "" || !prev.in.Equal(in) {
		return nil
	}
	if st := r.states[in.Name]; st == nil || st.algo != prev.algoName {
		return nil
	}
	return prev
}

// carry copies a balancer of the previous generation into the next one:
// the copy's per-generation fields (needVars) are set without writing to
// the one pickers may still be reading.
// buildOrKeep builds b; a backend that fails keeps what old had under its
// name (carried over), and the error is returned either way.
func (r *Registry) buildOrKeep(b *model.Backend, old *snapshot) (*backend, error) {
	nb, err := r.build(b)
	if err != nil && nb == nil {
		if prev := old.get(b.Name); prev != nil {
			nb = carry(prev)
		}
	}
	return nb, err
}

func carry(prev *backend) *backend {
	nb := *prev
	return &nb
}

// hasExternalName reports whether a payload has an ExternalName backend.
func hasExternalName(backends []*model.Backend) bool {
	for i := range backends {
		if backends[i].ExternalName != "" {
			return true
		}
	}
	return false
}

// sync is apply without the comparison with the previous payload.
func (r *Registry) sync(backends []*model.Backend, keep []string) error {
	old := r.snap.Load()
	next := &snapshot{byName: make(map[string]*backend, len(backends))}
	r.rings = newRingBuilds(len(backends))
	var errs []error
	present := make(map[string]bool, len(backends))
	// recompute are the balancers of next whose needVars are set below:
	// every one not shared with the previous generation.
	var recompute []*backend
	for i := range backends {
		b := backends[i]
		if present[b.Name] {
			errs = append(errs, fmt.Errorf("backend %d %q: duplicate name; the first one is used", i, b.Name))
			continue
		}
		present[b.Name] = true
		if prev := r.unchanged(old, b); prev != nil {
			// Only what differs is built again: an endpoint change of one
			// backend among thousands costs one backend's build. Without
			// alternatives nothing of it depends on other backends, so the
			// very balancer serves on.
			nb := prev
			if len(prev.alternatives) > 0 {
				nb = carry(prev)
				recompute = append(recompute, nb)
			}
			next.byName[b.Name] = nb
			if nb.policy.badPattern {
				errs = append(errs, fmt.Errorf("backend %q: canary-by-header-pattern %q: RE2 rejects it (Go keeps requests with the header on the primary; the nginx shim matches it with PCRE)", b.Name, b.Canary.HeaderPattern.String()))
			}
			continue
		}
		nb, err := r.buildOrKeep(b, old)
		if err != nil {
			errs = append(errs, err)
		}
		if nb != nil {
			next.byName[b.Name] = nb
			recompute = append(recompute, nb)
		}
	}
	for _, name := range keep {
		if prev := old.get(name); prev != nil && !present[name] {
			present[name] = true
			nb := carry(prev)
			next.byName[name] = nb
			recompute = append(recompute, nb)
		}
	}
	r.rings.wait()
	r.rings = nil
	for name := range r.states {
		if !present[name] {
			delete(r.states, name)
		}
	}
	for _, b := range recompute {
		b.needVars = neededVars(next, b)
	}
	r.publish(next)
	r.lastPlain, r.alternates = len(keep) == 0 && len(present) == len(backends), map[string]bool{}
	for i := range backends {
		if backends[i].ExternalName != "" {
			r.lastPlain = false
		}
		for _, a := range backends[i].Alternatives {
			r.alternates[a] = true
		}
	}
	return errors.Join(errs...)
}

// build turns one Backend into a balancer. It returns (nil, nil) for a backend
// with no usable endpoints (Lua sets the balancer to nil: requests get 503),
// and (nil, err) when the backend is invalid. A non-fatal problem (a canary
// pattern RE2 rejects) returns the balancer and an error.
func (r *Registry) build(in *model.Backend) (*backend, error) {
	if err := checkTyped(in); err != nil {
		return nil, err
	}
	addrs := r.endpointAddrs(in)
	st := r.states[in.Name]
	if len(addrs) == 0 {
		// No balancer; its endpoint statistics go too, as Lua deletes them.
		delete(r.states, in.Name)
		return nil, nil
	}
	algoName := string(in.Implementation())
	fresh := st == nil || st.algo != algoName
	if st == nil {
		st = &backendState{endpoints: map[string]*endpointState{}}
		r.states[in.Name] = st
	}

	b := &backend{
		in:           *in,
		name:         in.Name,
		algoName:     algoName,
		alternatives: in.Alternatives,
		byAddr:       make(map[string]int, len(addrs)),
		scored:       algoName == "ewma" || algoName == "peak_ewma",
		peak:         algoName == "peak_ewma",
	}
	var added []*endpointState
	keep := make(map[string]bool, len(addrs))
	for _, addr := range addrs {
		es, ok := st.endpoints[addr]
		if !ok {
			es = &endpointState{}
			st.endpoints[addr] = es
			added = append(added, es)
		}
		keep[addr] = true
		b.byAddr[addr] = len(b.peers)
		b.peers = append(b.peers, peer{addr: addr, st: es})
	}
	removed := false
	for addr := range st.endpoints {
		if !keep[addr] {
			delete(st.endpoints, addr)
			removed = true
		}
	}
	if b.scored && !fresh && (len(added) > 0 || removed) {
		r.slowStart(b, added)
	}
	st.algo = algoName

	var softErr error
	policy, err := compilePolicy(in.Canary)
	if err != nil {
		softErr = fmt.Errorf("backend %q: %w", in.Name, err)
	}
	b.policy = policy

	if algoName != "round_robin" && st.rr != nil {
		st.rr.close()
		st.rr, st.rrKey = nil, ""
	}
	switch algoName {
	case "round_robin":
		order := sortedPeerOrder(b)
		key := nodeSetKey(addrs)
		if st.rr == nil || st.rrKey != key || fresh {
			if st.rr != nil {
				st.rr.close()
			}
			eps := make([]*endpointState, len(order))
			for s, i := range order {
				eps[s] = b.peers[i].st
			}
			// Lua starts the cursor at a random node on every (re)init.
			st.rr = newRRCursor(uint64(r.intn(len(addrs))), eps)
			st.rrKey = key
		}
		rr := newRoundRobin(st.rr, order)
		b.algo = rr
		if len(order) > 1 && len(b.alternatives) == 0 {
			rr.picks = make([]Pick, len(order))
			for s, i := range order {
				rr.picks[s] = Pick{Backend: b.name, Peer: b.peers[i].addr, EWMAScore: -1, st: b.peers[i].st}
			}
			b.rr = rr
		}
	case "ewma", "peak_ewma":
		b.algo = ewmaPicker{}
	case "least_request":
		b.algo = leastRequest{}
	case "chash":
		tmpl := "$request_uri" // fix: Lua hashed the literal "nil" (spec §4.3 quirk)
		if in.HashBy != nil {
			tmpl = in.HashBy.Key
		}
		b.algo = newCHash(r, st, b, parseHashKey(tmpl))
	case "chashsubset":
		tmpl, size := "$request_uri", 0
		if in.HashBy != nil {
			tmpl, size = in.HashBy.Key, in.HashBy.SubsetSize
		}
		if size <= 0 {
			size = 3
		}
		b.algo = newCHashSubset(st, b, parseHashKey(tmpl), size)
	case "sticky_balanced", "sticky_persistent":
		s := newSticky(r, in, st, b, algoName == "sticky_persistent")
		b.sticky = s
		b.algo = s
	default:
		panic("BUG: unhandled algorithm " + algoName)
	}
	return b, softErr
}

// slowStart seeds added endpoints with the mean stored EWMA of the peers that
// have one (spec §4.2 sync, step 5).
func (r *Registry) slowStart(b *backend, added []*endpointState) {
	var sum float64
	var n int
	for _, p := range b.peers {
		if p.st.hasStat.Load() {
			sum += math.Float64frombits(p.st.ewma.Load())
			n++
		}
	}
	if n == 0 {
		return
	}
	avg := sum / float64(n)
	now := r.nowSeconds()
	for _, es := range added {
		es.ewma.Store(math.Float64bits(avg))
		es.lastTouched.Store(math.Float64bits(now))
		es.hasStat.Store(true)
	}
}

// endpointAddrs returns the deduplicated node ids of a backend, resolving
// the names of an ExternalName backend.
func (r *Registry) endpointAddrs(in *model.Backend) []string {
	seen := make(map[string]bool, len(in.Endpoints))
	out := make([]string, 0, len(in.Endpoints))
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, e := range in.Endpoints {
		if in.ExternalName == "" || isIP(e.Address) {
			add(e.HostPort()) // IP literals need no resolution (fix of #13076)
			continue
		}
		ips, err := r.cfg.Resolve(context.Background(), e.Address)
		if err != nil {
			continue // unresolved: dropped, as in Lua
		}
		port := strconv.Itoa(int(e.Port))
		for _, ip := range ips {
			add(mustAddr(ip, port))
		}
	}
	return out
}

func mustAddr(ip, port string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:" + port
	}
	return ip + ":" + port
}

// nodeSetKey identifies a set of node ids independent of order.
func nodeSetKey(addrs []string) string {
	s := append([]string(nil), addrs...)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// checkTyped checks what the builder guarantees of a typed backend, for
// callers of Apply that are not the builder.
func checkTyped(in *model.Backend) error {
	if in.Name == "" {
		return errors.New("backend with an empty name")
	}
	for i, e := range in.Endpoints {
		if e.Port == 0 || e.Address == "" {
			return fmt.Errorf("backend %q: endpoint %d: %q port %d is not an address and a port 1-65535", in.Name, i, e.Address, e.Port)
		}
	}
	return nil
}

// Pick chooses a peer for one attempt of a request to the named backend. The
// first pick of a request fixes the backend (and canary decision) in a; later
// picks with the same Attempt are retries. No locks; no allocation except a new
// sticky cookie.
//
// The Pick is read-only, and valid until the next Pick, PickAfter or Reset
// with the same Attempt (it may live in a): copy it (*p) to keep it longer.
// On error it is not nil, and names the backend. A pointer, not a value:
// returning the 80-byte struct cost a round-robin pick a quarter of its
// time (docs/benchmarks.md).
func (r *Registry) Pick(name string, req Request, a *Attempt) (*Pick, error) {
	var snap *snapshot
	var primary *backend
	if a.chosen == nil {
		snap = r.snap.Load()
		primary = snap.get(name)
		if rr := primary.fastRR(); rr != nil {
			// The first pick of a round-robin backend with several peers and
			// no canary: the cursor's advance is also the in-flight count
			// (see rrCursor), so one atomic add, and the result is a copy
			// of a Pick the builder made for the slot.
			c := rr.cursor.pos.Add(1)
			s := rr.slot(c)
			if c&rrClosed != 0 {
				rr.picks[s].st.inFlight.Add(1)
			}
			// a.record of a first pick: an Attempt without a chosen backend
			// has tried nothing (Reset clears both; the choice precedes
			// record).
			a.chosen, a.rrBase, a.tried[0], a.ntried = primary, uint64(uint32(c)), int32(rr.order[s]), 1
			return &rr.picks[s], nil
		}
	}
	p := &a.pick
	*p = Pick{}
	err := r.fill(snap, primary, name, req, a, p)
	if err == nil {
		p.st.inFlight.Add(1)
	}
	return p, err
}

// fastRR returns b's round-robin balancer if Pick's fast path serves b's
// first picks, else nil. b may be nil.
func (b *backend) fastRR() *roundRobin {
	if b == nil {
		return nil
	}
	return b.rr
}

// pick fills p; it is Pick without the in-flight count.
func (r *Registry) pick(name string, req Request, a *Attempt, p *Pick) error {
	var snap *snapshot
	var primary *backend
	if a.chosen == nil {
		snap = r.snap.Load()
		primary = snap.get(name)
	}
	return r.fill(snap, primary, name, req, a, p)
}

// fill is pick with the snapshot and the backend named name in it (nil if
// none) already looked up when a has no chosen backend yet.
func (r *Registry) fill(snap *snapshot, primary *backend, name string, req Request, a *Attempt, p *Pick) error {
	b := a.chosen
	if b == nil {
		if primary == nil {
			p.Backend, p.EWMAScore = name, -1
			return ErrUnknownBackend
		}
		b = r.choose(snap, primary, req)
		a.chosen = b
	}
	idx, cookie, score, err := b.pickIn(r, req, a)
	p.Backend, p.Alternative, p.EWMAScore = b.name, b.name != name, score
	if err != nil {
		p.EWMAScore = -1
		return err
	}
	a.record(idx)
	pe := &b.peers[idx]
	p.Peer, p.SetCookie, p.st, p.scored, p.peak = pe.addr, cookie, pe.st, b.scored, b.peak
	return nil
}

// choose is the canary decision of a request's first pick to primary.
func (r *Registry) choose(snap *snapshot, primary *backend, req Request) *backend {
	if len(primary.alternatives) > 0 {
		return r.route(snap, primary, req)
	}
	return primary
}

// pickIn runs b's algorithm. A type switch with direct calls, not a call
// through the algorithm interface: escape analysis then sees that a does not
// escape, so a caller's per-request Attempt can live on its stack.
func (b *backend) pickIn(r *Registry, req Request, a *Attempt) (int, string, float64, error) {
	switch al := b.algo.(type) {
	case *roundRobin:
		return al.pick(r, b, req, a)
	case ewmaPicker:
		return al.pick(r, b, req, a)
	case leastRequest:
		return al.pick(r, b, req, a)
	case *chash:
		return al.pick(r, b, req, a)
	case *chashSubset:
		return al.pick(r, b, req, a)
	case *sticky:
		return al.pick(r, b, req, a)
	}
	panic("BUG: unhandled algorithm type")
}

// Done reports the outcome of the attempt p: it decrements the in-flight count
// Pick incremented, counts failures, and feeds the EWMA of ewma and peak_ewma.
func (r *Registry) Done(p *Pick, info DoneInfo) {
	if p.st == nil {
		return
	}
	p.st.inFlight.Add(-1)
	p.st.completed.Add(1)
	r.observe(p.st, p.scored, p.peak, info)
}

// Release ends an attempt that says nothing of its peer (the client broke
// its request body, which is the client's fault): the in-flight count
// Pick took is given back, and nothing else changes: no completion, no
// failure, no latency sample for ewma or peak_ewma.
func (r *Registry) Release(p *Pick) {
	if p.st == nil {
		return
	}
	p.st.inFlight.Add(-1)
}

// Feedback reports the outcome of an attempt picked elsewhere (the nginx shim
// reports by address in batches): like Done, without the in-flight count.
// Unknown backends or addresses are ignored.
func (r *Registry) Feedback(backend, peer string, info DoneInfo) {
	b, st := r.endpoint(backend, peer)
	if st == nil {
		return
	}
	st.completed.Add(1)
	r.observe(st, b.scored, b.peak, info)
}

// endpoint returns the backend named backend and the state of its endpoint
// at address peer, or nil state when either is unknown.
func (r *Registry) endpoint(backend, peer string) (*backend, *endpointState) {
	b := r.snap.Load().get(backend)
	if b == nil {
		return nil, nil
	}
	i, ok := b.byAddr[peer]
	if !ok {
		return nil, nil
	}
	return b, b.peers[i].st
}

func (r *Registry) observe(st *endpointState, scored, peak bool, info DoneInfo) {
	if !scored {
		if info.Failed {
			st.failures.Add(1)
		}
		return
	}
	if info.Failed {
		st.failures.Add(1)
		// A failed attempt counts as a sample of failurePenalty: its own
		// timings would make a peer failing fast look fast (spec §10), and
		// no sample at all (Lua records only a request's final attempt)
		// left a peer refusing connections at score 0, the best there is.
		// It then won every pair it was drawn in, each such request was
		// retried on the better of two live peers, and a live peer whose
		// first sample happened to be higher than the others' got no
		// request until its score decayed below theirs, tens of seconds
		// later (TestShimDecisions: 1 of 600).
		st.update(failurePenalty, r.nowSeconds(), peak)
		return
	}
	// Lua: rtt = $upstream_connect_time + $upstream_response_time (connect
	// counted twice; kept for identical scores).
	rtt := (info.ConnectTime + info.ResponseTime).Seconds()
	st.update(rtt, r.nowSeconds(), peak)
}

// decayTime is ewma.lua's DECAY_TIME in seconds.
const decayTime = 10.0

// failurePenalty is the latency, in seconds, a failed attempt (refused,
// timed out, or retried by proxy_next_upstream) counts as: a peer that
// fails is ranked behind peers answering in under a second, and comes back
// as its score decays (from one failure on a peer with no other sample,
// below 1 ms after about 70 s), when it is tried again.
const failurePenalty = 1.0

// update applies one latency sample. Like Lua's resty.lock with timeout 0, a
// sample arriving while another is being applied is dropped.
func (s *endpointState) update(rtt, now float64, peak bool) {
	if !s.lock.CompareAndSwap(false, true) {
		return
	}
	s.apply(rtt, rtt, now, peak)
}

// updateMany applies the samples of one flush, whose mean is mean and
// largest max, as one sample (Registry.CountTimed). Unlike a single
// sample's, it waits for a sample being applied: a flush stands for many
// requests.
func (s *endpointState) updateMany(mean, max, now float64, peak bool) {
	for !s.lock.CompareAndSwap(false, true) {
		runtime.Gosched()
	}
	s.apply(mean, max, now, peak)
}

// apply moves the score by samples of mean mean and largest max (the same
// for one sample): peak_ewma takes max when it is above the score. The
// caller holds s.lock; apply releases it.
func (s *endpointState) apply(rtt, max, now float64, peak bool) {
	ewma := math.Float64frombits(s.ewma.Load())
	last := math.Float64frombits(s.lastTouched.Load())
	if !s.hasStat.Load() {
		ewma, last = 0, 0
	}
	td := math.Max(0, now-last)
	w := math.Exp(-td / decayTime)
	if peak && max > ewma {
		ewma = max
	} else {
		ewma = ewma*w + rtt*(1-w)
	}
	s.ewma.Store(math.Float64bits(ewma))
	s.lastTouched.Store(math.Float64bits(now))
	s.hasStat.Store(true)
	s.lock.Store(false)
}

// score is the decayed EWMA without writing it (ewma.lua get_or_update_ewma
// with rtt 0).
func (s *endpointState) score(now float64) float64 {
	if !s.hasStat.Load() {
		return 0
	}
	ewma := math.Float64frombits(s.ewma.Load())
	last := math.Float64frombits(s.lastTouched.Load())
	td := math.Max(0, now-last)
	return ewma * math.Exp(-td/decayTime)
}

// Candidates fills dst with up to len(dst) peers for successive attempts of one
// request, as Pick would return them if each attempt failed with
// FailureFailed; the nginx shim asks once in the rewrite phase and walks the
// list in balancer_by_lua. It returns how many it filled and the first Pick
// (backend, cookie, score). In-flight counts are not touched: the shim reports
// outcomes through Feedback.
func (r *Registry) Candidates(name string, req Request, a *Attempt, dst []string) (int, Pick, error) {
	var first Pick
	n := 0
	for n < len(dst) {
		var p Pick
		err := r.pick(name, req, a, &p)
		if err != nil {
			if n == 0 {
				return 0, p, err
			}
			break
		}
		if n == 0 {
			first = p
		}
		dst[n] = p.Peer
		n++
		a.LastFailure = FailureFailed
	}
	return n, first, nil
}

// CandidatePicks is Candidates with the whole Pick of every candidate, so a
// caller that walks the list can send the Set-Cookie of the peer that
// actually served (sticky picks a new peer, and issues a new cookie, on each
// attempt without a usable cookie). It fills dst and returns how many; the
// error is the first pick's. In-flight counts are not touched.
func (r *Registry) CandidatePicks(name string, req Request, a *Attempt, dst []Pick) (int, error) {
	n := 0
	for n < len(dst) {
		dst[n] = Pick{}
		if err := r.pick(name, req, a, &dst[n]); err != nil {
			if n == 0 {
				return 0, err
			}
			break
		}
		n++
		a.LastFailure = FailureFailed
	}
	return n, nil
}

// PickAfter is Pick for a request that already tried the given peers (in
// order), as nginx's $upstream_addr lists them: the backend and canary choice
// are made first, then the peers are recorded as tried and a.LastFailure
// applies. Addresses the chosen backend does not have are ignored. Used by
// `switchyard debug pick --tried` and by callers that rebuild a request's
// state from outside.
func (r *Registry) PickAfter(name string, req Request, a *Attempt, tried []string) (*Pick, error) {
	if a.chosen == nil && len(tried) > 0 {
		snap := r.snap.Load()
		primary := snap.get(name)
		if primary == nil {
			a.pick = Pick{Backend: name, EWMAScore: -1}
			return &a.pick, ErrUnknownBackend
		}
		a.chosen = r.choose(snap, primary, req)
	}
	if a.chosen != nil {
		for _, addr := range tried {
			if i, ok := a.chosen.byAddr[addr]; ok {
				a.record(i)
			}
		}
	}
	return r.Pick(name, req, a)
}
