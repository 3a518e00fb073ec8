package picksock

import (
	"hash/crc32"
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// routeJSON: backends with canaries of every kind the shim routes, one by
// header pattern among them.
const routeJSON = `[
 {"name":"hmain","port":80,"upstreamHashByConfig":{"upstream-hash-by":"$request_uri"},"alternativeBackends":["hcanary"],
  "endpoints":[{"address":"10.1.0.1","port":"80"},{"address":"10.1.0.2","port":"80"},{"address":"10.1.0.3","port":"80"}]},
 {"name":"hcanary","port":80,"noServer":true,"upstreamHashByConfig":{"upstream-hash-by":"$request_uri","upstream-hash-by-subset":true,"upstream-hash-by-subset-size":2},
  "trafficShapingPolicy":{"weight":30,"header":"X-Canary","headerValue":"yes","cookie":"canary"},
  "endpoints":[{"address":"10.2.0.1","port":"80"},{"address":"10.2.0.2","port":"80"},{"address":"10.2.0.3","port":"80"}]},
 {"name":"smain","port":80,"sessionAffinityConfig":{"name":"cookie","cookieSessionAffinity":{"name":"route"}},"alternativeBackends":["scanary"],
  "endpoints":[{"address":"10.3.0.1","port":"80"},{"address":"10.3.0.2","port":"80"}]},
 {"name":"scanary","port":80,"noServer":true,"sessionAffinityConfig":{"name":"cookie","cookieSessionAffinity":{"name":"route"}},
  "trafficShapingPolicy":{"weight":30,"header":"X-Canary"},"endpoints":[{"address":"10.4.0.1","port":"80"},{"address":"10.4.0.2","port":"80"}]},
 {"name":"rrmain","port":80,"alternativeBackends":["pcanary"],"endpoints":[{"address":"10.5.0.1","port":"80"},{"address":"10.5.0.2","port":"80"}]},
 {"name":"pcanary","port":80,"noServer":true,"load-balance":"ewma","trafficShapingPolicy":{"weight":100,"header":"X-Canary","headerPattern":"^a.c$"},
  "endpoints":[{"address":"10.6.0.1","port":"80"}]},
 {"name":"plain","port":80,"endpoints":[{"address":"10.7.0.1","port":"80"}]}]`

// shimRoute decides a request as the shim's switchyard.route decides it
// from a Route (lua/switchyard/route.lua, rule for rule; its header pattern
// read by RE2 here, by PCRE there, which read these inputs alike): the
// backend, or "" with "draw".
func shimRoute(rt *balancer.Route, name string, vars map[string]string) (string, string) {
	affinitized := func(cookie, key string) bool {
		h, ok := vars["http_cookie"]
		if cookie == "" || !ok {
			return false
		}
		v, ok := balancer.CookieValue([]byte(h), cookie)
		if !ok {
			return false
		}
		var pieces []string
		for _, p := range strings.Split(string(v), "|") {
			if p != "" {
				pieces = append(pieces, p)
			}
		}
		return len(pieces) >= 2 && pieces[1] == key
	}
	if affinitized(rt.PrimaryCookie, rt.PrimaryKey) || rt.Alternative == "" {
		return name, ""
	}
	if affinitized(rt.AltCookie, rt.AltKey) {
		return rt.Alternative, ""
	}
	if h, ok := vars[rt.HeaderVar]; ok && rt.Header != balancer.HeaderNone {
		switch rt.Header {
		case balancer.HeaderValue:
			if h == rt.HeaderValueText {
				return rt.Alternative, ""
			}
		case balancer.HeaderPattern:
			if regexp.MustCompile(rt.HeaderValueText).MatchString(h) {
				return rt.Alternative, ""
			}
		case balancer.HeaderBadPattern:
			return name, ""
		default:
			switch h {
			case "always":
				return rt.Alternative, ""
			case "never":
				return name, ""
			}
		}
	}
	if c, ok := vars[rt.CookieVar]; ok && rt.CookieVar != "" {
		switch c {
		case "always":
			return rt.Alternative, ""
		case "never":
			return name, ""
		}
	}
	switch {
	case rt.Weight <= 0:
		return name, ""
	case rt.Weight >= rt.Total:
		return rt.Alternative, ""
	}
	return "", "draw"
}

// TestRoutes: a shim that asks for routes (HelloRoutes) gets each canary's
// routing with its backend info, and the routing it applies decides every
// request as Registry.Pick does, but for the weight rule's draw, which Go
// premakes; a shim that does not ask gets the infos it always got.
func TestRoutes(t *testing.T) {
	reg := balancer.NewRegistry(balancer.Config{})
	syncJSON(t, reg, routeJSON)

	old := dialServer(t, reg)
	old.send(AppendNeedVars(nil, 1, "hmain"))
	if _, info, err := DecodeVarsReply(old.read()); err != nil || info.Route != nil || info.HashTable || info.Premade {
		t.Fatalf("hmain to a shim without routes: %+v %v", info, err)
	}

	tc := dialServer(t, reg)
	tc.send(AppendNeedVars(nil, 1, HelloRoutes))
	if _, info, err := DecodeVarsReply(tc.read()); err != nil || info.Code != CodeUnknownBackend {
		t.Fatalf("hello: %+v %v", info, err)
	}
	routes := map[string]*balancer.Route{}
	for _, name := range []string{"hmain", "smain", "rrmain", "plain", "hcanary"} {
		tc.send(AppendNeedVars(nil, 2, name))
		_, info, err := DecodeVarsReply(tc.read())
		if err != nil {
			t.Fatal(err)
		}
		if (info.Route != nil) != (name == "hmain" || name == "smain" || name == "rrmain") {
			t.Fatalf("%s: route %+v", name, info.Route)
		}
		if info.Route != nil {
			routes[name] = info.Route
			if !info.Premade || info.HashTable != (name != "rrmain") {
				t.Fatalf("%s: premade %v, table %v", name, info.Premade, info.HashTable)
			}
		}
	}
	if rt := routes["smain"]; rt.PrimaryKey != balancer.BackendKey("smain") || rt.AltKey != balancer.BackendKey("scanary") ||
		rt.PrimaryOwn != balancer.OwnSticky || rt.AltOwn != balancer.OwnSticky {
		t.Fatalf("smain route %+v", rt)
	}
	if rt := routes["rrmain"]; rt.Header != balancer.HeaderPattern || rt.PrimaryOwn != balancer.OwnLease || rt.AltOwn != balancer.OwnPicks || rt.Weight != 100 {
		t.Fatalf("rrmain route %+v", rt)
	}

	// Every combination of the rules' inputs: where the route decides,
	// Pick chooses the same backend; where it draws or asks, Pick is left
	// to decide.
	cookies := []string{"", "route=k1|" + balancer.BackendKey("smain"), "route=k2|" + balancer.BackendKey("scanary"), "route=k3|other", "canary=always", "canary=never", "x=1; canary=always; route=k|" + balancer.BackendKey("smain")}
	headers := []string{"", "yes", "no", "always", "never", "abc"}
	decided := 0
	for name, rt := range routes {
		for _, c := range cookies {
			for _, h := range headers {
				vars := map[string]string{"request_uri": "/u"}
				if c != "" {
					vars["http_cookie"] = c
					if v, ok := balancer.CookieValue([]byte(c), "canary"); ok {
						vars["cookie_canary"] = string(v)
					}
				}
				if h != "" {
					vars["http_x_canary"] = h
				}
				got, how := shimRoute(rt, name, vars)
				for range 20 {
					var a balancer.Attempt
					p, err := reg.Pick(name, balancer.VarsFunc(func(n string) ([]byte, bool) {
						v, ok := vars[n]
						return []byte(v), ok
					}), &a)
					if err != nil {
						t.Fatal(err)
					}
					if how == "" && p.Backend != got {
						t.Fatalf("%s %v: the route decides %s; Pick chose %s", name, vars, got, p.Backend)
					}
				}
				if how == "" {
					decided++
				}
				if name == "rrmain" && h == "abc" && (how != "" || got != "pcanary") {
					t.Fatalf("a header the pattern matches: %q %s; want pcanary decided by the route", got, how)
				}
			}
		}
	}
	if decided < 50 {
		t.Fatalf("the route decided %d combinations", decided)
	}

	// The draws: routed to a chash or round-robin backend, the choice
	// only; to a sticky one, a new session whose key leads back to its
	// peer through that backend's own table.
	tc.send(AppendTable(nil, 3, "hmain", 0))
	_, tab, err := DecodeTableReply(tc.read())
	if err != nil || tab.Code != CodeOK || tab.Kind != balancer.TableHash || int(tab.Total) != len(tab.Hashes) {
		t.Fatalf("hmain's own table: %+v %v", tab.Code, err)
	}
	peers := reg.Peers("hmain")
	for i := range 200 {
		uri := "/k/" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
		vars := map[string]string{"request_uri": uri, "cookie_canary": "never"}
		h := crc32.ChecksumIEEE([]byte(uri))
		j := 0
		for j < len(tab.Hashes) && tab.Hashes[j] < h {
			j++
		}
		if j == len(tab.Hashes) {
			j = 0
		}
		var a balancer.Attempt
		p, _ := reg.Pick("hmain", balancer.VarsFunc(func(n string) ([]byte, bool) { v, ok := vars[n]; return []byte(v), ok }), &a)
		if got := peers[tab.Owners[j]]; got != p.Peer {
			t.Fatalf("%s: own table %s; Pick %s", uri, got, p.Peer)
		}
	}
	for _, tcase := range []struct {
		name string
		kind func(p Premade) bool
	}{
		{"hmain", func(p Premade) bool { return p.Own && len(p.Candidates) == 0 }},
		{"rrmain", func(p Premade) bool { return p.Own && p.Backend == "rrmain" || !p.Own && len(p.Candidates) > 0 }},
		{"smain", func(p Premade) bool { return !p.Own && len(p.Keys) == len(p.Candidates) && len(p.Candidates) > 0 }},
	} {
		tc.send(AppendPremade(nil, 4, tcase.name, 1000))
		_, code, _, picks, err := DecodePremadeReply(tc.read())
		if err != nil || code != CodeOK || len(picks) < 500 {
			t.Fatalf("%s draws: code %d, %d, %v", tcase.name, code, len(picks), err)
		}
		alt := 0
		for _, p := range picks {
			if !tcase.kind(p) || p.Alternative != (p.Backend != tcase.name) {
				t.Fatalf("%s draw %+v", tcase.name, p)
			}
			if p.Alternative {
				alt++
			}
			for k, key := range p.Keys {
				// The session returns to its peer: the cookie carries the
				// chosen backend's key, so Pick routes it there too.
				vars := map[string]string{"http_cookie": "route=" + key + "|" + balancer.BackendKey(p.Backend)}
				var a balancer.Attempt
				back, _ := reg.Pick(tcase.name, balancer.VarsFunc(func(n string) ([]byte, bool) { v, ok := vars[n]; return []byte(v), ok }), &a)
				if back.Backend != p.Backend || back.Peer != p.Candidates[k] {
					t.Fatalf("%s: session %s of %s on %s returns to %s of %s", tcase.name, key, p.Backend, p.Candidates[k], back.Peer, back.Backend)
				}
			}
		}
		// rrmain's canary has weight 100: every draw; the others 30 %,
		// six standard deviations either way.
		n := float64(len(picks))
		if tcase.name == "rrmain" && alt != len(picks) || tcase.name != "rrmain" && math.Abs(float64(alt)-0.3*n) > 6*math.Sqrt(n*0.21) {
			t.Fatalf("%s: %d of %d draws went to the canary", tcase.name, alt, len(picks))
		}
	}

	// A request a header pattern reads: Go routes it (0x0A), without a
	// pick.
	for _, q := range []struct {
		name, want string
		vars       []string
	}{
		{"rrmain", "pcanary", []string{"http_x_canary", "abc"}},
		{"hmain", "hcanary", []string{"http_x_canary", "yes", "request_uri", "/a"}},
		{"hmain", "hmain", []string{"cookie_canary", "never", "request_uri", "/a"}},
		{"smain", "smain", []string{"http_cookie", "route=k|" + balancer.BackendKey("smain")}},
	} {
		tc.send(AppendRoute(nil, 12, q.name, q.vars...))
		id, p, err := DecodeRouteReply(tc.read())
		if err != nil || id != 12 || p.Code != CodeOK || p.Backend != q.want || p.Alternative != (q.want != q.name) || len(p.Candidates) != 0 {
			t.Fatalf("route of %s %v: %+v %v; want %s", q.name, q.vars, p, err, q.want)
		}
	}
	tc.send(AppendRoute(nil, 13, "nosuch"))
	if _, p, err := DecodeRouteReply(tc.read()); err != nil || p.Code != CodeUnknownBackend {
		t.Fatalf("route of an unknown backend: %+v %v", p, err)
	}

	// A route survives the wire byte for byte.
	for name, rt := range routes {
		f := AppendInfoReply(nil, 9, BackendInfo{Gen: 1, Route: rt, Peers: []string{"10.0.0.1:80"}})
		if _, got, err := DecodeVarsReply(f); err != nil || !reflect.DeepEqual(got.Route, rt) {
			t.Fatalf("%s: route %+v after the wire: %+v %v", name, rt, got.Route, err)
		}
	}
}
