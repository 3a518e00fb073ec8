package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// wire is one backend of the /configuration/backends payload, serialized
// the way ingress-nginx's controller does (as lua/shim_test.go's wire).
func wire(name string, eps []string, extra map[string]any) map[string]any {
	b := map[string]any{
		"name": name, "port": 80, "sslPassthrough": false, "noServer": false,
		"service":               map[string]any{"metadata": map[string]any{}, "spec": map[string]any{"type": "ClusterIP"}, "status": map[string]any{"loadBalancer": map[string]any{}}},
		"sessionAffinityConfig": map[string]any{"name": "", "mode": "", "cookieSessionAffinity": map[string]any{"name": ""}},
		"upstreamHashByConfig":  map[string]any{"upstream-hash-by-subset-size": 3},
		"trafficShapingPolicy":  map[string]any{"weight": 0, "weightTotal": 0, "header": "", "headerValue": "", "headerPattern": "", "cookie": ""},
	}
	var list []map[string]string
	for _, ep := range eps {
		host, port, _ := net.SplitHostPort(ep)
		list = append(list, map[string]string{"address": host, "port": port})
	}
	b["endpoints"] = list
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// affinity is the sessionAffinityConfig of a sticky case: cookie "route",
// set on the case's location of the default server ("_", which sticky.lua's
// should_set_cookie looks up when server_name is "_").
func affinity(mode, path string) map[string]any {
	return map[string]any{"sessionAffinityConfig": map[string]any{"name": "cookie", "mode": mode,
		"cookieSessionAffinity": map[string]any{"name": "route", "locations": map[string][]string{"_": {path}}}}}
}

// canaryPolicy is a canary's trafficShapingPolicy: weight out of 100, and
// header with either a value or a pattern (ingress-nginx's
// canary-by-header, -value and -pattern annotations).
func canaryPolicy(weight int, header, value, pattern string) map[string]any {
	return map[string]any{"noServer": true, "trafficShapingPolicy": map[string]any{
		"weight": weight, "weightTotal": 100, "header": header, "headerValue": value, "headerPattern": pattern, "cookie": ""}}
}

// chashBy is the upstreamHashByConfig of a chash backend on $request_uri,
// or with subset a chashsubset one with subsets of size.
func chashBy(subset bool, size int) map[string]any {
	return map[string]any{"upstreamHashByConfig": map[string]any{
		"upstream-hash-by": "$request_uri", "upstream-hash-by-subset": subset, "upstream-hash-by-subset-size": size}}
}

// withAlt adds alternativeBackends to a backend's extra fields.
func withAlt(extra map[string]any, alt string) map[string]any {
	extra["alternativeBackends"] = []string{alt}
	return extra
}

// buildPayload is the one payload POSTed to both configurations: a backend
// per case (allCases), plus the canary backend of each canary case. The
// canaries of canary_weight and the two header cases are primary[2] behind
// a round-robin main on primary[0:2]; the chash canaries are the secondary
// ports behind a chash main on the primary ones, so an answer tells which
// side served it. The chashsubset canary has subsets of 2 of its 3
// endpoints (set1 = s0 s1, set2 = s2 s0: ingress-nginx's build_subset_map
// reuses endpoints to fill the last subset).
func buildPayload(bk *backends) ([]byte, error) {
	all := append(append([]string{}, bk.primary...), bk.secondary...)
	payload := []map[string]any{
		wire("bench-rr-80", bk.primary, nil),
		wire("bench-ewma-80", bk.primary, map[string]any{"load-balance": "ewma"}),
		wire("bench-chash-80", bk.primary, map[string]any{"upstreamHashByConfig": map[string]any{"upstream-hash-by": "$request_uri"}}),
		wire("bench-chashsubset-80", all, map[string]any{"upstreamHashByConfig": map[string]any{
			"upstream-hash-by": "$request_uri", "upstream-hash-by-subset": true, "upstream-hash-by-subset-size": 3}}),
		wire("bench-sticky-balanced-80", bk.primary, affinity("balanced", "/sticky_balanced/")),
		wire("bench-sticky-persistent-80", bk.primary, affinity("persistent", "/sticky_persistent/")),
		wire("bench-main-80", bk.primary[:2], map[string]any{"alternativeBackends": []string{"bench-canary-80"}}),
		wire("bench-canary-80", bk.primary[2:], canaryPolicy(30, "", "", "")),
		wire("bench-hmain-80", bk.primary[:2], map[string]any{"alternativeBackends": []string{"bench-hcanary-80"}}),
		wire("bench-hcanary-80", bk.primary[2:], canaryPolicy(0, "X-Canary", "yes", "")),
		wire("bench-pmain-80", bk.primary[:2], map[string]any{"alternativeBackends": []string{"bench-pcanary-80"}}),
		wire("bench-pcanary-80", bk.primary[2:], canaryPolicy(0, "X-Canary", "", "^(on|yes)$")),
		wire("bench-chmain-80", bk.primary, withAlt(chashBy(false, 3), "bench-chcanary-80")),
		wire("bench-chcanary-80", bk.secondary, mergeExtra(chashBy(false, 3), canaryPolicy(30, "", "", ""))),
		wire("bench-csmain-80", bk.primary, withAlt(chashBy(false, 3), "bench-cscanary-80")),
		wire("bench-cscanary-80", bk.secondary, mergeExtra(chashBy(true, 2), canaryPolicy(30, "", "", ""))),
	}
	return json.Marshal(payload)
}

// mergeExtra returns a with b's fields added.
func mergeExtra(a, b map[string]any) map[string]any {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// postBackends sends the payload through the front's /configuration
// location, as the controller does.
func (f *front) postBackends(body []byte) error {
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/configuration/backends", f.statusPort), "application/json", strings.NewReader(string(body)))
	if err != nil {
		return fmt.Errorf("post backends: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("post backends: %s %s", resp.Status, b)
	}
	return nil
}
