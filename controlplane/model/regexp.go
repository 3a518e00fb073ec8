package model

import (
	"regexp"
	"sync"
)

// Regexp is a regular expression the builder validated. Data planes match
// with Compiled and never compile one themselves; the nginx plane writes
// String. The expression is compiled on first use, once, so a data plane
// that only writes it (nginx) pays nothing. It marshals as its source.
// Share it by pointer: a snapshot is immutable.
type Regexp struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

// NewRegexp holds expr, which the builder checked compiles.
func NewRegexp(expr string) *Regexp { return &Regexp{expr: expr} }

// String is the expression as written.
func (r *Regexp) String() string {
	if r == nil {
		return ""
	}
	return r.expr
}

// Compiled is the compiled expression; nil for a nil Regexp or one that
// does not compile (the builder never makes those).
func (r *Regexp) Compiled() *regexp.Regexp {
	if r == nil {
		return nil
	}
	r.once.Do(func() { r.re, _ = regexp.Compile(r.expr) })
	return r.re
}

// MarshalText writes the expression.
func (r *Regexp) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads an expression back (a snapshot read from JSON).
func (r *Regexp) UnmarshalText(b []byte) error {
	*r = Regexp{expr: string(b)}
	return nil
}

// Equal reports whether both hold the same expression.
func (r *Regexp) Equal(o *Regexp) bool { return r.String() == o.String() }

// SetPathRegexp sets l.PathRegexp from its Path, as the builder does: for a
// Regex path and for one with a rewrite-target; nil otherwise.
func (l *Location) SetPathRegexp() {
	l.PathRegexp = nil
	if l.Regex || l.Settings().Rewrite.Target != "" {
		l.PathRegexp = NewRegexp("(?i)" + l.Path)
	}
}
