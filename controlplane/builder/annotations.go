package builder

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// annotationPrefix is ingress-nginx's annotation prefix.
const annotationPrefix = "nginx.ingress.kubernetes.io/"

// annotations holds the parsed, validated annotations of one Ingress. An
// annotation whose value is invalid is left at its default and reported.
type annotations struct {
	loadBalance      string
	hashBy           *string
	hashBySubset     bool
	hashBySubsetSize int

	affinity             string // "cookie" or ""
	affinityMode         string
	affinityCanaryLegacy bool
	cookie               balancer.CookieSessionAffinity

	canary              bool
	canaryHeader        string
	canaryHeaderValue   string
	canaryHeaderPattern string
	canaryCookie        string
	canaryWeight        int
	canaryWeightTotal   int

	useRegex bool
}

// annotationError is one rejected annotation.
type annotationError struct {
	key, msg string
}

var (
	// Value grammars, as strict as ingress-nginx's validators or stricter.
	reHashBy     = regexp.MustCompile(`^[A-Za-z0-9\-_${}]+$`)
	reToken      = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+\-.^_` + "`" + `|~]+$`)
	reCookiePath = regexp.MustCompile(`^/[A-Za-z0-9\-._~!&()*+,=:@/%]*$`)
	reDomain     = regexp.MustCompile(`^\.?([A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?$`)
	reHeaderVal  = regexp.MustCompile(`^[\x20-\x7e]*$`)
	snippetKeys  = []string{"configuration-snippet", "server-snippet", "auth-snippet", "stream-snippet", "modsecurity-snippet"}
)

// parseAnnotations validates the annotations Switchyard understands.
func parseAnnotations(raw map[string]string) (annotations, []annotationError) {
	a := annotations{hashBySubsetSize: 3, canaryWeightTotal: 100}
	var errs []annotationError
	get := func(name string) (string, bool) {
		v, ok := raw[annotationPrefix+name]
		return v, ok
	}
	bad := func(name, format string, args ...any) {
		errs = append(errs, annotationError{key: annotationPrefix + name, msg: fmt.Sprintf(format, args...)})
	}
	boolean := func(name string) bool {
		v, ok := get(name)
		if !ok {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad(name, "%q is not true or false", v)
			return false
		}
		return b
	}
	integer := func(name string, lo, hi int) (int, bool) {
		v, ok := get(name)
		if !ok {
			return 0, false
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			bad(name, "%q is not an integer in [%d, %d]", v, lo, hi)
			return 0, false
		}
		return n, true
	}
	token := func(name string) string {
		v, ok := get(name)
		if !ok {
			return ""
		}
		if !reToken.MatchString(v) {
			bad(name, "%q is not a header or cookie name", v)
			return ""
		}
		return v
	}

	for _, k := range snippetKeys {
		if _, ok := get(k); ok {
			bad(k, "snippet annotations are not supported")
		}
	}

	if v, ok := get("load-balance"); ok {
		if !isAlgorithm(v) {
			bad("load-balance", "%q is not one of %s", v, strings.Join(balancer.Algorithms(), ", "))
		} else {
			a.loadBalance = v
		}
	}
	if v, ok := get("upstream-hash-by"); ok {
		if !reHashBy.MatchString(v) {
			bad("upstream-hash-by", "%q may only contain letters, digits and - _ $ { }", v)
		} else {
			a.hashBy = &v
		}
	}
	a.hashBySubset = boolean("upstream-hash-by-subset")
	if n, ok := integer("upstream-hash-by-subset-size", 1, 1000); ok {
		a.hashBySubsetSize = n
	}

	if v, ok := get("affinity"); ok {
		if v != "cookie" {
			bad("affinity", "%q is not cookie", v)
		} else {
			a.affinity = v
		}
	}
	if v, ok := get("affinity-mode"); ok {
		if v != "balanced" && v != "persistent" {
			bad("affinity-mode", "%q is not balanced or persistent", v)
		} else {
			a.affinityMode = v
		}
	}
	if v, ok := get("affinity-canary-behavior"); ok {
		switch v {
		case "legacy":
			a.affinityCanaryLegacy = true
		case "sticky":
		default:
			bad("affinity-canary-behavior", "%q is not sticky or legacy", v)
		}
	}
	if a.affinity == "cookie" {
		a.cookie.Name = "INGRESSCOOKIE"
		if v := token("session-cookie-name"); v != "" {
			a.cookie.Name = v
		}
		if v, ok := get("session-cookie-path"); ok {
			if !reCookiePath.MatchString(v) {
				bad("session-cookie-path", "%q is not a cookie path", v)
			} else {
				a.cookie.Path = v
			}
		}
		if v, ok := get("session-cookie-domain"); ok {
			if !reDomain.MatchString(v) {
				bad("session-cookie-domain", "%q is not a domain", v)
			} else {
				a.cookie.Domain = v
			}
		}
		for _, k := range []struct {
			name string
			dst  *string
		}{{"session-cookie-expires", &a.cookie.Expires}, {"session-cookie-max-age", &a.cookie.MaxAge}} {
			if n, ok := integer(k.name, 0, 1<<31-1); ok {
				*k.dst = strconv.Itoa(n)
			}
		}
		if v, ok := get("session-cookie-samesite"); ok {
			switch strings.ToLower(v) {
			case "none", "lax", "strict":
				a.cookie.SameSite = v // as typed: only exact case takes effect, as in ingress-nginx
			default:
				bad("session-cookie-samesite", "%q is not None, Lax or Strict", v)
			}
		}
		a.cookie.ConditionalSameSiteNone = boolean("session-cookie-conditional-samesite-none")
		a.cookie.ChangeOnFailure = boolean("session-cookie-change-on-failure")
		a.cookie.Secure = boolean("session-cookie-secure")
	}

	a.canary = boolean("canary")
	if a.canary {
		a.canaryHeader = token("canary-by-header")
		if v, ok := get("canary-by-header-value"); ok {
			if !reHeaderVal.MatchString(v) {
				bad("canary-by-header-value", "%q contains characters a header value cannot", v)
			} else {
				a.canaryHeaderValue = v
			}
		}
		if v, ok := get("canary-by-header-pattern"); ok {
			if _, err := regexp.Compile(v); err != nil || !reHeaderVal.MatchString(v) {
				bad("canary-by-header-pattern", "%q is not a regular expression RE2 accepts", v)
			} else {
				a.canaryHeaderPattern = v
			}
		}
		a.canaryCookie = token("canary-by-cookie")
		if n, ok := integer("canary-weight-total", 1, 1<<31-1); ok {
			a.canaryWeightTotal = n
		}
		if n, ok := integer("canary-weight", 0, 1<<31-1); ok {
			a.canaryWeight = n
		}
	}
	a.useRegex = boolean("use-regex")
	return a, errs
}

func isAlgorithm(name string) bool {
	for _, a := range balancer.Algorithms() {
		if a == name {
			return true
		}
	}
	return false
}
