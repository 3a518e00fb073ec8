package balancer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// DecodeBackends decodes a /configuration/backends body (a JSON array of
// Backend) without applying it. Unknown fields are tolerated, as ingress-nginx's
// Lua does. A document that is not a JSON array, or an element that does not
// decode, is an error naming the element's index and, when it can be read, its
// name; nothing is returned then, so a bad body changes nothing.
func DecodeBackends(body []byte) ([]Backend, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, errors.New("decode backends: empty body")
	}
	if string(body) == "null" {
		// json.Unmarshal reads null as an empty array: a payload that
		// would empty every backend by mistake is refused instead.
		return nil, errors.New("decode backends: want a JSON array of backends, got null")
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("decode backends: want a JSON array of backends: %w", err)
	}
	out := make([]Backend, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, fmt.Errorf("decode backends: backend %d%s: %w", i, nameOf(r), err)
		}
	}
	return out, nil
}

// nameOf returns ` ("name")` for an element whose name field is readable.
func nameOf(r json.RawMessage) string {
	var n struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(r, &n) == nil && n.Name != "" {
		return fmt.Sprintf(" (%q)", n.Name)
	}
	return ""
}

// maxCookieSeconds bounds session-cookie-expires and -max-age (about 31,700
// years), so now + expires cannot overflow.
const maxCookieSeconds = 1e12

// Validate checks the fields a balancer relies on. Sync calls it for every
// backend and skips (keeping the previous version of) a backend that fails.
func (b *Backend) Validate() error {
	var errs []error
	if b.Name == "" {
		errs = append(errs, errors.New("empty name"))
	}
	for i, e := range b.Endpoints {
		if _, _, err := checkEndpoint(e); err != nil {
			errs = append(errs, fmt.Errorf("endpoint %d: %w", i, err))
			continue
		}
	}
	if b.UpstreamHashBy.HashBySubset && b.UpstreamHashBy.HashBySubsetSize < 0 {
		errs = append(errs, fmt.Errorf("upstream-hash-by-subset-size %d is negative", b.UpstreamHashBy.HashBySubsetSize))
	}
	ca := b.SessionAffinity.CookieSessionAffinity
	if ca.Expires != "" {
		if n, err := strconv.ParseInt(ca.Expires, 10, 64); err != nil || n > maxCookieSeconds || n < -maxCookieSeconds {
			errs = append(errs, fmt.Errorf("cookie expires %q is not a whole number of seconds within ±%d", ca.Expires, int64(maxCookieSeconds)))
		}
	}
	if ca.MaxAge != "" {
		if n, err := strconv.ParseInt(ca.MaxAge, 10, 64); err != nil || n > maxCookieSeconds || n < -maxCookieSeconds {
			errs = append(errs, fmt.Errorf("cookie maxage %q is not a whole number of seconds within ±%d", ca.MaxAge, int64(maxCookieSeconds)))
		}
	}
	if strings.ContainsAny(ca.Name, "=;, \t\r\n") {
		errs = append(errs, fmt.Errorf("cookie name %q is not a cookie token", ca.Name))
	}
	for _, s := range []struct{ what, v string }{{"path", ca.Path}, {"domain", ca.Domain}} {
		if strings.ContainsAny(s.v, ";\r\n") {
			errs = append(errs, fmt.Errorf("cookie %s %q contains ';' or a line break", s.what, s.v))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("backend %q: %w", b.Name, errors.Join(errs...))
}

// nodeID returns the "ip:port" node id of an endpoint checked by
// checkEndpoint, IPv6 bracketed (Lua wraps any address that is not
// dotted-quad in brackets). Hostnames are accepted here (ExternalName); the
// registry resolves them.
func nodeID(address, port string, kind int) string {
	if kind == addrIPv6 {
		return "[" + address + "]:" + port
	}
	return address + ":" + port
}

// The kinds of endpoint address checkEndpoint tells apart.
const (
	addrHostname = iota
	addrIPv4     // dotted quad
	addrIPv6     // any other IP literal, IPv4-mapped ones included
)

// checkEndpoint validates an endpoint and returns its port in canonical form
// and the kind of its address, without allocating for a valid IP endpoint
// (Sync checks every endpoint of every backend).
func checkEndpoint(e Endpoint) (port string, kind int, err error) {
	n, err := strconv.Atoi(e.Port.Str)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("port %q is not 1-65535", e.Port.Str)
	}
	port = e.Port.Str
	if port[0] < '1' || port[0] > '9' { // "+80", "080"
		port = strconv.Itoa(n)
	}
	if e.Address == "" {
		return "", 0, errors.New("empty address")
	}
	// What net.ParseIP accepts: no zone.
	if ip, perr := netip.ParseAddr(e.Address); perr == nil && ip.Zone() == "" {
		if ip.Is4() {
			return port, addrIPv4, nil
		}
		return port, addrIPv6, nil
	}
	if !validHostname(e.Address) {
		return "", 0, fmt.Errorf("address %q is neither an IP nor a hostname", e.Address)
	}
	return port, addrHostname, nil
}

func validHostname(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if len(h) == 0 || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
