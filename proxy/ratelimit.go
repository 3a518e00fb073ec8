package proxy

import (
	"errors"
	"net/netip"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// Rate limits (limit-rps, limit-rpm) as nginx's limit_req runs them with
// ingress-nginx's settings (burst, nodelay): per client address a leaky
// bucket whose excess, in thousandths of a request, drains at the rate and
// grows by one request per request let through; a request that would bring
// it over the burst is refused and changes nothing. With two limits (rps
// and rpm) a request must pass both and is counted by both.
//
// golang.org/x/time/rate is not used: its Limiter is one token bucket with
// its own mutex and float arithmetic on time.Time, where nginx's limit_req
// counts integer thousandths of a request per millisecond, so the two
// refuse different requests near the burst (TestRateLimitArithmetic holds
// nginx's figures); and it has no keyed table, which is what bounds memory
// here: a zone keeps at most 64 × 1024 addresses, about 6.4 MiB of heap
// however many addresses pass (TestRateLimitZoneMemory, 1Mi addresses).

// rlZone is the state of one limit_req zone: the excess of each client
// address, in shards so that clients rarely share a lock. It outlives
// configuration changes (as nginx keeps a zone across reloads).
type rlZone struct {
	shards [rlShards]rlShard
}

const (
	rlShards = 64
	// rlShardMax bounds each shard (64 × 1024 addresses per zone, about
	// what nginx's 5 MB zone holds); a full shard first forgets addresses
	// whose excess has drained, then its oldest.
	rlShardMax = 1024
)

type rlShard struct {
	mu sync.Mutex
	m  map[netip.Addr]rlState // guarded by mu
	_  [40]byte               // keeps shards on their own cache lines
}

// rlState is one address's bucket: excess in thousandths of a request,
// last the millisecond it was last let through.
type rlState struct {
	excess, last int64
}

func newRLZone() *rlZone {
	z := &rlZone{}
	for i := range z.shards {
		z.shards[i].m = make(map[netip.Addr]rlState)
	}
	return z
}

// routeLimit is one limit of a route: its zone (in this process, or shm in
// shared memory), its rate in thousandths of a request per second and its
// burst in thousandths of a request.
type routeLimit struct {
	zone        *rlZone
	rate, burst int64
	shm         *shmZone
}

// excessAt is the excess an address would have with one more request at
// now (ms), and whether it has a bucket yet; nginx's arithmetic, integer
// milliseconds.
func (l *routeLimit) excessAt(st rlState, known bool, now int64) int64 {
	if !known {
		return 0 // nginx starts a new address at zero excess
	}
	ms := now - st.last
	if ms < 0 {
		ms = 0
	}
	return max(st.excess-l.rate*ms/1000+1000, 0)
}

// allowLimits reports whether the client at ip may pass every limit, and
// if so counts the request in each; a refused request changes no bucket.
// now is in milliseconds.
func allowLimits(limits []routeLimit, ip netip.Addr, now int64) bool {
	if len(limits) > 0 && limits[0].shm != nil {
		return allowShared(limits, ip, now)
	}
	ip = ip.Unmap()
	h := xxhash.Sum64(ip.AsSlice())
	var states [2]rlState
	var known [2]bool
	var excess [2]int64
	n := min(len(limits), len(states))
	// Lock every shard involved (zones differ, so no shard twice), check,
	// then count: the same order for every request, so no deadlock.
	ok := true
	for i := range n {
		sh := &limits[i].zone.shards[h%rlShards]
		sh.mu.Lock()
		states[i], known[i] = sh.m[ip]
		excess[i] = limits[i].excessAt(states[i], known[i], now)
		ok = ok && excess[i] <= limits[i].burst
	}
	for i := range n {
		sh := &limits[i].zone.shards[h%rlShards]
		if ok {
			l := &limits[i]
			last := states[i].last
			if !known[i] || now != last {
				last = now // as nginx, the time moves only when it has
			}
			if !known[i] && len(sh.m) >= rlShardMax {
				sh.evict(l, now)
			}
			sh.m[ip] = rlState{excess: excess[i], last: last}
		}
		sh.mu.Unlock()
	}
	return ok
}

// evict makes room in a full shard: addresses whose excess has drained
// under l's rate go first (they would start again at zero anyway), else
// the one let through longest ago.
func (sh *rlShard) evict(l *routeLimit, now int64) {
	var oldest netip.Addr
	oldestAt := int64(-1)
	freed := false
	for ip, st := range sh.m {
		if st.excess-l.rate*(now-st.last)/1000 <= 0 {
			delete(sh.m, ip)
			freed = true
			continue
		}
		if oldestAt < 0 || st.last < oldestAt {
			oldest, oldestAt = ip, st.last
		}
	}
	if !freed && oldestAt >= 0 {
		delete(sh.m, oldest)
	}
}

// rateLimits keeps the zones of the configuration in force, by name, so a
// configuration change keeps every bucket and count of the zones it keeps.
type rateLimits struct {
	// shm, when not nil, holds every zone in shared memory
	// (Config.LimitZones); immutable.
	shm *LimitZones

	mu    sync.Mutex
	zones zoneSet // guarded by mu
}

// zoneSet is the limit_req and limit_conn zones of a configuration, by
// name: in this process (req, conn) or in shared memory (shm).
type zoneSet struct {
	req  map[string]*rlZone
	conn map[string]*lcZone
	shm  map[string]*shmZone
}

func newZoneSet() zoneSet {
	return zoneSet{req: map[string]*rlZone{}, conn: map[string]*lcZone{}, shm: map[string]*shmZone{}}
}

// routeLimits returns a location's limit_req limits and its limit_conn
// limit (nil without) on zones that outlive the configuration, and marks
// their names used in keep. The error names the zones for which shared
// memory had no slot: their limits refuse every request.
func (r *rateLimits) routeLimits(rl *model.RateLimit, keep zoneSet) ([]routeLimit, *connLimit, error) {
	if rl == nil {
		return nil, nil, nil
	}
	var errs []error
	var cl *connLimit
	if rl.Connections > 0 {
		name := rl.Zone + "_conn"
		cl = &connLimit{max: int32(min(rl.Connections, 1<<31-1))}
		if r.shm != nil {
			var err error
			cl.shm, err = r.sharedZone(name, shmConn, keep)
			errs = append(errs, err)
		} else {
			z := keep.conn[name]
			if z == nil {
				r.mu.Lock()
				if z = r.zones.conn[name]; z == nil {
					z = newLCZone()
				}
				r.mu.Unlock()
				keep.conn[name] = z
			}
			cl.zone = z
		}
	}
	var out []routeLimit
	for _, k := range []struct {
		suffix string
		n      int
		per    int64 // seconds
	}{{"_rps", rl.RPS, 1}, {"_rpm", rl.RPM, 60}} {
		if k.n <= 0 {
			continue
		}
		name := rl.Zone + k.suffix
		l := routeLimit{rate: int64(k.n) * 1000 / k.per, burst: int64(k.n) * int64(rl.BurstMultiplier) * 1000}
		if r.shm != nil {
			var err error
			l.shm, err = r.sharedZone(name, shmReq, keep)
			errs = append(errs, err)
		} else {
			z := keep.req[name]
			if z == nil {
				r.mu.Lock()
				if z = r.zones.req[name]; z == nil {
					z = newRLZone()
				}
				r.mu.Unlock()
				keep.req[name] = z
			}
			l.zone = z
		}
		out = append(out, l)
	}
	return out, cl, errors.Join(errs...)
}

// sharedZone returns the zone name of kind in shared memory, once per
// configuration: the error of a zone without a slot is reported once.
func (r *rateLimits) sharedZone(name string, kind uint32, keep zoneSet) (*shmZone, error) {
	if z := keep.shm[name]; z != nil {
		return z, nil
	}
	z, err := r.shm.zone(name, kind)
	keep.shm[name] = z
	return z, err
}

// keepOnly makes keep the zones in force; the others are forgotten (a
// request still counted in a forgotten limit_conn zone releases its count
// there, harmlessly). In shared memory, a zone this process no longer
// uses is no longer marked kept (shmzone.go).
func (r *rateLimits) keepOnly(keep zoneSet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.zones
	r.zones = keep
	if r.shm != nil {
		r.shm.keep(prev.shm, keep.shm)
	}
}
