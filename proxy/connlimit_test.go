package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// connShardSizes is how many addresses each shard of l's zone holds.
func connShardSizes(t testing.TB, l *connLimit) []int {
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

// sameConnZone reports whether a and b count in the same zone.
func sameConnZone(a, b *connLimit) bool { return a.zone == b.zone && a.shm == b.shm }

// limit_conn's arithmetic: an address may have max requests in progress,
// another address has its own count, a release makes room, and a zone kept
// by name keeps its counts across configurations.
func TestConnLimitCounts(t *testing.T) {
	for _, be := range limitBackends {
		t.Run(be.name, func(t *testing.T) { testConnLimitCounts(t, be.new(t)) })
	}
}

func testConnLimitCounts(t *testing.T, r *rateLimits) {
	keep := newZoneSet()
	_, cl, err := r.routeLimits(&model.RateLimit{Zone: "ns_c_", Connections: 2, BurstMultiplier: 5}, keep)
	if err != nil {
		t.Fatal(err)
	}
	if cl == nil || cl.max != 2 {
		t.Fatalf("connLimit %+v; want max 2", cl)
	}
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2")
	h1, ok1 := cl.acquire(a)
	h2, ok2 := cl.acquire(netip.MustParseAddr("::ffff:192.0.2.1")) // the same address, mapped
	_, ok3 := cl.acquire(a)
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("three requests of one address under limit 2: %v %v %v; want true true false", ok1, ok2, ok3)
	}
	hb, ok := cl.acquire(b)
	if !ok {
		t.Fatal("another address is limited by the first's count")
	}
	hb.release()
	h1.release()
	h1.release() // a second release does nothing
	if h1.held() {
		t.Fatal("a released hold still counts a request")
	}
	h3, ok := cl.acquire(a)
	if !ok {
		t.Fatal("a released request still counts")
	}
	if _, ok := cl.acquire(a); ok {
		t.Fatal("a double release freed two places")
	}
	r.keepOnly(keep)
	_, again, err := r.routeLimits(&model.RateLimit{Zone: "ns_c_", Connections: 2}, newZoneSet())
	if err != nil {
		t.Fatal(err)
	}
	if !sameConnZone(again, cl) {
		t.Fatal("a new configuration forgot the zone")
	}
	if _, ok := again.acquire(a); ok {
		t.Fatal("a new configuration forgot the requests in progress")
	}
	h2.release()
	h3.release()
	for i, n := range connShardSizes(t, cl) {
		if n != 0 {
			t.Fatalf("shard %d keeps %d addresses with nothing in progress", i, n)
		}
	}
}

// TestConnLimitZoneBounded: a million addresses with a request in progress
// each fill the zone to its bound and no further (the others are refused,
// as nginx refuses when its zone is full); released, the zone is empty
// again, and a million more come and go without allocating.
func TestConnLimitZoneBounded(t *testing.T) {
	for _, be := range limitBackends {
		t.Run(be.name, func(t *testing.T) { testConnLimitZoneBounded(t, be.new(t)) })
	}
}

func testConnLimitZoneBounded(t *testing.T, r *rateLimits) {
	_, cl, err := r.routeLimits(&model.RateLimit{Zone: "z", Connections: 1}, newZoneSet())
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	holds := make([]connHold, 0, lcShards*lcShardMax)
	refused := 0
	for i := range 1_000_000 {
		h, ok := cl.acquire(addr(i))
		if !ok {
			refused++
			continue
		}
		holds = append(holds, h)
	}
	if len(holds) > lcShards*lcShardMax || refused == 0 {
		t.Fatalf("%d addresses counted, %d refused; want at most %d counted", len(holds), refused, lcShards*lcShardMax)
	}
	if len(holds) < lcShards*lcShardMax*9/10 {
		t.Errorf("only %d addresses counted before the zone refused; want about %d", len(holds), lcShards*lcShardMax)
	}
	for i, n := range connShardSizes(t, cl) {
		if n > lcShardMax {
			t.Fatalf("shard %d holds %d addresses; bound %d", i, n, lcShardMax)
		}
	}
	for i := range holds {
		holds[i].release()
	}
	for i, n := range connShardSizes(t, cl) {
		if n != 0 {
			t.Fatalf("shard %d keeps %d addresses after every release", i, n)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	i := 0
	allocs := testing.AllocsPerRun(1_000_000, func() {
		h, ok := cl.acquire(addr(i))
		if !ok {
			t.Fatalf("address %d refused in an empty zone", i)
		}
		h.release()
		i++
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	if allocs != 0 {
		t.Errorf("acquire and release allocate %v times; want 0", allocs)
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 1<<20 {
		t.Errorf("a million more addresses grew the heap by %d bytes", grew)
	}
}

// BenchmarkConnLimit is the cost of counting a request and releasing it,
// in each backend.
func BenchmarkConnLimit(b *testing.B) {
	for _, be := range limitBackends {
		b.Run("backend="+be.name, func(b *testing.B) {
			_, cl, err := be.new(b).routeLimits(&model.RateLimit{Zone: "z", Connections: 1 << 20}, newZoneSet())
			if err != nil {
				b.Fatal(err)
			}
			b.Run("one-address", func(b *testing.B) {
				ip := netip.MustParseAddr("192.0.2.1")
				b.ReportAllocs()
				for b.Loop() {
					h, _ := cl.acquire(ip)
					h.release()
				}
			})
			b.Run("parallel,distinct-addresses", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						h, _ := cl.acquire(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}))
						h.release()
						i++
					}
				})
			})
		})
	}
}

// clientFrom is an HTTP client whose connections come from the loopback
// address from, each request on a connection of its own.
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// status is the status of a GET of url by c (0 when it failed), its body
// read whole.
func status(c *http.Client, url string) int {
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// eventually asks until a GET of url by c answers want, for up to two
// seconds (a count is released when the proxy has written the end of a
// response, just after the client may have read it).
func eventually(t *testing.T, c *http.Client, url string, want int, why string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	got := 0
	for time.Now().Before(deadline) {
		if got = status(c, url); got == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: got %d for 2 s; want %d", why, got, want)
}

// TestConnLimitProxied: limit-connections 1 through the proxy to a real
// backend. A request whose response is in progress counts: the same
// address is refused with limit-conn-status-code, another is not; the
// count ends with the response's end, with a client that goes away
// mid-response, with an upstream error, and with a WebSocket tunnel's
// close. In each backend.
func TestConnLimitProxied(t *testing.T) {
	for _, be := range limitBackends {
		t.Run(be.name, func(t *testing.T) {
			var pc Config
			if be.name == "shared" {
				pc.LimitZones = be.new(t).shm
			}
			testConnLimitProxied(t, pc)
		})
	}
}

func testConnLimitProxied(t *testing.T, pc Config) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first ")
		w.(http.Flusher).Flush()
		switch r.URL.Path {
		case "/slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, "last")
		case "/drip":
			// Drips until the proxy goes away (at most 10 s).
			for i := 0; i < 1000 && r.Context().Err() == nil; i++ {
				_, _ = io.WriteString(w, "drip ")
				w.(http.Flusher).Flush()
				time.Sleep(10 * time.Millisecond)
			}
		}
	}))
	t.Cleanup(slow.Close)
	ws := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { _, _ = io.Copy(ws, ws) }))
	t.Cleanup(ws.Close)
	rl := &model.RateLimit{Zone: "ns_limited_1", Connections: 1, BurstMultiplier: 5}
	limited := func(path, backend string) model.Location {
		l := loc(path, model.PathTypePrefix, backend)
		l.RateLimit = rl
		return l
	}
	cfg := &model.Configuration{
		Global: model.Global{LimitConnStatus: 429},
		Backends: []*model.Backend{
			{Name: "slow", Endpoints: endpoints(strings.TrimPrefix(slow.URL, "http://"))},
			{Name: "ws", Endpoints: endpoints(strings.TrimPrefix(ws.URL, "http://"))},
			{Name: "dead", Endpoints: endpoints(deadAddr(t))},
		},
		Servers: []model.Server{{Hostname: "127.0.0.1", Locations: []model.Location{
			limited("/", "slow"), limited("/ws", "ws"), limited("/dead", "dead")}}},
	}
	p, _ := newProxy(t, cfg, pc)
	base := "http://" + serve(t, p.Serve)
	one, other := clientFrom("127.0.0.61"), clientFrom("127.0.0.62")

	// A response in progress counts until its end.
	resp, err := one.Get(base + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("first "))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	if got := status(one, base+"/fast"); got != 429 {
		t.Errorf("a second request of the address while one is in progress: got %d; want 429", got)
	}
	if got := status(other, base+"/fast"); got != 200 {
		t.Errorf("another address: got %d; want 200", got)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(rest) != "last" {
		t.Fatalf("rest of the held response: %q; want %q", rest, "last")
	}
	eventually(t, one, base+"/fast", 200, "after the response ended")

	// A client gone mid-response: the count ends when the proxy finds
	// out (its next write), though the upstream would go on.
	resp, err = one.Get(base + "/drip")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	if got := status(one, base+"/fast"); got != 429 {
		t.Errorf("while the drip is in progress: got %d; want 429", got)
	}
	resp.Body.Close() // closes the connection: keep-alives are off
	eventually(t, one, base+"/fast", 200, "after the client went away mid-response")

	// An upstream error ends the request too.
	for i := range 3 {
		if got := status(one, base+"/dead"); got != 502 {
			t.Fatalf("request %d to a dead upstream: got %d; want 502", i, got)
		}
	}

	// A WebSocket tunnel counts while it is open.
	wcfg, err := websocket.NewConfig("ws"+strings.TrimPrefix(base, "http")+"/ws", "http://127.0.0.1/")
	if err != nil {
		t.Fatal(err)
	}
	wcfg.Dialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.61")}}
	conn, err := websocket.DialConfig(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := websocket.Message.Send(conn, "ping"); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := websocket.Message.Receive(conn, &got); err != nil || got != "ping" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	if got := status(one, base+"/fast"); got != 429 {
		t.Errorf("while a WebSocket of the address is open: got %d; want 429", got)
	}
	_ = conn.Close()
	eventually(t, one, base+"/fast", 200, "after the WebSocket closed")
}

// TestLimitRate: limit-rate paces a real backend's body to the client at
// that many KiB a second after limit-rate-after KiB, as nginx's
// limit_rate (each write waits for the bytes before it), on HTTP/1.1,
// when proxy-buffering is on (nginx drops limit_rate otherwise).
func TestLimitRate(t *testing.T) {
	body := strings.Repeat("x", 300<<10)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(be.Close)
	paced := func(path string, rr *model.ResponseRate) model.Location {
		l := loc(path, model.PathTypePrefix, "be")
		l.ResponseRate = rr
		l.Proxy.Buffering = true // nginx paces buffered answers only
		return l
	}
	unbuffered := func(path string, rr *model.ResponseRate) model.Location {
		l := paced(path, rr)
		l.Proxy.Buffering = false
		return l
	}
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "be", Endpoints: endpoints(strings.TrimPrefix(be.URL, "http://"))}},
		Servers: []model.Server{{Hostname: "127.0.0.1", Locations: []model.Location{
			paced("/free", nil),
			paced("/paced", &model.ResponseRate{KBPerSecond: 1000}),
			paced("/after", &model.ResponseRate{KBPerSecond: 1000, AfterKB: 300}),
			paced("/half", &model.ResponseRate{KBPerSecond: 1000, AfterKB: 150}),
			unbuffered("/unbuffered", &model.ResponseRate{KBPerSecond: 1000}),
		}}},
	}
	base, _ := start(t, cfg)
	for _, tc := range []struct {
		path     string
		min, max time.Duration
	}{
		{"/free", 0, 200 * time.Millisecond},
		// 300 KiB at 1000 KiB/s: 0.3 s less the last write's share.
		{"/paced", 200 * time.Millisecond, 900 * time.Millisecond},
		{"/after", 0, 200 * time.Millisecond},
		{"/half", 100 * time.Millisecond, 600 * time.Millisecond},
		// proxy-buffering off: nginx drops limit_rate.
		{"/unbuffered", 0, 200 * time.Millisecond},
	} {
		start := time.Now()
		resp, err := http.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if err != nil || n != int64(len(body)) {
			t.Fatalf("%s: read %d bytes, %v; want %d", tc.path, n, err, len(body))
		}
		if took < tc.min || took > tc.max {
			t.Errorf("%s: 300 KiB took %v; want %v to %v", tc.path, took, tc.min, tc.max)
		}
	}
}

// The pacer's turns: unlimited bytes first, then no write larger than a
// second's worth, each waiting for the ones before it.
func TestPacer(t *testing.T) {
	p := newPacer(&model.ResponseRate{KBPerSecond: 1, AfterKB: 1})
	if n := p.next(4096); n != 1024 {
		t.Fatalf("first write: %d bytes; want the 1024 of limit-rate-after", n)
	}
	p.wrote(1024)
	if n := p.next(4096); n != 1024 {
		t.Fatalf("second write: %d bytes; want a second's worth, 1024", n)
	}
	p.wrote(100)
	// 100 bytes at 1024 B/s: 98 ms, less the paceSlack a start may use.
	if wait := p.due - monoNow(); wait < 98*time.Millisecond-paceSlack-time.Millisecond || wait > 98*time.Millisecond {
		t.Fatalf("after 100 bytes at 1024 B/s the next write waits %v; want 98 ms less up to %v", wait, paceSlack)
	}
	p.wrote(1024)
	if wait := p.due - monoNow(); wait < 1070*time.Millisecond || wait > 1098*time.Millisecond {
		t.Fatalf("1024 bytes more: the next write waits %v; want 1098 ms from the previous turn", wait)
	}
	var none pacer
	if none.next(5) != 5 {
		t.Fatal("the zero pacer limits")
	}
}

// TestLimitsHTTP2: on the HTTP/2 front end each stream is a request of its
// own for limit-connections (nginx's limit_conn counts HTTP/2 requests),
// counted until its handler ends; limit-rate paces the stream's body.
func TestLimitsHTTP2(t *testing.T) {
	release := make(chan struct{})
	body := strings.Repeat("x", 300<<10)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_, _ = io.WriteString(w, body)
			return
		}
		_, _ = io.WriteString(w, "first ")
		w.(http.Flusher).Flush()
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "last")
	}))
	t.Cleanup(be.Close)
	limited := loc("/", model.PathTypePrefix, "be")
	limited.RateLimit = &model.RateLimit{Zone: "ns_h2_1", Connections: 1}
	paced := loc("/", model.PathTypePrefix, "be")
	paced.ResponseRate, paced.Proxy.Buffering = &model.ResponseRate{KBPerSecond: 1000}, true
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "be", Endpoints: endpoints(strings.TrimPrefix(be.URL, "http://"))}},
		Servers: []model.Server{{Hostname: "limited.test", Locations: []model.Location{limited}},
			{Hostname: "paced.test", Locations: []model.Location{paced}}},
	}
	base := h2Proxy(t, cfg, Config{})
	c := h2Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/slow", nil)
	req.Host = "limited.test"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("protocol %s; want HTTP/2", resp.Proto)
	}
	first := make([]byte, len("first "))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	// Another stream of the same connection while the first is in
	// progress.
	if r, _ := h2Do(t, c, http.MethodGet, base+"/fast", "limited.test", nil, nil); r.StatusCode != 503 {
		t.Errorf("a second stream while one is in progress: got %d; want 503", r.StatusCode)
	}
	close(release)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		r, _ := h2Do(t, c, http.MethodGet, base+"/fast", "limited.test", nil, nil)
		if r.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the first stream ended: got %d for 2 s; want 200", r.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}

	start := time.Now()
	r, got := h2Do(t, c, http.MethodGet, base+"/big", "paced.test", nil, nil)
	took := time.Since(start)
	if r.StatusCode != 200 || len(got) != len(body) {
		t.Fatalf("paced: %d, %d bytes; want 200, %d", r.StatusCode, len(got), len(body))
	}
	if took < 200*time.Millisecond || took > 900*time.Millisecond {
		t.Errorf("300 KiB at 1000 KiB/s over HTTP/2 took %v; want 0.2 to 0.9 s", took)
	}
}
