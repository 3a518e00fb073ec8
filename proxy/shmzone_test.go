package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// testLimitZones is a fresh shared memory of limit zones, mapped, closed
// at the end of the test.
func testLimitZones(t testing.TB) *LimitZones {
	t.Helper()
	lz, _ := testLimitZonesClock(t, nil)
	return lz
}

// testLimitZonesClock is testLimitZones with now as the directory's clock
// (nil: the real one), and the file, for other processes.
func testLimitZonesClock(t testing.TB, now func() int64) (*LimitZones, *os.File) {
	t.Helper()
	f, err := CreateLimitZones()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	lz, err := openLimitZones(f, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			return // a goroutine may still wait on the mapping
		}
		if err := lz.Close(); err != nil {
			t.Error(err)
		}
	})
	return lz, f
}

// slotNow is z's slot, nil without.
func (z *shmZone) slotNow() *shmSlot {
	if b := z.bind.Load(); b != nil {
		return b.slot
	}
	return nil
}

// shmShardSizes is how many addresses each shard of z's slot holds,
// checked against the shard's count.
func shmShardSizes(t testing.TB, z *shmZone) []int {
	t.Helper()
	s := z.slotNow()
	if s == nil {
		t.Fatalf("zone %s has no slot", z.name)
	}
	var sizes []int
	for i := range s.shards {
		n := 0
		for _, e := range s.tables[i] {
			if e.a != 0 {
				n++
			}
		}
		if got := int(s.shards[i].n); got != n {
			t.Errorf("zone %s shard %d counts %d entries; holds %d", z.name, i, got, n)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// The layout's sizes, as the package comment gives them.
func TestLimitZonesLayout(t *testing.T) {
	if got, want := unsafe.Sizeof(shmFixed{}), uintptr(64); got != want {
		t.Errorf("fixed header %d bytes; want %d", got, want)
	}
	if got, want := unsafe.Sizeof(shmShard{}), uintptr(128); got != want {
		t.Errorf("shard header %d bytes; want %d", got, want)
	}
	if got, want := unsafe.Offsetof(shmSlot{}.shards), uintptr(128); got != want {
		t.Errorf("slot's shards at %d; want %d", got, want)
	}
	if got, want := shmSlotSize, uint64(4<<20+12<<10); got != want {
		t.Errorf("slot %d bytes; want %d", got, want)
	}
	if got, want := shmHeaderSize, uint64(36<<10); got != want {
		t.Errorf("header %d bytes; want %d", got, want)
	}
	t.Logf("shared memory: %d bytes (%.2f GiB)", shmSize, float64(shmSize)/(1<<30))
}

// OpenLimitZones refuses what CreateLimitZones did not make.
func TestLimitZonesOpen(t *testing.T) {
	valid := shmFixed{magic: shmMagic, version: shmVersion, slots: shmSlots, size: shmSize, slotSize: shmSlotSize}
	for _, tc := range []struct {
		name    string
		header  shmFixed
		size    int64
		wantErr bool
	}{
		{name: "valid", header: valid, size: int64(shmSize)},
		{name: "empty", size: 0, wantErr: true},
		{name: "short", header: valid, size: 64, wantErr: true},
		{name: "longer", header: valid, size: int64(shmSize) + 4096, wantErr: true},
		{name: "zeros", size: int64(shmSize), wantErr: true},
		{name: "other version", header: func() shmFixed { h := valid; h.version++; return h }(), size: int64(shmSize), wantErr: true},
		{name: "other slots", header: func() shmFixed { h := valid; h.slots = 1; return h }(), size: int64(shmSize), wantErr: true},
		{name: "other slot size", header: func() shmFixed { h := valid; h.slotSize = 4096; return h }(), size: int64(shmSize), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := memfdWith(t, unsafe.Slice((*byte)(unsafe.Pointer(&tc.header)), unsafe.Sizeof(tc.header)), tc.size)
			lz, err := OpenLimitZones(f)
			if (err != nil) != tc.wantErr {
				t.Fatalf("OpenLimitZones: %v; want error %v", err, tc.wantErr)
			}
			if lz != nil {
				if err := lz.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// memfdWith is a memfd holding b, size bytes long.
func memfdWith(t testing.TB, b []byte, size int64) *os.File {
	t.Helper()
	fd, err := unix.MemfdCreate("test-limit-zones", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "test-limit-zones")
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return f
}

// FuzzOpenLimitZones: whatever a memfd holds, OpenLimitZones returns an
// error or a mapping of a header that is CreateLimitZones', never panics;
// as is, and stretched to the zones' size.
func FuzzOpenLimitZones(f *testing.F) {
	valid := shmFixed{magic: shmMagic, version: shmVersion, slots: shmSlots, size: shmSize, slotSize: shmSlotSize}
	f.Add(append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&valid)), unsafe.Sizeof(valid))...))
	f.Add([]byte("swydlimz"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, size := range []int64{int64(len(data)), int64(shmSize)} {
			if size < int64(len(data)) {
				continue
			}
			fd, err := unix.MemfdCreate("fuzz-limit-zones", unix.MFD_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			file := os.NewFile(uintptr(fd), "fuzz-limit-zones")
			if _, err := file.Write(data); err != nil {
				t.Fatal(err)
			}
			if err := file.Truncate(size); err != nil {
				t.Fatal(err)
			}
			lz, err := OpenLimitZones(file)
			file.Close()
			if err != nil {
				continue
			}
			h := lz.hdr.shmFixed
			h.clockBase = 0
			if h != valid {
				t.Errorf("opened a header %+v; want %+v", h, valid)
			}
			if err := lz.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// crossLimit is the limits the cross-process tests share: limit-rpm 1
// with multiplier 3 (4 requests pass, nothing drains within the test) and
// limit-connections 3.
var crossLimit = &model.RateLimit{Zone: "ns_cross_", RPM: 1, BurstMultiplier: 3, Connections: 3}

var crossAddr = netip.MustParseAddr("192.0.2.7")

const shmChildEnv = "SWITCHYARD_TEST_LIMIT_ZONES_CHILD"

// TestLimitZonesChild is the other process of the cross-process tests,
// on the zones of fd 3; it runs only when they start it.
func TestLimitZonesChild(t *testing.T) {
	mode := os.Getenv(shmChildEnv)
	if mode == "" {
		t.Skip("the other process of TestLimitZonesCrossProcess and TestLimitZonesLockTakeover")
	}
	lz, err := OpenLimitZones(os.NewFile(3, "limit-zones"))
	if err != nil {
		t.Fatal(err)
	}
	r := &rateLimits{shm: lz}
	limits, cl, err := r.routeLimits(crossLimit, newZoneSet())
	if err != nil {
		t.Fatal(err)
	}
	now := monoNow().Milliseconds()
	switch mode {
	case "count":
		// One request in progress, one refused; three requests of which
		// the third is refused; then the one in progress ends.
		h, ok1 := cl.acquire(crossAddr)
		_, ok2 := cl.acquire(crossAddr)
		fmt.Printf("child: %d %v %v %v %v %v\n", lz.now(), ok1, ok2,
			allowLimits(limits, crossAddr, now), allowLimits(limits, crossAddr, now), allowLimits(limits, crossAddr, now))
		h.release()
	case "shard":
		// Two requests counted, then the shard's lock taken for good.
		allowLimits(limits, crossAddr, now)
		allowLimits(limits, crossAddr, now)
		s := limits[0].shm.slotNow()
		key := crossAddr.As16()
		s.lockShard(s.hash(&key))
		fmt.Println("child: locked")
		time.Sleep(time.Hour)
	case "directory":
		lz.lockDir()
		fmt.Println("child: locked")
		time.Sleep(time.Hour)
	}
}

// startChild runs TestLimitZonesChild in mode on the zones of f and
// returns it with its first line of output.
func startChild(t *testing.T, f *os.File, mode string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLimitZonesChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), shmChildEnv+"="+mode)
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go readChildLine(out, lines)
	select {
	case line := <-lines:
		return cmd, line
	case <-time.After(defaultTestTimeout):
		t.Fatalf("child %s: no line within %v", mode, defaultTestTimeout)
		return nil, ""
	}
}

// readChildLine sends the child's first line starting "child: " (or ""
// at its end), then drains its output.
func readChildLine(r io.Reader, lines chan<- string) {
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "child: "); ok && !sent {
			lines <- line
			sent = true
		}
	}
	if !sent {
		lines <- ""
	}
}

// Two processes on one shared memory are limited as one process would be:
// limit-connections 3 with two requests in progress here lets the other
// process have one and refuses its second; limit-rpm's burst of 4 requests
// is shared (two here, two there, the next refused in both); and the two
// agree on the clock.
func TestLimitZonesCrossProcess(t *testing.T) {
	lz, f := testLimitZonesClock(t, nil)
	r := &rateLimits{shm: lz}
	limits, cl, err := r.routeLimits(crossLimit, newZoneSet())
	if err != nil {
		t.Fatal(err)
	}
	var holds []connHold
	for range 2 {
		h, ok := cl.acquire(crossAddr)
		if !ok {
			t.Fatal("a request in progress refused under the limit")
		}
		holds = append(holds, h)
	}
	now := monoNow().Milliseconds()
	for range 2 {
		if !allowLimits(limits, crossAddr, now) {
			t.Fatal("a request refused within the burst")
		}
	}
	before := lz.now()
	cmd, line := startChild(t, f, "count")
	after := lz.now()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	fields := strings.Fields(line)
	if len(fields) != 6 {
		t.Fatalf("child said %q", line)
	}
	if got, want := fields[1:], []string{"true", "false", "true", "true", "false"}; !cmp.Equal(got, want) {
		t.Errorf("child's acquire, acquire, allow ×3: %v; want %v", got, want)
	}
	childNow, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil || childNow < before-1 || childNow > after+1 {
		t.Errorf("child's shared clock %s; want %d to %d", fields[0], before, after)
	}
	// The child's request ended: one place free here, then none.
	h, ok := cl.acquire(crossAddr)
	if !ok {
		t.Error("the child's ended request still counts")
	}
	if _, ok := cl.acquire(crossAddr); ok {
		t.Error("a fourth request in progress let through under limit 3")
	}
	if allowLimits(limits, crossAddr, monoNow().Milliseconds()) {
		t.Error("a fifth request let through a burst of four shared with the child")
	}
	h.release()
	for i := range holds {
		holds[i].release()
	}
	for i, n := range shmShardSizes(t, cl.shm) {
		if n != 0 {
			t.Errorf("conn shard %d keeps %d addresses", i, n)
		}
	}
}

// A process killed while it holds a lock does not wedge the others: the
// next one to want the lock takes it over within a bounded time, even
// before the killed process is reaped, and the shard it guarded keeps its
// counts.
func TestLimitZonesLockTakeover(t *testing.T) {
	for _, mode := range []string{"shard", "directory"} {
		t.Run(mode, func(t *testing.T) {
			lz, f := testLimitZonesClock(t, nil)
			cmd, line := startChild(t, f, mode)
			if line != "locked" {
				t.Fatalf("child said %q; want locked", line)
			}
			if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			// Not reaped yet: a zombie holds no lock.
			type result struct {
				limits []routeLimit
				err    error
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				limits, _, err := (&rateLimits{shm: lz}).routeLimits(crossLimit, newZoneSet())
				if err == nil && mode == "shard" {
					allowLimits(limits, crossAddr, monoNow().Milliseconds()) // waits for the shard
				}
				done <- result{limits, err}
			}()
			var res result
			select {
			case res = <-done:
			case <-time.After(defaultTestTimeout):
				t.Fatalf("lock not taken over within %v", defaultTestTimeout)
			}
			took := time.Since(start)
			t.Logf("took over in %v", took)
			if bound := 100*shmTakeoverAfter + time.Second; took > bound {
				t.Errorf("took over in %v; want under %v", took, bound)
			}
			if res.err != nil {
				t.Fatal(res.err)
			}
			if mode == "shard" {
				// Two by the child, one above: one more passes, then none.
				now := monoNow().Milliseconds()
				if !allowLimits(res.limits, crossAddr, now) || allowLimits(res.limits, crossAddr, now) {
					t.Error("the shard lost the killed process's counts")
				}
			}
		})
	}
}

// The directory: a zone's name finds its slot in every process; a slot no
// process keeps goes to another zone after shmIdle, zeroed; with every
// slot kept, a new zone has none, its limits refuse every request and the
// error says so, until a slot frees up.
func TestLimitZonesDirectory(t *testing.T) {
	var clock atomic.Int64
	clock.Store(shmClockStart)
	lz, f := testLimitZonesClock(t, clock.Load)
	a := &rateLimits{shm: lz}
	keepA := newZoneSet()
	la, _, err := a.routeLimits(&model.RateLimit{Zone: "ns_a_", RPS: 1, BurstMultiplier: 1}, keepA)
	if err != nil {
		t.Fatal(err)
	}
	a.keepOnly(keepA)
	ip := netip.MustParseAddr("192.0.2.9")
	if !allowLimits(la, ip, 0) {
		t.Fatal("refused in an empty zone")
	}
	// Every other slot taken by another configuration's zones.
	fill := &rateLimits{shm: lz}
	keepFill := newZoneSet()
	for i := range shmSlots - 1 {
		if _, _, err := fill.routeLimits(&model.RateLimit{Zone: fmt.Sprintf("fill%d_", i), RPS: 1}, keepFill); err != nil {
			t.Fatalf("zone %d of %d: %v", i+1, shmSlots, err)
		}
	}
	fill.keepOnly(keepFill)

	// Full: a new zone has no slot and refuses, both kinds.
	b := &rateLimits{shm: lz}
	lb, _, err := b.routeLimits(&model.RateLimit{Zone: "ns_b_", RPS: 1}, newZoneSet())
	if !errors.Is(err, ErrLimitZonesFull) {
		t.Fatalf("a zone beyond the slots: %v; want %v", err, ErrLimitZonesFull)
	}
	if allowLimits(lb, ip, 0) {
		t.Error("a limit_req zone without a slot let a request through")
	}
	c := &rateLimits{shm: lz}
	keepC := newZoneSet()
	_, cc, err := c.routeLimits(&model.RateLimit{Zone: "ns_c_", Connections: 1}, keepC)
	if !errors.Is(err, ErrLimitZonesFull) {
		t.Fatalf("a zone beyond the slots: %v; want %v", err, ErrLimitZonesFull)
	}
	if _, ok := cc.acquire(ip); ok {
		t.Error("a limit_conn zone without a slot let a request through")
	}
	// ns_c_conn used, then no more: this process forgets it.
	c.keepOnly(keepC)
	c.keepOnly(newZoneSet())

	// ns_a_ is no longer used but was kept just now: not free yet.
	a.keepOnly(newZoneSet())
	clock.Add(shmIdle.Milliseconds())
	if err := lz.refresh(); !errors.Is(err, ErrLimitZonesFull) {
		t.Fatalf("refresh with every slot kept: %v; want %v", err, ErrLimitZonesFull)
	}
	// Past shmIdle: ns_a_rps's slot goes to ns_b_rps (the refresher
	// retries zones without a slot), zeroed; the zones still used keep
	// theirs (the refresh marked them kept).
	clock.Add(1)
	wantSlot := la[0].shm.idx
	if err := lz.refresh(); err != nil {
		t.Fatalf("refresh with a slot free: %v", err)
	}
	if got := lb[0].shm.slotNow(); got == nil || lb[0].shm.idx != wantSlot {
		t.Fatalf("ns_b_rps took slot %d (%p); want ns_a_rps's, %d", lb[0].shm.idx, got, wantSlot)
	}
	for i, n := range shmShardSizes(t, lb[0].shm) {
		if n != 0 {
			t.Errorf("reused slot's shard %d holds %d addresses; want 0", i, n)
		}
	}
	if !allowLimits(lb, ip, 0) {
		t.Error("the zone that found a slot still refuses")
	}
	if _, ok := cc.acquire(ip); ok {
		t.Error("ns_c_conn, forgotten without a slot, let a request through")
	}
	// Another mapping (as another process's) finds ns_b_rps by name.
	lz2, err := openLimitZones(f, clock.Load)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lz2.Close(); err != nil {
			t.Error(err)
		}
	})
	other := &rateLimits{shm: lz2}
	lo, _, err := other.routeLimits(&model.RateLimit{Zone: "ns_b_", RPS: 1}, newZoneSet())
	if err != nil {
		t.Fatal(err)
	}
	if lo[0].shm.idx != wantSlot {
		t.Errorf("another mapping found ns_b_rps at slot %d; want %d", lo[0].shm.idx, wantSlot)
	}
	if allowLimits(lo, ip, 0) { // burst 0: the first request filled it
		t.Error("the other mapping does not see the first's count")
	}
}

// A configuration whose zone finds no slot answers its requests with the
// limit's status and says why through ErrorLog.
func TestLimitZonesFullProxied(t *testing.T) {
	lz := testLimitZones(t)
	for i := range shmSlots {
		if _, err := lz.zone(fmt.Sprintf("fill%d_rps", i), shmReq); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var logged []string
	rps := loc("/rps", model.PathTypePrefix, "dead")
	rps.RateLimit = &model.RateLimit{Zone: "ns_full_", RPS: 100, BurstMultiplier: 5}
	conns := loc("/conns", model.PathTypePrefix, "dead")
	conns.RateLimit = &model.RateLimit{Zone: "ns_full_", Connections: 100}
	cfg := &model.Configuration{
		Global:   model.Global{LimitReqStatus: 429, LimitConnStatus: 430},
		Backends: []*model.Backend{{Name: "dead", Endpoints: endpoints(deadAddr(t))}},
		Servers:  []model.Server{{Hostname: "127.0.0.1", Locations: []model.Location{rps, conns}}},
	}
	p, _ := newProxy(t, cfg, Config{LimitZones: lz, ErrorLog: func(msg string) {
		mu.Lock()
		logged = append(logged, msg)
		mu.Unlock()
	}})
	base := "http://" + serve(t, p.Serve)
	c := clientFrom("127.0.0.63")
	if got := status(c, base+"/rps"); got != 429 {
		t.Errorf("limit-rps without a slot: got %d; want 429", got)
	}
	if got := status(c, base+"/conns"); got != 430 {
		t.Errorf("limit-connections without a slot: got %d; want 430", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 1 || strings.Contains(logged[0], "\n") || !strings.Contains(logged[0], ErrLimitZonesFull.Error()) ||
		!strings.Contains(logged[0], "ns_full__rps") || !strings.Contains(logged[0], "ns_full__conn") {
		t.Errorf("ErrorLog got %q; want one line naming both zones", logged)
	}
}
