package tcpproxy

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/tcpproxy/proxyproto"
)

// The event loops (Config.EventLoops) serve TCP service ports and SNI
// listeners as nginx's workers do: each loop is one goroutine locked to its
// thread, waiting in epoll_wait on its own epoll instance; sockets are
// registered once, edge-triggered; every system call of the loop, the wait
// included, is a raw one, which the runtime does not see, so a wake-up is
// the kernel's alone (no sysmon hand-off of the P, no second thread woken to
// look for work). A loop that had no event for parkAfter waits the
// runtime's way until the next one. Issue 23 measured what that is worth: on two unpinned
// CPUs a Go forwarder built so added 145–185 µs of connection setup where
// nginx's stream module added 217–280 and Switchyard's goroutine per
// connection 346–534 (docs/benchmarks/tcpproxy.md).
//
// A loop keeps its P while it blocks, so each running loop adds one to
// GOMAXPROCS (and takes it back when it ends): the rest of the process
// keeps the Ps it had. The runtime's preemption signal interrupts the wait
// (EINTR), and the loop then yields, so the garbage collector's
// stop-the-world is not held up by it. sysmon sends that signal about every
// 10 ms to a P held that long, which is why an idle loop waits the
// runtime's way (parkAfter).
//
// After an event a loop with a connection open keeps looking for the next
// one for a while before it sleeps (epoll_wait with a zero timeout,
// sched_yield between looks), within a budget of busyPollWindow/10 per busyPollWindow: on a virtual
// machine whose idle CPUs halt, a sleeping loop is woken by an interrupt
// to a halted CPU once per chunk of a transfer or leg of a handshake, and
// issue 23 measured that wake-up as what kept the pinned loop behind nginx
// stream and HAProxy. How long it looks adapts as the kernel's guest halt
// polling does (nextPollWindow): from minPollWindow it doubles, up to
// Config.BusyPoll, each time an event came after the loop fell asleep but
// within BusyPoll of the one before, and loses a quarter each time one came
// later than that, so a loop whose events come in bursts looks long enough
// to catch a backend's answer and one whose events are far apart hardly
// looks at all.
//
// A connection the loop cannot finish alone (a ClientHello spread over
// several records or an unusual server name, which crypto/tls must parse; a
// peer given by host name, which must be resolved) is handed to the
// goroutine path with the bytes read so far.

const (
	// loopBufSize is the size of the buffer a loop reads into. 256 KiB
	// cost 5–12 % less CPU per GiB than 128 KiB in the same runs, and
	// 16–64 KiB no less than 128 (docs/benchmarks/tcpproxy.md).
	loopBufSize = 256 << 10
	// A direction whose peer will not take all it read keeps the rest:
	// in a headBufSize buffer when it fits (as nginx's 16 KiB per
	// direction), else in the loopBufSize one. maxHeldBufs bounds those a
	// loop's connections hold (64 MiB); past it reads are smallRead, so
	// what is left over always fits a head buffer.
	maxHeldBufs = 256
	smallRead   = 16 << 10
	// headBufSize holds what a connection sent before its upstream is
	// chosen: a PROXY header and a ClientHello.
	headBufSize = maxHello + 512
	// relayBudget bounds what one direction moves per wake-up before the
	// loop turns to other connections.
	relayBudget = 1 << 20
	// notSentLowatBytes is each relayed socket's TCP_NOTSENT_LOWAT
	// (setSockOpts).
	notSentLowatBytes = 32 << 10
	// epollBatch is how many events one epoll_wait returns at most.
	epollBatch = 128
	// parkAfter is how long a loop goes without an event before it waits
	// the runtime's way.
	parkAfter = time.Second
	// busyPollWindow and defaultPollBudget bound Config.BusyPoll: a loop
	// polls for at most the budget in each window, a tenth of a core
	// however the events fall (a transfer whose chunks come just under
	// BusyPoll apart would otherwise keep it polling all the time).
	busyPollWindow    = 100 * time.Millisecond
	defaultPollBudget = busyPollWindow / 10
	// minPollWindow is where a loop's polling window starts and the least
	// it shrinks to (nextPollWindow); Config.BusyPoll below it is used as
	// it is.
	minPollWindow = 20 * time.Microsecond
	// spliceAfter: a direction that has moved this much moves the rest
	// with splice(2), through a pipe (end.pipe), so the loop copies none
	// of its bytes; one that moves less (a handshake, small exchanges)
	// keeps read and write, which take one system call a side where
	// splice takes one more.
	spliceAfter = 64 << 10
	// pipeSize is what a loop asks each pipe to hold (F_SETPIPE_SZ); where
	// that is refused (a user past fs.pipe-user-pages-soft) the pipe
	// keeps the kernel's default.
	pipeSize = 256 << 10
	// maxFreePipes bounds the empty pipes a loop keeps for the next bulk
	// direction.
	maxFreePipes = 64
	// bulkBurst: a loop that relayed this much lately is moving bulk, and
	// looks only minPollWindow for the next event (see loop.burst).
	bulkBurst = 64 << 10
)

// nextPollWindow is a loop's polling window after an event that found it
// asleep, gap after the event before it: one a window up to most would
// have caught doubles the window (at most most); one it would not have
// takes a quarter off (at least least); anything else leaves it. The
// kernel's guest halt polling halves instead; but the first event of a
// burst (a connection, a request) always comes after a long gap, and
// halving there lost the next, the backend's answer, in half the bursts.
func nextPollWindow(win, gap, least, most time.Duration) time.Duration {
	switch {
	case gap > most:
		return max(win-win/4, least)
	case gap > win:
		return min(2*win, most)
	}
	return win
}

// connection states.
const (
	stHeader     uint8 = iota // awaiting the client's PROXY header
	stHello                   // awaiting the ClientHello (SNI listeners)
	stConnecting              // the upstream's connect is under way
	stRelay                   // both sockets open, bytes flowing
)

// loopListener is one listening socket, registered with every loop.
type loopListener struct {
	g    *loopGroup
	fd   int
	sni  bool
	port int // the TCP service port; 0 for SNI listeners
	// refs counts the loops that hold fd; the last to let go closes it
	// and closes done.
	refs atomic.Int32
	done chan struct{}
}

// loopGroup is a Proxy's event loops. They start with a listener and each
// ends once it has no listener and no connection left.
type loopGroup struct {
	p *Proxy
	n int
	// fallback is the HTTPS fallback's socket address.
	fallback rawAddr

	mu    sync.Mutex // guards loops
	loops []*loop    // those running
}

func newLoopGroup(p *Proxy, n int) (*loopGroup, error) {
	g := &loopGroup{p: p, n: n}
	if p.cfg.HTTPSFallback != "" {
		ap, err := netip.ParseAddrPort(p.cfg.HTTPSFallback)
		if err != nil {
			return nil, fmt.Errorf("tcpproxy: event loops need the HTTPS fallback as ip:port: %w", err)
		}
		g.fallback = rawAddrOf(ap)
	}
	return g, nil
}

// listen hands the listening socket of ln to the loops (ln itself is
// closed; the loops hold a duplicate) and returns its handle.
func (g *loopGroup) listen(ln net.Listener, sni bool, port int) (*loopListener, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("tcpproxy: event loops need a TCP listener, not %T", ln)
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listener for the event loops: %w", err)
	}
	fd := -1
	cerr := rc.Control(func(s uintptr) {
		// A duplicate of the same (non-blocking) socket.
		fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	})
	if err = errors.Join(cerr, err); err != nil {
		return nil, fmt.Errorf("tcpproxy: listener for the event loops: %w", err)
	}
	// Closing ln takes it out of the runtime's poller, which would
	// otherwise wake for every connection the loops accept.
	_ = ln.Close()
	l := &loopListener{g: g, fd: fd, sni: sni, port: port, done: make(chan struct{})}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.start(); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	l.refs.Store(int32(len(g.loops)))
	for _, lp := range g.loops {
		lp.post(loopCmd{add: l})
	}
	return l, nil
}

// Close makes every loop let go of l and returns once the last one has
// closed the socket, as net.Listener's Close does: a removed TCP service
// refuses new connections when SyncTCP returns, and its port can be bound
// again at once.
func (l *loopListener) Close() error {
	g := l.g
	g.mu.Lock()
	for _, lp := range g.loops {
		lp.post(loopCmd{remove: l})
	}
	g.mu.Unlock()
	<-l.done
	return nil
}

// start makes loops until there are n; g.mu is held.
func (g *loopGroup) start() error {
	for len(g.loops) < g.n {
		lp, err := newLoop(g)
		if err != nil {
			return err
		}
		g.loops = append(g.loops, lp)
		g.addProcs(1)
		go lp.run()
	}
	return nil
}

// procsMu serialises the loops' changes of GOMAXPROCS, across Proxies.
var procsMu sync.Mutex

// addProcs changes GOMAXPROCS by n, a P for each running loop, and tells
// Config.LoopProcs.
func (g *loopGroup) addProcs(n int) {
	procsMu.Lock()
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + n)
	if f := g.p.cfg.LoopProcs; f != nil {
		f(n)
	}
	procsMu.Unlock()
}

// loopCmd is work another goroutine gives a loop.
type loopCmd struct {
	add, remove *loopListener
}

// end is one socket of a connection: the client's or the upstream's.
// buf[off:n] holds what it read that the other end has not taken yet.
type end struct {
	fd     int
	gen    uint32 // tells a reused descriptor's stale events apart
	c      *lconn
	buf    []byte
	off, n int
	rd, wr bool // the last edge said readable / writable
	// hup: an edge said the peer closed or the socket failed. Until then
	// a read shorter than asked drains the socket (nginx's
	// rev->available), so no read is made just to see EAGAIN: more bytes
	// or the end would bring another edge.
	hup      bool
	eof      bool  // read to the end; the other end's write side is shut
	big      bool  // buf is a loopBufSize buffer counted in the loop's held
	moved    int64 // bytes written to the other end
	upstream bool
	// pipe carries this direction's bytes once it has moved spliceAfter
	// (hasPipe): spliced in from the socket, spliced out to the other
	// end's; inPipe of them are in it. noSplice: splice failed on this
	// socket, which goes on with read and write.
	pipe              [2]int // read end, write end
	inPipe            int
	hasPipe, noSplice bool
}

// lconn is one client connection in a loop.
type lconn struct {
	client, up end
	state      uint8
	ln         *loopListener
	routes     *Routes
	pol        *proxyproto.Policy // SNI listeners: the PROXY header policy in force at accept
	svc        model.L4Service    // TCP service ports
	service    string             // the metrics label: backend or fallbackService
	fallback   bool
	sendProxy  bool
	hdr        int // PROXY header bytes at the front of client.buf, not client bytes

	view    loopView
	attempt balancer.Attempt
	pick    *balancer.Pick
	tries   int

	start, connStart, connected, active time.Duration // since the loop's base
	deadline                            time.Duration

	prev, next *lconn // the loop's live list, oldest first
}

// loopView answers the nginx variables an L4 pick may read; addresses are
// looked up once, when first asked for.
type loopView struct {
	fd       int
	sni      string
	resolved bool
	// src and dst are the client's original addresses: from a decoded
	// PROXY header, else the socket's own.
	src, dst netip.AddrPort
}

func (v *loopView) addrs() (src, dst netip.AddrPort) {
	if !v.resolved {
		v.resolved = true
		if sa, err := unix.Getpeername(v.fd); err == nil {
			v.src = addrPortOfSockaddr(sa)
		}
		if sa, err := unix.Getsockname(v.fd); err == nil {
			v.dst = addrPortOfSockaddr(sa)
		}
	}
	return v.src, v.dst
}

func (v *loopView) Var(name string) ([]byte, bool) {
	switch name {
	case "ssl_preread_server_name":
		return []byte(v.sni), v.sni != ""
	case "remote_addr":
		src, _ := v.addrs()
		if !src.IsValid() {
			return nil, true
		}
		return src.Addr().Unmap().AppendTo(nil), true
	}
	return nil, false
}

// slot is what a descriptor is to a loop.
type slot struct {
	ln *loopListener
	e  *end
}

type loop struct {
	g    *loopGroup
	p    *Proxy
	ep   int
	wake int // an eventfd other goroutines write to after post

	mu   sync.Mutex // guards cmds
	cmds []loopCmd

	// Touched by the loop's goroutine only.
	base      time.Time
	now       time.Duration
	slots     []slot // by descriptor
	listeners int
	gen       uint32
	live      *lconn // oldest
	newest    *lconn
	nlive     int
	pending   int // connections in stHeader or stHello
	posted    []*lconn
	scratch   []byte
	bufs      [][]byte // free loopBufSize buffers
	held      int      // loopBufSize buffers ends hold (end.big)
	heads     [][]byte // free headBufSize buffers
	spare     []*lconn
	tick      time.Duration
	nextSweep time.Duration
	paused    []*loopListener // out of descriptors: not accepting until resumeAt
	resumeAt  time.Duration
	lastEvent time.Duration // when epoll_wait last returned an event
	// pollWin is how long the loop looks for the next event after one
	// (nextPollWindow), between pollLeast and Config.BusyPoll; only the
	// loop writes it (atomic for tests that read it).
	pollWin   atomic.Int64
	pollLeast time.Duration
	tid       atomic.Int32 // the loop's thread, once it runs
	// polled is the time spent polling (Config.BusyPoll) in the
	// busyPollWindow that ends at pollWindowEnd.
	polled, pollWindowEnd time.Duration
	emptyPoll             bool // the last epoll_wait was a look that found nothing
	// burst is what the loop relayed lately: a wake-up after a quiet gap
	// as long as its window (pollWin) starts it at zero, and one after a
	// shorter sleep takes a quarter off once the wake-up relays something
	// (burstDecay, addBurst). Past bulkBurst the next event is a
	// transfer's next chunk, beside which a wake-up costs little, and a
	// long look would spend the transfer's gaps polling; a handshake's
	// legs and small exchanges stay far below it.
	//
	// Decayed rather than zeroed after a short sleep: a transfer whose
	// chunks come a little apart (a slow reader at the far end) would
	// otherwise end on a short last chunk that looks like a small
	// exchange. Chunks of c bytes keep burst near 4c, so a transfer
	// whose chunks are a third of bulkBurst or more stays bulk to its
	// end (halving kept it near 2c, and a last chunk of 1 KiB after
	// chunks of 58 KiB fell below it: seen under -race). A stream of small
	// exchanges that the loop catches by looking, so that it never
	// sleeps, sleeps once for each bulkBurst/4 it moves, not at every
	// exchange. A wake-up that relays nothing (the slow reader making
	// room after the last chunk) leaves it as it is.
	burst      int
	burstDecay bool
	pipes      [][2]int // empty pipes for the next bulk direction
	// pipesOpen counts the loop's pipes, in use or kept; only the loop
	// writes it (atomic for tests that read it).
	pipesOpen atomic.Int32
	events    [epollBatch]unix.EpollEvent
}

func newLoop(g *loopGroup) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_ = unix.Close(ep)
		return nil, fmt.Errorf("tcpproxy: eventfd: %w", err)
	}
	lp := &loop{g: g, p: g.p, ep: ep, wake: wake, base: time.Now(), scratch: make([]byte, loopBufSize)}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(wake)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		lp.closeFDs()
		return nil, fmt.Errorf("tcpproxy: epoll_ctl eventfd: %w", err)
	}
	cfg := &g.p.cfg
	// Timeouts are checked every tick: a sixteenth of the shortest, within
	// [1 ms, 250 ms].
	lp.tick = min(max(min(cfg.IdleTimeout, cfg.HelloTimeout, cfg.ConnectTimeout)/16, time.Millisecond), 250*time.Millisecond)
	lp.pollLeast = cmp.Or(cfg.pollLeast, minPollWindow)
	lp.pollWin.Store(int64(min(lp.pollLeast, cfg.BusyPoll)))
	return lp, nil
}

func (l *loop) closeFDs() {
	_ = unix.Close(l.wake)
	_ = unix.Close(l.ep)
	for _, p := range l.pipes {
		rawClose(p[0])
		rawClose(p[1])
	}
	l.pipesOpen.Add(-int32(len(l.pipes)))
	l.pipes = nil
}

// post queues c for the loop and wakes it.
func (l *loop) post(c loopCmd) {
	l.mu.Lock()
	l.cmds = append(l.cmds, c)
	l.mu.Unlock()
	one := uint64(1)
	_, _ = unix.Write(l.wake, (*[8]byte)(unsafe.Pointer(&one))[:])
}

func rawCall(trap, a1, a2, a3 uintptr) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(trap, a1, a2, a3)
	return int(r), e
}

func rawClose(fd int) { _, _ = rawCall(syscall.SYS_CLOSE, uintptr(fd), 0, 0) }

func (l *loop) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l.tid.Store(int32(unix.Gettid()))
	for {
		timeout := -1
		switch {
		case len(l.posted) > 0:
			timeout = 0
		case l.nlive > 0 || len(l.paused) > 0:
			next := l.nextSweep
			if len(l.paused) > 0 && (l.nlive == 0 || l.resumeAt < next) {
				next = l.resumeAt
			}
			timeout = int(max((next-time.Since(l.base)+time.Millisecond-1)/time.Millisecond, 0))
		}
		prevNow, pollStart := l.now, time.Duration(0)
		slept := timeout != 0
		look := time.Duration(l.pollWin.Load())
		if l.burst >= bulkBurst {
			look = min(look, l.pollLeast)
		}
		if slept && l.nlive > 0 && l.now-l.lastEvent < look && l.mayPoll() {
			// An event a moment ago: look again without sleeping, so
			// the next one finds the thread running instead of a CPU
			// to wake (BusyPoll). Others runnable on this CPU go first.
			// With no connection open there is nothing whose next event
			// is near: the next is a client's connect, which comes when
			// it comes, and a look for it would be spent on every
			// connection's end.
			timeout, slept = 0, false
			pollStart = time.Since(l.base)
			_, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		}
		wait := syscall.RawSyscall6
		if l.now-l.lastEvent > parkAfter {
			// Idle for a while: wait in a system call the runtime sees,
			// which hands the P back, so an idle loop takes no preemption
			// signal every 10 ms (1.3 % of a CPU and ~320 context switches
			// a second, measured). The first event after it pays the
			// runtime's wake-up once.
			wait = syscall.Syscall6
		}
		// epoll_pwait with no signal mask is epoll_wait, and exists on
		// every Linux architecture (arm64 has no epoll_wait).
		r, _, e := wait(syscall.SYS_EPOLL_PWAIT, uintptr(l.ep), uintptr(unsafe.Pointer(&l.events[0])), epollBatch, uintptr(timeout), 0, 0)
		l.now = time.Since(l.base)
		if pollStart != 0 {
			// A look that follows an empty look is charged from the end
			// of that one, the loop's own bookkeeping in between included.
			from := pollStart
			if l.emptyPoll {
				from = prevNow
			}
			l.polled += l.now - from
		}
		l.emptyPoll = pollStart != 0 && r == 0 && e == 0
		if e == syscall.EINTR {
			// A signal, the runtime's preemption among them: let the
			// runtime act on it before waiting again.
			runtime.Gosched()
			continue
		}
		if e != 0 {
			panic(fmt.Sprintf("tcpproxy: epoll_wait: %v", e)) // only a bug makes the arguments bad
		}
		if r > 0 {
			if slept {
				win := time.Duration(l.pollWin.Load())
				l.burstDecay = l.now-l.lastEvent < win
				if !l.burstDecay {
					l.burst = 0
				}
				if l.p.cfg.BusyPoll > l.pollLeast {
					l.pollWin.Store(int64(nextPollWindow(win, l.now-l.lastEvent, l.pollLeast, l.p.cfg.BusyPoll)))
				}
			}
			l.lastEvent = l.now
		}
		for i := range int(r) {
			ev := &l.events[i]
			fd := int(ev.Fd)
			if fd == l.wake {
				if !l.commands() {
					return
				}
				continue
			}
			if fd >= len(l.slots) {
				continue
			}
			s := l.slots[fd]
			switch {
			case s.ln != nil:
				l.accept(s.ln)
			case s.e != nil && s.e.gen == uint32(ev.Pad):
				l.ready(s.e, ev.Events)
			}
		}
		if len(l.posted) > 0 {
			posted := l.posted
			l.posted = nil
			for _, c := range posted {
				if c.state == stRelay && c.client.fd >= 0 {
					l.relayBoth(c)
				}
			}
			clear(posted)
			if l.posted == nil {
				l.posted = posted[:0]
			}
		}
		if l.nlive > 0 && l.now >= l.nextSweep {
			l.sweep()
		}
		if len(l.paused) > 0 && l.now >= l.resumeAt {
			l.resume()
		}
		if l.listeners == 0 && l.nlive == 0 && l.stop() {
			return
		}
	}
}

// addBurst counts n relayed bytes in burst, taking a quarter off it first
// if these are the first relayed since a wake-up after a short sleep.
func (l *loop) addBurst(n int) {
	if l.burstDecay {
		l.burst -= l.burst / 4
		l.burstDecay = false
	}
	l.burst += n
}

// mayPoll reports whether the loop has polling time left in the current
// busyPollWindow.
func (l *loop) mayPoll() bool {
	if l.now >= l.pollWindowEnd {
		l.pollWindowEnd = l.now + busyPollWindow
		l.polled = 0
	}
	budget := l.p.cfg.pollBudget
	if budget == 0 {
		budget = defaultPollBudget
	}
	return l.polled < budget
}

// commands runs what other goroutines posted; false when the loop ended.
func (l *loop) commands() bool {
	var buf [8]byte
	_, _ = rawCall(syscall.SYS_READ, uintptr(l.wake), uintptr(unsafe.Pointer(&buf[0])), 8)
	l.mu.Lock()
	cmds := l.cmds
	l.cmds = nil
	l.mu.Unlock()
	for _, c := range cmds {
		switch {
		case c.add != nil:
			ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(c.add.fd)}
			if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, c.add.fd, &ev); err != nil {
				l.release(c.add)
				continue
			}
			l.slot(c.add.fd).ln = c.add
			l.listeners++
		case c.remove != nil:
			if c.remove.fd < len(l.slots) && l.slots[c.remove.fd].ln == c.remove {
				_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.remove.fd, nil)
				l.slots[c.remove.fd].ln = nil
				l.listeners--
				l.release(c.remove)
			}
		}
	}
	return true
}

// release lets go of a listener; the last loop closes it.
func (l *loop) release(ln *loopListener) {
	if ln.refs.Add(-1) == 0 {
		_ = unix.Close(ln.fd)
		close(ln.done)
	}
}

// stop ends the loop when nothing was posted meanwhile; the group starts
// new loops for the next listener.
func (l *loop) stop() bool {
	g := l.g
	g.mu.Lock()
	defer g.mu.Unlock()
	l.mu.Lock()
	queued := len(l.cmds)
	l.mu.Unlock()
	if queued > 0 {
		return false
	}
	// Every loop of the group is idle only when each has no listener;
	// listeners are registered with all loops at once, so this one being
	// idle means they all are, or soon will be.
	for i, lp := range g.loops {
		if lp == l {
			g.loops = append(g.loops[:i], g.loops[i+1:]...)
			break
		}
	}
	l.closeFDs()
	g.addProcs(-1)
	return true
}

func (l *loop) slot(fd int) *slot {
	if fd >= len(l.slots) {
		l.slots = append(l.slots, make([]slot, fd+1-len(l.slots)+64)...)
	}
	return &l.slots[fd]
}

// register adds e's socket to the loop, edge-triggered.
func (l *loop) register(e *end) bool {
	l.gen++
	e.gen = l.gen
	l.slot(e.fd).e = e
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(e.fd), Pad: int32(e.gen)}
	_, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(l.ep), unix.EPOLL_CTL_ADD, uintptr(e.fd), uintptr(unsafe.Pointer(&ev)), 0, 0)
	return errno == 0
}

// forget closes e's socket (or, keep, only takes it out of the loop).
func (l *loop) forget(e *end, keep bool) {
	if e.fd < 0 {
		return
	}
	if e.fd < len(l.slots) && l.slots[e.fd].e == e {
		l.slots[e.fd].e = nil
	}
	if keep {
		_, _, _ = syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(l.ep), unix.EPOLL_CTL_DEL, uintptr(e.fd), 0, 0, 0)
	} else {
		rawClose(e.fd) // also takes it out of the epoll set
	}
	e.fd = -1
	if e.buf != nil {
		l.drop(e)
	}
	l.putPipe(e)
}

// givePipe gives e a pipe, a free one or a new one; false (and e is marked
// noSplice) when none can be had.
func (l *loop) givePipe(e *end) bool {
	if n := len(l.pipes); n > 0 {
		e.pipe = l.pipes[n-1]
		l.pipes = l.pipes[:n-1]
		e.hasPipe = true
		return true
	}
	var fds [2]int32
	if _, errno := rawCall(syscall.SYS_PIPE2, uintptr(unsafe.Pointer(&fds[0])), unix.O_NONBLOCK|unix.O_CLOEXEC, 0); errno != 0 {
		e.noSplice = true // out of descriptors: bytes go by read and write
		return false
	}
	_, _ = rawCall(syscall.SYS_FCNTL, uintptr(fds[1]), unix.F_SETPIPE_SZ, pipeSize)
	l.pipesOpen.Add(1)
	e.pipe = [2]int{int(fds[0]), int(fds[1])}
	e.hasPipe = true
	return true
}

// putPipe takes e's pipe back: kept for the next direction when empty and
// fewer than maxFreePipes are, else closed.
func (l *loop) putPipe(e *end) {
	if !e.hasPipe {
		return
	}
	if e.inPipe == 0 && len(l.pipes) < maxFreePipes {
		l.pipes = append(l.pipes, e.pipe)
	} else {
		rawClose(e.pipe[0])
		rawClose(e.pipe[1])
		l.pipesOpen.Add(-1)
	}
	e.hasPipe, e.inPipe = false, 0
}

// splice moves up to n bytes from descriptor in to out without waiting
// (splice(2)), one of them a pipe.
func splice(in, out, n int) (int, syscall.Errno) {
	r, _, errno := syscall.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
	return int(r), errno
}

func (l *loop) getBuf() []byte {
	if n := len(l.bufs); n > 0 {
		b := l.bufs[n-1]
		l.bufs = l.bufs[:n-1]
		return b
	}
	return make([]byte, loopBufSize)
}

// putBuf takes back a loopBufSize or headBufSize buffer.
func (l *loop) putBuf(b []byte) {
	if cap(b) == headBufSize {
		l.heads = append(l.heads, b[:headBufSize])
		return
	}
	l.bufs = append(l.bufs, b[:loopBufSize])
}

// keep makes the bytes e still holds for its peer last: the scratch
// buffer they were read into becomes e's (counted in held) unless they fit
// a head buffer.
func (l *loop) keep(e *end) {
	if cap(e.buf) != loopBufSize || e.big {
		return
	}
	if rest := e.n - e.off; rest <= headBufSize {
		b := l.getHead()
		copy(b, e.buf[e.off:e.n])
		l.putBuf(e.buf)
		e.buf, e.off, e.n = b, 0, rest
		return
	}
	e.big = true
	l.held++
}

// drop gives e's buffer back.
func (l *loop) drop(e *end) {
	if e.big {
		e.big = false
		l.held--
	}
	l.putBuf(e.buf)
	e.buf, e.off, e.n = nil, 0, 0
}

func (l *loop) getHead() []byte {
	if n := len(l.heads); n > 0 {
		b := l.heads[n-1]
		l.heads = l.heads[:n-1]
		return b
	}
	return make([]byte, headBufSize)
}

// accept takes one pending connection of ln. The listener is registered
// level-triggered, so the next wait reports it again while more are
// pending (nginx's multi_accept off): no accept is made only to see EAGAIN,
// and other sockets' events are served in between.
func (l *loop) accept(ln *loopListener) {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, uintptr(ln.fd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		if e == syscall.EINTR || e == syscall.ECONNABORTED {
			continue
		}
		switch e {
		case 0:
			l.newConn(ln, int(r))
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM:
			// Out of descriptors or memory: the listener would stay
			// readable and the loop spin on it; it is left alone for
			// acceptPause, as nginx disables accept events.
			l.pause(ln)
		}
		// EAGAIN: another loop took it.
		return
	}
}

// acceptPause is how long a loop out of descriptors stops accepting.
const acceptPause = 100 * time.Millisecond

// pause takes ln out of the loop until acceptPause has passed.
func (l *loop) pause(ln *loopListener) {
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, ln.fd, nil)
	l.paused = append(l.paused, ln)
	l.resumeAt = l.now + acceptPause
}

// resume puts paused listeners back.
func (l *loop) resume() {
	for _, ln := range l.paused {
		if ln.fd < len(l.slots) && l.slots[ln.fd].ln == ln {
			ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(ln.fd)}
			_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, ln.fd, &ev)
		}
	}
	clear(l.paused)
	l.paused = l.paused[:0]
}

var (
	one          = int32(1)
	notSentLowat = int32(notSentLowatBytes)
)

// setSockOpts sets what a loop wants of each socket of a relayed pair:
// TCP_NODELAY, and TCP_NOTSENT_LOWAT so that a write leaves at most
// notSentLowatBytes in the kernel that it cannot send yet. The rest stays
// in the loop's buffer until the socket's EPOLLOUT, and goes out from the
// loop's own thread, not from the receive path of the peer's
// acknowledgements on whatever CPU that peer runs.
func setSockOpts(fd int) {
	_, _, _ = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, uintptr(unsafe.Pointer(&one)), 4, 0)
	_, _, _ = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, uintptr(unsafe.Pointer(&notSentLowat)), 4, 0)
}

func (l *loop) newConn(ln *loopListener, fd int) {
	var c *lconn
	if n := len(l.spare); n > 0 {
		c = l.spare[n-1]
		l.spare = l.spare[:n-1]
	} else {
		c = new(lconn)
	}
	c.client = end{fd: fd, c: c, rd: true, wr: true}
	c.up = end{fd: -1, c: c, upstream: true}
	c.ln = ln
	c.view = loopView{fd: fd}
	c.start, c.active = l.now, l.now
	l.p.conns.add()
	l.link(c)
	setSockOpts(fd)
	if !l.register(&c.client) {
		l.closeConn(c)
		return
	}
	c.routes = l.p.routes.Load()
	if !ln.sni {
		svc, ok := c.routes.TCP[ln.port]
		if !ok {
			l.closeConn(c)
			return
		}
		c.svc, c.service, c.sendProxy = svc, svc.Backend, svc.EncodeProxyProtocol
		if svc.DecodeProxyProtocol {
			l.await(c, stHeader, l.p.cfg.HelloTimeout)
			l.readHead(c)
			return
		}
		l.connect(c)
		return
	}
	if !l.p.awaitsHello(c.routes) {
		// Every connection goes to the fallback whatever its SNI: the
		// connect overlaps the client building its hello.
		l.toFallback(c)
		return
	}
	if pol := l.p.sniPolicy.Load(); pol != nil && pol.On {
		c.pol = pol
		l.await(c, stHeader, pol.Timeout)
	} else {
		l.await(c, stHello, l.p.cfg.HelloTimeout)
	}
	l.readHead(c)
}

// await puts c in a state that waits for the client, for at most timeout;
// past MaxPending such connections (of the SNI PROXY policy, shared out
// among the loops) the oldest is closed.
func (l *loop) await(c *lconn, state uint8, timeout time.Duration) {
	if c.deadline == 0 {
		l.pending++
	}
	c.state = state
	c.deadline = l.now + timeout
	if c.pol != nil && l.pending > max(c.pol.MaxPending/l.g.n, 1) {
		for o := l.live; o != nil; o = o.next {
			if o != c && (o.state == stHeader || o.state == stHello) {
				l.closeConn(o)
				break
			}
		}
	}
}

// unawait takes c out of the waiting states' count.
func (l *loop) unawait(c *lconn) {
	if (c.state == stHeader || c.state == stHello) && c.deadline != 0 {
		l.pending--
		c.deadline = 0
	}
}

func (l *loop) link(c *lconn) {
	c.prev, c.next = l.newest, nil
	if l.newest != nil {
		l.newest.next = c
	} else {
		l.live = c
	}
	l.newest = c
	if l.nlive == 0 {
		l.nextSweep = l.now + l.tick
	}
	l.nlive++
}

func (l *loop) unlink(c *lconn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.live = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.newest = c.prev
	}
	c.prev, c.next = nil, nil
	l.nlive--
}

// readHead reads what the client sends before its upstream is chosen and
// acts on it once it says enough.
func (l *loop) readHead(c *lconn) {
	e := &c.client
	for e.rd && !e.eof {
		if e.buf == nil {
			e.buf = l.getHead()
		}
		if e.n == len(e.buf) {
			break // full: decided below
		}
		n, errno := rawCall(syscall.SYS_READ, uintptr(e.fd), uintptr(unsafe.Pointer(&e.buf[e.n])), uintptr(len(e.buf)-e.n))
		switch {
		case errno == syscall.EINTR:
			continue
		case errno == syscall.EAGAIN:
			e.rd = false
		case errno != 0:
			l.failHead(c)
			return
		case n == 0:
			e.eof = true
		default:
			if n < len(e.buf)-e.n && !e.hup {
				e.rd = false // drained
			}
			e.n += n
		}
	}
	l.decideHead(c, false)
}

// decideHead acts on the bytes c's client sent so far, once they are
// enough; timedOut says no more will come.
func (l *loop) decideHead(c *lconn, timedOut bool) {
	e := &c.client
	done := timedOut || e.eof || e.n == len(e.buf)
	if c.state == stHeader {
		data := e.buf[e.off:e.n]
		if c.pol != nil && c.pol.Optional && len(data) > 0 && data[0] != 'P' && data[0] != '\r' {
			// Not a header: the connection goes on with its own addresses.
			c.state = stHello
			c.deadline = l.now + l.p.cfg.HelloTimeout
		} else {
			h, n, err := proxyproto.Parse(data)
			if errors.Is(err, proxyproto.ErrIncomplete) && !done {
				return
			}
			if err != nil {
				l.failHead(c)
				return
			}
			e.off += n
			if !h.Local {
				src, _ := c.view.addrs()
				if c.pol == nil || c.pol.Trusts(src.Addr()) {
					c.view.src = h.Source
				}
				c.view.dst = h.Destination
			}
			if !c.ln.sni {
				l.unawait(c)
				l.connect(c)
				return
			}
			c.state = stHello
			c.deadline = l.now + l.p.cfg.HelloTimeout
		}
	}
	data := e.buf[e.off:e.n]
	if len(data) >= recordHeaderLen && (data[0] != recordTypeHandshake || data[1] != 3) {
		l.routeHello(c, "", false)
		return
	}
	if len(data) >= recordHeaderLen {
		if n := recordHeaderLen + (int(data[3])<<8 | int(data[4])); n <= maxHello {
			if len(data) < n {
				if done {
					l.routeHello(c, "", false)
				}
				return
			}
			if sni, ok, decided := sniOfRecord(data[:n]); decided {
				l.routeHello(c, sni, ok)
				return
			}
		}
		// crypto/tls decides the rest, as on the goroutine path.
		l.handOff(c, func(nc net.Conn) { l.p.handleSNI(nc) })
		return
	}
	if done {
		l.routeHello(c, "", false)
	}
}

// failHead closes a connection whose PROXY header was malformed or whose
// socket failed before its upstream was chosen.
func (l *loop) failHead(c *lconn) {
	if c.state == stHeader && !c.ln.sni {
		l.p.metrics.fail(c.service, reasonProxyProtocol)
	}
	l.closeConn(c)
}

// routeHello sends c where its server name says, as handleSNI does.
func (l *loop) routeHello(c *lconn, sni string, isTLS bool) {
	l.unawait(c)
	if backend, ok := c.routes.lookup(sni); ok && isTLS {
		c.view.sni = sni
		c.service = backend
		l.connect(c)
		return
	}
	if l.p.cfg.HTTPSFallback == "" {
		l.closeConn(c)
		return
	}
	l.toFallback(c)
}

// toFallback connects c to the HTTPS data plane behind a PROXY v2 header.
func (l *loop) toFallback(c *lconn) {
	c.fallback, c.service = true, fallbackService
	src, dst := c.view.addrs()
	l.prependHeader(c, proxyproto.AppendV2(make([]byte, 0, 64), src, dst))
	l.startConnect(c, l.g.fallback)
}

// prependHeader puts a PROXY header in front of what c's client sent.
func (l *loop) prependHeader(c *lconn, hdr []byte) {
	e := &c.client
	c.hdr = len(hdr)
	if e.buf != nil && e.off >= len(hdr) {
		e.off -= len(hdr)
		copy(e.buf[e.off:], hdr)
		return
	}
	b := l.getBuf() // holds a header and a whole head buffer
	pending := e.n - e.off
	copy(b, hdr)
	if e.buf != nil {
		copy(b[len(hdr):], e.buf[e.off:e.n])
		l.drop(e)
	}
	e.buf, e.off, e.n = b, 0, len(hdr)+pending
}

// connect picks a peer for c's backend and starts connecting to it,
// moving on to the next peer (Config.Tries in all) on failure.
func (l *loop) connect(c *lconn) {
	if c.sendProxy && c.hdr == 0 {
		src, dst := c.view.addrs()
		l.prependHeader(c, proxyproto.AppendV1(make([]byte, 0, 112), src, dst))
	}
	for c.tries < l.p.cfg.Tries {
		pick, err := l.p.cfg.Picker.Pick(c.service, &c.view, &c.attempt)
		if err != nil {
			break
		}
		c.tries++
		ap, err := netip.ParseAddrPort(pick.Peer)
		if err != nil {
			// A host name: the goroutine path resolves it.
			backend, view, sendProxy, a := c.service, c.view, c.sendProxy, &c.attempt
			l.handOff(c, func(nc net.Conn) {
				cv := &connView{sni: view.sni, remote: remoteIP(nc), src: view.src, dst: view.dst}
				l.p.toBackendFrom(nc, nil, backend, cv, sendProxy, pick, a)
			})
			return
		}
		c.pick = pick
		if l.startConnect(c, rawAddrOf(ap)) {
			return
		}
		l.p.cfg.Picker.Done(pick, balancer.DoneInfo{Failed: true})
		c.attempt.LastFailure = balancer.FailureFailed
		c.pick = nil
	}
	reason := reasonConnect
	if c.tries == 0 {
		reason = reasonNoPeer
	}
	l.p.metrics.fail(c.service, reason)
	l.closeConn(c)
}

// startConnect opens c's upstream socket and starts its connect; false
// when that failed at once (the caller tries another peer). For the
// fallback a failure closes c.
func (l *loop) startConnect(c *lconn, sa rawAddr) bool {
	fd, errno := rawCall(syscall.SYS_SOCKET, uintptr(sa.sa.Family), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if errno != 0 {
		return l.connectFailed(c)
	}
	setSockOpts(fd)
	c.up.fd = fd
	c.up.rd, c.up.wr, c.up.eof = false, false, false
	c.connStart = l.now
	_, errno = rawCall(syscall.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa.sa)), sa.len)
	if errno != 0 && errno != syscall.EINPROGRESS && errno != syscall.EINTR {
		l.forget(&c.up, false)
		return l.connectFailed(c)
	}
	c.state = stConnecting
	c.deadline = l.now + l.p.cfg.ConnectTimeout
	if !l.register(&c.up) {
		l.forget(&c.up, false)
		return l.connectFailed(c)
	}
	return true
}

func (l *loop) connectFailed(c *lconn) bool {
	if c.fallback {
		l.p.metrics.fail(fallbackService, reasonConnect)
		l.closeConn(c)
		return true // c is closed: nothing to retry
	}
	return false
}

// ready handles an edge on e's socket.
func (l *loop) ready(e *end, ev uint32) {
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		e.rd = true
	}
	if ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		e.hup = true
	}
	if ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		e.wr = true
	}
	c := e.c
	switch c.state {
	case stHeader, stHello:
		if !e.upstream {
			l.readHead(c)
		}
	case stConnecting:
		if e.upstream && e.wr {
			l.connected(c)
		}
	case stRelay:
		l.relayBoth(c)
	}
}

// connected finishes c's connect: on success the bytes start to flow, on
// failure the next peer is tried.
func (l *loop) connected(c *lconn) {
	var soErr int32
	size := uint32(4)
	_, _, errno := syscall.RawSyscall6(syscall.SYS_GETSOCKOPT, uintptr(c.up.fd), unix.SOL_SOCKET, unix.SO_ERROR, uintptr(unsafe.Pointer(&soErr)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 || soErr != 0 {
		l.upstreamFailed(c)
		return
	}
	c.connected = l.now
	c.state = stRelay
	c.active = l.now
	c.deadline = 0
	l.relayBoth(c)
}

// upstreamFailed ends a connect that failed or timed out and tries the
// next peer.
func (l *loop) upstreamFailed(c *lconn) {
	l.forget(&c.up, false)
	c.up.fd = -1
	if c.fallback {
		l.p.metrics.fail(fallbackService, reasonConnect)
		l.closeConn(c)
		return
	}
	l.p.cfg.Picker.Done(c.pick, balancer.DoneInfo{ConnectTime: l.now - c.connStart, Failed: true})
	c.attempt.LastFailure = balancer.FailureFailed
	c.pick = nil
	l.connect(c)
}

// relayBoth moves what can move in both directions.
func (l *loop) relayBoth(c *lconn) {
	if l.relay(c, &c.client, &c.up) {
		l.relay(c, &c.up, &c.client)
	}
}

// relay moves src's bytes to dst until src would block, dst would block,
// src ends, or relayBudget is spent (then c is posted for the next round);
// false when c was closed.
func (l *loop) relay(c *lconn, src, dst *end) bool {
	moved := 0
	for {
		for src.off < src.n {
			if !dst.wr {
				l.keep(src)
				return true // dst's EPOLLOUT edge brings us back
			}
			w, errno := rawCall(syscall.SYS_WRITE, uintptr(dst.fd), uintptr(unsafe.Pointer(&src.buf[src.off])), uintptr(src.n-src.off))
			switch {
			case errno == syscall.EINTR:
				continue
			case errno == syscall.EAGAIN:
				dst.wr = false
				l.keep(src)
				return true
			case errno != 0:
				l.closeConn(c)
				return false
			}
			if w < src.n-src.off {
				dst.wr = false // full: its EPOLLOUT edge brings us back
			}
			src.off += w
			src.moved += int64(w)
			moved += w
			l.addBurst(w)
		}
		if src.buf != nil {
			l.drop(src)
		}
		for src.inPipe > 0 {
			if !dst.wr {
				return true // dst's EPOLLOUT edge brings us back
			}
			w, errno := splice(src.pipe[0], dst.fd, src.inPipe)
			switch {
			case errno == syscall.EINTR:
				continue
			case errno == syscall.EAGAIN:
				// Full: the socket is marked waiting for room, and its
				// EPOLLOUT edge brings us back. A short splice is not
				// proof of that (it can stop short of a socket with
				// room, which then sends no edge: seen as a transfer
				// stalled with bytes in the pipe and an empty send
				// queue), so the loop splices again until EAGAIN.
				dst.wr = false
				return true
			case errno != 0 || w == 0:
				l.closeConn(c)
				return false
			}
			src.inPipe -= w
			src.moved += int64(w)
			moved += w
			l.addBurst(w)
		}
		if src.eof {
			return true
		}
		if !src.rd {
			return true
		}
		if moved >= relayBudget {
			l.posted = append(l.posted, c)
			return true
		}
		if src.hasPipe || (src.moved >= spliceAfter && !src.noSplice && l.givePipe(src)) {
			// The pipe is empty: all it gets now is src's.
			n, errno := splice(src.fd, src.pipe[1], pipeSize)
			switch {
			case errno == syscall.EINTR:
				continue
			case errno == syscall.EAGAIN:
				src.rd = false
				return true
			case errno == syscall.EINVAL:
				// Not a socket splice can read: read and write it.
				src.noSplice = true
				l.putPipe(src)
				continue
			case errno != 0:
				l.closeConn(c)
				return false
			case n == 0:
				return l.ended(c, src, dst)
			}
			// A short splice need not have drained the socket (the pipe
			// can fill by pages before bytes), so src is read again
			// until EAGAIN.
			c.active = l.now
			src.inPipe = n
			continue
		}
		size := len(l.scratch)
		if l.held >= maxHeldBufs {
			size = smallRead
		}
		n, errno := rawCall(syscall.SYS_READ, uintptr(src.fd), uintptr(unsafe.Pointer(&l.scratch[0])), uintptr(size))
		switch {
		case errno == syscall.EINTR:
			continue
		case errno == syscall.EAGAIN:
			src.rd = false
			return true
		case errno != 0:
			l.closeConn(c)
			return false
		case n == 0:
			return l.ended(c, src, dst)
		}
		c.active = l.now
		if n < size && !src.hup {
			src.rd = false // drained
		}
		// The scratch buffer becomes src's; if dst takes it all at once
		// it goes straight back.
		src.buf, src.off, src.n = l.scratch, 0, n
		l.scratch = l.getBuf()
	}
}

// ended handles the end of src's bytes, all of them written to dst: dst's
// write side is shut, and c closed when dst's bytes had ended too; false
// when c was closed.
func (l *loop) ended(c *lconn, src, dst *end) bool {
	src.eof = true
	_, _ = rawCall(syscall.SYS_SHUTDOWN, uintptr(dst.fd), unix.SHUT_WR, 0)
	if dst.eof {
		l.closeConn(c)
		return false
	}
	return true
}

// sweep closes what outlived its timeout.
func (l *loop) sweep() {
	l.nextSweep = l.now + l.tick
	idle := l.p.cfg.IdleTimeout
	for c := l.live; c != nil; {
		next := c.next
		switch c.state {
		case stHeader, stHello:
			if l.now >= c.deadline {
				l.unawait(c)
				if c.state == stHeader {
					l.failHead(c)
				} else {
					l.decideHead(c, true)
				}
			}
		case stConnecting:
			if l.now >= c.deadline {
				l.upstreamFailed(c)
			}
		case stRelay:
			if l.now-c.active >= idle {
				l.closeConn(c)
			}
		}
		c = next
	}
}

// closeConn closes both sockets of c and accounts for it.
func (l *loop) closeConn(c *lconn) {
	if c.client.fd < 0 && c.up.fd < 0 {
		return // closed already
	}
	l.unawait(c)
	switch {
	case c.state == stRelay:
		up := c.client.moved - int64(c.hdr)
		if c.pick != nil {
			l.p.cfg.Picker.Done(c.pick, balancer.DoneInfo{ConnectTime: c.connected - c.connStart, ResponseTime: l.now - c.connStart})
		}
		l.p.metrics.done(c.service, up, c.up.moved)
	case c.pick != nil:
		// Closed while connecting: the attempt did not succeed.
		l.p.cfg.Picker.Done(c.pick, balancer.DoneInfo{ConnectTime: l.now - c.connStart, Failed: true})
	}
	l.forget(&c.client, false)
	l.forget(&c.up, false)
	l.unlink(c)
	l.p.conns.done()
	*c = lconn{client: end{fd: -1}, up: end{fd: -1}}
	l.spare = append(l.spare, c)
}

// handOff gives c's client socket, with what it sent so far, to a new
// goroutine running serve; the loop lets go of c.
func (l *loop) handOff(c *lconn, serve func(net.Conn)) {
	l.unawait(c)
	e := &c.client
	prefix := append([]byte(nil), e.buf[e.off:e.n]...)
	if c.hdr > 0 {
		prefix = prefix[c.hdr:]
	}
	fd := e.fd
	l.forget(e, true)
	l.forget(&c.up, false)
	l.unlink(c)
	// c is not reused: a pick handed on may point into c.attempt.
	remote, local := c.view.src, c.view.dst
	f := os.NewFile(uintptr(fd), "")
	nc, err := net.FileConn(f) // a duplicate, in the runtime's poller
	_ = f.Close()
	if err != nil {
		l.p.conns.done()
		return
	}
	hc := &handedConn{TCPConn: nc.(*net.TCPConn), prefix: prefix}
	if remote.IsValid() {
		hc.remote = net.TCPAddrFromAddrPort(remote)
	}
	if local.IsValid() {
		hc.local = net.TCPAddrFromAddrPort(local)
	}
	go func() {
		defer l.p.conns.done()
		serve(hc)
	}()
}

// handedConn is a client connection an event loop handed to the goroutine
// path: it reads what the loop read first, and reports the addresses a
// PROXY header gave.
type handedConn struct {
	*net.TCPConn
	prefix        []byte
	remote, local net.Addr
}

func (c *handedConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.TCPConn.Read(b)
}

func (c *handedConn) RemoteAddr() net.Addr {
	if c.remote != nil {
		return c.remote
	}
	return c.TCPConn.RemoteAddr()
}

func (c *handedConn) LocalAddr() net.Addr {
	if c.local != nil {
		return c.local
	}
	return c.TCPConn.LocalAddr()
}

// rawAddr is a socket address as connect(2) takes it: an IPv4 one lives
// in the first bytes of sa.
type rawAddr struct {
	sa  unix.RawSockaddrInet6
	len uintptr
}

func rawAddrOf(ap netip.AddrPort) rawAddr {
	var r rawAddr
	a, port := ap.Addr().Unmap(), ap.Port()
	port = port<<8 | port>>8 // network byte order
	if a.Is4() {
		v4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&r.sa))
		v4.Family, v4.Port, v4.Addr = unix.AF_INET, port, a.As4()
		r.len = unix.SizeofSockaddrInet4
		return r
	}
	r.sa.Family, r.sa.Port, r.sa.Addr = unix.AF_INET6, port, a.As16()
	r.len = unix.SizeofSockaddrInet6
	return r
}

func addrPortOfSockaddr(sa unix.Sockaddr) netip.AddrPort {
	switch v := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(v.Addr), uint16(v.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(v.Addr), uint16(v.Port))
	}
	return netip.AddrPort{}
}

// deferAcceptFD is setDeferAccept for a socket the loops hold.
func deferAcceptFD(fd int, wait time.Duration) {
	secs := int((wait + time.Second - 1) / time.Second)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, secs)
}
