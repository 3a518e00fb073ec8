package builder

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	// pathChars is what an Ingress path may contain after its leading '/':
	// RFC 3986 path characters less the quote and '$' (nginx variables),
	// ^/[A-Za-z0-9\-._~!&()*+,=:@/%]*$. Quotes, braces, ';', whitespace,
	// '\' and control characters never reach a data plane (the 2025-2026
	// ingress-nginx injection CVEs came through the path). A byte table
	// rather than a regular expression: every location's path is checked.
	pathChars = byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!&()*+,=:@/%")
	// reRegexPath additionally allows the regex metacharacters of a use-regex
	// path, still without quotes, braces in nginx syntax, ';' or whitespace.
	reRegexPath = regexp.MustCompile(`^/[A-Za-z0-9\-._~!$&()*+,=:@/%^|?\[\]\\{}]*$`)
)

// byteSet is the set of chars' bytes.
func byteSet(chars string) (set [256]bool) {
	for i := range len(chars) {
		set[chars[i]] = true
	}
	return set
}

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
	if !isPath(p) {
		return fmt.Errorf("path %q must start with / and contain only RFC 3986 path characters", p)
	}
	return nil
}

// isPath reports whether p is '/' and pathChars.
func isPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 1; i < len(p); i++ {
		if !pathChars[p[i]] {
			return false
		}
	}
	return true
}

// validateHost checks an Ingress host (lower-case DNS name, optionally with
// a leading "*." wildcard label).
func validateHost(h string) error {
	if len(h) > 253 || !isHost(h) {
		return fmt.Errorf("host %q is not a lower-case DNS name", h)
	}
	return nil
}

// isHost reports whether h is lower-case DNS labels joined by dots (each 1
// to 63 letters, digits and '-', not starting or ending with '-'), after
// an optional "*.":
// ^(\*\.)?([a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?$,
// written out because every Ingress rule's host is checked.
func isHost(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := range len(label) {
			if c := label[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
