//go:build !race

package h2srv

import (
	"net/http"
	"testing"
)

// maxRequestAllocs is what serving a GET costs in allocations: the stream
// (with its request, response writer, context and small buffers), the
// request's header map and the response's, each a map and its first group.
const maxRequestAllocs = 5

// The request path stays within maxRequestAllocs (BenchmarkServeRequests
// measures it under load).
func TestServeRequestAllocs(t *testing.T) {
	addr, _ := serveH2(t, &Server{Handler: http.HandlerFunc(benchHandler)})
	bc := newBenchClient(t, addr, 1)
	var err error
	allocs := testing.AllocsPerRun(200, func() {
		if e := bc.roundTrip(); e != nil {
			err = e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v allocations a request", allocs)
	if allocs > maxRequestAllocs {
		t.Errorf("got %v allocations a request; want at most %d", allocs, maxRequestAllocs)
	}
}
