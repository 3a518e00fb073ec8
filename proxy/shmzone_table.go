package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"
)

// The shared zones' per-request work (shmzone.go has the layout): limit_req
// and limit_conn as ratelimit.go and connlimit.go run them, on tables in
// shared memory. No allocation, no system call, no logging, except while
// waiting for a lock some other process holds.

// allowShared is allowLimits on zones in shared memory: the same checks,
// the same counts, on the shared clock. A zone without a slot refuses.
func allowShared(limits []routeLimit, ip netip.Addr, now int64) bool {
	var slots [2]*shmSlot
	n := min(len(limits), len(slots))
	for i := range n {
		b := limits[i].shm.bind.Load()
		if b == nil {
			return false // no slot free for the zone: fail closed
		}
		slots[i] = b.slot
	}
	now = max(now+limits[0].shm.lz.shift, 1) // entries' 0 is empty
	key := ip.Unmap().As16()
	var (
		hashes [2]uint64
		shards [2]*shmShard
		tables [2]*shmTable
		at     [2]int
		empty  [2]int
		excess [2]int64
	)
	// As allowLimits: lock every shard involved (zones differ), check,
	// then count, in the same order for every request of every process.
	ok := true
	for i := range n {
		hashes[i] = slots[i].hash(&key)
		shards[i], tables[i] = slots[i].lockShard(hashes[i])
		at[i], empty[i] = tables[i].find(&key, shmHome(hashes[i]))
		var st rlState
		if at[i] >= 0 {
			e := &tables[i][at[i]]
			st = rlState{excess: e.b, last: e.a}
		}
		excess[i] = limits[i].excessAt(st, at[i] >= 0, now)
		ok = ok && excess[i] <= limits[i].burst
	}
	for i := range n {
		sh, t := shards[i], tables[i]
		if ok {
			p := at[i]
			if p < 0 {
				if sh.n >= shmShardMax {
					slots[i].evict(sh, t, &limits[i], now)
					_, empty[i] = t.find(&key, shmHome(hashes[i])) // entries moved
				}
				if p = empty[i]; p >= 0 {
					t[p].key = key
					sh.n++
				}
			}
			if p >= 0 {
				t[p].b, t[p].a = excess[i], now // a last: it marks the entry used
			}
		}
		sh.lock.unlock()
	}
	return ok
}

// acquireShared is acquire on a zone in shared memory.
func (l *connLimit) acquireShared(ip netip.Addr) (connHold, bool) {
	b := l.shm.bind.Load()
	if b == nil {
		return connHold{}, false // no slot free for the zone: fail closed
	}
	s := b.slot
	ip = ip.Unmap()
	key := ip.As16()
	h := s.hash(&key)
	sh, t := s.lockShard(h)
	at, empty := t.find(&key, shmHome(h))
	var n int64
	if at >= 0 {
		n = t[at].a
	}
	if n >= int64(l.max) || at < 0 && (sh.n >= shmShardMax || empty < 0) {
		sh.lock.unlock()
		return connHold{}, false
	}
	if at >= 0 {
		t[at].a = n + 1
	} else {
		e := &t[empty]
		e.key, e.b, e.a = key, 0, 1
		sh.n++
	}
	sh.lock.unlock()
	return connHold{sh: &b.tag, ip: ip}, true
}

// release is connHold.release on a zone in shared memory, for ip. A slot
// that has gone to another zone since (its generation moved on) is left
// alone.
func (b *shmBind) release(ip netip.Addr) {
	s := b.slot
	if s.gen.Load() != b.gen {
		return
	}
	key := ip.As16()
	hh := s.hash(&key)
	sh, t := s.lockShard(hh)
	if at, _ := t.find(&key, shmHome(hh)); at >= 0 {
		if e := &t[at]; e.a > 1 {
			e.a--
		} else {
			s.remove(t, at)
			if sh.n > 0 {
				sh.n--
			}
		}
	}
	sh.lock.unlock()
}

// hash is key's hash in s: seeded per slot, so that the addresses that
// share a shard or a probe sequence cannot be chosen by clients.
func (s *shmSlot) hash(key *[16]byte) uint64 {
	var b [32]byte
	binary.LittleEndian.PutUint64(b[0:], s.seed[0])
	binary.LittleEndian.PutUint64(b[8:], s.seed[1])
	copy(b[16:], key[:])
	return xxhash.Sum64(b[:])
}

// shmHome is where a hash's probe sequence starts in its shard's table
// (its shard is h % shmShards).
func shmHome(h uint64) uint32 { return uint32(h/shmShards) & shmTableMask }

// lockShard locks the shard of hash h and returns it with its table.
func (s *shmSlot) lockShard(h uint64) (*shmShard, *shmTable) {
	i := h % shmShards
	sh, t := &s.shards[i], &s.tables[i]
	if sh.lock.lock() {
		s.repair(sh, t)
	}
	return sh, t
}

// find looks key up from home: its position, or -1 and the first empty
// position of its probe sequence (-1 when there is none, which only a
// damaged table has).
func (t *shmTable) find(key *[16]byte, home uint32) (at, empty int) {
	for i := range uint32(shmTableLen) {
		p := (home + i) & shmTableMask
		e := &t[p]
		if e.a == 0 {
			return -1, int(p)
		}
		if e.key == *key {
			return int(p), -1
		}
	}
	return -1, -1
}

// remove empties position p, moving back the entries after it whose probe
// sequences pass there (linear probing's deletion, no tombstones).
func (s *shmSlot) remove(t *shmTable, p int) {
	i := uint32(p)
	for j, n := (i+1)&shmTableMask, 0; n < shmTableLen; j, n = (j+1)&shmTableMask, n+1 {
		e := &t[j]
		if e.a == 0 {
			break
		}
		// e stays when its home lies after i on its way to j.
		if k := shmHome(s.hash(&e.key)); (j-k)&shmTableMask < (j-i)&shmTableMask {
			continue
		}
		t[i] = *e
		i = j
	}
	t[i] = shmEntry{}
}

// evict makes room in a full shard as rlShard.evict does: addresses whose
// excess has drained under l's rate go first, else the one let through
// longest ago.
func (s *shmSlot) evict(sh *shmShard, t *shmTable, l *routeLimit, now int64) {
	freed := false
	for p, n := 0, 0; p < shmTableLen && n < 2*shmTableLen; n++ {
		if e := &t[p]; e.a != 0 && e.b-l.rate*(now-e.a)/1000 <= 0 {
			s.remove(t, p)
			sh.n = max(sh.n, 1) - 1
			freed = true
			continue // p again: remove may have moved an entry there
		}
		p++
	}
	if freed {
		return
	}
	oldest := -1
	for p := range t {
		if t[p].a != 0 && (oldest < 0 || t[p].a < t[oldest].a) {
			oldest = p
		}
	}
	if oldest >= 0 {
		s.remove(t, oldest)
		sh.n = max(sh.n, 1) - 1
	}
}

// repair rebuilds a shard whose lock was taken over from a process killed
// while it held it: its entries again each at one place, at most
// shmShardMax, and its count theirs.
func (s *shmSlot) repair(sh *shmShard, t *shmTable) {
	kept := make([]shmEntry, 0, shmShardMax)
	for p := range t {
		if t[p].a != 0 && len(kept) < shmShardMax {
			kept = append(kept, t[p])
		}
	}
	clear(t[:])
	sh.n = 0
	for _, e := range kept {
		at, empty := t.find(&e.key, shmHome(s.hash(&e.key)))
		if at >= 0 || empty < 0 {
			continue // the copy a shift left behind
		}
		t[empty] = e
		sh.n++
	}
}

// lock takes l, as holder shmPid; it reports whether it took the lock over
// from a holder that no longer exists (what l guards may be half updated).
func (l *shmLock) lock() (tookOver bool) {
	if l.holder.CompareAndSwap(0, shmPid) {
		return false
	}
	return l.lockSlow()
}

func (l *shmLock) lockSlow() bool {
	var start, check time.Duration
	for i := 0; ; i++ {
		h := l.holder.Load()
		if h == 0 {
			if l.holder.CompareAndSwap(0, shmPid) {
				return false
			}
			continue
		}
		if i < 100 {
			// Another goroutine of this process may hold it
			// (GOMAXPROCS=1 in a worker): let it run.
			runtime.Gosched()
			continue
		}
		now := monoNow()
		if start == 0 {
			start, check = now, now+shmTakeoverAfter
		}
		if now >= check {
			check = now + shmTakeoverAfter
			if h != shmPid && shmGone(h) && l.holder.CompareAndSwap(h, shmPid) {
				return true
			}
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func (l *shmLock) unlock() { l.holder.CompareAndSwap(shmPid, 0) }

// shmGone reports whether process pid no longer exists, or is a zombie
// (which holds no lock: it only waits for its parent to reap it).
func shmGone(pid uint32) bool {
	if pid > math.MaxInt32 {
		return true
	}
	if err := unix.Kill(int(pid), 0); errors.Is(err, unix.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	// "pid (comm) state ...", comm may hold ')'.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}
