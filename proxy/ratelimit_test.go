package proxy

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// allowLimits counts as nginx's limit_req with ingress-nginx's nodelay
// burst: a new address starts at zero excess, each request adds one, the
// excess drains at the rate, a request over the burst is refused and
// changes nothing; with two limits both must pass and both count.
func TestRateLimitArithmetic(t *testing.T) {
	r := &rateLimits{}
	keep := newZoneSet()
	// limit-rps 2, multiplier 1: burst 2 requests.
	limits, _ := r.routeLimits(&model.RateLimit{Zone: "ns_a_", RPS: 2, BurstMultiplier: 1}, keep)
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2")
	var got []bool
	for range 4 {
		got = append(got, allowLimits(limits, a, 1000))
	}
	// excess 0, 1000, 2000 pass (≤ burst 2000); the fourth would be 3000.
	if want := []bool{true, true, true, false}; !equalBools(got, want) {
		t.Errorf("burst: %v; want %v", got, want)
	}
	if !allowLimits(limits, b, 1000) {
		t.Error("another address is limited by the first's bucket")
	}
	// 500 ms later 1 request has drained (rate 2/s): one passes, not two.
	if !allowLimits(limits, a, 1500) || allowLimits(limits, a, 1500) {
		t.Error("after 500 ms: want exactly one more request")
	}

	// limit-rps 10 and limit-rpm 2 (multiplier 1): the rpm bucket refuses
	// the fourth request and the rps bucket does not count it.
	keep = newZoneSet()
	both, _ := r.routeLimits(&model.RateLimit{Zone: "ns_b_", RPS: 10, RPM: 2, BurstMultiplier: 1}, keep)
	if len(both) != 2 || both[1].rate != 2*1000/60 {
		t.Fatalf("limits %+v", both)
	}
	got = got[:0]
	for range 4 {
		got = append(got, allowLimits(both, a, 5000))
	}
	if want := []bool{true, true, true, false}; !equalBools(got, want) {
		t.Errorf("rps and rpm: %v; want %v", got, want)
	}
	// A zone kept by name keeps its buckets across configurations.
	r.keepOnly(keep)
	again, _ := r.routeLimits(&model.RateLimit{Zone: "ns_b_", RPS: 10, RPM: 2, BurstMultiplier: 1}, newZoneSet())
	if again[1].zone != both[1].zone || allowLimits(again, a, 5001) {
		t.Error("a new configuration forgot the zone's buckets")
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A full shard forgets drained addresses first, then the oldest: a zone
// never grows past its bound, however many addresses pass.
func TestRateLimitZoneBounded(t *testing.T) {
	limits, _ := (&rateLimits{}).routeLimits(&model.RateLimit{Zone: "z", RPS: 1, BurstMultiplier: 100}, newZoneSet())
	for i := range 300_000 {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if !allowLimits(limits, ip, int64(i/1000)) {
			t.Fatalf("address %d refused on its first request", i)
		}
	}
	total := 0
	for i := range limits[0].zone.shards {
		n := len(limits[0].zone.shards[i].m)
		if n > rlShardMax {
			t.Fatalf("shard %d holds %d addresses; bound %d", i, n, rlShardMax)
		}
		total += n
	}
	if total == 0 {
		t.Fatal("no address kept")
	}
}

// TestRateLimitZoneMemory: 1M distinct client addresses through one zone
// leave the heap grown by no more than the zone's bound allows (64 × 1024
// addresses), not by what a million would take.
func TestRateLimitZoneMemory(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	limits, _ := (&rateLimits{}).routeLimits(&model.RateLimit{Zone: "z", RPS: 10, BurstMultiplier: 5}, newZoneSet())
	var after uint64
	for i := range 1 << 20 {
		ip := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 12: byte(i >> 24), 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)})
		allowLimits(limits, ip, int64(i/100))
		if i == 1<<18 {
			after = heap() // 256k addresses: the zone is full
		}
	}
	end := heap()
	runtime.KeepAlive(limits)
	t.Logf("heap: %d KiB before, %d KiB after 256Ki addresses, %d KiB after 1Mi", before>>10, after>>10, end>>10)
	const bound = 32 << 20 // 65,536 entries at well under 512 B each
	if end > before+bound {
		t.Fatalf("heap grew %d KiB for 1Mi addresses; bound %d KiB", (end-before)>>10, bound>>10)
	}
	if end > after+after/4 {
		t.Fatalf("heap kept growing past a full zone: %d KiB at 256Ki addresses, %d KiB at 1Mi", after>>10, end>>10)
	}
}

// BenchmarkRateLimit is the cost of a limited request that passes.
func BenchmarkRateLimit(b *testing.B) {
	limits, _ := (&rateLimits{}).routeLimits(&model.RateLimit{Zone: "z", RPS: 1_000_000, BurstMultiplier: 5}, newZoneSet())
	ip := netip.MustParseAddr("192.0.2.1")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		allowLimits(limits, ip, int64(i))
	}
}
