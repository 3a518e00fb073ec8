package balancer

import (
	"context"
	"encoding/json"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// vars is a Request backed by a map, for tests.
type vars map[string]string

func (v vars) Var(name string) ([]byte, bool) {
	s, ok := v[name]
	if !ok {
		return nil, false
	}
	return []byte(s), true
}

// seqRand is a deterministic, concurrency-safe Rand for tests.
func seqRand(seed uint64) func() uint64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Uint64()
	}
}

func fixedClock(unix float64) func() time.Time {
	return func() time.Time { return time.Unix(0, int64(unix*1e9)) }
}

func eps(addrs ...string) []Endpoint {
	out := make([]Endpoint, 0, len(addrs))
	for _, a := range addrs {
		host, port := a, "80"
		for i := len(a) - 1; i >= 0; i-- {
			if a[i] == ':' {
				host, port = a[:i], a[i+1:]
				break
			}
		}
		out = append(out, Endpoint{Address: host, Port: PortString(port)})
	}
	return out
}

func strp(s string) *string { return &s }

func mustSync(t testing.TB, r *Registry, bs ...Backend) {
	t.Helper()
	if err := r.Sync(bs); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func crc32Of(s string) uint32 { return crc32.ChecksumIEEE([]byte(s)) }

// bvars is a Request that does not allocate, for allocation tests and
// benchmarks.
type bvars map[string][]byte

func (v bvars) Var(name string) ([]byte, bool) {
	b, ok := v[name]
	return b, ok
}

func toB(v vars) bvars {
	out := bvars{}
	for k, s := range v {
		out[k] = []byte(s)
	}
	return out
}

func noResolve(_ context.Context, host string) ([]string, error) {
	return nil, errors.New("no DNS in tests: " + host)
}

func crc32Update(crc uint32, p []byte) uint32 { return crc32.Update(crc, crc32.IEEETable, p) }
