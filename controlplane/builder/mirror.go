package builder

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// parseMirror reads mirror-target, mirror-request-body and mirror-host into
// a Mirror without its Source (the Ingress's UID is set by the caller); nil
// without mirror-target or when it is invalid. None of them restricts
// access: an invalid value is reported (bad) and the Ingress served without
// the mirror.
func parseMirror(get func(string) (string, bool), bad func(string, string, ...any), warn func(name, msg string)) *model.Mirror {
	body := true
	if v, ok := get("mirror-request-body"); ok {
		switch strings.TrimSpace(v) {
		case "on":
		case "off":
			body = false
		default:
			bad("mirror-request-body", "%q is not on or off", v)
		}
	}
	host := ""
	if v, ok := get("mirror-host"); ok {
		if h := strings.ToLower(strings.TrimSpace(v)); model.ValidUpstreamVhost(h) {
			host = h
		} else {
			bad("mirror-host", "%q is not a host name with an optional port (1-65535)", v)
		}
	}
	raw, ok := get("mirror-target")
	if !ok {
		for _, name := range []string{"mirror-request-body", "mirror-host"} {
			if _, set := get(name); set {
				warn(name, "has no effect without mirror-target (as in ingress-nginx); ignored")
			}
		}
		return nil
	}
	m, err := parseMirrorTarget(strings.TrimSpace(raw))
	if err != nil {
		bad("mirror-target", "%v; requests are not mirrored", err)
		return nil
	}
	m.RequestBody = body
	if host != "" {
		m.Host = host
	}
	return m
}

// parseMirrorTarget reads a mirror-target: http:// or https://, a host (DNS
// labels or an IPv4 address, no variable) with an optional port, then an
// optional path and query of URL characters and the variables $request_uri,
// $uri, $args, $query_string, $is_args, $host and $scheme ($name or
// ${name}). What nginx would work out in the mirror's subrequest is
// resolved here, so that the data planes only expand variables: $uri is
// the subrequest's own URI, Source (left as the placeholder "$uri" for the
// caller to fill in, see withSource); a target without variables gets the
// client's query appended, and one without a path starts with Source, as
// nginx's proxy_pass sends them.
func parseMirrorTarget(s string) (*model.Mirror, error) {
	if s == "" {
		return nil, fmt.Errorf("%q is not an http or https URL", s)
	}
	if len(s) > 2048 {
		return nil, fmt.Errorf("%q... is longer than 2048 bytes", s[:64])
	}
	m := &model.Mirror{}
	rest := ""
	switch lower := strings.ToLower(s); {
	case strings.HasPrefix(lower, "http://"):
		m.Scheme, rest = "http", s[len("http://"):]
	case strings.HasPrefix(lower, "https://"):
		m.Scheme, rest = "https", s[len("https://"):]
	default:
		return nil, fmt.Errorf("%q is not an http or https URL", s)
	}
	end := strings.IndexAny(rest, "/?$")
	if end < 0 {
		end = len(rest)
	}
	hostPort := strings.ToLower(rest[:end])
	if !model.ValidUpstreamVhost(hostPort) {
		return nil, fmt.Errorf("%q: the host %q is not a host name or IPv4 address with an optional port (1-65535)", s, rest[:end])
	}
	m.HostPort = hostPort
	m.Host = hostPort
	if i := strings.LastIndexByte(hostPort, ':'); i >= 0 {
		m.Host = hostPort[:i]
	}
	path := rest[end:]
	vars := false
	for p := path; p != ""; {
		i := strings.IndexByte(p, '$')
		if i < 0 {
			if err := mirrorLiteral(s, p); err != nil {
				return nil, err
			}
			m.URI = append(m.URI, model.URLPart{Literal: p})
			break
		}
		if i > 0 {
			if err := mirrorLiteral(s, p[:i]); err != nil {
				return nil, err
			}
			m.URI = append(m.URI, model.URLPart{Literal: p[:i]})
		}
		name, after, ok := cutVarName(p[i+1:])
		if !ok {
			return nil, fmt.Errorf("%q: unterminated ${", s)
		}
		p = after
		vars = true
		switch name {
		case "request_uri", "args", "is_args", "host", "scheme":
			m.URI = append(m.URI, model.URLPart{Var: model.URLVar(name)})
		case "query_string":
			m.URI = append(m.URI, model.URLPart{Var: model.VarArgs})
		case "uri":
			m.URI = append(m.URI, model.URLPart{Var: varURIPlaceholder})
		default:
			return nil, fmt.Errorf("%q: variable $%s is not one of $request_uri, $uri, $args, $query_string, $is_args, $host, $scheme", s, name)
		}
	}
	if len(m.URI) > 0 && m.URI[0].Var != "" && m.URI[0].Var != model.VarRequestURI && m.URI[0].Var != varURIPlaceholder {
		// Right after the host it would extend the host name.
		return nil, fmt.Errorf("%q: after the host comes '/', '?', $request_uri or $uri", s)
	}
	if !vars {
		if strings.Contains(path, "?") {
			return nil, fmt.Errorf("%q: a query in a target without variables is not supported (nginx would append the client's)", s)
		}
		if path == "" {
			m.URI = append(m.URI, model.URLPart{Var: varURIPlaceholder})
		}
		m.URI = append(m.URI, model.URLPart{Var: model.VarIsArgs}, model.URLPart{Var: model.VarArgs})
	}
	return m, nil
}

// varURIPlaceholder stands for $uri, the mirror subrequest's URI (Source),
// until withSource replaces it; it never reaches the model.
const varURIPlaceholder model.URLVar = "uri"

// withSource returns m with its Source for the Ingress uid and every $uri
// replaced by it (adjacent literals joined).
func withSource(m *model.Mirror, uid string) *model.Mirror {
	out := *m
	out.Source = "/_mirror-" + uid
	if !model.ValidMirrorSource(out.Source) {
		// UIDs are UUIDs (or the manifests loader's names); anything
		// else is named by its digest so it stays one nginx word.
		out.Source = "/_mirror-" + strconv.FormatUint(fnv64(uid), 16)
	}
	out.URI = nil
	for _, p := range m.URI {
		if p.Var == varURIPlaceholder {
			p = model.URLPart{Literal: out.Source}
		}
		if n := len(out.URI); n > 0 && p.Var == "" && out.URI[n-1].Var == "" {
			out.URI[n-1].Literal += p.Literal
			continue
		}
		out.URI = append(out.URI, p)
	}
	return &out
}

// fnv64 is FNV-1a.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mirrorLiteral checks the literal text of a mirror-target's path.
func mirrorLiteral(target, text string) error {
	if !reURLText.MatchString(text) || strings.Contains(text, "#") {
		return fmt.Errorf("%q: only URL characters (no blank, quote, '#', ';', '{', '}' or backslash) and variables are allowed after the host", target)
	}
	return nil
}
