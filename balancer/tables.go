package balancer

import "errors"

// Decision data the nginx shim applies itself, so that a request needs no
// round trip to Go (docs/pick-protocol.md, "Decisions applied by the shim").
// The choices stay this package's: a hash table is the ring Pick searches, and
// premade picks are Pick's own answers, made ahead of the requests they serve.

// KeyPart is one part of a hash-key template: a literal, or the value of the
// nginx variable Var (a regex capture "1".."9" is a number in Lua). An unset
// variable adds nothing to the key; an empty one adds "".
type KeyPart struct {
	Lit string
	Var string
}

// TableKind says how a HashTable decides.
type TableKind uint8

// Kinds of HashTable.
const (
	// TableHash (chash): the key is Key evaluated over the request's
	// variables.
	TableHash TableKind = 1
	// TableSticky (sticky_balanced): the key is the upstream key of the
	// request's Cookie; a request without one is a new session, which the
	// table does not decide.
	TableSticky TableKind = 2
	// TableStickyPersistent (sticky_persistent): no ring; the cookie's
	// upstream key is PeerKeys[i] for peer i, and any other key (or none)
	// is a new session.
	TableStickyPersistent TableKind = 3
	// TableSubset (chashsubset): the key is Key evaluated over the
	// request's variables, and the owner of its point is a subset: each
	// attempt of the request gets a uniformly drawn member of
	// Subsets[owner], as Pick draws one.
	TableSubset TableKind = 4
)

// HashTable is the decision table of a consistent-hash or sticky backend: the
// peer of a request is Peers(backend)[Owners[i]], where i is the first point
// whose hash is at least CRC32(key), or 0 when there is none. Every attempt
// of a request gets the same peer. The slices are shared and read-only.
type HashTable struct {
	Kind   TableKind
	Key    []KeyPart
	Hashes []uint32
	Owners []int32
	// Sticky: the cookie's name, parsed as lua-resty-cookie parses it
	// (CookieValue), its value split on '|' (the first piece is the upstream
	// key).
	Cookie string
	// PeerKeys (TableStickyPersistent) are the upstream keys of the peers,
	// in the order of Peers(backend).
	PeerKeys []string
	// Subsets (TableSubset) are the members of each subset, as indices
	// into Peers(backend), all of the same length.
	Subsets [][]int32
	// Recipe (sticky) is how the backend's Set-Cookie is written for a new
	// session's upstream key.
	Recipe *CookieRecipe
}

// CookieRecipe is how a sticky backend writes the Set-Cookie of a new
// session (spec §4.5; lua-resty-cookie's attribute order): Name=key|BackendKey,
// then "; Expires=" with ngx.cookie_time(now+Expires) if HasExpires,
// "; Max-Age=" MaxAge and "; Domain=" Domain if not empty, "; Path=" Path (or
// $location_path when Path is empty), "; Secure" if Secure or $https is
// "on", "; HttpOnly", and "; SameSite=" SameSite if not empty, unless
// ConditionalNone and SameSite is None and the User-Agent is one
// SameSiteNoneIncompatible names. The cookie is set only for the request
// hosts and Ingress paths Locations lists ("*.suffix" hosts match one more
// label; server_name "_" is host "_").
type CookieRecipe struct {
	Name, BackendKey        string
	HasExpires              bool
	Expires                 int64
	MaxAge, Domain, Path    string
	Secure, ConditionalNone bool
	SameSite                string
	Locations               map[string][]string
	// ChangeOnFailure: the retries of a returning session go to new
	// sessions' peers (other than the cookie's), each with its own cookie,
	// as those of a new session do.
	ChangeOnFailure bool
}

// recipe returns s's CookieRecipe.
func (s *sticky) recipe() *CookieRecipe {
	c := &CookieRecipe{Name: s.cookieName, BackendKey: string(s.backendKey), HasExpires: s.hasExpires, Expires: s.expires,
		MaxAge: s.maxAge, Domain: s.domain, Path: s.path, Secure: s.secure, ConditionalNone: s.conditionalNone, SameSite: s.sameSite,
		ChangeOnFailure: s.changeOnFailure}
	if s.hasLocations {
		c.Locations = s.locations
	}
	return c
}

// ErrNotSticky is NewSessions' answer for a backend whose new sessions it
// cannot make ahead: not sticky, or with a canary.
var ErrNotSticky = errors.New("balancer: backend's new sessions cannot be premade")

// NewSessions fills peers and keys with the candidates of a new session of
// a sticky backend (a request without its cookie), in attempt order, and
// returns how many: exactly what CandidatePicks gives such a request, with
// the upstream key each cookie would carry instead of the cookie, which
// depends on the request (CookieRecipe). a must be fresh (Reset), or hold
// the sticky backend RouteAhead chose.
func (r *Registry) NewSessions(backend string, a *Attempt, peers, keys []string) (int, error) {
	b := r.snap.Load().get(backend)
	if b == nil {
		return 0, ErrUnknownBackend
	}
	// A routed backend's premade entry (RouteAhead) chose the backend
	// already.
	if a.chosen != nil {
		b = a.chosen
	} else if len(b.alternatives) > 0 {
		return 0, ErrNotSticky
	}
	s, ok := b.algo.(*sticky)
	if !ok {
		return 0, ErrNotSticky
	}
	a.chosen = b
	n := 0
	for n < len(peers) && n < len(keys) {
		idx, key := s.pickNewUpstream(r, b, a)
		if idx < 0 {
			break
		}
		a.record(idx)
		peers[n], keys[n] = b.peers[idx].addr, string(key.bytes())
		n++
	}
	if n == 0 {
		return 0, ErrNoPeer
	}
	return n, nil
}

// HashTable returns the decision table of a chash, sticky_balanced or
// sticky_persistent backend without canary alternatives, or false for any
// other backend, whose picks depend on more than the key or on a random draw.
// A sticky table decides the first attempt of a returning session; with
// change-on-failure its retries are those of a new session.
func (r *Registry) HashTable(backend string) (HashTable, bool) {
	b := r.snap.Load().get(backend)
	if b == nil || len(b.alternatives) > 0 {
		return HashTable{}, false
	}
	return hashTableOf(b)
}

// hashTableOf is b's own table, whatever its alternatives.
func hashTableOf(b *backend) (HashTable, bool) {
	if s, ok := b.algo.(*sticky); ok {
		if !s.persistent {
			return HashTable{Kind: TableSticky, Cookie: s.cookieName, Hashes: s.ring.hashes, Owners: s.ring.owners, Recipe: s.recipe()}, true
		}
		keys := make([]string, len(b.peers))
		for pos, i := range sortedPeerOrder(b) {
			keys[pos] = s.peerKeys[i]
		}
		return HashTable{Kind: TableStickyPersistent, Cookie: s.cookieName, PeerKeys: keys, Recipe: s.recipe()}, true
	}
	switch c := b.algo.(type) {
	case *chash:
		// The ring's owners are ring node indices, nodes in address
		// order: the order Peers lists them in.
		return HashTable{Kind: TableHash, Key: c.key.wire(), Hashes: c.ring.hashes, Owners: c.ring.owners}, true
	case *chashSubset:
		// Members are b.peers indices; Peers lists addresses sorted.
		pos := make([]int32, len(b.peers))
		for p, i := range sortedPeerOrder(b) {
			pos[i] = int32(p)
		}
		sets := make([][]int32, len(c.subsets))
		for s, members := range c.subsets {
			sets[s] = make([]int32, len(members))
			for m, i := range members {
				sets[s][m] = pos[i]
			}
		}
		return HashTable{Kind: TableSubset, Key: c.key.wire(), Hashes: c.ring.hashes, Owners: c.ring.owners, Subsets: sets}, true
	}
	return HashTable{}, false
}

// wire returns the template's parts as KeyParts.
func (k hashKey) wire() []KeyPart {
	parts := make([]KeyPart, len(k.parts))
	for i, p := range k.parts {
		if p.v != "" {
			parts[i] = KeyPart{Var: p.v}
		} else {
			parts[i] = KeyPart{Lit: p.lit}
		}
	}
	return parts
}

// Premadeable reports whether the backend's picks for a request that carries
// none of NeededVars(backend) depend on nothing of the request: its algorithm
// and those of its canary alternatives read no variables (ewma, peak_ewma,
// least_request; see varFree for round robin), so the canary rules that remain are the header
// and cookie ones, which such a request does not meet, and the weight. Such
// picks can be made ahead of their requests: CandidatePicks with a Request
// that has no variables is exactly the answer one of them would get. A sticky
// backend without canary is premadeable too, for its
// new sessions only (NewSessions): their peers do not depend on the request,
// and the shim writes their cookies (CookieRecipe).
func (r *Registry) Premadeable(backend string) bool {
	snap := r.snap.Load()
	b := snap.get(backend)
	if b == nil {
		return false
	}
	if _, ok := b.algo.(*sticky); ok {
		// New sessions (NewSessions); the shim writes their cookies.
		return len(b.alternatives) == 0
	}
	if len(b.alternatives) == 0 {
		return varFree(b)
	}
	// With canaries, a premade pick may be a routing decision only: a
	// backend of round robin is then served from its own rotation's lease
	// (RouteOwn).
	if !varFree(b) && !ownRotation(b) {
		return false
	}
	for _, name := range b.alternatives {
		if alt := snap.get(name); alt != nil && !varFree(alt) && !ownRotation(alt) {
			return false
		}
	}
	return true
}

// noVars is a request that carries no variables.
type noVars struct{}

func (noVars) Var(string) ([]byte, bool) { return nil, false }

// ownRotation reports whether b is round robin with no session affinity:
// a request routed to it takes the next position of its rotation, which a
// lease of that rotation gives as well (Lease).
func ownRotation(b *backend) bool {
	_, rr := b.algo.(*roundRobin)
	return rr && b.sticky == nil
}

// RouteOwn makes the canary decision of a premade pick for a backend with
// alternatives: a request that carries none of NeededVars(backend) is routed
// by weight alone. When the chosen backend is round robin (ownRotation), it
// returns its name and true: the shim takes the request's peers from a lease
// of that backend's own rotation, so premade picks that expire unused take
// no positions of it. Otherwise the choice is recorded in a, and
// CandidatePicks with a picks from the chosen backend without routing again.
// A backend without alternatives returns false and leaves a alone.
func (r *Registry) RouteOwn(backend string, a *Attempt) (string, bool) {
	snap := r.snap.Load()
	b := snap.get(backend)
	if b == nil || len(b.alternatives) == 0 {
		return "", false
	}
	chosen := r.choose(snap, b, noVars{})
	if ownRotation(chosen) {
		return chosen.name, true
	}
	a.chosen = chosen
	return "", false
}

// varFree reports whether b's algorithm reads no request variable and keeps
// no shared sequence: round robin is left out, as premade picks that expire
// unused would take positions of its rotation and skew it (11/9, 13/7 over
// 20 requests in TestControllerNginxDataPlane); leases serve it when it has
// no canary, and a pick per request when it has.
func varFree(b *backend) bool {
	switch b.algo.(type) {
	case ewmaPicker, leastRequest:
		return b.sticky == nil
	}
	return false
}
