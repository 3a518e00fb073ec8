package nginxcompat

import (
	"fmt"
	"strings"
)

// directive is one parsed nginx directive: its name, its arguments with
// quotes removed and escapes resolved, and its block, if any.
type directive struct {
	Name  string
	Args  []string
	Block []*directive
	// IsBlock is true for "name args { ... }".
	IsBlock bool
}

// parseNginxConf is a small nginx configuration parser written for the tests
// (ngx_conf_file.c rules): words split on whitespace, ';' ends a directive,
// '{' opens a block, '#' at a word start comments to the end of the line,
// "..." and '...' with \" \' \\ \t \r \n escapes. A *_by_lua_block's body is
// kept as one raw argument, as the Lua module reads it. It fails on anything
// unbalanced, so a value that broke out of its quotes shows up as an error or
// as a directive the template never writes.
func parseNginxConf(src string) ([]*directive, error) {
	p := &confParser{s: src}
	ds, err := p.block(0)
	if err != nil {
		return nil, err
	}
	if p.i < len(p.s) {
		return nil, fmt.Errorf("offset %d: unexpected '}'", p.i)
	}
	return ds, nil
}

type confParser struct {
	s string
	i int
}

func (p *confParser) skipSpace() {
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.i++
		case c == '#':
			for p.i < len(p.s) && p.s[p.i] != '\n' {
				p.i++
			}
		default:
			return
		}
	}
}

// word reads one word; ok is false at ';', '{', '}' or the end.
func (p *confParser) word() (string, bool, error) {
	p.skipSpace()
	if p.i >= len(p.s) {
		return "", false, nil
	}
	c := p.s[p.i]
	if c == ';' || c == '{' || c == '}' {
		return "", false, nil
	}
	if c == '"' || c == '\'' {
		q := c
		p.i++
		var b strings.Builder
		for {
			if p.i >= len(p.s) {
				return "", false, fmt.Errorf("unterminated quoted string")
			}
			c := p.s[p.i]
			if c == '\\' && p.i+1 < len(p.s) {
				n := p.s[p.i+1]
				switch n {
				case '"', '\'', '\\':
					b.WriteByte(n)
				case 't':
					b.WriteByte('\t')
				case 'r':
					b.WriteByte('\r')
				case 'n':
					b.WriteByte('\n')
				default:
					b.WriteByte('\\')
					b.WriteByte(n)
				}
				p.i += 2
				continue
			}
			p.i++
			if c == q {
				break
			}
			b.WriteByte(c)
		}
		if p.i < len(p.s) {
			switch p.s[p.i] {
			case ' ', '\t', '\n', '\r', ';', '{':
			default:
				return "", false, fmt.Errorf("offset %d: unexpected %q after a quoted string", p.i, p.s[p.i])
			}
		}
		return b.String(), true, nil
	}
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ';' || c == '{' || c == '}' {
			break
		}
		if c == '"' || c == '\'' {
			return "", false, fmt.Errorf("offset %d: quote inside a word", p.i)
		}
		if c == '\\' {
			p.i++
		}
		p.i++
	}
	return p.s[start:p.i], true, nil
}

func (p *confParser) block(depth int) ([]*directive, error) {
	var out []*directive
	for {
		p.skipSpace()
		if p.i >= len(p.s) {
			if depth > 0 {
				return nil, fmt.Errorf("unexpected end of file inside a block")
			}
			return out, nil
		}
		if p.s[p.i] == '}' {
			if depth == 0 {
				return out, nil
			}
			p.i++
			return out, nil
		}
		d := &directive{}
		named := false // a map's key may be '', an empty name
		for {
			w, ok, err := p.word()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			if !named {
				d.Name, named = w, true
			} else {
				d.Args = append(d.Args, w)
			}
		}
		if !named {
			return nil, fmt.Errorf("offset %d: directive without a name", p.i)
		}
		if p.i >= len(p.s) {
			return nil, fmt.Errorf("directive %q not terminated", d.Name)
		}
		switch p.s[p.i] {
		case ';':
			p.i++
		case '{':
			p.i++
			d.IsBlock = true
			if strings.HasSuffix(d.Name, "_by_lua_block") {
				start, n := p.i, 1
				for p.i < len(p.s) && n > 0 {
					switch p.s[p.i] {
					case '{':
						n++
					case '}':
						n--
					}
					p.i++
				}
				if n > 0 {
					return nil, fmt.Errorf("unterminated %s", d.Name)
				}
				d.Args = append(d.Args, strings.TrimSpace(p.s[start:p.i-1]))
				break
			}
			kids, err := p.block(depth + 1)
			if err != nil {
				return nil, err
			}
			d.Block = kids
		default:
			return nil, fmt.Errorf("directive %q: unexpected '}'", d.Name)
		}
		out = append(out, d)
	}
}

// shapes lists "ctx/ctx/name" for every directive in ds.
func shapes(ds []*directive, ctx string, into map[string]int) {
	for _, d := range ds {
		k := ctx + "/" + d.Name
		into[k]++
		if d.IsBlock && !strings.HasSuffix(d.Name, "_by_lua_block") {
			shapes(d.Block, k, into)
		}
	}
}
