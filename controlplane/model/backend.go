package model

import (
	"maps"
	"slices"
	"strconv"
)

// Backend is one upstream the balancer picks peers from: the endpoints of
// one Service port and how to choose among them. The builder makes every
// field valid; data planes read them as they are. ingress-nginx's wire form
// of the same thing (the JSON POSTed to /configuration/backends) is
// converted to and from a Backend only at the edges that speak it
// (balancer.Backend).
type Backend struct {
	Name string `json:"name"`

	// Port is the Service port the backend was made for, as its Ingress
	// or ConfigMap named it; the zero value for the default backend.
	Port ServicePort `json:"port"`

	// HasService is true when the Service and the port the backend names
	// were found (ingress-nginx then sends the Service's spec with the
	// backend). False: the backend has no endpoints because of its Service
	// (the orphan_ingress metric's no-service).
	HasService bool `json:"hasService,omitempty"`

	// ExternalName is the DNS name (or IP) of an ExternalName Service; the
	// balancer resolves endpoints whose Address is a name only then. Empty
	// for any other Service.
	ExternalName string `json:"externalName,omitempty"`

	// Endpoints are the peers, in the order the builder found them.
	Endpoints []Endpoint `json:"endpoints,omitempty"`

	// Algorithm is load-balance; empty means round robin. Affinity and
	// HashBy take precedence over it (Implementation).
	Algorithm Algorithm `json:"algorithm,omitempty"`

	// HashBy is upstream-hash-by and its subset settings; nil: none.
	HashBy *HashBy `json:"hashBy,omitempty"`

	// Affinity is cookie session affinity; nil: none.
	Affinity *CookieAffinity `json:"affinity,omitempty"`

	// Canary holds the rules that route a request from a primary backend
	// to this one, when this backend is one of its Alternatives; the zero
	// value routes by weight 0 only (never).
	Canary Canary `json:"canary"`

	// Alternatives are the canary backends requests may be routed to,
	// in order.
	Alternatives []string `json:"alternatives,omitempty"`

	// NoServer marks a canary backend: no server routes to it directly.
	NoServer bool `json:"noServer,omitempty"`

	// SSLPassthrough marks a backend served by TLS passthrough.
	SSLPassthrough bool `json:"sslPassthrough,omitempty"`
}

// ServicePort names a Service port: by Name when it is set, else by Number.
type ServicePort struct {
	Number int32  `json:"number,omitempty"`
	Name   string `json:"name,omitempty"`
}

// String is the port as ingress-nginx writes it in backend names.
func (p ServicePort) String() string {
	if p.Name != "" {
		return p.Name
	}
	return strconv.Itoa(int(p.Number))
}

// Endpoint is one peer. Address is an IP literal as the EndpointSlice
// spelled it (the sticky_persistent key hashes it as written), or, for an
// ExternalName backend, the DNS name to resolve. Port is 1-65535.
type Endpoint struct {
	Address string `json:"address"`
	Port    uint16 `json:"port"`
}

// HostPort is "address:port", the address bracketed when it holds a colon
// (IPv6), as the balancer names a peer.
func (e Endpoint) HostPort() string {
	p := strconv.Itoa(int(e.Port))
	for i := 0; i < len(e.Address); i++ {
		if e.Address[i] == ':' {
			return "[" + e.Address + "]:" + p
		}
	}
	return e.Address + ":" + p
}

// Algorithm is a load-balance name.
type Algorithm string

// The algorithms load-balance accepts: ingress-nginx's six and Switchyard's
// two (docs/compatibility.md).
const (
	RoundRobin       Algorithm = "round_robin"
	EWMA             Algorithm = "ewma"
	CHash            Algorithm = "chash"
	CHashSubset      Algorithm = "chashsubset"
	StickyBalanced   Algorithm = "sticky_balanced"
	StickyPersistent Algorithm = "sticky_persistent"
	LeastRequest     Algorithm = "least_request"
	PeakEWMA         Algorithm = "peak_ewma"
)

// Algorithms lists every Algorithm, sorted by name.
var Algorithms = []Algorithm{CHash, CHashSubset, EWMA, LeastRequest, PeakEWMA, RoundRobin, StickyBalanced, StickyPersistent}

// ParseAlgorithm returns the Algorithm named s, and whether s names one.
func ParseAlgorithm(s string) (Algorithm, bool) {
	for _, a := range Algorithms {
		if string(a) == s {
			return a, true
		}
	}
	return "", false
}

// Implementation is the algorithm that picks this backend's peers, chosen
// as ingress-nginx's balancer chooses it: cookie affinity first, then
// upstream-hash-by (with or without subsets), then load-balance, round
// robin when that is empty.
func (b *Backend) Implementation() Algorithm {
	switch {
	case b.Affinity != nil && b.Affinity.Persistent:
		return StickyPersistent
	case b.Affinity != nil:
		return StickyBalanced
	case b.HashBy != nil && b.HashBy.Subset:
		return CHashSubset
	case b.HashBy != nil:
		return CHash
	case b.Algorithm != "":
		return b.Algorithm
	}
	return RoundRobin
}

// HashBy is upstream-hash-by: consistent hashing of Key, a template of
// nginx variables (`$request_uri`, `$http_x_user`, ...), over all peers or,
// with Subset, over subsets of SubsetSize peers (chashsubset).
type HashBy struct {
	Key        string `json:"key"`
	Subset     bool   `json:"subset,omitempty"`
	SubsetSize int    `json:"subsetSize,omitempty"`
}

// CookieAffinity is affinity: cookie with its session-cookie-* settings.
type CookieAffinity struct {
	// Persistent is affinity-mode: persistent; false is balanced.
	Persistent bool `json:"persistent,omitempty"`
	// Name is the cookie's name; empty means "route", as ingress-nginx's
	// balancer names it.
	Name string `json:"name,omitempty"`
	// Expires and MaxAge are seconds; nil leaves the attribute out.
	Expires *int64 `json:"expires,omitempty"`
	MaxAge  *int64 `json:"maxAge,omitempty"`
	// Path and Domain are the cookie's attributes, without ';' or line
	// breaks; an empty Path means the location's path.
	Path   string `json:"path,omitempty"`
	Domain string `json:"domain,omitempty"`
	// SameSite is "Strict", "Lax", "None" or empty (left out).
	SameSite string `json:"sameSite,omitempty"`
	// ConditionalSameSiteNone leaves SameSite=None out for user agents
	// known to reject it.
	ConditionalSameSiteNone bool `json:"conditionalSameSiteNone,omitempty"`
	Secure                  bool `json:"secure,omitempty"`
	// ChangeOnFailure issues a new cookie when the sticky peer failed.
	ChangeOnFailure bool `json:"changeOnFailure,omitempty"`
	// Locations are, by host, the paths whose requests get a cookie; nil
	// means every location.
	Locations map[string][]string `json:"locations,omitempty"`
}

// Canary is the set of rules that send a request to a canary backend, tried
// in ingress-nginx's order: the header (by HeaderValue, by HeaderPattern, or
// "always"/"never"), then the cookie, then Weight out of WeightTotal.
type Canary struct {
	Weight int `json:"weight,omitempty"`
	// WeightTotal is canary-weight-total; a value not above 100 means 100.
	WeightTotal int    `json:"weightTotal,omitempty"`
	Header      string `json:"header,omitempty"`
	HeaderValue string `json:"headerValue,omitempty"`
	// HeaderPattern is used when HeaderValue is empty.
	HeaderPattern *Regexp `json:"headerPattern,omitempty"`
	Cookie        string  `json:"cookie,omitempty"`
}

// Equal reports whether b and o are the same backend, canary patterns
// compared by their text. The balancer rebuilds only backends that are not
// Equal to their previous version, so every field counts
// (TestBackendEqualCoversEveryField).
func (b *Backend) Equal(o *Backend) bool {
	if b == o {
		// The same Backend: Configurations refreshed from one another
		// share the ones that did not change.
		return true
	}
	if b.Name != o.Name || b.Port != o.Port || b.HasService != o.HasService || b.ExternalName != o.ExternalName ||
		b.Algorithm != o.Algorithm || b.NoServer != o.NoServer || b.SSLPassthrough != o.SSLPassthrough ||
		!slices.Equal(b.Endpoints, o.Endpoints) || !slices.Equal(b.Alternatives, o.Alternatives) {
		return false
	}
	if (b.HashBy == nil) != (o.HashBy == nil) || b.HashBy != nil && *b.HashBy != *o.HashBy {
		return false
	}
	c, d := &b.Canary, &o.Canary
	if c.Weight != d.Weight || c.WeightTotal != d.WeightTotal || c.Header != d.Header || c.HeaderValue != d.HeaderValue ||
		c.Cookie != d.Cookie || c.HeaderPattern.String() != d.HeaderPattern.String() {
		return false
	}
	return b.Affinity.equal(o.Affinity)
}

func (a *CookieAffinity) equal(o *CookieAffinity) bool {
	if a == nil || o == nil {
		return a == o
	}
	return a.Persistent == o.Persistent && a.Name == o.Name && sameInt(a.Expires, o.Expires) && sameInt(a.MaxAge, o.MaxAge) &&
		a.Path == o.Path && a.Domain == o.Domain && a.SameSite == o.SameSite && a.ConditionalSameSiteNone == o.ConditionalSameSiteNone &&
		a.Secure == o.Secure && a.ChangeOnFailure == o.ChangeOnFailure && maps.EqualFunc(a.Locations, o.Locations, slices.Equal[[]string])
}

func sameInt(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
