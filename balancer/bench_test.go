package balancer

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/internal/cputime"
)

var benchAlgorithms = []struct {
	name string
	b    Backend
	req  bvars
}{
	{"round_robin", Backend{}, bvars{}},
	{"ewma", Backend{LoadBalance: "ewma"}, bvars{}},
	{"peak_ewma", Backend{LoadBalance: "peak_ewma"}, bvars{}},
	{"least_request", Backend{LoadBalance: "least_request"}, bvars{}},
	{"chash", Backend{UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$request_uri")}}, bvars{"request_uri": []byte("/api/v1/users/12345")}},
	{"chashsubset", Backend{UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$request_uri"), HashBySubset: true, HashBySubsetSize: 3}}, bvars{"request_uri": []byte("/api/v1/users/12345")}},
	{"sticky_balanced", Backend{SessionAffinity: SessionAffinityConfig{Name: "cookie", CookieSessionAffinity: CookieSessionAffinity{Name: "route"}}}, bvars{"http_cookie": []byte("session=1; route=1700000001.4242.323811|5a881deec44117eee2efd3540198e203")}},
	{"sticky_persistent", Backend{SessionAffinity: SessionAffinityConfig{Name: "cookie", Mode: "persistent", CookieSessionAffinity: CookieSessionAffinity{Name: "route"}}}, nil},
}

func benchEndpoints(n int) []Endpoint {
	out := make([]Endpoint, n)
	for i := range out {
		out[i] = Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: PortString("8080")}
	}
	return out
}

func benchRegistry(b *testing.B, alg Backend, n int) (*Registry, bvars) {
	r := NewRegistry(Config{Now: func() time.Time { return time.Unix(1700000000, 0) }})
	alg.Name = "bench"
	alg.Endpoints = benchEndpoints(n)
	if err := r.Sync([]Backend{alg}); err != nil {
		b.Fatal(err)
	}
	// ewma and peak_ewma score real statistics (an unscored peer costs no
	// math.Exp): every endpoint has an EWMA, touched up to 10 s ago.
	for i, e := range alg.Endpoints {
		r.SetEWMA("bench", e.Address+":"+e.Port.Str, 0.001*float64(1+i%97), 1700000000-float64(i%10))
	}
	return r, nil
}

// processCPU returns the CPU time (user and system, every thread) this
// process has used, in nanoseconds, or -1 if unknown.
func processCPU() int64 {
	d, ok := cputime.Process()
	if !ok {
		return -1
	}
	return int64(d)
}

// reportCPU adds the metric cpu-ns/op: the process CPU time per op since
// start (a processCPU value), for every thread. On a machine shared with other
// work, wall-clock ns/op also counts the time the benchmark waited for a CPU;
// cpu-ns/op does not (but sums the CPUs of a parallel build).
func reportCPU(b *testing.B, start int64) {
	if end := processCPU(); start >= 0 && end >= 0 && b.N > 0 {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkPick measures one pick; BenchmarkPickDone adds the Done a data
// plane reports after the attempt.
func BenchmarkPick(b *testing.B)     { benchPick(b, false) }
func BenchmarkPickDone(b *testing.B) { benchPick(b, true) }

func benchPick(b *testing.B, done bool) {
	for _, alg := range benchAlgorithms {
		for _, n := range []int{1, 10, 100, 1000, 10000} {
			req := alg.req
			if alg.name == "sticky_persistent" {
				// a cookie naming an existing endpoint
				req = bvars{"http_cookie": []byte("route=" + md5hex("bench"+"10.0.0.1:8080"))}
			}
			b.Run(alg.name+"/endpoints="+strconv.Itoa(n), func(b *testing.B) {
				r, _ := benchRegistry(b, alg.b, n)
				var a Attempt
				a.keyBuf = make([]byte, 0, 128)
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				defer reportCPU(b, cpu)
				for b.Loop() {
					a.Reset()
					p, err := r.Pick("bench", req, &a)
					if err != nil {
						b.Fatal(err)
					}
					if done {
						r.Done(p, DoneInfo{ResponseTime: time.Millisecond})
					}
				}
			})
			b.Run(alg.name+"/endpoints="+strconv.Itoa(n)+"/parallel", func(b *testing.B) {
				r, _ := benchRegistry(b, alg.b, n)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					var a Attempt
					a.keyBuf = make([]byte, 0, 128)
					for pb.Next() {
						a.Reset()
						p, err := r.Pick("bench", req, &a)
						if err != nil {
							b.Fatal(err)
						}
						if done {
							r.Done(p, DoneInfo{ResponseTime: time.Millisecond})
						}
					}
				})
			})
		}
	}
}

// BenchmarkPickNewStickyCookie is the one pick that must allocate: a request
// without a cookie gets a new Set-Cookie.
func BenchmarkPickNewStickyCookie(b *testing.B) {
	r := NewRegistry(Config{})
	be := Backend{Name: "bench", Endpoints: benchEndpoints(100), SessionAffinity: SessionAffinityConfig{Name: "cookie",
		CookieSessionAffinity: CookieSessionAffinity{Name: "route", MaxAge: "3600", Locations: map[string][]string{"h": {"/"}}}}}
	if err := r.Sync([]Backend{be}); err != nil {
		b.Fatal(err)
	}
	req := bvars{"host": []byte("h"), "server_name": []byte("h"), "location_path": []byte("/")}
	b.ReportAllocs()
	var a Attempt
	for b.Loop() {
		a.Reset()
		p, _ := r.Pick("bench", req, &a)
		if p.SetCookie == "" {
			b.Fatal("no cookie")
		}
	}
}

// BenchmarkSync applies a payload of ten backends that differs from the
// previous one: by one endpoint per backend, or (all-new) in every endpoint,
// the worst case where no ring can be reused.
func BenchmarkSync(b *testing.B) {
	for _, n := range []int{100, 10000} {
		for _, alg := range []struct {
			name string
			b    Backend
		}{{"round_robin", Backend{}}, {"ewma", Backend{LoadBalance: "ewma"}}, {"chash", Backend{UpstreamHashBy: UpstreamHashByConfig{HashBy: strp("$request_uri")}}}} {
			for _, change := range []struct {
				name  string
				shift int
			}{{"", 1}, {"/all-new", n}} {
				b.Run("endpoints="+strconv.Itoa(n)+"/"+alg.name+change.name, func(b *testing.B) {
					// Ten backends sharing the endpoints between them. The two
					// payloads differ by one endpoint per backend (a pod
					// replaced), or in every endpoint (all-new).
					var payloads [2][]Backend
					for v := range payloads {
						eps := benchEndpoints(n + v*change.shift)[v*change.shift:]
						per := n / 10
						for i := range 10 {
							be := alg.b
							be.Name = "b" + strconv.Itoa(i)
							be.Endpoints = eps[i*per : (i+1)*per]
							payloads[v] = append(payloads[v], be)
						}
					}
					r := NewRegistry(Config{})
					b.ReportAllocs()
					cpu := processCPU()
					defer reportCPU(b, cpu)
					i := 0
					for b.Loop() {
						if err := r.Sync(payloads[i%2]); err != nil {
							b.Fatal(err)
						}
						i++
					}
				})
			}
		}
	}
}

// BenchmarkBaseline is the floor a pick by backend name cannot go below: one
// atomic pointer load, one map lookup by the name and one atomic add. Compare
// BenchmarkPick/round_robin against it in the same run (these machines are
// shared and noisy).
func BenchmarkBaseline(b *testing.B) {
	var p atomic.Pointer[map[string]*atomic.Uint32]
	m := map[string]*atomic.Uint32{"bench": new(atomic.Uint32)}
	for i := range 20 {
		m["other-"+strconv.Itoa(i)] = new(atomic.Uint32)
	}
	p.Store(&m)
	b.Run("load+map+add", func(b *testing.B) {
		b.ReportAllocs()
		cpu := processCPU()
		defer reportCPU(b, cpu)
		var sink uint32
		for b.Loop() {
			sink += (*p.Load())["bench"].Add(1)
		}
		_ = sink
	})
}

// BenchmarkApplyOneChanged is the controller's common case: n backends (a
// third round robin, a third ewma, a third chash; three endpoints each),
// Applied again with one endpoint of one backend replaced. Only that
// backend should cost anything beyond the comparison.
func BenchmarkApplyOneChanged(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run("backends="+strconv.Itoa(n), func(b *testing.B) {
			var payloads [2][]*model.Backend
			for v := range payloads {
				for i := range n {
					be := model.Backend{Name: "ns-svc" + strconv.Itoa(i) + "-80"}
					switch i % 3 {
					case 1:
						be.Algorithm = model.EWMA
					case 2:
						be.HashBy = &model.HashBy{Key: "$request_uri"}
					}
					for e := range 3 {
						be.Endpoints = append(be.Endpoints, model.Endpoint{Address: "10." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250) + "." + strconv.Itoa(e+1), Port: 8080})
					}
					if i == n/2 && v == 1 {
						be.Endpoints[0].Address = "10.255.255.1"
					}
					payloads[v] = append(payloads[v], &be)
				}
			}
			r := NewRegistry(Config{})
			if err := r.Apply(payloads[1]); err != nil { // the first build, untimed
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := r.Apply(payloads[i%2]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
