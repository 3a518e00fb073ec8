package proxy

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Limit zones in shared memory (Config.LimitZones). With several worker
// processes serving one port, as nginx's workers do, a client's requests
// must count in one limit_req or limit_conn zone whichever process serves
// them; nginx keeps its zones in shared memory for that reason. Here the
// parent process makes one memfd (CreateLimitZones) and every worker maps
// it (OpenLimitZones). The zones hold exactly the state of the in-process
// ones (ratelimit.go, connlimit.go) with the same arithmetic, refusal rules
// and bounds, laid out as fixed-size tables instead of Go maps:
//
//	header   magic, version, sizes, the clock's base; the directory's
//	         lock; the directory: per slot the SHA-256 of its zone's name,
//	         its kind, its generation and when a process last kept it
//	slot i   its generation and hash seeds; 64 shard headers (lock, count),
//	         128 bytes apart; 64 tables of 2048 entries (address, two
//	         int64), linear probing, at most 1024 used (the bounds of
//	         rlShardMax and lcShardMax)
//
// Size: 512 slots of 4 MiB + 12 KiB, about 2 GiB of address space. memfd
// pages are allocated on first touch, so the resident cost is the header
// (36 KiB) plus, per zone in use, one page of shard headers and one 4 KiB
// page per table page an address lands on: about 4 KiB per address up to
// 1024 addresses, 4 MiB for a full zone (the in-process zones' 64 × 1024
// bound; nginx's default 5 MB zones hold about as many).
//
// Zone names to slots, without the parent's help: a process that needs a
// zone looks its name up in the directory under the directory's lock and
// takes a free slot if the name is not there. Every process marks the
// slots of its configuration kept when it claims them and again every
// shmRefreshEvery (LimitZones' refresher goroutine); a slot no process
// has marked kept for shmIdle is free for another zone (the stalest
// first, after the never-used ones), and is zeroed when taken. A process
// that stops using a zone just stops marking it. When no slot is free the
// zone has none: its limit refuses every request, as a full zone does
// (fail closed), the error is returned to the configuration's builder
// (table.limitErr, logged through Config.ErrorLog), and the refresher and
// the next configuration try again.
//
// Locks are a uint32 in the mapping holding the holder's pid, taken with a
// compare-and-swap (sync.Mutex cannot live in shared memory). A waiter
// spins, yielding, then sleeps; a waiter that has waited shmTakeoverAfter
// asks whether the holder still exists (kill(pid, 0), and /proc for a
// zombie whose parent has not reaped it) and takes over the lock of a
// holder that is gone, then rebuilds the shard it guards (a holder killed
// mid-update may have left a duplicate). A killed worker therefore costs
// the others at most about shmTakeoverAfter once. Left as it is: a pid
// reused by a new process before a waiter checks looks alive until that
// process ends; and the requests in progress of a killed worker stay
// counted in its limit_conn zones (as they would in nginx's shared zone
// when a worker dies).

// ErrLimitZonesFull reports that every slot of the shared limit zones is
// in use: the zone's requests are refused until a slot frees up.
var ErrLimitZonesFull = errors.New("proxy: no free shared limit zone slot")

const (
	shmMagic   = 0x7a6d696c64797773 // "swydlimz", little-endian
	shmVersion = 1
	// shmSlots is how many zones the shared memory holds: each Ingress
	// with limits takes one per limit (_rps, _rpm, _conn).
	shmSlots = 512
	// shmShards and shmShardMax are the in-process zones' shards and
	// bound; shmTableLen keeps each shard's table at most half full.
	shmShards    = rlShards
	shmShardMax  = rlShardMax
	shmTableLen  = 2 * shmShardMax
	shmTableMask = shmTableLen - 1
	// shmClockStart is the shared clock at the memory's creation, in ms,
	// so that every time stored is positive (an entry's 0 means empty).
	shmClockStart = 1 << 40
	// A process marks the slots it uses kept every shmRefreshEvery; a
	// slot not marked for shmIdle may go to another zone.
	shmRefreshEvery = 30 * time.Second
	shmIdle         = 5 * time.Minute
	// A lock waiter checks that the holder still exists once it has
	// waited about shmTakeoverAfter, and as often again after.
	shmTakeoverAfter = 10 * time.Millisecond
)

// The zones' kinds, in the directory.
const (
	shmFree = iota
	shmReq  // limit_req
	shmConn // limit_conn
)

// Both in-process zone kinds have the bounds the shared ones take.
var _ = [1]struct{}{}[lcShards-shmShards]
var _ = [1]struct{}{}[lcShardMax-shmShardMax]

// shmFixed is the start of the shared memory: what OpenLimitZones checks
// before it maps anything.
type shmFixed struct {
	magic     uint64
	version   uint32
	slots     uint32
	size      uint64 // the whole memory, bytes
	slotSize  uint64
	clockBase int64 // CLOCK_MONOTONIC at creation, ns
	_         [24]byte
}

// shmHeader is the shared memory's first pages.
type shmHeader struct {
	shmFixed
	dirLock shmLock
	dir     [shmSlots]shmDirEntry
}

// shmLock is a lock in shared memory: the holder's pid, 0 when free, on a
// cache line of its own.
type shmLock struct {
	holder atomic.Uint32
	_      [60]byte
}

// shmDirEntry names one slot's zone; guarded by the directory's lock,
// except kept, which the refresher also reads.
type shmDirEntry struct {
	key  [32]byte // SHA-256 of the zone's name
	kind uint32   // shmFree, shmReq, shmConn
	gen  uint32   // bumped each time the slot goes to a zone
	kept atomic.Int64
	_    [16]byte
}

// shmSlot is one zone.
type shmSlot struct {
	// gen is the directory entry's gen: a limit_conn release skips a
	// slot that has gone to another zone since its count (shmBind).
	gen  atomic.Uint32
	_    uint32
	seed [2]uint64 // the address hash's, set when the slot is taken
	_    [104]byte
	// shards are the tables' locks and counts, 128 bytes apart so that
	// clients rarely share a cache line (as rlShard and lcShard).
	shards [shmShards]shmShard
	tables [shmShards]shmTable
}

type shmShard struct {
	lock shmLock
	n    uint32 // entries in the table; guarded by lock
	_    [60]byte
}

type shmTable [shmTableLen]shmEntry

// shmEntry is one address of a zone: a is 0 when the entry is empty,
// else limit_req's last (ms on the shared clock) or limit_conn's count;
// b is limit_req's excess.
type shmEntry struct {
	key  [16]byte // the address, unmapped, as 16 bytes
	a, b int64
}

var (
	shmHeaderSize = pageRound(unsafe.Sizeof(shmHeader{}))
	shmSlotSize   = pageRound(unsafe.Sizeof(shmSlot{}))
	shmSize       = shmHeaderSize + shmSlots*shmSlotSize
)

func pageRound(n uintptr) uint64 { return (uint64(n) + 4095) &^ 4095 }

// shmPid is this process's, as lock holders record it.
var shmPid = uint32(os.Getpid())

// CreateLimitZones makes the shared memory of the limit zones (a memfd of
// about 2 GiB, allocated as used: see the comment above) with no zone in
// it. The parent process calls it once and hands the file to every worker,
// which maps it with OpenLimitZones. Its size is sealed.
func CreateLimitZones() (*os.File, error) {
	fd, err := unix.MemfdCreate("switchyard-limit-zones", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("proxy: create limit zones: %w", err)
	}
	f := os.NewFile(uintptr(fd), "switchyard-limit-zones")
	var ts unix.Timespec
	if err = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err == nil {
		err = f.Truncate(int64(shmSize))
	}
	if err == nil {
		h := shmFixed{magic: shmMagic, version: shmVersion, slots: shmSlots, size: shmSize, slotSize: shmSlotSize, clockBase: ts.Nano()}
		_, err = f.WriteAt(unsafe.Slice((*byte)(unsafe.Pointer(&h)), unsafe.Sizeof(h)), 0)
	}
	if err == nil {
		_, err = unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("proxy: create limit zones: %w", err)
	}
	return f, nil
}

// LimitZones is one process's mapping of the shared limit zones. Close it
// only once no Proxy uses it any more.
type LimitZones struct {
	_ shmNoCopy

	// immutable
	mem []byte
	hdr *shmHeader
	// shift turns monoNow's ms into the shared clock's.
	shift int64
	// now is the shared clock, ms (tests set their own).
	now  func() int64
	stop chan struct{}
	done chan struct{}

	mu sync.Mutex
	// zones are this process's handles by zone name, those of the
	// configurations in force and those being built; guarded by mu.
	zones  map[string]*shmZone
	closed bool // guarded by mu
}

// shmZone is a process's handle on a zone in shared memory.
type shmZone struct {
	// immutable
	lz   *LimitZones
	name string
	key  [32]byte
	kind uint32

	// bind is the zone's slot, nil while it has none (every request is
	// refused).
	bind atomic.Pointer[shmBind]

	idx   int // the slot's index; guarded by lz.mu
	users int // the rateLimits whose configuration uses it; guarded by lz.mu
}

// shmBind is a zone's slot in one generation: what holds of limit_conn
// point at (tag stands for it in a connHold).
type shmBind struct {
	// immutable
	tag  lcShard // tag.shm is the bind itself
	slot *shmSlot
	gen  uint32
}

// OpenLimitZones maps the shared limit zones in f, made by
// CreateLimitZones (in this process or its parent), after checking its
// header; f may be closed afterwards.
func OpenLimitZones(f *os.File) (*LimitZones, error) { return openLimitZones(f, nil) }

// openLimitZones is OpenLimitZones with now as the shared clock (ms) when
// not nil.
func openLimitZones(f *os.File, now func() int64) (*LimitZones, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("proxy: open limit zones: %w", err)
	}
	if uint64(st.Size()) != shmSize {
		return nil, fmt.Errorf("proxy: open limit zones: %d bytes; want %d", st.Size(), shmSize)
	}
	var h shmFixed
	if _, err := f.ReadAt(unsafe.Slice((*byte)(unsafe.Pointer(&h)), unsafe.Sizeof(h)), 0); err != nil {
		return nil, fmt.Errorf("proxy: open limit zones: read header: %w", err)
	}
	switch {
	case h.magic != shmMagic:
		return nil, fmt.Errorf("proxy: open limit zones: bad magic %#x", h.magic)
	case h.version != shmVersion:
		return nil, fmt.Errorf("proxy: open limit zones: version %d; want %d", h.version, shmVersion)
	case h.slots != shmSlots || h.slotSize != shmSlotSize || h.size != shmSize:
		return nil, fmt.Errorf("proxy: open limit zones: layout %d slots of %d bytes, %d bytes; want %d of %d, %d",
			h.slots, h.slotSize, h.size, shmSlots, shmSlotSize, shmSize)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(shmSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("proxy: open limit zones: map: %w", err)
	}
	lz := &LimitZones{mem: mem, hdr: (*shmHeader)(unsafe.Pointer(&mem[0])), zones: map[string]*shmZone{},
		stop: make(chan struct{}), done: make(chan struct{})}
	lz.shift = clockShift(h.clockBase)
	lz.now = now
	if now == nil {
		lz.now = func() int64 { return monoNow().Milliseconds() + lz.shift }
	}
	go lz.refresher()
	return lz, nil
}

// clockShift is what turns monoNow's ms into the shared clock's: ms since
// base (CLOCK_MONOTONIC, ns, as every process on the host reads it) plus
// shmClockStart. Go's monotonic clock is CLOCK_MONOTONIC less a
// per-process epoch; processes disagree by under a millisecond, as
// nginx's workers each read their own cached time.
func clockShift(base int64) int64 {
	var ts unix.Timespec
	m1 := monoNow()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("BUG: CLOCK_MONOTONIC: " + err.Error())
	}
	m2 := monoNow()
	off := ts.Nano() - int64(m1+m2)/2 // CLOCK_MONOTONIC less monoNow, ns
	return floorDiv(off-base, 1e6) + shmClockStart
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Close stops the refresher and unmaps the zones; the slots of this
// process's zones free up shmIdle later unless another process keeps
// them.
func (lz *LimitZones) Close() error {
	lz.mu.Lock()
	if lz.closed {
		lz.mu.Unlock()
		return nil
	}
	lz.closed = true
	lz.mu.Unlock()
	close(lz.stop)
	<-lz.done
	if err := unix.Munmap(lz.mem); err != nil {
		return fmt.Errorf("proxy: close limit zones: %w", err)
	}
	return nil
}

// refresher marks this process's zones kept every shmRefreshEvery, and
// gives a slot to those that had none.
func (lz *LimitZones) refresher() {
	defer close(lz.done)
	t := time.NewTicker(shmRefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-lz.stop:
			return
		case <-t.C:
			_ = lz.refresh() // the configuration's build reported it
		}
	}
}

// refresh marks the slots of this process's zones kept, and gives a slot
// to each zone without one, or whose slot went to another zone (after
// this process stopped for longer than shmIdle).
func (lz *LimitZones) refresh() error {
	lz.mu.Lock()
	defer lz.mu.Unlock()
	now := lz.now()
	lz.lockDir()
	defer lz.hdr.dirLock.unlock()
	var errs []error
	for _, z := range lz.zones {
		if b := z.bind.Load(); b != nil {
			e := &lz.hdr.dir[z.idx]
			if e.key == z.key && e.kind == z.kind && e.gen == b.gen {
				e.kept.Store(now)
				continue
			}
		}
		if err := lz.bind(z, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// zone returns this process's handle on the zone name of kind, with a
// slot unless none is free (its limit then refuses every request and the
// error says so). Called when a configuration is built.
func (lz *LimitZones) zone(name string, kind uint32) (*shmZone, error) {
	lz.mu.Lock()
	defer lz.mu.Unlock()
	z := lz.zones[name]
	if z == nil {
		z = &shmZone{lz: lz, name: name, key: sha256.Sum256([]byte(name)), kind: kind}
		lz.zones[name] = z
	}
	if lz.closed || z.bind.Load() != nil {
		return z, nil
	}
	lz.lockDir()
	defer lz.hdr.dirLock.unlock()
	return z, lz.bind(z, lz.now())
}

// keep records that a rateLimits' configuration now uses the zones of
// next instead of those of prev; a zone no configuration of this process
// uses is no longer marked kept.
func (lz *LimitZones) keep(prev, next map[string]*shmZone) {
	lz.mu.Lock()
	defer lz.mu.Unlock()
	for _, z := range next {
		z.users++
	}
	for _, z := range prev {
		if z.users--; z.users <= 0 && lz.zones[z.name] == z {
			delete(lz.zones, z.name)
		}
	}
}

// lockDir takes the directory's lock.
func (lz *LimitZones) lockDir() { lz.hdr.dirLock.lock() }

// bind gives z its zone's slot: the one whose entry has its name, else a
// never-used one, else the one not kept for the longest, if for over
// shmIdle (zeroed first). Called with lz.mu and the directory's lock
// held.
func (lz *LimitZones) bind(z *shmZone, now int64) error {
	d := &lz.hdr.dir
	free, stalest := -1, -1
	for i := range d {
		e := &d[i]
		switch {
		case e.kind == z.kind && e.key == z.key:
			e.kept.Store(max(e.kept.Load(), now))
			lz.publish(z, i)
			return nil
		case e.kind == shmFree:
			if free < 0 {
				free = i
			}
		case now-e.kept.Load() > shmIdle.Milliseconds():
			if stalest < 0 || e.kept.Load() < d[stalest].kept.Load() {
				stalest = i
			}
		}
	}
	i := free
	if i < 0 {
		i = stalest
	}
	if i < 0 {
		z.bind.Store(nil)
		return fmt.Errorf("limit zone %s: %w", z.name, ErrLimitZonesFull)
	}
	e := &d[i]
	// The entry names no zone until the slot is ready, so a holder
	// killed half way leaves a free or stale slot.
	e.kind = shmFree
	off := shmHeaderSize + uint64(i)*shmSlotSize
	mem := lz.mem[off : off+shmSlotSize]
	if err := unix.Madvise(mem, unix.MADV_REMOVE); err != nil {
		clear(mem)
	}
	s := (*shmSlot)(unsafe.Pointer(&mem[0]))
	var seed [16]byte
	_, _ = rand.Read(seed[:]) // never fails (crypto/rand)
	s.seed[0] = leUint64(seed[:8])
	s.seed[1] = leUint64(seed[8:])
	gen := e.gen + 1
	s.gen.Store(gen)
	e.key, e.gen = z.key, gen
	e.kept.Store(now)
	e.kind = z.kind
	lz.publish(z, i)
	return nil
}

// publish points z at slot i.
func (lz *LimitZones) publish(z *shmZone, i int) {
	s := lz.slot(i)
	z.idx = i
	if b := z.bind.Load(); b != nil && b.slot == s && b.gen == s.gen.Load() {
		return
	}
	b := &shmBind{slot: s, gen: s.gen.Load()}
	b.tag.shm = b
	z.bind.Store(b)
}

func (lz *LimitZones) slot(i int) *shmSlot {
	return (*shmSlot)(unsafe.Pointer(&lz.mem[shmHeaderSize+uint64(i)*shmSlotSize]))
}

func leUint64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// shmNoCopy makes go vet's copylocks check refuse copies of a LimitZones.
type shmNoCopy struct{}

func (*shmNoCopy) Lock()   {}
func (*shmNoCopy) Unlock() {}
