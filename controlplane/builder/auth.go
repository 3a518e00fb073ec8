package builder

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

var (
	// reURLText is what the literal text of an auth URL may hold: URL
	// characters without blanks, quotes, ';', '{', '}', '\' or '$'.
	reURLText = regexp.MustCompile(`^[A-Za-z0-9\-._~:/?#\[\]@!&()*+,=%]*$`)
	// reRedirectParam is auth-signin-redirect-param.
	reRedirectParam = regexp.MustCompile(`^[A-Za-z0-9\-._~]+$`)
	// reHeaderName is one auth-response-headers entry.
	reHeaderName = regexp.MustCompile(`^[A-Za-z0-9\-_]+$`)
	// authMethods are auth-method's values, as ingress-nginx accepts them.
	authMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true,
		"DELETE": true, "CONNECT": true, "OPTIONS": true, "TRACE": true}
)

// parseURLTemplate splits an auth URL into literal text and the variables
// model.URLVars names ($name or ${name}). Anything else is an error naming
// what is wrong: a character outside reURLText, an unknown variable, or a
// result that is not an absolute http(s) URL with a host.
func parseURLTemplate(s string) (model.URLTemplate, error) {
	var t model.URLTemplate
	lit := func(text string) error {
		if !reURLText.MatchString(text) {
			return fmt.Errorf("%q: only URL characters and the variables $%s are allowed", s, joinVars())
		}
		if text != "" {
			t = append(t, model.URLPart{Literal: text})
		}
		return nil
	}
	rest := s
	for {
		i := strings.IndexByte(rest, '$')
		if i < 0 {
			if err := lit(rest); err != nil {
				return nil, err
			}
			break
		}
		if err := lit(rest[:i]); err != nil {
			return nil, err
		}
		rest = rest[i+1:]
		var name string
		if strings.HasPrefix(rest, "{") {
			j := strings.IndexByte(rest, '}')
			if j < 0 {
				return nil, fmt.Errorf("%q: unterminated ${", s)
			}
			name, rest = rest[1:j], rest[j+1:]
		} else {
			j := 0
			for j < len(rest) && (rest[j] == '_' || rest[j] >= 'a' && rest[j] <= 'z' || rest[j] >= 'A' && rest[j] <= 'Z' || rest[j] >= '0' && rest[j] <= '9') {
				j++
			}
			name, rest = rest[:j], rest[j:]
		}
		if !knownVar(name) {
			return nil, fmt.Errorf("%q: variable $%s is not one of $%s", s, name, joinVars())
		}
		t = append(t, model.URLPart{Var: model.URLVar(name)})
	}
	u, err := url.Parse(sample(t))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%q is not an absolute http or https URL", s)
	}
	return t, nil
}

func knownVar(name string) bool {
	for _, v := range model.URLVars {
		if string(v) == name {
			return true
		}
	}
	return false
}

func joinVars() string {
	s := make([]string, len(model.URLVars))
	for i, v := range model.URLVars {
		s[i] = string(v)
	}
	return strings.Join(s, ", $")
}

// sample renders t with a plausible value per variable, for checking the
// shape of the URL it makes.
func sample(t model.URLTemplate) string {
	var b strings.Builder
	for _, p := range t {
		switch p.Var {
		case "":
			b.WriteString(p.Literal)
		case model.VarHost, model.VarHTTPHost, model.VarBestHTTPHost:
			b.WriteString("host.example")
		case model.VarScheme, model.VarPassAccessScheme:
			b.WriteString("https")
		default:
			b.WriteString("/path")
		}
	}
	return b.String()
}

// hostOf is the Host field ingress-nginx sends the authentication service:
// the URL's host name without the port, which may be a variable.
func hostOf(t model.URLTemplate) model.URLTemplate {
	// Between "://" and the first '/', '?' or '#', without ":port" or
	// "[...]" brackets; the URL's shape was checked by parseURLTemplate.
	var out model.URLTemplate
	state := 0 // 0 before "://", 1 in the host, 2 done
	for _, p := range t {
		if p.Var != "" {
			if state == 1 {
				out = append(out, p)
			}
			continue
		}
		text := p.Literal
		if state == 0 {
			i := strings.Index(text, "://")
			if i < 0 {
				continue
			}
			text, state = text[i+3:], 1
		}
		if state == 1 {
			end := strings.IndexAny(text, "/?#")
			if end >= 0 {
				text, state = text[:end], 2
			}
			if text != "" {
				out = append(out, model.URLPart{Literal: text})
			}
		}
	}
	// Drop a literal ":port" at the end, and IPv6 brackets.
	if n := len(out); n > 0 && out[n-1].Var == "" {
		lit := out[n-1].Literal
		if i := strings.LastIndexByte(lit, ':'); i >= 0 && !strings.Contains(lit[i:], "]") {
			if _, err := strconv.Atoi(lit[i+1:]); err == nil || i == len(lit)-1 {
				lit = lit[:i]
			}
		}
		lit = strings.TrimSuffix(strings.TrimPrefix(lit, "["), "]")
		if lit == "" {
			out = out[:n-1]
		} else {
			out[n-1].Literal = lit
		}
	}
	return out
}

// signinURL appends the redirect parameter to auth-signin as ingress-nginx
// does: "?<param>=$pass_access_scheme://$http_host$escaped_request_uri", or
// with '&' when the URL has a query, and nothing when the query already
// holds the parameter.
func signinURL(raw, param string) string {
	if param == "" {
		param = "rd"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw // parseURLTemplate reports it
	}
	q := u.Query()
	const back = "$pass_access_scheme://$http_host$escaped_request_uri"
	switch {
	case len(q) == 0:
		return raw + "?" + param + "=" + back
	case q.Get(param) != "":
		return raw
	}
	return raw + "&" + param + "=" + back
}

// externalAuthKin are the annotations that only mean something with
// auth-url.
var externalAuthKin = []string{"auth-method", "auth-signin", "auth-signin-redirect-param", "auth-response-headers",
	"auth-request-redirect", "auth-always-set-cookie"}

// parseExternalAuth reads auth-url and its kin; nil without auth-url, when
// each kin present is reported to warn as having no effect. Errors go to
// bad, which fails the Ingress closed (they are access annotations).
func parseExternalAuth(get func(string) (string, bool), bad func(string, string, ...any), warn func(string, string), boolean func(string) bool) *model.ExternalAuth {
	raw, ok := get("auth-url")
	if !ok {
		for _, k := range externalAuthKin {
			if _, ok := get(k); ok {
				warn(k, "has no effect without auth-url (as in ingress-nginx); ignored")
			}
		}
		return nil
	}
	ea := &model.ExternalAuth{}
	t, err := parseURLTemplate(strings.TrimSpace(raw))
	if err != nil {
		bad("auth-url", "%v", err)
		return nil
	}
	ea.URL, ea.Host = t, hostOf(t)
	if v, ok := get("auth-method"); ok {
		if !authMethods[v] {
			bad("auth-method", "%q is not an HTTP method (GET, HEAD, POST, PUT, PATCH, DELETE, CONNECT, OPTIONS, TRACE)", v)
			return nil
		}
		ea.Method = v
	}
	param := ""
	if v, ok := get("auth-signin-redirect-param"); ok {
		if !reRedirectParam.MatchString(v) {
			bad("auth-signin-redirect-param", "%q is not a query parameter name", v)
			return nil
		}
		param = v
	}
	if v, ok := get("auth-signin"); ok {
		t, err := parseURLTemplate(signinURL(strings.TrimSpace(v), param))
		if err != nil {
			bad("auth-signin", "%v", err)
			return nil
		}
		ea.SigninURL = t
	}
	if v, ok := get("auth-response-headers"); ok {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h == "" {
				continue
			}
			if !reHeaderName.MatchString(h) {
				bad("auth-response-headers", "%q is not a comma-separated list of header names", v)
				return nil
			}
			ea.ResponseHeaders = append(ea.ResponseHeaders, h)
		}
	}
	if v, ok := get("auth-request-redirect"); ok {
		if v == "" || !reURLText.MatchString(v) {
			bad("auth-request-redirect", "%q: only URL characters are allowed", v)
			return nil
		}
		ea.RequestRedirect = v
	}
	ea.AlwaysSetCookie = boolean("auth-always-set-cookie")
	return ea
}
