package balancer

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

// HashTable is the decision table of a consistent-hash backend: the peer of a
// request is Peers(backend)[Owners[i]], where i is the first point whose hash
// is at least CRC32(key), or 0 when there is none, and key is Key evaluated
// over the request's variables. Every attempt of a request gets the same
// peer. The slices are shared and read-only.
type HashTable struct {
	Key    []KeyPart
	Hashes []uint32
	Owners []int32
}

// HashTable returns the decision table of a chash backend without canary
// alternatives, or false for any other backend (whose picks depend on more
// than the key, or on a random draw).
func (r *Registry) HashTable(backend string) (HashTable, bool) {
	b := r.snap.Load().byName[backend]
	if b == nil || len(b.alternatives) > 0 {
		return HashTable{}, false
	}
	c, ok := b.algo.(*chash)
	if !ok {
		return HashTable{}, false
	}
	parts := make([]KeyPart, len(c.key.parts))
	for i, p := range c.key.parts {
		parts[i] = KeyPart{Lit: p.lit, Var: p.v}
		if p.v != "" {
			parts[i].Lit = ""
		}
	}
	// The ring's owners are ring node indices, nodes in address order:
	// the order Peers lists them in.
	return HashTable{Key: parts, Hashes: c.ring.hashes, Owners: c.ring.owners}, true
}

// Premadeable reports whether the backend's picks for a request that carries
// none of NeededVars(backend) depend on nothing of the request: its algorithm
// and those of its canary alternatives read no variables (round robin, ewma,
// peak_ewma, least_request), so the canary rules that remain are the header
// and cookie ones, which such a request does not meet, and the weight. Such
// picks can be made ahead of their requests: CandidatePicks with a Request
// that has no variables is exactly the answer one of them would get.
func (r *Registry) Premadeable(backend string) bool {
	snap := r.snap.Load()
	b := snap.byName[backend]
	if b == nil || !varFree(b) {
		return false
	}
	for _, name := range b.alternatives {
		if alt := snap.byName[name]; alt != nil && !varFree(alt) {
			return false
		}
	}
	return true
}

// varFree reports whether b's algorithm reads no request variable.
func varFree(b *backend) bool {
	switch b.algo.(type) {
	case *roundRobin, ewmaPicker, leastRequest:
		return b.sticky == nil
	}
	return false
}
