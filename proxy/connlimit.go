package proxy

import (
	"net/netip"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// limit-connections as nginx's limit_conn runs it with ingress-nginx's
// settings: per client address, the requests in progress (each HTTP/2
// stream one, an upgraded connection until it closes); a request that
// would bring its address over the limit is refused. A request counts from
// its check until its response has been written (or its tunnel closed),
// whatever ends it: a finished body, a client gone mid-response, an error.

// lcZone is the state of one limit_conn zone: the requests in progress of
// each client address, in shards so that clients rarely share a lock. An
// address is in the zone only while it has requests in progress. It
// outlives configuration changes, as nginx keeps a zone across reloads.
type lcZone struct {
	shards [lcShards]lcShard
}

const (
	lcShards = 64
	// lcShardMax bounds each shard (64 × 1024 addresses with requests in
	// progress per zone, about what nginx's 5 MB zone holds). A full
	// shard refuses a new address, as nginx refuses a request when its
	// zone has no room ("limit_conn" answers limit_conn_status).
	lcShardMax = 1024
)

type lcShard struct {
	mu sync.Mutex
	m  map[netip.Addr]int32 // guarded by mu; counts > 0 only
	// shm is set, and the rest unused, in the tag that stands for a
	// zone in shared memory in a connHold (shmBind); immutable.
	shm *shmBind
	_   [40]byte // keeps shards on their own cache lines
}

func newLCZone() *lcZone {
	z := &lcZone{}
	for i := range z.shards {
		z.shards[i].m = make(map[netip.Addr]int32)
	}
	return z
}

// connLimit is a location's limit-connections: its zone (in this process,
// or shm in shared memory) and how many requests one address may have in
// progress.
type connLimit struct {
	zone *lcZone
	max  int32
	shm  *shmZone
}

// connHold is one counted request; its zero value counts nothing.
// release it exactly once, when the request ends.
// In shared memory, sh is the zone's tag (lcShard.shm): a hold stays 32
// bytes, which the in-process path's cost depends on.
type connHold struct {
	sh *lcShard
	ip netip.Addr
}

// acquire counts a request of the client at ip, or reports false (and
// counts nothing) when the address is at the limit or the zone has no room
// for it.
func (l *connLimit) acquire(ip netip.Addr) (connHold, bool) {
	if l.shm != nil {
		return l.acquireShared(ip)
	}
	ip = ip.Unmap()
	sh := &l.zone.shards[xxhash.Sum64(ip.AsSlice())%lcShards]
	sh.mu.Lock()
	n, known := sh.m[ip]
	if n >= l.max || (!known && len(sh.m) >= lcShardMax) {
		sh.mu.Unlock()
		return connHold{}, false
	}
	sh.m[ip] = n + 1
	sh.mu.Unlock()
	return connHold{sh: sh, ip: ip}, true
}

// release ends the count of h's request, once; the address leaves the
// zone with its last request.
func (h *connHold) release() {
	sh := h.sh
	if sh == nil {
		return
	}
	h.sh = nil
	if sh.shm != nil {
		sh.shm.release(h.ip)
		return
	}
	sh.mu.Lock()
	if n := sh.m[h.ip] - 1; n > 0 {
		sh.m[h.ip] = n
	} else {
		delete(sh.m, h.ip)
	}
	sh.mu.Unlock()
}

// held reports whether h counts a request.
func (h *connHold) held() bool { return h.sh != nil }
