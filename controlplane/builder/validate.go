package builder

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	// rePath is what an Ingress path may contain: RFC 3986 path characters
	// less the quote and '$' (nginx variables).
	// Quotes, braces, ';', whitespace, '\' and control characters never reach
	// a data plane (the 2025-2026 ingress-nginx injection CVEs came through
	// the path).
	rePath = regexp.MustCompile(`^/[A-Za-z0-9\-._~!&()*+,=:@/%]*$`)
	// reRegexPath additionally allows the regex metacharacters of a use-regex
	// path, still without quotes, braces in nginx syntax, ';' or whitespace.
	reRegexPath = regexp.MustCompile(`^/[A-Za-z0-9\-._~!$&()*+,=:@/%^|?\[\]\\{}]*$`)
	reHost      = regexp.MustCompile(`^(\*\.)?([a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?$`)
)

// validatePath checks an Ingress path.
func validatePath(p string, regex bool) error {
	if len(p) > 2048 {
		return fmt.Errorf("path is longer than 2048 bytes")
	}
	if regex {
		if !reRegexPath.MatchString(p) {
			return fmt.Errorf("path %q contains characters a regex path may not", p)
		}
		if _, err := regexp.Compile(p); err != nil {
			return fmt.Errorf("path %q is not a regular expression RE2 accepts: %v", p, err)
		}
		if strings.Contains(p, "${") {
			return fmt.Errorf("path %q contains ${", p)
		}
		return nil
	}
	if !rePath.MatchString(p) {
		return fmt.Errorf("path %q must start with / and contain only RFC 3986 path characters", p)
	}
	return nil
}

// validateHost checks an Ingress host (lower-case DNS name, optionally with
// a leading "*." wildcard label).
func validateHost(h string) error {
	if len(h) > 253 || !reHost.MatchString(h) {
		return fmt.Errorf("host %q is not a lower-case DNS name", h)
	}
	return nil
}
