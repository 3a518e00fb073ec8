package picksock

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/switchyard-proxy/switchyard/balancer"
)

const payload = `[
 {"name":"default-web-80","port":80,"load-balance":"round_robin","endpoints":[
   {"address":"127.0.0.2","port":"8080"},{"address":"127.0.0.3","port":"8080"},{"address":"127.0.0.4","port":"8080"}]},
 {"name":"default-hash-80","port":80,"upstreamHashByConfig":{"upstream-hash-by":"$request_uri"},"endpoints":[
   {"address":"127.0.0.2","port":"8080"},{"address":"127.0.0.3","port":"8080"},{"address":"127.0.0.4","port":"8080"}]}
]`

func newRegistry(t testing.TB) *balancer.Registry {
	t.Helper()
	return registryOf(t, payload)
}

// registryOf is a Registry synced to a /configuration/backends payload.
func registryOf(t testing.TB, backends string) *balancer.Registry {
	t.Helper()
	bs, err := balancer.DecodeBackends([]byte(backends))
	if err != nil {
		t.Fatal(err)
	}
	r := balancer.NewRegistry(balancer.Config{})
	if err := r.Sync(bs); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDecodeRequest(t *testing.T) {
	pick := AppendPick(nil, 7, "default-web-80", "request_uri", "/a", "https", "on")
	var q Request
	if err := DecodeRequest(pick, &q); err != nil {
		t.Fatal(err)
	}
	if q.Type != TypePick || q.ID != 7 || string(q.Backend) != "default-web-80" || q.NVars != 2 {
		t.Fatalf("decoded %+v", q)
	}
	if v, ok := q.Var("https"); !ok || string(v) != "on" {
		t.Fatalf("https = %q %v", v, ok)
	}
	if _, ok := q.Var("host"); ok {
		t.Fatal("host should be unset")
	}
	done := AppendDone(nil, "b", "127.0.0.2:80", 1, 2, 3, 200, true)
	if err := DecodeRequest(done, &q); err != nil {
		t.Fatal(err)
	}
	got := []any{q.Type, string(q.Peer), q.ConnectUS, q.HeaderUS, q.ResponseUS, q.Status, q.Failed}
	if d := cmp.Diff([]any{byte(TypeDone), "127.0.0.2:80", uint32(1), uint32(2), uint32(3), uint16(200), true}, got); d != "" {
		t.Fatal(d)
	}

	bad := map[string]struct {
		frame []byte
		want  error
	}{
		"truncated":   {pick[:len(pick)-1], ErrShort},
		"version":     {func() []byte { b := append([]byte(nil), pick...); b[4] = 9; return b }(), ErrVersion},
		"type":        {func() []byte { b := append([]byte(nil), pick...); b[5] = 0x7f; return b }(), ErrType},
		"too big":     {[]byte{0xff, 0, 0, 0, 1, 1}, ErrTooBig},
		"trailing":    {func() []byte { b := AppendNeedVars(nil, 1, "x"); b = append(b, 0); b[3]++; return b }(), ErrTrail},
		"inner short": {func() []byte { b := AppendNeedVars(nil, 1, "x"); b[10] = 50; return b }(), ErrShort},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			if err := DecodeRequest(tc.frame, &q); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestPickReplyRoundTrip(t *testing.T) {
	b := AppendPickReply(nil, 42, CodeOK, true, 7, "canary", 1.5, []string{"127.0.0.2:80", "[fd00::1]:8080"}, []string{"c=1; Path=/", ""})
	id, p, err := DecodePickReply(b)
	if err != nil {
		t.Fatal(err)
	}
	want := PickReply{Code: CodeOK, Alternative: true, Gen: 7, Backend: "canary", EWMAScore: 1.5,
		Candidates: []string{"127.0.0.2:80", "[fd00::1]:8080"}, Cookies: []string{"c=1; Path=/", ""}}
	if d := cmp.Diff(want, p); id != 42 || d != "" {
		t.Fatalf("id %d %s", id, d)
	}
}

func TestVarsReplyRoundTrip(t *testing.T) {
	b := AppendVarsReply(nil, 9, CodeOK, 3, true, false, []string{"request_uri", "http_x_canary"}, []string{"10.0.0.1:80", "10.0.0.2:80"})
	id, info, err := DecodeVarsReply(b)
	if err != nil {
		t.Fatal(err)
	}
	want := BackendInfo{Code: CodeOK, Gen: 3, Leasable: true, ConnectSamples: true, Tables: true, TimedCounts: true, Vars: []string{"request_uri", "http_x_canary"}, Peers: []string{"10.0.0.1:80", "10.0.0.2:80"}}
	if d := cmp.Diff(want, info); id != 9 || d != "" {
		t.Fatalf("id %d %s", id, d)
	}
	// A peer list larger than a frame is cut to what fits.
	many := make([]string, 5000)
	for i := range many {
		many[i] = fmt.Sprintf("10.%d.%d.%d:8080", i>>16, (i>>8)&255, i&255)
	}
	b = AppendVarsReply(nil, 1, CodeOK, 1, false, true, nil, many)
	if n, err := FrameLen(b); err != nil || n != len(b) || n-4 > MaxFrame {
		t.Fatalf("frame of %d bytes, FrameLen %d %v", len(b), n, err)
	}
	if _, info, err = DecodeVarsReply(b); err != nil || len(info.Peers) == 0 || len(info.Peers) >= 5000 || info.Peers[0] != many[0] {
		t.Fatalf("cut peer list: %d peers, %v", len(info.Peers), err)
	}
}

// TestServerOverUnixSocket drives a real Registry through a real unix socket:
// pipelined picks in one write come back by id, round robin spreads evenly,
// chash matches Registry.Pick, unknown backends get CodeUnknownBackend, and
// the socket has mode 0660.
func TestServerOverUnixSocket(t *testing.T) {
	reg := newRegistry(t)
	srv := NewServer(Config{Picker: reg})
	path := filepath.Join(t.TempDir(), "pick.sock")
	ln, err := srv.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o660 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v err %v", st.Mode(), err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	readReply := func() (uint32, PickReply) {
		t.Helper()
		var hdr [4]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			t.Fatal(err)
		}
		n, err := FrameLen(hdr[:])
		if err != nil {
			t.Fatal(err)
		}
		f := make([]byte, n)
		copy(f, hdr[:])
		if _, err := io.ReadFull(br, f[4:]); err != nil {
			t.Fatal(err)
		}
		id, p, err := DecodePickReply(f)
		if err != nil {
			t.Fatal(err)
		}
		return id, p
	}

	// 300 picks in one write, with feedback frames interleaved.
	var batch []byte
	for i := 0; i < 300; i++ {
		batch = AppendPick(batch, uint32(i+1), "default-web-80")
		batch = AppendDone(batch, "default-web-80", "127.0.0.2:8080", 100, 200, 300, 200, false)
	}
	if _, err := c.Write(batch); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for i := 0; i < 300; i++ {
		id, p := readReply()
		if id != uint32(i+1) || p.Code != CodeOK || len(p.Candidates) != 3 || p.Backend != "default-web-80" || p.Gen != uint32(reg.Version()) {
			t.Fatalf("reply %d: id %d %+v", i, id, p)
		}
		counts[p.Candidates[0]]++
	}
	want := map[string]int{"127.0.0.2:8080": 100, "127.0.0.3:8080": 100, "127.0.0.4:8080": 100}
	if d := cmp.Diff(want, counts); d != "" {
		t.Fatalf("round robin spread (-want +got):\n%s", d)
	}

	for _, uri := range []string{"/a", "/b", "/c/d", "/e?x=1"} {
		var a balancer.Attempt
		exp, err := reg.Pick("default-hash-80", balancer.VarsFunc(func(n string) ([]byte, bool) {
			if n == "request_uri" {
				return []byte(uri), true
			}
			return nil, false
		}), &a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(AppendPick(nil, 9, "default-hash-80", "request_uri", uri)); err != nil {
			t.Fatal(err)
		}
		_, p := readReply()
		if p.Code != CodeOK || p.Candidates[0] != exp.Peer {
			t.Fatalf("chash %s: got %+v want %s", uri, p, exp.Peer)
		}
	}

	// The default retry budget of 3 gives 3 distinct peers.
	cs := &conn{s: NewServer(Config{Picker: reg})}
	if err := cs.handle(AppendPick(nil, 6, "default-web-80")); err != nil {
		t.Fatal(err)
	}
	if _, p, err := DecodePickReply(cs.out); err != nil || len(p.Candidates) != 3 || p.Candidates[0] == p.Candidates[1] || p.Candidates[1] == p.Candidates[2] || p.Candidates[0] == p.Candidates[2] {
		t.Fatalf("candidates %v", p.Candidates)
	}
	if _, err := c.Write(AppendPick(nil, 5, "nope")); err != nil {
		t.Fatal(err)
	}
	if id, p := readReply(); id != 5 || p.Code != CodeUnknownBackend || len(p.Candidates) != 0 {
		t.Fatalf("unknown backend: %d %+v", id, p)
	}

	// Backend info: the variables and the fallback peer list.
	cs.out = cs.out[:0]
	if err := cs.handle(AppendNeedVars(nil, 11, "default-hash-80")); err != nil {
		t.Fatal(err)
	}
	if id, info, err := DecodeVarsReply(cs.out); err != nil || id != 11 || info.Code != CodeOK || len(info.Peers) != 3 ||
		!slices.Contains(info.Vars, "request_uri") || info.Gen != uint32(reg.Version()) {
		t.Fatalf("info: %d %+v %v", id, info, err)
	}
	cs.out = cs.out[:0]
	if err := cs.handle(AppendNeedVars(nil, 12, "nope")); err != nil {
		t.Fatal(err)
	}
	if _, info, err := DecodeVarsReply(cs.out); err != nil || info.Code != CodeUnknownBackend || len(info.Peers) != 0 {
		t.Fatalf("unknown info: %+v %v", info, err)
	}

	// Leases: round robin only, positions continue the shared rotation.
	cs.out = cs.out[:0]
	if err := cs.handle(AppendNeedVars(nil, 13, "default-web-80")); err != nil {
		t.Fatal(err)
	}
	_, info, err := DecodeVarsReply(cs.out)
	if err != nil || !info.Leasable || info.Scored {
		t.Fatalf("round robin info %+v %v; want leasable, not scored", info, err)
	}
	// Aggregated completions reach the endpoint's counters.
	if err := cs.handle(AppendCounts(nil, "default-web-80", info.Peers[1], 7, 3)); err != nil {
		t.Fatal(err)
	}
	for _, b := range reg.Backends() {
		for _, ep := range b.Endpoints {
			if b.Name == "default-web-80" && ep.Address == info.Peers[1] && ep.Failures != 3 {
				t.Errorf("after a counts frame: %+v; want 3 failures", ep)
			}
		}
	}
	cs.out = cs.out[:0]
	if err := cs.handle(AppendLease(nil, 14, "default-web-80", 64)); err != nil {
		t.Fatal(err)
	}
	id, l, err := DecodeLeaseReply(cs.out)
	if err != nil || id != 14 || l.Code != CodeOK || l.Count != 64 || l.N != 3 {
		t.Fatalf("lease %d %+v %v", id, l, err)
	}
	var a balancer.Attempt
	next, _ := reg.Pick("default-web-80", balancer.VarsFunc(func(string) ([]byte, bool) { return nil, false }), &a)
	if want := info.Peers[(l.Start+65)%3]; next.Peer != want {
		t.Errorf("the pick after a lease of 64 from %d got %s; want %s", l.Start, next.Peer, want)
	}
	for _, tc := range []struct {
		backend string
		code    byte
	}{{"default-hash-80", CodeNoPeer}, {"nope", CodeUnknownBackend}} {
		cs.out = cs.out[:0]
		if err := cs.handle(AppendLease(nil, 15, tc.backend, 64)); err != nil {
			t.Fatal(err)
		}
		if _, l, err := DecodeLeaseReply(cs.out); err != nil || l.Code != tc.code || l.Count != 0 {
			t.Errorf("lease of %s: %+v %v; want code %d", tc.backend, l, err, tc.code)
		}
	}
}

// requestsGot is what Config.Requests saw of one frame, copied out of the
// connection's buffers.
type requestsGot struct {
	Labels  string
	Count   uint32
	SumUS   uint64
	Buckets []uint32
	Connect ConnectTimes
}

func copyRequests(m *RequestMetrics) requestsGot {
	return requestsGot{Labels: string(m.Labels), Count: m.Count, SumUS: m.SumUS, Buckets: slices.Clone(m.Buckets),
		Connect: ConnectTimes{Count: m.Connect.Count, SumUS: m.Connect.SumUS, Samples: slices.Clone(m.Connect.Samples)}}
}

// Requests frames, with and without the connect-time section, reach
// Config.Requests intact and get no reply.
func TestRequestsFrame(t *testing.T) {
	const labels = "h\t200\tGET\t/\tns\ting\tsvc\t"
	full := make([]uint32, MaxSamples)
	var fullSum uint64
	for i := range full {
		full[i] = uint32(i * 1000)
		fullSum += uint64(full[i])
	}
	for name, tc := range map[string]struct {
		frame []byte
		want  requestsGot
	}{
		// What a shim sends a server without FlagConnectSamples, and what
		// shims before the section sent.
		"no connect section": {
			AppendRequests(nil, labels, 7, 1<<33+9, []uint32{4, 0, 3}),
			requestsGot{labels, 7, 1<<33 + 9, []uint32{4, 0, 3}, ConnectTimes{}},
		},
		"every connect time": {
			AppendRequestsConnect(nil, labels, 7, 1<<33+9, []uint32{4, 0, 3}, ConnectTimes{3, 6000, []uint32{1000, 2000, 3000}}),
			requestsGot{labels, 7, 1<<33 + 9, []uint32{4, 0, 3}, ConnectTimes{3, 6000, []uint32{1000, 2000, 3000}}},
		},
		"a sample of the connect times": {
			AppendRequestsConnect(nil, labels, 7, 9, []uint32{7}, ConnectTimes{5, 1<<33 + 1, []uint32{1, 1 << 31}}),
			requestsGot{labels, 7, 9, []uint32{7}, ConnectTimes{5, 1<<33 + 1, []uint32{1, 1 << 31}}},
		},
		"requests without an upstream": {
			AppendRequestsConnect(nil, labels, 2, 10, []uint32{2}, ConnectTimes{}),
			requestsGot{labels, 2, 10, []uint32{2}, ConnectTimes{}},
		},
		"MaxSamples samples": {
			AppendRequestsConnect(nil, labels, 1<<20, 0, nil, ConnectTimes{1 << 20, fullSum + 5, full}),
			requestsGot{labels, 1 << 20, 0, nil, ConnectTimes{1 << 20, fullSum + 5, full}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var got []requestsGot
			srv := NewServer(Config{Picker: newRegistry(t), Requests: func(m *RequestMetrics) { got = append(got, copyRequests(m)) }})
			cs := &conn{s: srv}
			if err := cs.handle(tc.frame); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]requestsGot{tc.want}, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("Config.Requests got (-want +got):\n%s", d)
			}
			if len(cs.out) != 0 {
				t.Errorf("reply %x; want none", cs.out)
			}
		})
	}
}

// Malformed and inconsistent requests frames are refused: the connection
// is closed, as for any malformed frame other than a pick.
func TestRequestsFrameRejected(t *testing.T) {
	const labels = "h\t200\tGET\t/\tns\ting\tsvc\t"
	ok := AppendRequestsConnect(nil, labels, 3, 30, []uint32{1, 2}, ConnectTimes{2, 3000, []uint32{1000, 2000}})
	// edit returns a copy of ok with f applied to it; the length prefix is
	// fixed up unless f changed it.
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), ok...)) }
	grow := func(b []byte, extra ...byte) []byte {
		b = append(b, extra...)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		return b
	}
	end := len(ok)
	nsAt := end - 2*4 - 2 // the sample count, before two samples
	tooMany := AppendRequestsConnect(nil, labels, 3, 30, []uint32{1, 2}, ConnectTimes{2, 3000, []uint32{1000, 2000}})
	binary.BigEndian.PutUint16(tooMany[nsAt:], MaxSamples+1)
	for name, tc := range map[string]struct {
		frame []byte
		want  error
	}{
		"buckets do not add up": {
			AppendRequests(nil, labels, 3, 30, []uint32{1, 1}), ErrInvalid},
		"more connect times than requests": {
			AppendRequestsConnect(nil, labels, 1, 30, []uint32{1}, ConnectTimes{2, 3000, []uint32{1000, 2000}}), ErrInvalid},
		"more samples than connect times": {
			AppendRequestsConnect(nil, labels, 3, 30, []uint32{3}, ConnectTimes{1, 3000, []uint32{1000, 2000}}), ErrInvalid},
		"samples over the sum": {
			AppendRequestsConnect(nil, labels, 3, 30, []uint32{3}, ConnectTimes{3, 100, []uint32{1000, 2000}}), ErrInvalid},
		"all samples, another sum": {
			AppendRequestsConnect(nil, labels, 3, 30, []uint32{3}, ConnectTimes{2, 3001, []uint32{1000, 2000}}), ErrInvalid},
		"sum beyond 2^32 µs per connect time": {
			AppendRequestsConnect(nil, labels, 3, 30, []uint32{3}, ConnectTimes{1, 1 << 32, nil}), ErrInvalid},
		"too many samples":       {tooMany, ErrTooBig},
		"section cut short":      {edit(func(b []byte) []byte { return grow(b[:end-3]) }), ErrShort},
		"section count only":     {edit(func(b []byte) []byte { return grow(b[:nsAt-8]) }), ErrShort},
		"a sample missing":       {edit(func(b []byte) []byte { return grow(b[:end-4]) }), ErrShort},
		"a byte after samples":   {edit(func(b []byte) []byte { return grow(b, 0) }), ErrTrail},
		"length prefix too long": {edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b, uint32(len(b))); return b }), ErrShort},
	} {
		t.Run(name, func(t *testing.T) {
			var q Request
			if err := DecodeRequest(tc.frame, &q); !errors.Is(err, tc.want) {
				t.Fatalf("DecodeRequest: %v; want %v", err, tc.want)
			}
			called := false
			srv := NewServer(Config{Picker: newRegistry(t), Requests: func(*RequestMetrics) { called = true }})
			if err := (&conn{s: srv}).handle(tc.frame); err == nil || called {
				t.Errorf("handle: %v, Config.Requests called: %v; want an error (the connection closes) and no call", err, called)
			}
		})
	}
	var q Request
	if err := DecodeRequest(ok, &q); err != nil {
		t.Fatalf("the unedited frame: %v", err)
	}
}

// A counts frame's timing section: decoded, and refused when its numbers
// cannot all be true; a frame without one is not timed.
func TestCountsTimed(t *testing.T) {
	var q Request
	if err := DecodeRequest(AppendTimedCounts(nil, "b", "10.0.0.1:80", 10, 2, 8000, 1500), &q); err != nil ||
		!q.Timed || q.Completed != 10 || q.FailedN != 2 || q.RTTSumUS != 8000 || q.RTTMaxUS != 1500 || string(q.Peer) != "10.0.0.1:80" {
		t.Fatalf("timed counts: %+v %v", q, err)
	}
	if err := DecodeRequest(AppendTimedCounts(nil, "b", "10.0.0.1:80", 3, 0, 1<<40, 1<<31), &q); !errors.Is(err, ErrInvalid) {
		t.Errorf("a sum above 3 × the longest: %v; want ErrInvalid", err)
	}
	if err := DecodeRequest(AppendCounts(nil, "b", "10.0.0.1:80", 4, 4), &q); err != nil || q.Timed {
		t.Fatalf("untimed counts: %+v %v", q, err)
	}
	for name, f := range map[string][]byte{
		"more failures than attempts":          AppendCounts(nil, "b", "p", 1, 2),
		"the longest above the sum":            AppendTimedCounts(nil, "b", "p", 2, 0, 10, 11),
		"the sum above the longest × the rest": AppendTimedCounts(nil, "b", "p", 3, 1, 301, 150),
		"timings of failed attempts only":      AppendTimedCounts(nil, "b", "p", 2, 2, 5, 5),
	} {
		if err := DecodeRequest(f, &q); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
		if err := (&conn{s: NewServer(Config{Picker: newRegistry(t)})}).handle(f); err == nil {
			t.Errorf("%s: handled; want an error (the connection closes)", name)
		}
	}
	cut := AppendTimedCounts(nil, "b", "p", 2, 0, 10, 5)
	cut = cut[:len(cut)-2]
	binary.BigEndian.PutUint32(cut, uint32(len(cut)-4))
	if err := DecodeRequest(cut, &q); !errors.Is(err, ErrShort) {
		t.Errorf("a timing section cut short: %v; want ErrShort", err)
	}
}

// Backend-info replies tell the shim it may send connect-time sections.
func TestVarsReplyConnectSamples(t *testing.T) {
	for _, leasable := range []bool{false, true} {
		_, info, err := DecodeVarsReply(AppendVarsReply(nil, 1, CodeUnknownBackend, 2, leasable, false, nil, nil))
		if err != nil || !info.ConnectSamples || !info.TimedCounts || info.Leasable != leasable || info.Scored {
			t.Errorf("leasable=%v: %+v %v; want ConnectSamples and TimedCounts", leasable, info, err)
		}
	}
}

func BenchmarkPickFrame(b *testing.B) {
	benchHandle(b, newConn(newRegistry(b)), AppendPick(nil, 1, "default-web-80", "request_uri", "/x", "https", "on"))
}

// newConn is a connection of a server over reg, with room for replies.
func newConn(reg *balancer.Registry) *conn {
	return &conn{s: NewServer(Config{Picker: reg}), out: make([]byte, 0, 64<<10)}
}

// benchHandle measures cs handling frame, its reply dropped each time.
func benchHandle(b *testing.B, cs *conn, frame []byte) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cs.out = cs.out[:0]
		if err := cs.handle(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPremadeEWMA is the sidecar's work for one premade batch of an
// ewma backend (what the shim asks for every ~40 ms under load): 760
// picks of 3 candidates over 3 scored peers, as a 1-worker ewma run of
// test/bench/shim-real.sh asks (docs/benchmarks.md).
func BenchmarkPremadeEWMA(b *testing.B) {
	reg := registryOf(b, `[{"name":"e","port":80,"load-balance":"ewma","endpoints":[
		{"address":"10.0.0.1","port":"80"},{"address":"10.0.0.2","port":"80"},{"address":"10.0.0.3","port":"80"}]}]`)
	for i, peer := range []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"} {
		reg.Feedback("e", peer, balancer.DoneInfo{ResponseTime: time.Duration(300+100*i) * time.Microsecond})
	}
	benchHandle(b, newConn(reg), AppendPremade(nil, 1, "e", 760))
}

// BenchmarkPremadeCanaryWeight is the sidecar's work for one premade batch
// of draws of a round-robin backend with a canary by weight 30 (both sides
// leased), what a 1-worker canary_weight run of test/bench/shim-real.sh asks
// for about 25 times a second: 1000 draws, each the choice only.
func BenchmarkPremadeCanaryWeight(b *testing.B) {
	cs := newConn(registryOf(b, `[
 {"name":"main","port":80,"alternativeBackends":["canary"],"endpoints":[{"address":"10.0.0.1","port":"80"},{"address":"10.0.0.2","port":"80"}]},
 {"name":"canary","port":80,"noServer":true,"trafficShapingPolicy":{"weight":30},"endpoints":[{"address":"10.0.1.1","port":"80"}]}]`))
	frame := AppendPremade(nil, 1, "main", 1000)
	if err := cs.handle(frame); err != nil {
		b.Fatal(err)
	}
	if len(cs.out) < 1000 {
		b.Fatalf("reply of %d bytes for 1000 draws", len(cs.out))
	}
	benchHandle(b, cs, frame)
}
