package picksock

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// Picker is what the server needs of the balancer (a *balancer.Registry).
type Picker interface {
	CandidatePicks(name string, req balancer.Request, a *balancer.Attempt, dst []balancer.Pick) (int, error)
	Feedback(backend, peer string, info balancer.DoneInfo)
	NeededVars(backend string) []string
	Peers(backend string) []string
	Version() uint64
	Lease(backend string, count int) (start uint32, n int, err error)
	Leasable(backend string) bool
	Scored(backend string) bool
	Count(backend, peer string, completed, failed uint64)
	CountTimed(backend, peer string, c balancer.TimedCounts)
	HashTable(backend string) (balancer.HashTable, bool)
	Premadeable(backend string) bool
	RouteOwn(backend string, a *balancer.Attempt) (string, bool)
	Route(backend string) (balancer.Route, bool)
	RouteAhead(backend string, a *balancer.Attempt) (string, balancer.RouteKind, bool)
	OwnTable(backend string) (balancer.HashTable, bool)
	RouteFor(backend string, req balancer.Request) (string, bool, error)
	NewSessions(backend string, a *balancer.Attempt, peers, keys []string) (int, error)
	// Changed returns a channel closed when Version next changes.
	Changed() <-chan struct{}
}

// Config of a Server.
type Config struct {
	// Picker answers picks; required.
	Picker Picker
	// Candidates is how many ordered peers a pick reply carries: the shim's
	// retry budget before it falls back to cycling them. Zero means 3,
	// ingress-nginx's proxy-next-upstream-tries default.
	Candidates int
	// Mode is the socket's permission bits. Zero means 0660.
	Mode os.FileMode
	// Requests, if set, receives aggregated request metrics (0x06 frames),
	// valid only during the call.
	Requests func(m *RequestMetrics)
	// GID, when >= 0 and Chown is true, is the socket's group.
	GID   int
	Chown bool
	// FrameTimeout bounds how long the rest of a frame may take once its
	// first byte came; a connection stalled mid-frame is closed. Zero means
	// 5 s.
	FrameTimeout time.Duration
}

// RequestMetrics are the request metrics of one label set that a shim
// aggregated over its flush interval (one 0x06 frame). The slices alias the
// connection's buffers.
type RequestMetrics struct {
	// Labels are tab-separated: host, status, method, path, namespace,
	// ingress, service, canary.
	Labels []byte
	// Count requests took SumUS microseconds in all; Buckets counts them
	// per bucket of the shim's duration histogram (not cumulative).
	Count   uint32
	SumUS   uint64
	Buckets []uint32
	// Connect are the upstream connect times of those requests (zero from
	// a shim that sends no connect-time section).
	Connect ConnectTimes
}

// Server serves the pick protocol on unix-socket connections.
type Server struct {
	cfg   Config
	mu    sync.Mutex
	lns   map[net.Listener]struct{}
	conns map[net.Conn]struct{}
	subs  map[*conn]struct{} // subscribed connections (guarded by mu)
	wg    sync.WaitGroup
	// frames counts the frames decoded, by type.
	frames [256]atomic.Uint64
}

// Frames returns how many frames of the given type the server has decoded:
// TypePick counts the requests whose shim asked Go in the request path.
func (s *Server) Frames(typ byte) uint64 { return s.frames[typ].Load() }

// FrameTypes names the shim-to-Go frame types, for metrics.
var FrameTypes = map[byte]string{
	TypePick: "pick", TypeDone: "feedback", TypeNeedVars: "backend_info", TypeLease: "lease",
	TypeCounts: "counts", TypeRequests: "requests", TypeSubscribe: "subscribe", TypeTable: "table", TypePremade: "premade",
	TypeRoute: "route",
}

// NewServer returns a Server.
func NewServer(cfg Config) *Server {
	if cfg.Candidates <= 0 {
		cfg.Candidates = 3
	}
	if cfg.Candidates > MaxCandidates {
		cfg.Candidates = MaxCandidates
	}
	if cfg.Mode == 0 {
		cfg.Mode = 0o660
	}
	if cfg.FrameTimeout <= 0 {
		cfg.FrameTimeout = 5 * time.Second
	}
	return &Server{cfg: cfg, lns: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}, subs: map[*conn]struct{}{}}
}

// Listen creates the unix socket at path with its final mode and group: it
// binds a temporary name next to path, sets mode and group, then renames it
// into place, so the socket is never reachable with other permissions.
func (s *Server) Listen(path string) (net.Listener, error) {
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("picksock: listen %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	if err := os.Chmod(tmp, s.cfg.Mode); err != nil {
		return fail(fmt.Errorf("picksock: chmod %s: %w", tmp, err))
	}
	if s.cfg.Chown && s.cfg.GID >= 0 {
		if err := os.Chown(tmp, -1, s.cfg.GID); err != nil {
			return fail(fmt.Errorf("picksock: chown %s: %w", tmp, err))
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("picksock: rename %s: %w", path, err))
	}
	return ln, nil
}

// Serve accepts connections on ln until it is closed or Close is called.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("picksock: accept: %w", err)
		}
		delay = 0
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			_ = s.ServeConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// Close stops listeners and connections and waits for handlers to return.
func (s *Server) Close() error {
	s.mu.Lock()
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// conn is the per-connection state reused across frames.
type conn struct {
	s       *Server
	req     Request
	att     balancer.Attempt
	picks   [MaxCandidates]balancer.Pick
	cands   [MaxCandidates]string
	cookies [MaxCandidates]string
	metrics RequestMetrics
	out     []byte

	// w is the connection. Replies are written by ServeConn's loop and
	// generation pushes by the subscription's goroutine, under wmu.
	w          io.Writer
	wmu        sync.Mutex
	pushed     uint32 // the last generation pushed (guarded by wmu)
	subscribed bool
	// routes: the shim's hello asked for routes (HelloRoutes): its backend
	// infos carry them, and tables and premade draws follow.
	routes  bool
	done    chan struct{} // closed when ServeConn returns
	pushers sync.WaitGroup
}

// ServeConn serves one connection until EOF or error. Replies to all frames
// read in one read are written together.
func (s *Server) ServeConn(c io.ReadWriteCloser) error {
	cs := &conn{s: s, out: make([]byte, 0, 64<<10), w: c, done: make(chan struct{})}
	defer func() {
		close(cs.done)
		c.Close()
		cs.pushers.Wait()
		s.mu.Lock()
		delete(s.subs, cs)
		s.mu.Unlock()
	}()
	br := bufio.NewReaderSize(c, MaxFrame+4)
	dl, _ := c.(interface{ SetReadDeadline(time.Time) error })
	for {
		// An idle connection may wait as long as it likes; once a frame
		// has begun, the rest of it must come within FrameTimeout, or a
		// client that stalls mid-frame would hold the connection forever.
		if _, err := br.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		partial := false
		if dl != nil && !wholeFrame(br) {
			partial = true
			if err := dl.SetReadDeadline(time.Now().Add(s.cfg.FrameTimeout)); err != nil {
				return err
			}
		}
		hdr, err := br.Peek(4)
		if err != nil {
			return fmt.Errorf("picksock: frame header: %w", err)
		}
		n, err := FrameLen(hdr)
		if err != nil {
			return err
		}
		frame, err := br.Peek(n)
		if err != nil {
			return fmt.Errorf("picksock: frame body: %w", err)
		}
		if partial {
			if err := dl.SetReadDeadline(time.Time{}); err != nil {
				return err
			}
		}
		if err := cs.handle(frame); err != nil {
			return err
		}
		if _, err := br.Discard(n); err != nil {
			return err
		}
		if br.Buffered() == 0 && len(cs.out) > 0 {
			cs.wmu.Lock()
			_, err := c.Write(cs.out)
			cs.wmu.Unlock()
			if err != nil {
				return err
			}
			cs.out = cs.out[:0]
		}
	}
}

// wholeFrame reports whether br holds a whole frame (or one whose length is
// invalid, which the caller refuses without reading on).
func wholeFrame(br *bufio.Reader) bool {
	if br.Buffered() < 4 {
		return false
	}
	hdr, _ := br.Peek(4)
	n, err := FrameLen(hdr)
	return err != nil || br.Buffered() >= n
}

// handle processes one frame and appends any reply to cs.out; the benchmark
// measures the server-side cost per frame through it.
func (cs *conn) handle(frame []byte) error {
	q := &cs.req
	if err := DecodeRequest(frame, q); err != nil {
		if len(frame) >= headerLen && q.Type == TypePick {
			cs.out = AppendPickReply(cs.out, q.ID, CodeBadFrame, false, 0, "", -1, nil, nil)
			return nil
		}
		return err
	}
	cs.s.frames[q.Type].Add(1)
	switch q.Type {
	case TypePick:
		cs.pick(q)
	case TypeRoute:
		gen := uint32(cs.s.cfg.Picker.Version())
		chosen, alt, err := cs.s.cfg.Picker.RouteFor(unsafeString(q.Backend), q)
		code := byte(CodeOK)
		if err != nil {
			code = CodeUnknownBackend
		}
		cs.out = AppendRouteReply(cs.out, q.ID, code, alt, gen, chosen)
	case TypeDone:
		// The backend and peer names are only read during the call.
		cs.s.cfg.Picker.Feedback(unsafeString(q.Backend), unsafeString(q.Peer), balancer.DoneInfo{
			ConnectTime:  time.Duration(q.ConnectUS) * time.Microsecond,
			HeaderTime:   time.Duration(q.HeaderUS) * time.Microsecond,
			ResponseTime: time.Duration(q.ResponseUS) * time.Microsecond,
			Status:       int(q.Status),
			Failed:       q.Failed,
		})
	case TypeNeedVars:
		p := cs.s.cfg.Picker
		gen := uint32(p.Version())
		name := unsafeString(q.Backend)
		if name == HelloRoutes {
			cs.routes = true
		}
		peers := p.Peers(name)
		code := byte(CodeOK)
		if peers == nil {
			code = CodeUnknownBackend
		}
		info := BackendInfo{Code: code, Gen: gen, Leasable: p.Leasable(name), Scored: p.Scored(name),
			Premade: p.Premadeable(name), Vars: p.NeededVars(name), Peers: peers}
		_, info.HashTable = p.HashTable(name)
		if rt, ok := cs.route(name); ok {
			// A routed backend: its own table, and premade draws of its
			// weight rule.
			info.Route = &rt
			_, info.HashTable = p.OwnTable(name)
			info.Premade = true
		}
		cs.out = AppendInfoReply(cs.out, q.ID, info)
	case TypeLease:
		cs.lease(q)
	case TypeSubscribe:
		cs.subscribe()
	case TypeTable:
		cs.table(q)
	case TypePremade:
		cs.premade(q)
	case TypeRequests:
		if f := cs.s.cfg.Requests; f != nil {
			cs.metrics = RequestMetrics{Labels: q.Labels, Count: q.Requests, SumUS: q.SumUS, Buckets: q.Buckets[:q.NBuckets],
				Connect: ConnectTimes{Count: q.ConnCount, SumUS: q.ConnSumUS, Samples: q.Samples[:q.NSamples]}}
			f(&cs.metrics)
		}
	case TypeCounts:
		if q.Timed {
			cs.s.cfg.Picker.CountTimed(unsafeString(q.Backend), unsafeString(q.Peer), balancer.TimedCounts{
				Completed: uint64(q.Completed), Failed: uint64(q.FailedN),
				RTTSum: time.Duration(q.RTTSumUS) * time.Microsecond, RTTMax: time.Duration(q.RTTMaxUS) * time.Microsecond,
			})
			break
		}
		cs.s.cfg.Picker.Count(unsafeString(q.Backend), unsafeString(q.Peer), uint64(q.Completed), uint64(q.FailedN))
	}
	return nil
}

// route returns the backend's route if this connection's shim applies
// routes.
func (cs *conn) route(name string) (balancer.Route, bool) {
	if !cs.routes {
		return balancer.Route{}, false
	}
	return cs.s.cfg.Picker.Route(name)
}

// lease answers a lease request. The generation is read before the lease is
// taken: if a sync lands in between, the shim sees a new generation on its
// next reply and refreshes its peer list.
func (cs *conn) lease(q *Request) {
	p := cs.s.cfg.Picker
	gen := uint32(p.Version())
	count := min(int(q.Count), MaxLease)
	start, n, err := p.Lease(unsafeString(q.Backend), count)
	l := Lease{Gen: gen, Start: start, Count: uint16(count), N: uint16(min(n, 65535))}
	switch {
	case errors.Is(err, balancer.ErrUnknownBackend):
		l = Lease{Code: CodeUnknownBackend, Gen: gen}
	case err != nil:
		l = Lease{Code: CodeNoPeer, Gen: gen}
	}
	cs.out = AppendLeaseReply(cs.out, q.ID, l)
}

func (cs *conn) pick(q *Request) {
	cs.att.Reset()
	k := cs.s.cfg.Candidates
	gen := uint32(cs.s.cfg.Picker.Version())
	n, err := cs.s.cfg.Picker.CandidatePicks(unsafeString(q.Backend), q, &cs.att, cs.picks[:k])
	if err != nil {
		code := byte(CodeNoPeer)
		if errors.Is(err, balancer.ErrUnknownBackend) {
			code = CodeUnknownBackend
		}
		cs.out = AppendPickReply(cs.out, q.ID, code, false, gen, "", -1, nil, nil)
		return
	}
	for i := 0; i < n; i++ {
		cs.cands[i] = cs.picks[i].Peer
		cs.cookies[i] = cs.picks[i].SetCookie
	}
	first := &cs.picks[0]
	cs.out = AppendPickReply(cs.out, q.ID, CodeOK, first.Alternative, gen, first.Backend, first.EWMAScore, cs.cands[:n], cs.cookies[:n])
}

// subscribe starts pushing the connection's shim every new generation: the
// current one at once (after the replies before it), then one TypeGen frame
// per change, so decision data the shim applies itself is dropped as soon as
// Go has a newer configuration. Several changes in quick succession may push
// only the last.
func (cs *conn) subscribe() {
	if cs.subscribed {
		return
	}
	cs.subscribed = true
	p := cs.s.cfg.Picker
	changed := p.Changed()
	cs.wmu.Lock()
	cs.pushed = uint32(p.Version())
	cs.out = AppendGen(cs.out, cs.pushed)
	cs.wmu.Unlock()
	cs.s.mu.Lock()
	cs.s.subs[cs] = struct{}{}
	cs.s.mu.Unlock()
	cs.pushers.Go(func() {
		for {
			select {
			case <-changed:
			case <-cs.done:
				return
			}
			// Changed before Version: a Sync after this read closes the
			// new channel, and the loop comes round again.
			changed = p.Changed()
			if !cs.push(uint32(p.Version())) {
				return
			}
		}
	})
}

// push writes a generation frame unless gen was the last one pushed; it
// reports false when the connection failed (and closes it).
func (cs *conn) push(gen uint32) bool {
	cs.wmu.Lock()
	defer cs.wmu.Unlock()
	if gen == cs.pushed {
		return true
	}
	cs.pushed = gen
	if _, err := cs.w.Write(AppendGen(nil, gen)); err != nil {
		if c, ok := cs.w.(io.Closer); ok {
			c.Close()
		}
		return false
	}
	return true
}

// Push writes the current generation to every subscribed connection that
// has not had it yet, and returns once it is written. The configuration
// API calls it after a Sync and before it answers the POST, so that every
// nginx worker has the push in its socket before the POST's answer leaves
// (the per-connection goroutines push too, but a moment later).
func (s *Server) Push() {
	gen := uint32(s.cfg.Picker.Version())
	s.mu.Lock()
	subs := make([]*conn, 0, len(s.subs))
	for cs := range s.subs {
		subs = append(subs, cs)
	}
	s.mu.Unlock()
	for _, cs := range subs {
		cs.push(gen)
	}
}

// table answers a table request with the chunk of the backend's hash table
// from the offset asked for. The generation is read before the table, as in
// lease: a Sync in between labels the new table with the old generation,
// which the shim drops at the push that follows, never the other way round.
func (cs *conn) table(q *Request) {
	p := cs.s.cfg.Picker
	gen := uint32(p.Version())
	name := unsafeString(q.Backend)
	t, ok := p.HashTable(name)
	if _, routed := cs.route(name); routed {
		t, ok = p.OwnTable(name)
	}
	code := byte(CodeOK)
	npeers := 0
	switch {
	case ok:
		// The owners index the peer list of the backend info.
		npeers = len(p.Peers(name))
	case p.Peers(name) == nil:
		code = CodeUnknownBackend
	default:
		code = CodeNoTable
	}
	cs.out = AppendTableReply(cs.out, q.ID, code, gen, t, npeers, q.Offset)
}

// premade answers a premade request: up to count picks (as many as fit in one
// frame) for requests that carry none of the backend's variables, each made
// by CandidatePicks as a pick request without variables would be.
func (cs *conn) premade(q *Request) {
	p := cs.s.cfg.Picker
	gen := uint32(p.Version())
	name := unsafeString(q.Backend)
	dst, start := appendHeader(cs.out, TypePremadeReply, q.ID)
	if _, routed := cs.route(name); routed {
		cs.out = cs.premadeRouted(dst, start, name, gen, min(int(q.Count), MaxPremade))
		return
	}
	switch {
	case !p.Premadeable(name):
		code := byte(CodeNoTable)
		if p.Peers(name) == nil {
			code = CodeUnknownBackend
		}
		dst = append(dst, code)
		dst = binary.BigEndian.AppendUint32(dst, gen)
		dst = append(dst, 0, 0)
		cs.out = finish(dst, start)
		return
	}
	dst = append(dst, CodeOK)
	dst = binary.BigEndian.AppendUint32(dst, gen)
	npos := len(dst)
	dst = append(dst, 0, 0)
	var empty Request
	k := cs.s.cfg.Candidates
	count := min(int(q.Count), MaxPremade)
	made := 0
	sticky := true // until NewSessions says otherwise
	// The batch's picks are made at one moment: each peer's ewma cost is
	// read once for all of them (issue 16: the sidecar's premade batches of
	// an ewma backend took ~1 ms each, on the cores nginx needs).
	cs.att.ScoreOnce(true)
	defer cs.att.ScoreOnce(false)
	for made < count {
		cs.att.Reset()
		var ok bool
		if sticky {
			n, err := p.NewSessions(name, &cs.att, cs.cands[:k], cs.cookies[:k])
			if errors.Is(err, balancer.ErrNotSticky) {
				sticky = false
				cs.att.Reset()
			} else {
				if err != nil {
					break
				}
				for i := range n {
					cs.picks[i] = balancer.Pick{Backend: name, Peer: cs.cands[i], EWMAScore: -1}
				}
				if dst, ok = premadeEntryKeys(dst, start, cs.picks[:n], cs.cookies[:n]); !ok {
					break
				}
				made++
				continue
			}
		}
		if own, ok := p.RouteOwn(name, &cs.att); ok {
			// Routed to a round-robin backend: the shim takes the
			// peers from that backend's own rotation (a lease).
			if dst, ok = premadeOwnEntry(dst, start, own, own != name); !ok {
				break
			}
			made++
			continue
		}
		n, err := p.CandidatePicks(name, &empty, &cs.att, cs.picks[:k])
		if err != nil {
			break
		}
		if dst, ok = premadeEntry(dst, start, cs.picks[:n]); !ok {
			break
		}
		made++
	}
	if made == 0 {
		dst[npos-5] = CodeNoPeer
	}
	binary.BigEndian.PutUint16(dst[npos:], uint16(made))
	cs.out = finish(dst, start)
}

// premadeRouted writes the body of a premade reply for a routed backend
// (BackendInfo.Route): count draws of its weight rule, each with what the
// chosen backend's own data cannot give the shim: a new sticky session's
// peers and keys, or the picks of an ewma or least_request backend. A
// backend whose request takes its peers from its lease or table gets the
// choice only (flags bit 2).
func (cs *conn) premadeRouted(dst []byte, start int, name string, gen uint32, count int) []byte {
	p := cs.s.cfg.Picker
	dst = append(dst, CodeOK)
	dst = binary.BigEndian.AppendUint32(dst, gen)
	npos := len(dst)
	dst = append(dst, 0, 0)
	var empty Request
	k := cs.s.cfg.Candidates
	made := 0
	// As in premade: an ewma side's costs read once for the batch (they
	// are read again when the draws alternate between two scored sides).
	cs.att.ScoreOnce(true)
	defer cs.att.ScoreOnce(false)
	for made < count {
		cs.att.Reset()
		chosen, kind, ok := p.RouteAhead(name, &cs.att)
		if !ok {
			break
		}
		switch kind {
		case balancer.RouteOnly:
			dst, ok = premadeOwnEntry(dst, start, chosen, chosen != name)
		case balancer.RouteSessions:
			n, err := p.NewSessions(name, &cs.att, cs.cands[:k], cs.cookies[:k])
			if err != nil {
				ok = false
				break
			}
			for i := range n {
				cs.picks[i] = balancer.Pick{Backend: chosen, Alternative: chosen != name, Peer: cs.cands[i], EWMAScore: -1}
			}
			dst, ok = premadeEntryKeys(dst, start, cs.picks[:n], cs.cookies[:n])
		case balancer.RoutePicks:
			n, err := p.CandidatePicks(name, &empty, &cs.att, cs.picks[:k])
			if err != nil {
				ok = false
				break
			}
			dst, ok = premadeEntry(dst, start, cs.picks[:n])
		}
		if !ok {
			break
		}
		made++
	}
	if made == 0 {
		dst[npos-5] = CodeNoPeer
	}
	binary.BigEndian.PutUint16(dst[npos:], uint16(made))
	return finish(dst, start)
}
