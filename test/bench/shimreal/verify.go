package main

import (
	"context"
	"fmt"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/benchutil"
	"io"
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
		for _, c := range cases {
			if err := f.verify(c, bk); err != nil {
				return fmt.Errorf("%s does not balance %s: %w\n%s", v, c.name, err, f.tail())
			}
		}
		fmt.Printf("# verified %s: %s\n", v, caseNames(cases))
	}
	return nil
}

// verifyClient opens a connection per request, so with several workers
// (reuseport) the requests reach all of them.
var verifyClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// get requests path with an optional Cookie field and returns the backend
// that answered (the body) and the response's Set-Cookie.
func (f *front) get(path, cookie string, bk *backends) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+f.listen+path, nil)
	if err != nil {
		return "", "", err
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
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
		return "", "", fmt.Errorf("GET %s: %s %q", path, resp.Status, who)
	}
	if !slices.Contains(bk.primary, who) && !slices.Contains(bk.secondary, who) {
		return "", "", fmt.Errorf("GET %s: answer %q is no backend's", path, who)
	}
	return who, resp.Header.Get("Set-Cookie"), nil
}

// verify checks one case on one front, and for sticky cases keeps the
// cookie wrk will send.
func (f *front) verify(c benchCase, bk *backends) error {
	count := func(path, cookie string, n int) (map[string]int, error) {
		seen := map[string]int{}
		for range n {
			who, _, err := f.get(path, cookie, bk)
			if err != nil {
				return nil, err
			}
			seen[who]++
		}
		return seen, nil
	}
	switch c.name {
	case "round_robin":
		seen, err := count(c.path, "", 30)
		if err != nil {
			return err
		}
		if len(seen) != 3 {
			return fmt.Errorf("30 requests reached %v; want all 3 backends", seen)
		}
	case "ewma":
		seen, err := count(c.path, "", 60)
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
			seen, err := count(uri, "", 9)
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
		first, set, err := f.get(c.path, "", bk)
		if err != nil {
			return err
		}
		value, ok := strings.CutPrefix(set, "route=")
		if !ok {
			return fmt.Errorf("first request: Set-Cookie %q; want a route cookie", set)
		}
		value, _, _ = strings.Cut(value, ";")
		cookie := "route=" + value
		seen, err := count(c.path, cookie, 10)
		if err != nil {
			return err
		}
		if len(seen) != 1 || seen[first] != 10 {
			return fmt.Errorf("with %s (set by %s): %v; want all on %s", cookie, first, seen, first)
		}
		fresh := map[string]int{}
		for range 12 {
			who, set, err := f.get(c.path, "", bk)
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
		seen, err := count(c.path, "", 300)
		if err != nil {
			return err
		}
		canary := seen[bk.primary[2]]
		if canary < 60 || canary > 120 || seen[bk.primary[0]] == 0 || seen[bk.primary[1]] == 0 {
			return fmt.Errorf("300 requests: %v; want about 90 on the canary %s (weight 30) and the rest on both main backends", seen, bk.primary[2])
		}
	default:
		panic("BUG: no verification for case " + c.name)
	}
	return nil
}
