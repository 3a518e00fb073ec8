package balancer

import (
	"encoding/json"
	"net/netip"
	"strconv"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// Model checks b (Validate) and converts it to the typed backend the
// registry applies. It reads the wire form as ingress-nginx's Lua does:
// affinity only when sessionAffinityConfig.name is "cookie", an unknown
// load-balance as round robin, an upstream-hash-by present (even "") as
// consistent hashing, a SameSite other than Strict, Lax or None as none, a
// hostname endpoint only for an ExternalName Service. A canary header
// pattern RE2 rejects is kept; Apply reports it, Go keeps requests with the
// header on the primary, and the nginx shim matches it with PCRE as
// ingress-nginx does (Route).
func (b *Backend) Model() (model.Backend, error) {
	if err := b.Validate(); err != nil {
		return model.Backend{}, err
	}
	m := model.Backend{
		Name:           b.Name,
		Alternatives:   b.AlternativeBackends,
		NoServer:       b.NoServer,
		SSLPassthrough: b.SSLPassthrough,
		HasService:     b.Service != nil && len(b.Service.Spec) > 0 && string(b.Service.Spec) != "{}",
	}
	if b.Port.IsString {
		m.Port.Name = b.Port.Str
	} else if n, err := strconv.ParseInt(b.Port.Str, 10, 32); err == nil {
		m.Port.Number = int32(n)
	}
	name, external := b.Service.IsExternalName()
	external = external && name != ""
	if external {
		m.ExternalName = name
	}
	for _, e := range b.Endpoints {
		port, kind, _ := checkEndpoint(e) // Validate checked it
		if kind == addrHostname && !external {
			continue // a hostname is only meaningful for ExternalName
		}
		n, _ := strconv.Atoi(port)
		m.Endpoints = append(m.Endpoints, model.Endpoint{Address: e.Address, Port: uint16(n)})
	}
	if a, ok := model.ParseAlgorithm(b.LoadBalance); ok {
		m.Algorithm = a
	}
	if h := b.UpstreamHashBy; h.HashBy != nil {
		m.HashBy = &model.HashBy{Key: *h.HashBy, Subset: h.HashBySubset, SubsetSize: h.HashBySubsetSize}
	}
	if sa := b.SessionAffinity; sa.Name == "cookie" {
		ca := sa.CookieSessionAffinity
		a := &model.CookieAffinity{
			Persistent: sa.Mode == "persistent",
			Name:       ca.Name, Path: ca.Path, Domain: ca.Domain, Secure: ca.Secure,
			ConditionalSameSiteNone: ca.ConditionalSameSiteNone, ChangeOnFailure: ca.ChangeOnFailure,
			Locations: ca.Locations,
		}
		switch ca.SameSite {
		case "Strict", "Lax", "None": // resty.cookie drops anything else
			a.SameSite = ca.SameSite
		}
		if ca.Expires != "" {
			n, _ := strconv.ParseInt(ca.Expires, 10, 64) // Validate checked it
			a.Expires = &n
		}
		if ca.MaxAge != "" {
			n, _ := strconv.ParseInt(ca.MaxAge, 10, 64)
			a.MaxAge = &n
		}
		m.Affinity = a
	}
	p := b.TrafficShapingPolicy
	m.Canary = model.Canary{Weight: p.Weight, WeightTotal: p.WeightTotal, Header: p.Header, HeaderValue: p.HeaderValue, Cookie: p.Cookie}
	if p.HeaderPattern != "" {
		m.Canary.HeaderPattern = model.NewRegexp(p.HeaderPattern)
	}
	return m, nil
}

// WireBackends encodes typed backends in ingress-nginx's wire form, for the
// edges that answer with it (GET /configuration/backends, debug). The
// Service is sent cut down to what the Lua balancer reads: its type and
// external name.
func WireBackends(bs []*model.Backend) []Backend {
	out := make([]Backend, len(bs))
	for i := range bs {
		out[i] = wireBackend(bs[i])
	}
	return out
}

// serviceSpecJSON is the part of a ServiceSpec the wire form carries.
type serviceSpecJSON struct {
	Type         string `json:"type,omitempty"`
	ExternalName string `json:"externalName,omitempty"`
}

func wireBackend(m *model.Backend) Backend {
	b := Backend{
		Name:                m.Name,
		Port:                PortNumber(int(m.Port.Number)),
		SSLPassthrough:      m.SSLPassthrough,
		NoServer:            m.NoServer,
		LoadBalance:         string(m.Algorithm),
		AlternativeBackends: m.Alternatives,
	}
	if m.Port.Name != "" {
		b.Port = PortString(m.Port.Name)
	}
	spec := []byte("{}")
	if m.ExternalName != "" {
		spec, _ = json.Marshal(serviceSpecJSON{Type: "ExternalName", ExternalName: m.ExternalName})
	}
	b.Service = &BackendService{Metadata: []byte("{}"), Spec: spec, Status: []byte(`{"loadBalancer":{}}`)}
	for _, e := range m.Endpoints {
		b.Endpoints = append(b.Endpoints, Endpoint{Address: e.Address, Port: PortString(strconv.Itoa(int(e.Port)))})
	}
	if h := m.HashBy; h != nil {
		key := h.Key
		b.UpstreamHashBy = UpstreamHashByConfig{HashBy: &key, HashBySubset: h.Subset, HashBySubsetSize: h.SubsetSize}
	}
	if a := m.Affinity; a != nil {
		b.SessionAffinity = SessionAffinityConfig{Name: "cookie", Mode: "balanced", CookieSessionAffinity: CookieSessionAffinity{
			Name: a.Name, Locations: a.Locations, Secure: a.Secure, Path: a.Path, Domain: a.Domain, SameSite: a.SameSite,
			ConditionalSameSiteNone: a.ConditionalSameSiteNone, ChangeOnFailure: a.ChangeOnFailure,
		}}
		if a.Persistent {
			b.SessionAffinity.Mode = "persistent"
		}
		if a.Expires != nil {
			b.SessionAffinity.CookieSessionAffinity.Expires = strconv.FormatInt(*a.Expires, 10)
		}
		if a.MaxAge != nil {
			b.SessionAffinity.CookieSessionAffinity.MaxAge = strconv.FormatInt(*a.MaxAge, 10)
		}
	}
	c := m.Canary
	b.TrafficShapingPolicy = TrafficShapingPolicy{Weight: c.Weight, WeightTotal: c.WeightTotal, Header: c.Header,
		HeaderValue: c.HeaderValue, HeaderPattern: c.HeaderPattern.String(), Cookie: c.Cookie}
	return b
}

// isIP reports whether s is an IP literal without a zone (what net.ParseIP
// accepts).
func isIP(s string) bool {
	ip, err := netip.ParseAddr(s)
	return err == nil && ip.Zone() == ""
}
