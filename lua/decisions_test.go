package lua_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// chiSquareCritical2 is the chi-square statistic that 2 degrees of freedom
// (three equally likely outcomes) exceed with probability 1e-6:
// -2 ln(1e-6).
const chiSquareCritical2 = 27.631

// chiSquare is Pearson's statistic of counts against equal shares of total
// over the keys of want.
func chiSquare(counts map[string]int, keys []string, total int) float64 {
	exp := float64(total) / float64(len(keys))
	var x float64
	for _, k := range keys {
		d := float64(counts[k]) - exp
		x += d * d / exp
	}
	return x
}

// serve sends n requests one after another on one keep-alive connection
// (so one nginx worker decides them all, as in the measurements)
// and counts the answering backends.
func serve(t *testing.T, e *env, path string, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		code, who, _ := e.get(t, path)
		if code != 200 {
			t.Fatalf("%s request %d: %d %q; want 200", path, i, code, who)
		}
		counts[who]++
	}
	return counts
}

// TestShimDecisions holds the decisions found wrong against ingress-nginx
// v1.15.1's own Lua: retries with a peer that refuses connections (round
// robin, ewma), and requests decided on a backend info of an old
// generation.
func TestShimDecisions(t *testing.T) {
	b1, b2, b3 := startBackend(t, "127.0.0.2"), startBackend(t, "127.0.0.3"), startBackend(t, "127.0.0.4")
	e := newEnv(t, 2)
	live := addrs(b1, b2, b3)
	refused := deadAddr(t, "127.0.0.6")
	eps := append([]string{refused}, live...)
	hashBy := func(v string) map[string]any {
		return map[string]any{"upstreamHashByConfig": map[string]any{"upstream-hash-by": v, "upstream-hash-by-subset-size": 3}}
	}
	payload := []map[string]any{
		wire("default-ewmarefused-80", eps, map[string]any{"load-balance": "ewma"}),
		wire("default-generation-80", live, hashBy("$request_uri")),
		wire("default-rrrefused-80", eps, nil),
	}
	post := func(payload []map[string]any) string {
		t.Helper()
		body, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		if code, b := e.post(t, "/configuration/backends", body); code != 201 {
			t.Fatalf("POST /configuration/backends = %d %q; want 201", code, b)
		}
		f := filepath.Join(e.dir, fmt.Sprintf("payload-%d.json", time.Now().UnixNano()))
		if err := os.WriteFile(f, body, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	post(payload)

	// ingress-nginx's round robin calls find() again for each retry, so a
	// retry takes the next position of the worker's rotation: with one
	// peer of four refusing, 600 requests gave 200/200/200. The shim's
	// retry took the request's own position + 1 without consuming it, so
	// the refusing peer's successor got its share twice (299/150/151).
	t.Run("round robin: a refusing peer's share goes round the live peers", func(t *testing.T) {
		const n = 600
		counts := serve(t, e, "/rr-refused/", n)
		t.Logf("round robin, %s refusing: %v", refused, counts)
		if x := chiSquare(counts, live, n); x > chiSquareCritical2 {
			t.Errorf("round robin with %s refusing: %v; want about %d each of %v (chi-square %.1f > %.1f)", refused, counts, n/3, live, x, chiSquareCritical2)
		}
	})

	// ingress-nginx's ewma: each live peer got a share (the least 145 of
	// 600); the shim's left one live peer without a request, as Go gave the
	// refusing peer no score at all, the best there is (balancer.observe).
	t.Run("ewma: the live peers share the load beside a refusing peer", func(t *testing.T) {
		// The first sample of a peer counts in full: b1's first answer,
		// 3 ms late, scores it above the other live peers, as a cold first
		// request did in the run.
		b1.delay.Store(int64(3 * time.Millisecond))
		for i := 0; b1.hits.Load() == 0; i++ {
			if code, who, _ := e.get(t, "/ewma-refused/"); code != 200 || i == 100 {
				t.Fatalf("until b1 answers once: %d %q after %d requests", code, who, i)
			}
		}
		b1.delay.Store(0)
		const n = 600
		counts := serve(t, e, "/ewma-refused/", n)
		t.Logf("ewma, %s refusing, %s first answering late: %v", refused, b1.addr, counts)
		for _, a := range live {
			if counts[a] < n/10 {
				t.Errorf("ewma with %s refusing: %v; want each of %v to get at least %d", refused, counts, live, n/10)
				break
			}
		}
	})

	// After a change, a worker must decide no request on the backend info
	// of the old generation: here upstream-hash-by changes, so the
	// variables the shim sends with a pick change too.
	t.Run("a reply of a newer generation: no request is decided on the old backend info", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			if code, _, _ := e.get(t, fmt.Sprintf("/generation/warm-%d", i)); code != 200 {
				t.Fatalf("warm-up request: %d", code)
			}
		}
		next := append([]map[string]any(nil), payload...)
		next[1] = wire("default-generation-80", live, hashBy("$http_x_key"))
		file := post(next)
		// Keys that the new hash sends elsewhere than a request without
		// the header would go: a pick made with the old variables
		// ($request_uri only) lands where the absent header hashes.
		unset := debugPick(t, e.bin, file, "default-generation-80")["peer"]
		var got, want []string
		for k := 0; len(want) < 6 && k < 200; k++ {
			key := fmt.Sprintf("key-%d", k)
			w := debugPick(t, e.bin, file, "default-generation-80", "--var", "http_x_key="+key)["peer"]
			if w == unset {
				continue
			}
			_, who, _ := e.get(t, "/generation/"+key, "X-Key", key)
			got, want = append(got, who), append(want, w.(string))
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("peers after upstream-hash-by changed to $http_x_key (-switchyard debug pick +nginx):\n%s", d)
		}
	})
}
