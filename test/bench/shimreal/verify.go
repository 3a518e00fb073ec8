package main

import (
	"context"
	"fmt"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/benchutil"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// syncInterval is ingress-nginx balancer.lua's BACKENDS_SYNC_INTERVAL: each
// worker reads a POSTed payload from configuration_data on a timer of this
// period, so a location answering 200 on one worker says nothing of the
// others until it has passed.
const syncInterval = time.Second

// prepare POSTs the payload to every front, waits until they serve it, and
// checks that each one really balances (verify); it fails on the first
// front or case that does not.
func prepare(fronts map[string]*front, payload []byte, bk *backends, cases []benchCase) error {
	for _, v := range variants {
		f := fronts[v]
		if err := f.postBackends(payload); err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		for _, c := range allCases {
			if err := benchutil.WaitHTTP("http://"+f.listen+c.path, 200); err != nil {
				return fmt.Errorf("%s: %w\n%s", v, err, f.tail())
			}
		}
	}
	time.Sleep(syncInterval + 100*time.Millisecond)
	for _, v := range variants {
		f := fronts[v]
		f.cookies = map[string]string{}
		f.picks = map[string]map[string]string{}
		for _, c := range cases {
			if err := f.verify(c, bk); err != nil {
				return fmt.Errorf("%s does not balance %s: %w\n%s", v, c.name, err, f.tail())
			}
		}
		fmt.Printf("# verified %s: %s\n", v, caseNames(cases))
	}
	for _, c := range cases {
		n, err := agree(c, fronts[variantReal].picks[c.name], fronts[variantShim].picks[c.name])
		if err != nil {
			return fmt.Errorf("real Lua and shim disagree on %s: %w", c.name, err)
		}
		if n > 0 {
			fmt.Printf("# picks agree (real Lua, shim): %s, %d request classes or URIs\n", c.name, n)
		}
	}
	return nil
}

// verifyClient opens a connection per request, so with several workers
// (reuseport) the requests reach all of them.
var verifyClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// get requests path with optional header fields (name, value pairs) and
// returns the backend that answered (the body) and the response's
// Set-Cookie.
func (f *front) get(path string, bk *backends, hdr ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+f.listen+path, nil)
	if err != nil {
		return "", "", err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := verifyClient.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "", err
	}
	who := string(body)
	if resp.StatusCode != 200 {
		return "", "", fmt.Errorf("GET %s %v: %s %q", path, hdr, resp.Status, who)
	}
	if !slices.Contains(bk.primary, who) && !slices.Contains(bk.secondary, who) {
		return "", "", fmt.Errorf("GET %s: answer %q is no backend's", path, who)
	}
	return who, resp.Header.Get("Set-Cookie"), nil
}

// keys returns a set's members sorted and joined by spaces.
func keys[V any](m map[string]V) string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return strings.Join(k, " ")
}

// agree compares what verify recorded of one case on the real Lua and on
// the shim (front.picks): a key "one ..." holds the one backend (or route)
// a request class reached and must be equal on both; a key "set ..." holds
// the backends a URI reached within its subset, at random, and the two
// fronts together must not exceed the subset (limit). Keys one front has
// and the other has not (a canary URI the weight sent nowhere) are skipped.
// It returns how many keys were compared.
func agree(c benchCase, real, shim map[string]string) (int, error) {
	limit := 3
	if c.name == "chash_canary_chashsubset" {
		limit = 2
	}
	n := 0
	for _, k := range slices.Sorted(maps.Keys(real)) {
		r, s := real[k], shim[k]
		if r == "" || s == "" {
			continue
		}
		n++
		if strings.HasPrefix(k, "one ") && r != s {
			return n, fmt.Errorf("%s: real Lua %s, shim %s", strings.TrimPrefix(k, "one "), r, s)
		}
		if strings.HasPrefix(k, "set ") {
			union := map[string]bool{}
			for _, w := range append(strings.Fields(r), strings.Fields(s)...) {
				union[w] = true
			}
			if len(union) > limit {
				return n, fmt.Errorf("%s: real Lua %s, shim %s; together more than one subset of %d", strings.TrimPrefix(k, "set "), r, s, limit)
			}
		}
	}
	return n, nil
}

// verify checks one case on one front, records in f.picks what its
// requests reached (for agree), and for sticky cases keeps the cookie wrk
// will send.
func (f *front) verify(c benchCase, bk *backends) error {
	f.picks[c.name] = map[string]string{}
	count := func(path string, n int, hdr ...string) (map[string]int, error) {
		seen := map[string]int{}
		for range n {
			who, _, err := f.get(path, bk, hdr...)
			if err != nil {
				return nil, err
			}
			seen[who]++
		}
		return seen, nil
	}
	switch c.name {
	case "round_robin":
		seen, err := count(c.path, 30)
		if err != nil {
			return err
		}
		if len(seen) != 3 {
			return fmt.Errorf("30 requests reached %v; want all 3 backends", seen)
		}
	case "ewma":
		seen, err := count(c.path, 60)
		if err != nil {
			return err
		}
		if len(seen) < 2 {
			return fmt.Errorf("60 requests reached %v; want at least 2 backends", seen)
		}
	case "chash", "chashsubset":
		// chash: a URI always reaches the same backend. chashsubset: a URI
		// reaches one subset of 3 (of the 6 endpoints), at random within it.
		union, most := map[string]bool{}, 0
		for i := range 12 {
			uri := fmt.Sprintf("%sk%d", c.path, i)
			seen, err := count(uri, 9)
			if err != nil {
				return err
			}
			for who := range seen {
				union[who] = true
			}
			most = max(most, len(seen))
			if c.name == "chash" && len(seen) != 1 {
				return fmt.Errorf("%s reached %v; want one backend", uri, seen)
			}
			if c.name == "chash" {
				f.picks[c.name]["one "+uri] = keys(seen)
			} else {
				f.picks[c.name]["set "+uri] = keys(seen)
			}
			if len(seen) > 3 {
				return fmt.Errorf("%s reached %v; want one subset of 3", uri, seen)
			}
		}
		if c.name == "chash" && len(union) < 2 {
			return fmt.Errorf("12 URIs all reached %v; want at least 2 backends", union)
		}
		if c.name == "chashsubset" && (len(union) <= 3 || most < 2) {
			return fmt.Errorf("12 URIs reached %v, at most %d backends per URI; want more than one subset, and more than one backend within one", union, most)
		}
	case "sticky_balanced", "sticky_persistent":
		first, set, err := f.get(c.path, bk)
		if err != nil {
			return err
		}
		value, ok := strings.CutPrefix(set, "route=")
		if !ok {
			return fmt.Errorf("first request: Set-Cookie %q; want a route cookie", set)
		}
		value, _, _ = strings.Cut(value, ";")
		cookie := "route=" + value
		seen, err := count(c.path, 10, "Cookie", cookie)
		if err != nil {
			return err
		}
		if len(seen) != 1 || seen[first] != 10 {
			return fmt.Errorf("with %s (set by %s): %v; want all on %s", cookie, first, seen, first)
		}
		fresh := map[string]int{}
		for range 12 {
			who, set, err := f.get(c.path, bk)
			if err != nil {
				return err
			}
			if !strings.HasPrefix(set, "route=") {
				return fmt.Errorf("request without cookie: Set-Cookie %q; want a route cookie", set)
			}
			fresh[who]++
		}
		if len(fresh) < 2 {
			return fmt.Errorf("12 requests without cookie reached %v; want at least 2 backends", fresh)
		}
		f.cookies[c.name] = cookie
	case "canary_weight":
		seen, err := count(c.path, 300)
		if err != nil {
			return err
		}
		canary := seen[bk.primary[2]]
		if canary < 60 || canary > 120 || seen[bk.primary[0]] == 0 || seen[bk.primary[1]] == 0 {
			return fmt.Errorf("300 requests: %v; want about 90 on the canary %s (weight 30) and the rest on both main backends", seen, bk.primary[2])
		}
	case "canary_header", "canary_header_pattern":
		// The first value routes to the canary (equal to the header value,
		// or matching the pattern); the second, and no header at all, fall
		// through to the weight, 0: the main's round robin.
		for i, v := range append([]string{""}, c.values...) {
			var hdr []string
			if v != "" {
				hdr = []string{c.header, v}
			}
			seen, err := count(c.path, 20, hdr...)
			if err != nil {
				return err
			}
			want, got := "main", "mixed"
			if i == 1 {
				want = "canary"
			}
			switch seen[bk.primary[2]] {
			case 20:
				got = "canary"
			case 0:
				got = "main"
			}
			if got != want || want == "main" && (seen[bk.primary[0]] == 0 || seen[bk.primary[1]] == 0) {
				return fmt.Errorf("20 requests with %v: %v; want all on the %s (canary %s, main %s and %s)",
					hdr, seen, want, bk.primary[2], bk.primary[0], bk.primary[1])
			}
			f.picks[c.name][fmt.Sprintf("one %s: %q", c.header, v)] = got
		}
	case "chash_canary_chash", "chash_canary_chashsubset":
		// A URI the weight (30) sends to the main reaches its one chash
		// backend among the primary ports; one it sends to the canary
		// reaches the canary's one chash backend, or one subset of 2, among
		// the secondary ports.
		limit := 1
		if c.name == "chash_canary_chashsubset" {
			limit = 2
		}
		mains, canaries := map[string]bool{}, map[string]bool{}
		ncanary, most := 0, 0
		for i := range 12 {
			uri := fmt.Sprintf("%sk%d", c.path, i)
			seen, err := count(uri, 30)
			if err != nil {
				return err
			}
			main, canary := map[string]int{}, map[string]int{}
			for who, n := range seen {
				if slices.Contains(bk.primary, who) {
					main[who] = n
					mains[who] = true
				} else {
					canary[who] = n
					canaries[who] = true
					ncanary += n
				}
			}
			most = max(most, len(canary))
			if len(main) != 1 || len(canary) > limit {
				return fmt.Errorf("%s: main %v, canary %v; want one main backend and at most %d canary backends", uri, main, canary, limit)
			}
			f.picks[c.name]["one main "+uri] = keys(main)
			if limit == 1 {
				f.picks[c.name]["one canary "+uri] = keys(canary)
			} else {
				f.picks[c.name]["set canary "+uri] = keys(canary)
			}
		}
		if ncanary < 72 || ncanary > 144 || len(mains) < 2 || len(canaries) < 2 || limit == 2 && most < 2 {
			return fmt.Errorf("360 requests over 12 URIs: %d on the canary (weight 30; want 72–144), main backends %v, canary backends %v, at most %d canary backends per URI",
				ncanary, keys(mains), keys(canaries), most)
		}
	default:
		panic("BUG: no verification for case " + c.name)
	}
	return nil
}
