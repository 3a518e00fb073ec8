package proxy

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// limitBackend is where a test's zones live: in this process, or in shared
// memory (Config.LimitZones).
type limitBackend struct {
	name string
	new  func(t testing.TB) *rateLimits
}

var limitBackends = []limitBackend{
	{"in-process", func(testing.TB) *rateLimits { return &rateLimits{} }},
	{"shared", func(t testing.TB) *rateLimits { return &rateLimits{shm: testLimitZones(t)} }},
}

// sameReqZone reports whether a and b count in the same zone.
func sameReqZone(a, b routeLimit) bool { return a.zone == b.zone && a.shm == b.shm }

// reqShardSizes is how many addresses each shard of l's zone holds.
func reqShardSizes(t testing.TB, l routeLimit) []int {
	t.Helper()
	if l.shm != nil {
		return shmShardSizes(t, l.shm)
	}
	var n []int
	for i := range l.zone.shards {
		n = append(n, len(l.zone.shards[i].m))
	}
	return n
}

// allowLimits counts as nginx's limit_req with ingress-nginx's nodelay
// burst: a new address starts at zero excess, each request adds one, the
// excess drains at the rate, a request over the burst is refused and
// changes nothing; with two limits both must pass and both count.
func TestRateLimitArithmetic(t *testing.T) {
	for _, be := range limitBackends {
		t.Run(be.name, func(t *testing.T) { testRateLimitArithmetic(t, be.new(t)) })
	}
}

func testRateLimitArithmetic(t *testing.T, r *rateLimits) {
	keep := newZoneSet()
	// limit-rps 2, multiplier 1: burst 2 requests.
	limits, _, err := r.routeLimits(&model.RateLimit{Zone: "ns_a_", RPS: 2, BurstMultiplier: 1}, keep)
	if err != nil {
		t.Fatal(err)
	}
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
	both, _, err := r.routeLimits(&model.RateLimit{Zone: "ns_b_", RPS: 10, RPM: 2, BurstMultiplier: 1}, keep)
	if err != nil {
		t.Fatal(err)
	}
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
	// The rps bucket did not count the refused request: 2 more pass there
	// (burst 10, 3 counted), as a limit of its own.
	rpsOnly := both[:1]
	got = got[:0]
	for range 9 {
		got = append(got, allowLimits(rpsOnly, a, 5000))
	}
	if want := []bool{true, true, true, true, true, true, true, true, false}; !equalBools(got, want) {
		t.Errorf("the rps bucket after a request the rpm bucket refused: %v; want %v", got, want)
	}
	// A zone kept by name keeps its buckets across configurations.
	r.keepOnly(keep)
	again, _, err := r.routeLimits(&model.RateLimit{Zone: "ns_b_", RPS: 10, RPM: 2, BurstMultiplier: 1}, newZoneSet())
	if err != nil {
		t.Fatal(err)
	}
	if !sameReqZone(again[1], both[1]) || allowLimits(again, a, 5001) {
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
	for _, be := range limitBackends {
		t.Run(be.name, func(t *testing.T) {
			limits, _, err := be.new(t).routeLimits(&model.RateLimit{Zone: "z", RPS: 1, BurstMultiplier: 100}, newZoneSet())
			if err != nil {
				t.Fatal(err)
			}
			for i := range 300_000 {
				ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
				if !allowLimits(limits, ip, int64(i/1000)) {
					t.Fatalf("address %d refused on its first request", i)
				}
			}
			total := 0
			for i, n := range reqShardSizes(t, limits[0]) {
				if n > rlShardMax {
					t.Fatalf("shard %d holds %d addresses; bound %d", i, n, rlShardMax)
				}
				total += n
			}
			if total == 0 {
				t.Fatal("no address kept")
			}
		})
	}
}

// A full shard whose addresses have not drained forgets the one let
// through longest ago, and only it: the others keep their buckets.
func TestRateLimitZoneEvictsOldest(t *testing.T) {
	for _, be := range limitBackends {
		t.Run(be.name, func(t *testing.T) {
			// limit-rpm 1, multiplier 5: 16 thousandths drain a second,
			// nothing to speak of within the test.
			limits, _, err := be.new(t).routeLimits(&model.RateLimit{Zone: "z", RPM: 1, BurstMultiplier: 5}, newZoneSet())
			if err != nil {
				t.Fatal(err)
			}
			// rlShardMax+1 addresses of one shard, the last one new.
			var addrs []netip.Addr
			for i := 0; len(addrs) <= rlShardMax; i++ {
				ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
				if reqShardOf(limits[0], ip) == 0 {
					addrs = append(addrs, ip)
				}
			}
			now := int64(1000)
			for _, ip := range addrs[:rlShardMax] {
				now++
				// Twice: excess 1000, not drained.
				for range 2 {
					if !allowLimits(limits, ip, now) {
						t.Fatalf("%v refused", ip)
					}
				}
			}
			if got := reqShardSizes(t, limits[0])[0]; got != rlShardMax {
				t.Fatalf("shard 0 holds %d addresses; want %d", got, rlShardMax)
			}
			now++
			if !allowLimits(limits, addrs[rlShardMax], now) {
				t.Fatal("a new address refused in a full shard")
			}
			if got := reqShardSizes(t, limits[0])[0]; got != rlShardMax {
				t.Fatalf("shard 0 holds %d addresses after an eviction; want %d", got, rlShardMax)
			}
			// addrs[1] kept its excess (984 by now): 4 more pass (to 4984).
			// addrs[0] was forgotten: it starts again at 0, 6 pass (to 5000).
			for _, c := range []struct {
				ip   netip.Addr
				want int
			}{{addrs[1], 4}, {addrs[0], 6}} {
				n := 0
				for allowLimits(limits, c.ip, now) {
					n++
				}
				if n != c.want {
					t.Errorf("%v: %d requests passed; want %d", c.ip, n, c.want)
				}
			}
		})
	}
}

// reqShardOf is the shard of l's zone that holds ip.
func reqShardOf(l routeLimit, ip netip.Addr) int {
	ip = ip.Unmap()
	if l.shm != nil {
		key := ip.As16()
		return int(l.shm.slotNow().hash(&key) % shmShards)
	}
	return int(xxhash.Sum64(ip.AsSlice()) % rlShards)
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
	limits, _, _ := (&rateLimits{}).routeLimits(&model.RateLimit{Zone: "z", RPS: 10, BurstMultiplier: 5}, newZoneSet())
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

// BenchmarkRateLimit is the cost of a limited request that passes (a
// check and a count), in each backend.
func BenchmarkRateLimit(b *testing.B) {
	for _, be := range limitBackends {
		b.Run("backend="+be.name, func(b *testing.B) {
			limits, _, err := be.new(b).routeLimits(&model.RateLimit{Zone: "z", RPS: 1_000_000, BurstMultiplier: 5}, newZoneSet())
			if err != nil {
				b.Fatal(err)
			}
			ip := netip.MustParseAddr("192.0.2.1")
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				allowLimits(limits, ip, int64(i))
			}
		})
	}
}
