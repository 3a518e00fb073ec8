package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
	c := benchCase{path: "/x/", nkeys: 3}
	spec := loadSpec{Conns: 4, Slice: 20 * time.Millisecond, Round: 100 * time.Millisecond, Warmup: 20 * time.Millisecond}
	for i, s := range []*countingServer{fast, slow} {
		addr := strings.TrimPrefix(s.URL, "http://")
		spec.Fronts[i] = loadTarget{Addr: addr, Requests: loadRequests(addr, c, "")}
	}
	l, err := newLoadRun(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if err := l.warm(); err != nil {
		t.Fatal(err)
	}
	fast.served.Store(0)
	slow.served.Store(0)
	slow.conns.Store(0)
	res, err := l.round()
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
		if got := hist(f.Hist).count(); got != float64(f.Requests) {
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
	sf, ss := res.Fronts[0].sample(), res.Fronts[1].sample()
	if ss.p50 < 2 || sf.p50 >= 2 {
		t.Errorf("p50: fast %.3f ms, slow %.3f ms; want the slow one at 2 ms or more and the fast one below", sf.p50, ss.p50)
	}
	if sf.rps <= ss.rps {
		t.Errorf("rps: fast %.0f, slow %.0f", sf.rps, ss.rps)
	}
}

// A front that answers other than 200 fails the round, through the
// worker's protocol, with the answer it gave.
func TestLoadWorkerProtocol(t *testing.T) {
	var a, b *countingServer
	var overlaps atomic.Int64
	a = newCountingServer(t, 0, 0, &b, &overlaps)
	b = newCountingServer(t, 0, 0, &a, &overlaps)
	spec := loadSpec{Conns: 2, Slice: 10 * time.Millisecond, Round: 20 * time.Millisecond, Warmup: 10 * time.Millisecond}
	aAddr, bAddr := strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://")
	spec.Fronts[0] = loadTarget{Addr: aAddr, Requests: loadRequests(aAddr, benchCase{path: "/ok"}, "")}
	spec.Fronts[1] = loadTarget{Addr: bAddr, Requests: loadRequests(bAddr, benchCase{path: "/fail"}, "")}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveLoad(inR, outW); _ = outW.Close() }()
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
	var res roundResult
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
		t.Errorf("serveLoad: %v", err)
	}
}

// The requests are wrk.lua's: per URI, one bare, one with the cookie, one
// per header value.
func TestLoadRequests(t *testing.T) {
	got := loadRequests("h:1", benchCase{path: "/p/", nkeys: 2, header: "X-Canary", values: []string{"yes", "no"}}, "route=abc")
	want := []string{
		"GET /p/k0 HTTP/1.1\r\nHost: h:1\r\n\r\n",
		"GET /p/k0 HTTP/1.1\r\nHost: h:1\r\nCookie: route=abc\r\n\r\n",
		"GET /p/k0 HTTP/1.1\r\nHost: h:1\r\nX-Canary: yes\r\n\r\n",
		"GET /p/k0 HTTP/1.1\r\nHost: h:1\r\nX-Canary: no\r\n\r\n",
		"GET /p/k1 HTTP/1.1\r\nHost: h:1\r\n\r\n",
		"GET /p/k1 HTTP/1.1\r\nHost: h:1\r\nCookie: route=abc\r\n\r\n",
		"GET /p/k1 HTTP/1.1\r\nHost: h:1\r\nX-Canary: yes\r\n\r\n",
		"GET /p/k1 HTTP/1.1\r\nHost: h:1\r\nX-Canary: no\r\n\r\n",
	}
	if len(got) != len(want) {
		t.Fatalf("%d requests, want %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("request %d = %q, want %q", i, got[i], want[i])
		}
	}
}

// readAnswer reads Content-Length answers and refuses what it cannot
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
		status, closing, err := readAnswer(bufio.NewReader(strings.NewReader(tc.in)))
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
