package picksock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// Version is the protocol version carried in every frame.
const Version = 1

// Frame types. Replies set the high bit of the request's type.
const (
	TypePick         = 0x01 // shim -> Go: pick candidates for a request
	TypeDone         = 0x02 // shim -> Go: completion feedback of one attempt (no reply)
	TypeNeedVars     = 0x03 // shim -> Go: backend info (variables, peers, leasable)
	TypeLease        = 0x04 // shim -> Go: reserve positions of a round-robin rotation
	TypeCounts       = 0x05 // shim -> Go: aggregated completions of one endpoint (no reply)
	TypeRequests     = 0x06 // shim -> Go: aggregated request metrics of one label set (no reply)
	TypeSubscribe    = 0x07 // shim -> Go: push this connection every new generation (TypeGen)
	TypeTable        = 0x08 // shim -> Go: a chunk of a backend's hash table
	TypePremade      = 0x09 // shim -> Go: picks made ahead for requests without the backend's variables
	TypeRoute        = 0x0A // shim -> Go: the canary routing of one request, no pick (a pick frame's body)
	TypePickReply    = 0x81
	TypeVarsReply    = 0x83
	TypeLeaseReply   = 0x84
	TypeGen          = 0x87 // Go -> shim, id 0: the generation changed
	TypeTableReply   = 0x88
	TypePremadeReply = 0x89
	TypeRouteReply   = 0x8A // a pick reply without candidates
)

// Error codes of a pick reply.
const (
	CodeOK             = 0
	CodeUnknownBackend = 1 // nginx answers 503
	CodeNoPeer         = 2 // nginx answers 502
	CodeBadFrame       = 3
)

const (
	headerLen = 4 + 1 + 1 + 4 // length, version, type, id
	// MaxFrame bounds the body of a frame (everything after the length).
	MaxFrame = 64 << 10
	// MaxVars bounds the variables of one pick request.
	MaxVars = 16
	// MaxCandidates bounds the candidates of one pick reply.
	MaxCandidates = 8
	// MaxLease bounds the positions one lease reserves.
	MaxLease = 1024
)

// Errors of the frame decoder.
var (
	ErrShort   = errors.New("picksock: truncated frame")
	ErrVersion = errors.New("picksock: unsupported protocol version")
	ErrTooBig  = errors.New("picksock: frame too large")
	ErrType    = errors.New("picksock: unknown frame type")
	ErrTrail   = errors.New("picksock: trailing bytes in frame")
	// ErrInvalid: the frame's fields contradict each other (a requests
	// frame whose buckets do not add up to its count, or whose connect
	// times are not a subset of its requests).
	ErrInvalid = errors.New("picksock: inconsistent fields in frame")
)

// Var is one request variable as sent by the shim.
type Var struct{ Name, Value []byte }

// Request is a decoded shim frame. Byte slices alias the input buffer.
type Request struct {
	Type    byte
	ID      uint32
	Backend []byte
	// Pick:
	NVars int
	Vars  [MaxVars]Var
	// Done:
	Peer                            []byte
	ConnectUS, HeaderUS, ResponseUS uint32
	Status                          uint16
	Failed                          bool
	// Lease, Premade:
	Count uint16
	// Table: the first point of the chunk asked for.
	Offset uint32
	// Counts (Peer is set too):
	Completed, FailedN uint32
	// Counts, the optional timing section (Timed; all zero when the frame
	// has none): of the Completed attempts, the Completed-FailedN that
	// succeeded took RTTSumUS microseconds of connect plus response time
	// in all, the longest RTTMaxUS.
	Timed    bool
	RTTSumUS uint64
	RTTMaxUS uint32
	// Requests: tab-separated labels, request count, summed duration and
	// the duration histogram's per-bucket counts (not cumulative).
	Labels   []byte
	Requests uint32
	SumUS    uint64
	NBuckets int
	Buckets  [MaxBuckets]uint32
	// Requests, the optional connect-time section (all zero when the frame
	// has none): how many of the requests have an upstream connect time,
	// their sum, and a uniform sample of them, all in microseconds.
	ConnCount uint32
	ConnSumUS uint64
	NSamples  int
	Samples   [MaxSamples]uint32
}

const (
	// MaxBuckets bounds the histogram buckets of a requests frame.
	MaxBuckets = 16
	// MaxSamples bounds the connect-time samples of a requests frame.
	MaxSamples = 1024
)

// Var implements balancer.Request over the frame's variables without
// allocating.
func (r *Request) Var(name string) ([]byte, bool) {
	for i := 0; i < r.NVars; i++ {
		if string(r.Vars[i].Name) == name {
			return r.Vars[i].Value, true
		}
	}
	return nil, false
}

// FrameLen reports the total length of the frame at the start of b, or 0 if
// fewer than 4 bytes are available. It fails for frames over MaxFrame.
func FrameLen(b []byte) (int, error) {
	if len(b) < 4 {
		return 0, nil
	}
	n := binary.BigEndian.Uint32(b)
	if n > MaxFrame {
		return 0, fmt.Errorf("%w: %d bytes", ErrTooBig, n)
	}
	if n < headerLen-4 {
		return 0, fmt.Errorf("%w: body of %d bytes", ErrShort, n)
	}
	return int(n) + 4, nil
}

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) u8() byte {
	if len(r.b) < 1 {
		r.bad = true
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u16() uint16 {
	if len(r.b) < 2 {
		r.bad = true
		return 0
	}
	v := binary.BigEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *reader) u32() uint32 {
	if len(r.b) < 4 {
		r.bad = true
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

// u64 reads a 64-bit value sent as two 32-bit halves, high first.
func (r *reader) u64() uint64 { return uint64(r.u32())<<32 | uint64(r.u32()) }

// u32s fills dst with 32-bit values.
func (r *reader) u32s(dst []uint32) {
	for i := range dst {
		dst[i] = r.u32()
	}
}

func (r *reader) bytes(n int) []byte {
	if len(r.b) < n {
		r.bad = true
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// DecodeRequest decodes one whole frame (as delimited by FrameLen) into q.
// It never allocates; on error q's contents are unspecified.
func DecodeRequest(frame []byte, q *Request) error {
	n, err := FrameLen(frame)
	if err != nil {
		return err
	}
	if n == 0 || n != len(frame) {
		return ErrShort
	}
	r := reader{b: frame[4:]}
	if v := r.u8(); v != Version {
		return fmt.Errorf("%w: %d", ErrVersion, v)
	}
	q.Type = r.u8()
	q.ID = r.u32()
	q.Backend = r.bytes(int(r.u8()))
	switch q.Type {
	case TypePick, TypeRoute:
		nv := int(r.u8())
		if nv > MaxVars {
			return fmt.Errorf("%w: %d variables (max %d)", ErrTooBig, nv, MaxVars)
		}
		q.NVars = nv
		for i := 0; i < nv; i++ {
			q.Vars[i].Name = r.bytes(int(r.u8()))
			q.Vars[i].Value = r.bytes(int(r.u16()))
		}
	case TypeDone:
		q.Peer = r.bytes(int(r.u8()))
		q.ConnectUS = r.u32()
		q.HeaderUS = r.u32()
		q.ResponseUS = r.u32()
		q.Status = r.u16()
		q.Failed = r.u8() != 0
	case TypeNeedVars:
	case TypeLease, TypePremade:
		q.Count = r.u16()
	case TypeSubscribe:
	case TypeTable:
		q.Offset = r.u32()
	case TypeCounts:
		q.Peer = r.bytes(int(r.u8()))
		q.Completed = r.u32()
		q.FailedN = r.u32()
		q.Timed, q.RTTSumUS, q.RTTMaxUS = len(r.b) > 0, 0, 0
		if q.Timed {
			q.RTTSumUS = r.u64()
			q.RTTMaxUS = r.u32()
		}
	case TypeRequests:
		// The backend field is empty for this type; labels follow.
		q.Labels = r.bytes(int(r.u16()))
		q.Requests = r.u32()
		q.SumUS = r.u64()
		nb := int(r.u8())
		if nb > MaxBuckets {
			return fmt.Errorf("%w: %d buckets (max %d)", ErrTooBig, nb, MaxBuckets)
		}
		q.NBuckets = nb
		r.u32s(q.Buckets[:nb])
		// The connect-time section is optional: shims that predate it, or
		// that have not seen FlagConnectSamples, end the frame here.
		q.ConnCount, q.ConnSumUS, q.NSamples = 0, 0, 0
		if len(r.b) > 0 {
			q.ConnCount = r.u32()
			q.ConnSumUS = r.u64()
			ns := int(r.u16())
			if ns > MaxSamples {
				return fmt.Errorf("%w: %d samples (max %d)", ErrTooBig, ns, MaxSamples)
			}
			q.NSamples = ns
			r.u32s(q.Samples[:ns])
		}
	default:
		return fmt.Errorf("%w: 0x%02x", ErrType, q.Type)
	}
	if r.bad {
		return ErrShort
	}
	if len(r.b) != 0 {
		return ErrTrail
	}
	switch q.Type {
	case TypeRequests:
		return checkRequests(q)
	case TypeCounts:
		return checkCounts(q)
	}
	return nil
}

// checkCounts rejects a counts frame whose numbers cannot all be true: no
// more failures than attempts, and timings of the successful attempts
// only, the longest no more than their sum and their sum no more than the
// longest times their number.
func checkCounts(q *Request) error {
	if q.FailedN > q.Completed {
		return fmt.Errorf("%w: %d failures of %d attempts", ErrInvalid, q.FailedN, q.Completed)
	}
	if !q.Timed {
		return nil
	}
	ok := uint64(q.Completed - q.FailedN)
	if uint64(q.RTTMaxUS) > q.RTTSumUS || q.RTTSumUS > ok*uint64(q.RTTMaxUS) {
		return fmt.Errorf("%w: %d successful attempts taking %d µs, the longest %d µs", ErrInvalid, ok, q.RTTSumUS, q.RTTMaxUS)
	}
	return nil
}

// checkRequests rejects a requests frame whose numbers cannot all be true:
// every request falls in exactly one bucket; only requests have connect
// times; the samples are some of those times, each under 2^32 µs.
func checkRequests(q *Request) error {
	if q.NBuckets > 0 {
		var n uint64
		for _, b := range q.Buckets[:q.NBuckets] {
			n += uint64(b)
		}
		if n != uint64(q.Requests) {
			return fmt.Errorf("%w: %d requests in buckets adding up to %d", ErrInvalid, q.Requests, n)
		}
	}
	if q.ConnCount > q.Requests || q.NSamples > int(q.ConnCount) {
		return fmt.Errorf("%w: %d samples of %d connect times of %d requests", ErrInvalid, q.NSamples, q.ConnCount, q.Requests)
	}
	if q.ConnSumUS > uint64(q.ConnCount)*math.MaxUint32 {
		return fmt.Errorf("%w: connect time sum %d µs over %d requests", ErrInvalid, q.ConnSumUS, q.ConnCount)
	}
	var sum uint64
	for _, s := range q.Samples[:q.NSamples] {
		sum += uint64(s)
	}
	if sum > q.ConnSumUS || q.NSamples == int(q.ConnCount) && sum != q.ConnSumUS {
		return fmt.Errorf("%w: samples add up to %d µs, connect times to %d", ErrInvalid, sum, q.ConnSumUS)
	}
	return nil
}

func appendHeader(dst []byte, typ byte, id uint32) ([]byte, int) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, Version, typ)
	dst = binary.BigEndian.AppendUint32(dst, id)
	return dst, start
}

func finish(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

func appendStr8(dst []byte, s string) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	dst = append(dst, byte(len(s)))
	return append(dst, s...)
}

// AppendPick appends a pick request frame (used by tests and the Go client).
func AppendPick(dst []byte, id uint32, backend string, vars ...string) []byte {
	return appendPick(dst, TypePick, id, backend, vars)
}

// AppendRoute appends a route request frame: a pick frame's body, answered
// with the backend the request is routed to and no pick.
func AppendRoute(dst []byte, id uint32, backend string, vars ...string) []byte {
	return appendPick(dst, TypeRoute, id, backend, vars)
}

func appendPick(dst []byte, typ byte, id uint32, backend string, vars []string) []byte {
	dst, start := appendHeader(dst, typ, id)
	dst = appendStr8(dst, backend)
	dst = append(dst, byte(len(vars)/2))
	for i := 0; i+1 < len(vars); i += 2 {
		dst = appendStr8(dst, vars[i])
		v := vars[i+1]
		if len(v) > math.MaxUint16 {
			v = v[:math.MaxUint16]
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(v)))
		dst = append(dst, v...)
	}
	return finish(dst, start)
}

// AppendDone appends a completion-feedback frame.
func AppendDone(dst []byte, backend, peer string, connectUS, headerUS, responseUS uint32, status uint16, failed bool) []byte {
	dst, start := appendHeader(dst, TypeDone, 0)
	dst = appendStr8(dst, backend)
	dst = appendStr8(dst, peer)
	dst = binary.BigEndian.AppendUint32(dst, connectUS)
	dst = binary.BigEndian.AppendUint32(dst, headerUS)
	dst = binary.BigEndian.AppendUint32(dst, responseUS)
	dst = binary.BigEndian.AppendUint16(dst, status)
	f := byte(0)
	if failed {
		f = 1
	}
	dst = append(dst, f)
	return finish(dst, start)
}

// AppendNeedVars appends a backend-info query frame.
func AppendNeedVars(dst []byte, id uint32, backend string) []byte {
	dst, start := appendHeader(dst, TypeNeedVars, id)
	dst = appendStr8(dst, backend)
	return finish(dst, start)
}

// PickReply is a pick answer.
type PickReply struct {
	Code        byte
	Alternative bool
	// Gen is the low 32 bits of the balancer's configuration version when the
	// pick was made; the shim refreshes its backend info when it changes.
	Gen       uint32
	Backend   string
	EWMAScore float64
	// Candidates are the peers in attempt order; Cookies[i] is the
	// Set-Cookie value to send when Candidates[i] serves ("" for none).
	Candidates []string
	Cookies    []string
}

func appendStr16(dst []byte, s string) []byte {
	if len(s) > math.MaxUint16 {
		s = ""
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

// AppendPickReply appends a pick reply frame for request id. cookies is
// either nil or as long as cands.
func AppendPickReply(dst []byte, id uint32, code byte, alt bool, gen uint32, backend string, score float64, cands, cookies []string) []byte {
	return appendPickReply(dst, TypePickReply, id, code, alt, gen, backend, score, cands, cookies)
}

// AppendRouteReply appends a route reply: a pick reply of type
// TypeRouteReply that names the backend and carries no candidates.
func AppendRouteReply(dst []byte, id uint32, code byte, alt bool, gen uint32, backend string) []byte {
	return appendPickReply(dst, TypeRouteReply, id, code, alt, gen, backend, -1, nil, nil)
}

func appendPickReply(dst []byte, typ byte, id uint32, code byte, alt bool, gen uint32, backend string, score float64, cands, cookies []string) []byte {
	dst, start := appendHeader(dst, typ, id)
	flags := byte(0)
	if alt {
		flags = 1
	}
	dst = append(dst, code, flags)
	dst = binary.BigEndian.AppendUint32(dst, gen)
	dst = appendStr8(dst, backend)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(score))
	dst = append(dst, byte(len(cands)))
	for i, c := range cands {
		dst = appendStr8(dst, c)
		if cookies != nil {
			dst = appendStr16(dst, cookies[i])
		} else {
			dst = append(dst, 0, 0)
		}
	}
	return finish(dst, start)
}

// BackendInfo is the answer to a backend-info query.
type BackendInfo struct {
	Code     byte // CodeOK or CodeUnknownBackend
	Gen      uint32
	Leasable bool // picks need no request attributes: use TypeLease
	// Scored: the balancer learns from latencies: send the attempts'
	// timings, in counts frames with a timing section when TimedCounts,
	// else a TypeDone per request.
	Scored bool
	// TimedCounts: the server takes counts frames with a timing section.
	// Every server of this version sets it; a shim sends an older one a
	// TypeDone per request instead.
	TimedCounts bool
	// ConnectSamples: the server takes requests frames with a connect-time
	// section. Every server of this version sets it; older ones do not,
	// and a shim sends them the section-less form.
	ConnectSamples bool
	// Tables: the server takes TypeSubscribe, TypeTable and TypePremade
	// (set by every server of this version, whatever the backend).
	Tables bool
	// HashTable: the backend's picks are a lookup in its hash table
	// (TypeTable); Premade: picks for requests without any of Vars can be
	// made ahead (TypePremade).
	HashTable, Premade bool
	Vars               []string
	Peers              []string
	// Route, when not nil, is the backend's canary routing, which the shim
	// evaluates itself (flags bit 6; only to a shim whose hello asked for
	// routes, HelloRoutes). Its HashTable and Premade then describe the
	// backend's own table and the premade draws of its weight rule.
	Route *balancer.Route
}

// HelloRoutes is the backend name of the hello of a shim that applies
// routes (BackendInfo.Route): a server that knows it answers that shim's
// backend infos with routes, tables of backends with alternatives and
// premade draws; an older server answers it as an unknown backend.
const HelloRoutes = "\x00routes"

// AppendCounts appends an aggregated-completions frame without a timing
// section (for backends Go does not score).
func AppendCounts(dst []byte, backend, peer string, completed, failed uint32) []byte {
	dst, start := appendCountsHead(dst, backend, peer, completed, failed)
	return finish(dst, start)
}

// AppendTimedCounts appends an aggregated-completions frame with its timing
// section (for backends Go scores): of the completed attempts, the
// completed-failed that succeeded took rttSumUS microseconds of connect
// plus response time in all, the longest rttMaxUS.
func AppendTimedCounts(dst []byte, backend, peer string, completed, failed uint32, rttSumUS uint64, rttMaxUS uint32) []byte {
	dst, start := appendCountsHead(dst, backend, peer, completed, failed)
	dst = binary.BigEndian.AppendUint32(dst, uint32(rttSumUS>>32))
	dst = binary.BigEndian.AppendUint32(dst, uint32(rttSumUS))
	dst = binary.BigEndian.AppendUint32(dst, rttMaxUS)
	return finish(dst, start)
}

func appendCountsHead(dst []byte, backend, peer string, completed, failed uint32) ([]byte, int) {
	dst, start := appendHeader(dst, TypeCounts, 0)
	dst = appendStr8(dst, backend)
	dst = appendStr8(dst, peer)
	dst = binary.BigEndian.AppendUint32(dst, completed)
	dst = binary.BigEndian.AppendUint32(dst, failed)
	return dst, start
}

// AppendRequests appends an aggregated request-metrics frame without a
// connect-time section (what shims before it send). Its backend field is
// empty.
func AppendRequests(dst []byte, labels string, count uint32, sumUS uint64, buckets []uint32) []byte {
	return appendRequests(dst, labels, count, sumUS, buckets, nil)
}

// ConnectTimes is the connect-time section of a requests frame: Count of
// the requests had an upstream connect time (their last attempt's), adding
// up to SumUS microseconds; Samples holds up to MaxSamples of those times,
// a uniform sample of them when Count is larger.
type ConnectTimes struct {
	Count   uint32
	SumUS   uint64
	Samples []uint32
}

// AppendRequestsConnect appends a requests frame with a connect-time
// section. Samples beyond MaxSamples are left out.
func AppendRequestsConnect(dst []byte, labels string, count uint32, sumUS uint64, buckets []uint32, c ConnectTimes) []byte {
	return appendRequests(dst, labels, count, sumUS, buckets, &c)
}

func appendRequests(dst []byte, labels string, count uint32, sumUS uint64, buckets []uint32, c *ConnectTimes) []byte {
	dst, start := appendHeader(dst, TypeRequests, 0)
	dst = append(dst, 0) // no backend
	dst = appendStr16(dst, labels)
	dst = binary.BigEndian.AppendUint32(dst, count)
	dst = binary.BigEndian.AppendUint32(dst, uint32(sumUS>>32))
	dst = binary.BigEndian.AppendUint32(dst, uint32(sumUS))
	dst = append(dst, byte(len(buckets)))
	for _, b := range buckets {
		dst = binary.BigEndian.AppendUint32(dst, b)
	}
	if c != nil {
		samples := c.Samples[:min(len(c.Samples), MaxSamples)]
		dst = binary.BigEndian.AppendUint32(dst, c.Count)
		dst = binary.BigEndian.AppendUint32(dst, uint32(c.SumUS>>32))
		dst = binary.BigEndian.AppendUint32(dst, uint32(c.SumUS))
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(samples)))
		for _, s := range samples {
			dst = binary.BigEndian.AppendUint32(dst, s)
		}
	}
	return finish(dst, start)
}

// AppendLease appends a lease request for count rotation positions.
func AppendLease(dst []byte, id uint32, backend string, count uint16) []byte {
	dst, start := appendHeader(dst, TypeLease, id)
	dst = appendStr8(dst, backend)
	dst = binary.BigEndian.AppendUint16(dst, count)
	return finish(dst, start)
}

// Lease is the answer to a lease request: positions Start+1 .. Start+Count
// (uint32 arithmetic) of the rotation over N peers, in the order of the
// backend info's peer list.
type Lease struct {
	Code  byte
	Gen   uint32
	Start uint32
	Count uint16
	N     uint16
}

// AppendLeaseReply appends a lease reply frame.
func AppendLeaseReply(dst []byte, id uint32, l Lease) []byte {
	dst, start := appendHeader(dst, TypeLeaseReply, id)
	dst = append(dst, l.Code)
	dst = binary.BigEndian.AppendUint32(dst, l.Gen)
	dst = binary.BigEndian.AppendUint32(dst, l.Start)
	dst = binary.BigEndian.AppendUint16(dst, l.Count)
	dst = binary.BigEndian.AppendUint16(dst, l.N)
	return finish(dst, start)
}

// DecodeLeaseReply decodes a lease reply frame.
func DecodeLeaseReply(frame []byte) (id uint32, l Lease, err error) {
	if n, err := FrameLen(frame); err != nil || n == 0 || n != len(frame) {
		return 0, l, ErrShort
	}
	r := reader{b: frame[4:]}
	if r.u8() != Version || r.u8() != TypeLeaseReply {
		return 0, l, ErrType
	}
	id = r.u32()
	l.Code = r.u8()
	l.Gen = r.u32()
	l.Start = r.u32()
	l.Count = r.u16()
	l.N = r.u16()
	if r.bad || len(r.b) != 0 {
		return 0, Lease{}, ErrShort
	}
	return id, l, nil
}

// Flags of a backend-info reply. flagConnectSamples and flagTables describe
// the server and are set in every reply; the others the backend.
const (
	flagLeasable       = 1
	flagScored         = 2
	flagConnectSamples = 4 // decodes requests frames with a connect-time section
	flagTables         = 8
	flagHashTable      = 16
	flagPremade        = 32
	flagRoute          = 64  // a route section follows the peers
	flagTimedCounts    = 128 // decodes counts frames with a timing section
)

// AppendVarsReply appends a backend-info reply frame: the variables a pick
// for the backend needs and its peers (the shim's fallback list), cut to what
// fits in one frame.
func AppendVarsReply(dst []byte, id uint32, code byte, gen uint32, leasable, scored bool, names, peers []string) []byte {
	return AppendInfoReply(dst, id, BackendInfo{Code: code, Gen: gen, Leasable: leasable, Scored: scored, Vars: names, Peers: peers})
}

// AppendInfoReply appends a backend-info reply frame from info; the server's
// own flags (ConnectSamples, Tables) are always set.
func AppendInfoReply(dst []byte, id uint32, info BackendInfo) []byte {
	dst, start := appendHeader(dst, TypeVarsReply, id)
	dst = append(dst, info.Code)
	dst = binary.BigEndian.AppendUint32(dst, info.Gen)
	flags := byte(flagConnectSamples | flagTables | flagTimedCounts)
	for _, f := range []struct {
		on  bool
		bit byte
	}{{info.Leasable, flagLeasable}, {info.Scored, flagScored}, {info.HashTable, flagHashTable}, {info.Premade, flagPremade}} {
		if f.on {
			flags |= f.bit
		}
	}
	room := MaxFrame
	if rb := routeBytes(info.Route); rb > 0 {
		flags |= flagRoute
		room -= rb
	}
	dst = append(dst, flags)
	names := info.Vars
	if len(names) > MaxVars {
		names = names[:MaxVars]
	}
	dst = append(dst, byte(len(names)))
	for _, n := range names {
		dst = appendStr8(dst, n)
	}
	npos := len(dst)
	dst = append(dst, 0, 0)
	n := 0
	for _, p := range info.Peers {
		if len(p) > 255 || len(dst)+1+len(p)-start-4 > room || n == math.MaxUint16 {
			continue
		}
		dst = appendStr8(dst, p)
		n++
	}
	binary.BigEndian.PutUint16(dst[npos:], uint16(n))
	if flags&flagRoute != 0 {
		dst = appendRoute(dst, info.Route)
	}
	return finish(dst, start)
}

// routeBytes is the size of a route section, or 0 when there is none or it
// cannot be sent (a string too long): the shim then asks Go per request.
func routeBytes(rt *balancer.Route) int {
	if rt == nil {
		return 0
	}
	for _, s := range []string{rt.Alternative, rt.PrimaryCookie, rt.PrimaryKey, rt.AltCookie, rt.AltKey, rt.HeaderVar, rt.CookieVar} {
		if len(s) > 255 {
			return 0
		}
	}
	if len(rt.HeaderValueText) > math.MaxUint16 || rt.Weight < 0 || rt.Total <= 0 || rt.Total > math.MaxInt32 {
		return 0
	}
	return 5 + len(rt.Alternative) + len(rt.PrimaryCookie) + len(rt.PrimaryKey) + len(rt.AltCookie) + len(rt.AltKey) +
		1 + 1 + len(rt.HeaderVar) + 2 + len(rt.HeaderValueText) + 1 + len(rt.CookieVar) + 8 + 2
}

// appendRoute appends a route section (routeBytes said it fits).
func appendRoute(dst []byte, rt *balancer.Route) []byte {
	dst = appendStr8(dst, rt.Alternative)
	dst = appendStr8(dst, rt.PrimaryCookie)
	dst = appendStr8(dst, rt.PrimaryKey)
	dst = appendStr8(dst, rt.AltCookie)
	dst = appendStr8(dst, rt.AltKey)
	dst = append(dst, byte(rt.Header))
	dst = appendStr8(dst, rt.HeaderVar)
	dst = appendStr16(dst, rt.HeaderValueText)
	dst = appendStr8(dst, rt.CookieVar)
	dst = binary.BigEndian.AppendUint32(dst, uint32(min(rt.Weight, math.MaxInt32)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(rt.Total))
	return append(dst, byte(rt.PrimaryOwn), byte(rt.AltOwn))
}

// decodeRoute reads a route section.
func decodeRoute(r *reader) *balancer.Route {
	rt := &balancer.Route{}
	str := func() string { return string(r.bytes(int(r.u8()))) }
	rt.Alternative, rt.PrimaryCookie, rt.PrimaryKey, rt.AltCookie, rt.AltKey = str(), str(), str(), str(), str()
	rt.Header = balancer.RouteHeader(r.u8())
	rt.HeaderVar = str()
	rt.HeaderValueText = string(r.bytes(int(r.u16())))
	rt.CookieVar = str()
	rt.Weight, rt.Total = int(r.u32()), int(r.u32())
	rt.PrimaryOwn, rt.AltOwn = balancer.OwnData(r.u8()), balancer.OwnData(r.u8())
	if rt.Header > balancer.HeaderAlways || rt.Total == 0 || rt.Weight > math.MaxInt32 || rt.Total > math.MaxInt32 ||
		rt.PrimaryOwn == 0 || rt.PrimaryOwn > balancer.OwnPicks || rt.AltOwn > balancer.OwnPicks || (rt.AltOwn == 0) != (rt.Alternative == "") {
		r.bad = true
	}
	return rt
}

// DecodePickReply decodes a pick reply frame (for Go clients and tests).
func DecodePickReply(frame []byte) (id uint32, p PickReply, err error) {
	return decodePickReply(frame, TypePickReply)
}

// DecodeRouteReply decodes a route reply frame (for Go clients and tests).
func DecodeRouteReply(frame []byte) (id uint32, p PickReply, err error) {
	return decodePickReply(frame, TypeRouteReply)
}

func decodePickReply(frame []byte, typ byte) (id uint32, p PickReply, err error) {
	if n, err := FrameLen(frame); err != nil || n == 0 || n != len(frame) {
		return 0, p, ErrShort
	}
	r := reader{b: frame[4:]}
	if r.u8() != Version || r.u8() != typ {
		return 0, p, ErrType
	}
	id = r.u32()
	p.Code = r.u8()
	p.Alternative = r.u8() == 1
	p.Gen = r.u32()
	p.Backend = string(r.bytes(int(r.u8())))
	p.EWMAScore = math.Float64frombits(binary.BigEndian.Uint64(append(r.bytes(8), make([]byte, 8)...)))
	nc := int(r.u8())
	for i := 0; i < nc && !r.bad; i++ {
		p.Candidates = append(p.Candidates, string(r.bytes(int(r.u8()))))
		p.Cookies = append(p.Cookies, string(r.bytes(int(r.u16()))))
	}
	if r.bad || len(r.b) != 0 {
		return 0, PickReply{}, ErrShort
	}
	return id, p, nil
}

// DecodeVarsReply decodes a backend-info reply frame.
func DecodeVarsReply(frame []byte) (id uint32, info BackendInfo, err error) {
	if n, err := FrameLen(frame); err != nil || n == 0 || n != len(frame) {
		return 0, info, ErrShort
	}
	r := reader{b: frame[4:]}
	if r.u8() != Version || r.u8() != TypeVarsReply {
		return 0, info, ErrType
	}
	id = r.u32()
	info.Code = r.u8()
	info.Gen = r.u32()
	flags := r.u8()
	info.Leasable, info.Scored = flags&flagLeasable != 0, flags&flagScored != 0
	info.ConnectSamples = flags&flagConnectSamples != 0
	info.Tables = flags&flagTables != 0
	info.TimedCounts = flags&flagTimedCounts != 0
	info.HashTable, info.Premade = flags&flagHashTable != 0, flags&flagPremade != 0
	nv := int(r.u8())
	for i := 0; i < nv && !r.bad; i++ {
		info.Vars = append(info.Vars, string(r.bytes(int(r.u8()))))
	}
	np := int(r.u16())
	for i := 0; i < np && !r.bad; i++ {
		info.Peers = append(info.Peers, string(r.bytes(int(r.u8()))))
	}
	if flags&flagRoute != 0 && !r.bad {
		info.Route = decodeRoute(&r)
	}
	if r.bad || len(r.b) != 0 {
		return 0, BackendInfo{}, ErrShort
	}
	return id, info, nil
}
