package balancer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Backend is one element of the JSON array ingress-nginx's controller POSTs to
// /configuration/backends (pkg/apis/ingress/types.go Backend, cut down by
// configureBackends). JSON tags and omitempty rules match what ingress-nginx
// actually serializes (spec §1.3), so a Backend marshals to the same bytes.
type Backend struct {
	Name                 string                `json:"name"`
	Service              *BackendService       `json:"service,omitempty"`
	Port                 PortValue             `json:"port"`
	SSLPassthrough       bool                  `json:"sslPassthrough"`
	Endpoints            []Endpoint            `json:"endpoints,omitempty"`
	SessionAffinity      SessionAffinityConfig `json:"sessionAffinityConfig"`
	UpstreamHashBy       UpstreamHashByConfig  `json:"upstreamHashByConfig"`
	LoadBalance          string                `json:"load-balance,omitempty"`
	NoServer             bool                  `json:"noServer"`
	TrafficShapingPolicy TrafficShapingPolicy  `json:"trafficShapingPolicy"`
	AlternativeBackends  []string              `json:"alternativeBackends,omitempty"`
}

// BackendService is the cut-down Service ingress-nginx sends:
// {metadata:{}, spec:<ServiceSpec>, status:{loadBalancer:{}}}. The balancer
// only reads spec.type and spec.externalName; Spec keeps the full spec bytes
// so a re-encode loses nothing.
type BackendService struct {
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Spec     json.RawMessage `json:"spec,omitempty"`
	Status   json.RawMessage `json:"status,omitempty"`
}

// serviceSpecView is the part of a ServiceSpec the balancer reads.
type serviceSpecView struct {
	Type         string `json:"type"`
	ExternalName string `json:"externalName"`
}

// IsExternalName reports whether the service is of type ExternalName, and the
// external name it points to.
func (s *BackendService) IsExternalName() (name string, ok bool) {
	if s == nil || len(s.Spec) == 0 {
		return "", false
	}
	var v serviceSpecView
	if err := json.Unmarshal(s.Spec, &v); err != nil {
		return "", false
	}
	return v.ExternalName, v.Type == "ExternalName"
}

// Endpoint is one upstream address. ingress-nginx sends the port as a string
// ("8080"); a number is accepted too.
type Endpoint struct {
	Address string    `json:"address"`
	Port    PortValue `json:"port"`
}

// SessionAffinityConfig is ingress-nginx's SessionAffinityConfig.
type SessionAffinityConfig struct {
	// Name is "cookie" when cookie affinity is on, "" otherwise.
	Name string `json:"name"`
	// Mode is "balanced", "persistent" or "" (balanced).
	Mode                  string                `json:"mode"`
	CookieSessionAffinity CookieSessionAffinity `json:"cookieSessionAffinity"`
}

// CookieSessionAffinity is ingress-nginx's CookieSessionAffinity: every field
// but Name is omitted when empty or false.
type CookieSessionAffinity struct {
	Name                    string              `json:"name"`
	Expires                 string              `json:"expires,omitempty"`
	MaxAge                  string              `json:"maxage,omitempty"`
	Locations               map[string][]string `json:"locations,omitempty"`
	Secure                  bool                `json:"secure,omitempty"`
	Path                    string              `json:"path,omitempty"`
	Domain                  string              `json:"domain,omitempty"`
	SameSite                string              `json:"samesite,omitempty"`
	ConditionalSameSiteNone bool                `json:"conditional_samesite_none,omitempty"`
	ChangeOnFailure         bool                `json:"change_on_failure,omitempty"`
}

// UpstreamHashByConfig is ingress-nginx's UpstreamHashByConfig. HashBy is a
// pointer because Lua distinguishes absent from "" (spec §3.4: any non-nil
// string, even "", selects chash).
type UpstreamHashByConfig struct {
	HashBy           *string `json:"upstream-hash-by,omitempty"`
	HashBySubset     bool    `json:"upstream-hash-by-subset,omitempty"`
	HashBySubsetSize int     `json:"upstream-hash-by-subset-size,omitempty"`
}

// TrafficShapingPolicy is the canary policy; ingress-nginx always sends every
// field.
type TrafficShapingPolicy struct {
	Weight        int    `json:"weight"`
	WeightTotal   int    `json:"weightTotal"`
	Header        string `json:"header"`
	HeaderValue   string `json:"headerValue"`
	HeaderPattern string `json:"headerPattern"`
	Cookie        string `json:"cookie"`
}

// PortValue is a Kubernetes IntOrString as it appears in the payload: a JSON
// number (80) or a JSON string ("http", "8080"). It re-encodes in the form it
// was decoded from.
type PortValue struct {
	// Str holds the value as text ("80", "http").
	Str string
	// IsString records that the JSON form was a string.
	IsString bool
}

// PortString returns a PortValue that encodes as a JSON string.
func PortString(s string) PortValue { return PortValue{Str: s, IsString: true} }

// PortNumber returns a PortValue that encodes as a JSON number.
func PortNumber(n int) PortValue { return PortValue{Str: strconv.Itoa(n)} }

// String returns the port as text.
func (p PortValue) String() string { return p.Str }

// MarshalJSON encodes the port in the form it came in.
func (p PortValue) MarshalJSON() ([]byte, error) {
	if p.IsString {
		return json.Marshal(p.Str)
	}
	if p.Str == "" {
		return []byte("0"), nil
	}
	return []byte(p.Str), nil
}

// UnmarshalJSON accepts a JSON number (an integer) or a JSON string.
func (p *PortValue) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("decode port: %w", err)
		}
		*p = PortValue{Str: s, IsString: true}
		return nil
	}
	if bytes.Equal(b, []byte("null")) {
		*p = PortValue{}
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 32)
	if err != nil {
		return fmt.Errorf("decode port %q: not an integer or string", b)
	}
	*p = PortValue{Str: strconv.FormatInt(n, 10)}
	return nil
}
