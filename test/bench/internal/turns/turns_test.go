package turns

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is a loopback HTTP server that counts the requests it
// answers and how many it is answering at the moment.
type countingServer struct {
	*httptest.Server
	served, inflight atomic.Int64
	conns            atomic.Int64 // connections accepted
}

func newCountingServer(t *testing.T, delay time.Duration, closeEvery int64, other **countingServer, overlaps *atomic.Int64) *countingServer {
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		if o := *other; o != nil && o.inflight.Load() > 0 {
			overlaps.Add(1)
		}
		time.Sleep(delay)
		n := s.served.Add(1)
		if closeEvery > 0 && n%closeEvery == 0 {
			w.Header().Set("Connection", "close")
		}
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusBadGateway)
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// The interleaved load gives the fronts turns that never overlap, connects
// anew for each turn, counts every answer a front served, reconnects when a
// front closes, and sees a slower front as slower.
func TestInterleavedLoadTakesTurns(t *testing.T) {
	var fast, slow *countingServer
	var overlaps atomic.Int64
	fast = newCountingServer(t, 0, 7, &slow, &overlaps)
	slow = newCountingServer(t, 2*time.Millisecond, 0, &fast, &overlaps)
	spec := Spec{Conns: 4, Slice: 20 * time.Millisecond, Round: 100 * time.Millisecond, Warmup: 20 * time.Millisecond}
	for _, s := range []*countingServer{fast, slow} {
		addr := strings.TrimPrefix(s.URL, "http://")
		spec.Fronts = append(spec.Fronts, Target{Addr: addr, Requests: requests(addr, "/x/k0", "/x/k1", "/x/k2")})
	}
	l, err := NewRun(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Warm(); err != nil {
		t.Fatal(err)
	}
	fast.served.Store(0)
	slow.served.Store(0)
	slow.conns.Store(0)
	res, err := l.Round()
	if err != nil {
		t.Fatal(err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d requests reached one front while the other was answering one", n)
	}
	for i, s := range []*countingServer{fast, slow} {
		f := res.Fronts[i]
		if int64(f.Requests) != s.served.Load() {
			t.Errorf("front %d: the load counted %d answers, the server served %d", i, f.Requests, s.served.Load())
		}
		if got := f.Hist.Count(); got != float64(f.Requests) {
			t.Errorf("front %d: the histogram holds %v requests, want %d", i, got, f.Requests)
		}
		if len(f.SliceP99s) != 5 {
			t.Errorf("front %d: %d slices, want 5 (100ms rounds of 20ms slices)", i, len(f.SliceP99s))
		}
		if f.Active < 100*time.Millisecond || f.Active > 300*time.Millisecond {
			t.Errorf("front %d: active %s, want about 100ms", i, f.Active)
		}
	}
	// The slow front never closes: every one of its connections is a
	// slice's.
	if n := slow.conns.Load(); n != 5*4 {
		t.Errorf("the slow front accepted %d connections in 5 slices of 4, want 20", n)
	}
	pf, ps := res.Fronts[0].Hist.Quantile(0.5), res.Fronts[1].Hist.Quantile(0.5)
	if ps < 2 || pf >= 2 {
		t.Errorf("p50: fast %.3f ms, slow %.3f ms; want the slow one at 2 ms or more and the fast one below", pf, ps)
	}
	if rf, rs := res.Fronts[0].RPS(), res.Fronts[1].RPS(); rf <= rs {
		t.Errorf("rps: fast %.0f, slow %.0f", rf, rs)
	}
}

// A front that answers other than 200 fails the round, through the
// worker's protocol, with the answer it gave.
func TestLoadWorkerProtocol(t *testing.T) {
	var a, b *countingServer
	var overlaps atomic.Int64
	a = newCountingServer(t, 0, 0, &b, &overlaps)
	b = newCountingServer(t, 0, 0, &a, &overlaps)
	aAddr, bAddr := strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://")
	spec := Spec{
		Conns: 2, Slice: 10 * time.Millisecond, Round: 20 * time.Millisecond, Warmup: 10 * time.Millisecond,
		Fronts: []Target{{Addr: aAddr, Requests: requests(aAddr, "/ok")}, {Addr: bAddr, Requests: requests(bAddr, "/fail")}},
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Serve(inR, outW); _ = outW.Close() }()
	spec1, _ := json.Marshal(spec)
	go func() { _, _ = inW.Write(append(spec1, []byte("\nround\n")...)); _ = inW.Close() }()
	out := bufio.NewScanner(outR)
	out.Buffer(nil, 1<<20)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("first line %q, want ready", out.Text())
	}
	if !out.Scan() {
		t.Fatal("no round result")
	}
	var res Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Fronts[0].Errors != 0 || res.Fronts[0].Requests == 0 {
		t.Errorf("the healthy front: %d errors of %d", res.Fronts[0].Errors, res.Fronts[0].Requests)
	}
	if res.Fronts[1].Errors != res.Fronts[1].Requests || !strings.Contains(res.Fronts[1].FirstErr, "answered 502") {
		t.Errorf("the failing front: %d errors of %d (%q)", res.Fronts[1].Errors, res.Fronts[1].Requests, res.Fronts[1].FirstErr)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// ReadAnswer reads Content-Length answers and refuses what it cannot
// measure.
func TestReadAnswer(t *testing.T) {
	for _, tc := range []struct {
		in      string
		status  int
		closing bool
		err     string
	}{
		{in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1", status: 200},
		{in: "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nConnection: close\r\n\r\n", status: 503, closing: true},
		{in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", err: "Transfer-Encoding"},
		{in: "HTTP/1.1 200 OK\r\n\r\n", err: "without Content-Length"},
		{in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: "bad Content-Length"},
		{in: "SSH-2.0\r\n", err: "bad status line"},
		{in: "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", err: "body"},
	} {
		status, closing, err := ReadAnswer(bufio.NewReader(strings.NewReader(tc.in)))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || status != tc.status || closing != tc.closing {
			t.Errorf("%q: %d %v %v, want %d %v", tc.in, status, closing, err, tc.status, tc.closing)
		}
	}
}

// requests are GETs of paths to host.
func requests(host string, paths ...string) [][]byte {
	var reqs [][]byte
	for _, p := range paths {
		reqs = append(reqs, []byte("GET "+p+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n"))
	}
	return reqs
}

// Order gives each front its slices in passes forward and back.
func TestOrder(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		want string
	}{
		{2, 4, "01100110"},
		{3, 2, "012210"},
		{3, 3, "012210012"},
		{2, 1, "01"},
	} {
		got := ""
		for _, i := range Order(tc.n, tc.k) {
			got += strconv.Itoa(i)
		}
		if got != tc.want {
			t.Errorf("Order(%d, %d) = %s, want %s", tc.n, tc.k, got, tc.want)
		}
	}
}

// Three fronts take turns too, and a spec with one front is refused.
func TestThreeFronts(t *testing.T) {
	var none *countingServer
	var overlaps atomic.Int64
	spec := Spec{Conns: 2, Slice: 10 * time.Millisecond, Round: 30 * time.Millisecond, Warmup: 5 * time.Millisecond}
	var servers []*countingServer
	for range 3 {
		s := newCountingServer(t, 0, 0, &none, &overlaps)
		servers = append(servers, s)
		addr := strings.TrimPrefix(s.URL, "http://")
		spec.Fronts = append(spec.Fronts, Target{Addr: addr, Requests: requests(addr, "/")})
	}
	l, err := NewRun(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, s := range servers {
		s.served.Store(0)
	}
	var turns []int
	open := -1
	l.Turn = func(front int, start bool) {
		switch {
		case start && open == -1:
			open = front
		case !start && open == front:
			turns, open = append(turns, front), -1
		default:
			t.Errorf("Turn(%d, %v) with turn %d open", front, start, open)
		}
	}
	res, err := l.Round()
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Check(); err != nil {
		t.Fatal(err)
	}
	for i, f := range res.Fronts {
		if int64(f.Requests) != servers[i].served.Load() || len(f.SliceP99s) != 3 {
			t.Errorf("front %d: %d answers counted, %d served, %d slices (want 3)", i, f.Requests, servers[i].served.Load(), len(f.SliceP99s))
		}
	}
	if fmt.Sprint(turns) != fmt.Sprint(Order(3, 3)) {
		t.Errorf("Turn saw the turns %v, want %v", turns, Order(3, 3))
	}
	if _, err := NewRun(Spec{Conns: 1, Slice: time.Millisecond, Round: time.Millisecond, Fronts: spec.Fronts[:1]}); err == nil {
		t.Error("a spec with one front was taken")
	}
}
