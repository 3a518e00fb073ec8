//go:build !race

package proxy

import (
	"net/netip"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// TestLimitZonesAllocs: a limited request's check and count, and a
// request in progress counted and released, allocate nothing in shared
// memory zones.
func TestLimitZonesAllocs(t *testing.T) {
	r := &rateLimits{shm: testLimitZones(t)}
	limits, cl, err := r.routeLimits(&model.RateLimit{Zone: "ns_allocs_", RPS: 1_000_000, RPM: 1_000_000, BurstMultiplier: 5, Connections: 10}, newZoneSet())
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("2001:db8::1")
	now := int64(0)
	if n := testing.AllocsPerRun(1000, func() {
		now++
		allowLimits(limits, ip, now)
	}); n != 0 {
		t.Errorf("allowLimits allocates %v times; want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		h, _ := cl.acquire(ip)
		h.release()
	}); n != 0 {
		t.Errorf("acquire and release allocate %v times; want 0", n)
	}
}
