package balancer

import (
	"bytes"
	"fmt"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"regexp"
	"strings"
)

// canaryPolicy is a backend's Canary rules made ready for requests at Sync.
type canaryPolicy struct {
	weight, total int
	headerVar     string // "http_x_canary", "" for none
	headerValue   []byte
	pattern       *regexp.Regexp
	patternSrc    string // the pattern as written, for the shim's PCRE (Route)
	badPattern    bool   // headerPattern was set but RE2 rejected it
	cookieVar     string
}

func compilePolicy(p model.Canary) (canaryPolicy, error) {
	c := canaryPolicy{weight: p.Weight, total: 100}
	// Lua ignores a weight-total that is not above 100 (spec §3.6 rule 8).
	if p.WeightTotal > 100 {
		c.total = p.WeightTotal
	}
	if p.Header != "" {
		c.headerVar = "http_" + strings.ToLower(strings.ReplaceAll(p.Header, "-", "_"))
	}
	if p.Cookie != "" {
		c.cookieVar = "cookie_" + p.Cookie
	}
	c.headerValue = []byte(p.HeaderValue)
	if p.HeaderValue == "" && p.HeaderPattern.String() != "" {
		c.pattern, c.patternSrc = p.HeaderPattern.Compiled(), p.HeaderPattern.String()
		if c.pattern == nil {
			c.badPattern = true
			return c, fmt.Errorf("canary-by-header-pattern %q: RE2 rejects it (Go keeps requests with the header on the primary; the nginx shim matches it with PCRE)", p.HeaderPattern.String())
		}
	}
	return c, nil
}

// route implements route_to_alternative_balancer (spec §3.6): affinity →
// header → cookie → weight, first rule that applies decides.
func (r *Registry) route(snap *snapshot, primary *backend, req Request) *backend {
	if len(primary.alternatives) == 0 {
		return primary
	}
	if primary.sticky != nil && primary.sticky.isAffinitized(req) {
		return primary
	}
	alts := primary.alternatives
	if !r.cfg.AllAlternatives {
		alts = alts[:1]
	}
	for _, name := range alts {
		alt := snap.get(name)
		if alt == nil {
			continue // Lua: logs and stays on the primary
		}
		if alt.sticky != nil && alt.sticky.isAffinitized(req) {
			return alt
		}
		decided, to := r.evaluate(&alt.policy, req)
		if decided {
			if to {
				return alt
			}
			if !r.cfg.AllAlternatives {
				return primary
			}
		}
	}
	return primary
}

// evaluate applies the header, cookie and weight rules of one policy.
// decided is false only in multi-alternative mode semantics never: the weight
// rule always decides; it is kept for clarity.
func (r *Registry) evaluate(p *canaryPolicy, req Request) (decided, toAlt bool) {
	if p.headerVar != "" {
		if h, ok := req.Var(p.headerVar); ok {
			switch {
			case len(p.headerValue) > 0:
				if bytes.Equal(h, p.headerValue) {
					return true, true
				}
			case p.badPattern:
				return true, false
			case p.pattern != nil:
				if p.pattern.Match(h) {
					return true, true
				}
			default:
				switch string(h) {
				case "always":
					return true, true
				case "never":
					return true, false
				}
			}
		}
	}
	if p.cookieVar != "" {
		if c, ok := req.Var(p.cookieVar); ok {
			switch string(c) {
			case "always":
				return true, true
			case "never":
				return true, false
			}
		}
	}
	// math.random(total) <= weight
	return true, r.intn(p.total)+1 <= p.weight
}

// neededVars lists the variables a pick on b may read, including those of the
// alternatives a request to b may be routed to.
func neededVars(snap *snapshot, b *backend) []string {
	set := map[string]bool{}
	own := func(x *backend) {
		switch a := x.algo.(type) {
		case *chash:
			for _, v := range a.key.vars() {
				set[v] = true
			}
		case *chashSubset:
			for _, v := range a.key.vars() {
				set[v] = true
			}
		case *sticky:
			for _, v := range a.vars() {
				set[v] = true
			}
		}
	}
	own(b)
	for _, name := range b.alternatives {
		alt := snap.get(name)
		if alt == nil {
			continue
		}
		own(alt)
		if alt.policy.headerVar != "" {
			set[alt.policy.headerVar] = true
		}
		if alt.policy.cookieVar != "" {
			set[alt.policy.cookieVar] = true
		}
		if alt.sticky != nil {
			set["http_cookie"] = true
		}
	}
	if b.sticky != nil && len(b.alternatives) > 0 {
		set["http_cookie"] = true
	}
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sortStrings(out)
	return out
}

// NeededVars returns the nginx variables a pick on the named backend may read
// (hash-key variables, the sticky cookie via "http_cookie", canary header and
// cookie variables, "https", "host", "server_name", "location_path",
// "http_user_agent"), so the nginx shim sends only those. The slice is shared:
// do not modify it. Nil for an unknown backend.
func (r *Registry) NeededVars(backend string) []string {
	b := r.snap.Load().get(backend)
	if b == nil {
		return nil
	}
	return b.needVars
}
