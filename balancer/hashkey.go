package balancer

// hashKey is an upstream-hash-by template parsed once at Sync
// (util.parse_complex_value in Lua, spec §4.3).
type hashKey struct {
	parts []keyPart
}

// keyPart is a literal or a variable reference.
type keyPart struct {
	lit string
	v   string // variable name; lit is unused when set
}

// parseHashKey splits a template into parts with the same four alternatives,
// tried left to right, as Lua's PCRE: `\$name` (a literal, backslash
// included), `${name}`, `$name`, and `$` alone or a run of characters other
// than `$` and `\`. Characters matching none (a lone backslash) are skipped,
// as ngx.re.gmatch skips them. Names are [0-9A-Za-z_]+.
func parseHashKey(s string) hashKey {
	var k hashKey
	addLit := func(l string) {
		if n := len(k.parts); n > 0 && k.parts[n-1].v == "" {
			k.parts[n-1].lit += l
			return
		}
		k.parts = append(k.parts, keyPart{lit: l})
	}
	for i := 0; i < len(s); {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '$' && nameLen(s[i+2:]) > 0:
			n := nameLen(s[i+2:])
			addLit(s[i : i+2+n])
			i += 2 + n
		case s[i] == '$' && i+1 < len(s) && s[i+1] == '{' && nameLen(s[i+2:]) > 0 && i+2+nameLen(s[i+2:]) < len(s) && s[i+2+nameLen(s[i+2:])] == '}':
			n := nameLen(s[i+2:])
			k.parts = append(k.parts, keyPart{v: s[i+2 : i+2+n]})
			i += 3 + n
		case s[i] == '$' && nameLen(s[i+1:]) > 0:
			n := nameLen(s[i+1:])
			k.parts = append(k.parts, keyPart{v: s[i+1 : i+1+n]})
			i += 1 + n
		case s[i] == '$':
			addLit("$")
			i++
		case s[i] == '\\':
			i++
		default:
			j := i
			for j < len(s) && s[j] != '$' && s[j] != '\\' {
				j++
			}
			addLit(s[i:j])
			i = j
		}
	}
	return k
}

func nameLen(s string) int {
	n := 0
	for n < len(s) {
		c := s[n]
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' {
			n++
			continue
		}
		break
	}
	return n
}

// vars returns the variable names the template reads.
func (k hashKey) vars() []string {
	var out []string
	for _, p := range k.parts {
		if p.v != "" {
			out = append(out, p.v)
		}
	}
	return out
}

// eval builds the key for req into buf (reusing its storage). A variable that
// is unset adds nothing; an empty one adds "".
func (k hashKey) eval(req Request, buf []byte) []byte {
	buf = buf[:0]
	for _, p := range k.parts {
		if p.v == "" {
			buf = append(buf, p.lit...)
			continue
		}
		if v, ok := req.Var(p.v); ok {
			buf = append(buf, v...)
		}
	}
	return buf
}

// single returns the variable of a template that is exactly one variable.
func (k hashKey) single() (string, bool) {
	if len(k.parts) == 1 && k.parts[0].v != "" {
		return k.parts[0].v, true
	}
	return "", false
}
