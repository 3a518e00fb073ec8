package balancer

import "math"

// Canary routing the nginx shim applies itself (docs/pick-protocol.md,
// "Routed backends"): the rules of route_to_alternative_balancer (spec §3.6)
// that depend only on the request (affinity, header, cookie) are data the
// shim evaluates; the weight rule's draw stays Go's, made ahead (RouteAhead);
// the request's peers then come from the chosen backend's own decision data
// (its lease, table or premade picks).

// RouteHeader says how a Route's header rule decides when the request has
// the header.
type RouteHeader uint8

// Header rules of a Route.
const (
	// HeaderNone: no header rule.
	HeaderNone RouteHeader = 0
	// HeaderValue: the header equal to HeaderValue routes to the
	// alternative; any other value falls through.
	HeaderValue RouteHeader = 1
	// HeaderPattern: the header is matched against the expression in
	// HeaderValueText, by the shim itself with nginx's PCRE (ngx.re.match,
	// unanchored, no flags), as ingress-nginx's balancer.lua matches it: a
	// match routes to the alternative, a PCRE error keeps the primary, no
	// match falls through. Registry.Pick matches the same expression with
	// RE2; the two read ASCII header values alike for the expressions RE2
	// accepts (TestShimHeaderPattern), and the shim is what ingress-nginx
	// does where they differ (docs/compatibility.md). Issue 16: no round
	// trip to Go per request carrying the header.
	HeaderPattern RouteHeader = 2
	// HeaderBadPattern: the pattern did not compile; a request with the
	// header stays on the primary. Route no longer sends it (a pattern RE2
	// refuses goes to the shim as HeaderPattern, for PCRE to read); the
	// shim still understands it.
	HeaderBadPattern RouteHeader = 3
	// HeaderAlways: "always" routes to the alternative, "never" keeps the
	// primary, anything else falls through.
	HeaderAlways RouteHeader = 4
)

// OwnData says where the peers of a request routed to a backend come from.
type OwnData uint8

// Kinds of OwnData.
const (
	// OwnLease: round robin, the next position of a lease of the backend's
	// own rotation (Lease).
	OwnLease OwnData = 1
	// OwnTable: chash or chashsubset, the backend's table (OwnTable).
	OwnTable OwnData = 2
	// OwnSticky: a returning session from the backend's sticky table, a new
	// one from premade new sessions (NewSessions).
	OwnSticky OwnData = 3
	// OwnPicks: ewma, peak_ewma, least_request: picks premade without
	// variables.
	OwnPicks OwnData = 4
)

// ownData is how b's own requests are decided by the shim, 0 if they
// cannot be.
func ownData(b *backend) OwnData {
	switch {
	case ownRotation(b):
		return OwnLease
	case varFree(b):
		return OwnPicks
	}
	switch b.algo.(type) {
	case *chash, *chashSubset:
		return OwnTable
	case *sticky:
		return OwnSticky
	}
	return 0
}

// Route is the canary routing of a backend with an alternative, as the
// shim evaluates it: the first rule that applies decides.
//
//  1. PrimaryCookie set and the request's cookie of that name carries
//     PrimaryKey as its backend key: the primary.
//  2. Alternative empty (no such backend now): the primary.
//  3. AltCookie set and the request's cookie of that name carries AltKey:
//     the alternative.
//  4. The header rule (Header), then the cookie rule: CookieVar "always"
//     routes to the alternative, "never" keeps the primary.
//  5. The weight rule: Weight ≤ 0 keeps the primary, Weight ≥ Total routes
//     to the alternative; otherwise the next premade draw of Go (RouteAhead)
//     decides.
//
// Cookies are parsed as lua-resty-cookie parses them (CookieValue), their
// values split on '|' (the second piece is the backend key).
type Route struct {
	Alternative                string
	PrimaryCookie, PrimaryKey  string
	AltCookie, AltKey          string
	Header                     RouteHeader
	HeaderVar, HeaderValueText string
	CookieVar                  string
	Weight, Total              int
	// PrimaryOwn and AltOwn say where the peers of a request routed to
	// either come from.
	PrimaryOwn, AltOwn OwnData
}

// Route returns the canary routing of a backend with alternatives, or false
// when the shim cannot apply it: no alternatives, every alternative
// evaluated (Config.AllAlternatives), an alternative with alternatives of
// its own, a header pattern longer than the frame carries (64 KiB), or a
// backend whose requests the shim cannot decide from its own data.
func (r *Registry) Route(backend string) (Route, bool) {
	snap := r.snap.Load()
	b := snap.get(backend)
	if b == nil || len(b.alternatives) == 0 || r.cfg.AllAlternatives || ownData(b) == 0 {
		return Route{}, false
	}
	rt := Route{PrimaryOwn: ownData(b)}
	if b.sticky != nil {
		rt.PrimaryCookie, rt.PrimaryKey = b.sticky.cookieName, string(b.sticky.backendKey)
	}
	alt := snap.get(b.alternatives[0])
	if alt == nil {
		// route: a missing alternative keeps the primary.
		return rt, true
	}
	if len(alt.alternatives) > 0 || ownData(alt) == 0 {
		return Route{}, false
	}
	rt.Alternative, rt.AltOwn = alt.name, ownData(alt)
	if alt.sticky != nil {
		rt.AltCookie, rt.AltKey = alt.sticky.cookieName, string(alt.sticky.backendKey)
	}
	p := &alt.policy
	if p.headerVar != "" {
		rt.HeaderVar = p.headerVar
		switch {
		case len(p.headerValue) > 0:
			rt.Header, rt.HeaderValueText = HeaderValue, string(p.headerValue)
		case p.patternSrc != "":
			// Compiled by RE2 or not (badPattern): the shim matches it
			// with nginx's PCRE, as ingress-nginx does.
			if len(p.patternSrc) > math.MaxUint16 {
				return Route{}, false
			}
			rt.Header, rt.HeaderValueText = HeaderPattern, p.patternSrc
		default:
			rt.Header = HeaderAlways
		}
	}
	rt.CookieVar = p.cookieVar
	// math.random(total) <= weight: a weight out of 0..total decides as
	// its bound does.
	rt.Weight, rt.Total = min(max(p.weight, 0), p.total), p.total
	return rt, true
}

// RouteKind says what a premade entry of a routed backend carries.
type RouteKind uint8

// Kinds of RouteAhead's answer.
const (
	// RouteOnly: the choice of backend only; the shim takes the request's
	// peers from that backend's lease or table.
	RouteOnly RouteKind = iota
	// RouteSessions: the chosen backend is sticky: NewSessions with the
	// same Attempt gives a new session's peers and keys (for a request the
	// chosen backend's table does not decide).
	RouteSessions
	// RoutePicks: CandidatePicks with the same Attempt and no variables
	// gives the request's peers (ewma, peak_ewma, least_request).
	RoutePicks
)

// RouteAhead draws the weight rule of a routed backend (Route) ahead of the
// request that will need it: the request reached that rule, so none of the
// earlier ones applied. It returns the chosen backend and what the premade
// entry carries; the choice is recorded in a (fresh, Reset). False for a
// backend Route refuses.
func (r *Registry) RouteAhead(backend string, a *Attempt) (string, RouteKind, bool) {
	snap := r.snap.Load()
	b := snap.get(backend)
	if _, ok := r.Route(backend); !ok || b == nil {
		return "", 0, false
	}
	chosen := r.choose(snap, b, noVars{})
	a.chosen = chosen
	switch {
	case ownRotation(chosen):
		return chosen.name, RouteOnly, true
	case chosen.sticky != nil:
		return chosen.name, RouteSessions, true
	case varFree(chosen):
		return chosen.name, RoutePicks, true
	}
	return chosen.name, RouteOnly, true
}

// OwnTable is HashTable of the backend's own algorithm, whatever its
// alternatives: the table that decides a request once routing chose this
// backend (Route).
func (r *Registry) OwnTable(backend string) (HashTable, bool) {
	b := r.snap.Load().get(backend)
	if b == nil {
		return HashTable{}, false
	}
	return hashTableOf(b)
}

// RouteFor is the canary routing of one request to backend, without a
// pick: the backend it goes to and whether that is an alternative, as Go
// decides it (a header pattern read by RE2). The pick socket answers it
// (0x0A); the shim no longer asks it, as it matches header patterns itself
// (HeaderPattern).
func (r *Registry) RouteFor(backend string, req Request) (string, bool, error) {
	snap := r.snap.Load()
	b := snap.get(backend)
	if b == nil {
		return backend, false, ErrUnknownBackend
	}
	chosen := r.choose(snap, b, req)
	return chosen.name, chosen != b, nil
}
