package nginxcompat

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// mirrorV is a location's mirror-target, checked again: the location
// writes `mirror` and `mirror_request_body`, its server the internal
// location Source proxying to Pass with Host.
type mirrorV struct {
	Source, Host, Pass string
	RequestBody        bool
}

// mirrorView checks a Mirror and makes its mirrorV: Source, Host and the
// host:port as their grammars allow, URI's literal text as URL characters
// without '$' (quote keeps the whole one argument; no variable may slip in)
// and its variables from model.MirrorVars, written ${name}. The URI holds a
// variable, so nginx sends it as written (proxy_pass with variables) and
// resolves the host when a request is mirrored, not when it loads.
func mirrorView(m *model.Mirror) (*mirrorV, error) {
	switch {
	case !model.ValidMirrorSource(m.Source):
		return nil, fmt.Errorf("mirror source %q", m.Source)
	case m.Scheme != "http" && m.Scheme != "https":
		return nil, fmt.Errorf("mirror scheme %q", m.Scheme)
	case !model.ValidUpstreamVhost(m.HostPort):
		return nil, fmt.Errorf("mirror target host %q", m.HostPort)
	case !model.ValidUpstreamVhost(m.Host):
		return nil, fmt.Errorf("mirror-host %q", m.Host)
	}
	var b strings.Builder
	b.WriteString(m.Scheme + "://" + m.HostPort)
	vars := false
	if len(m.URI) > 0 && m.URI[0].Var != "" && m.URI[0].Var != model.VarRequestURI {
		// Right after the host it would extend the host name.
		return nil, fmt.Errorf("mirror URI starting with $%s", m.URI[0].Var)
	}
	for i, p := range m.URI {
		if p.Var == "" {
			if !reAuthLiteral.MatchString(p.Literal) || strings.Contains(p.Literal, "#") || (i == 0 && !strings.HasPrefix(p.Literal, "/") && !strings.HasPrefix(p.Literal, "?")) {
				return nil, fmt.Errorf("mirror URI text %q", p.Literal)
			}
			b.WriteString(p.Literal)
			continue
		}
		known := false
		for _, v := range model.MirrorVars {
			known = known || v == p.Var
		}
		if !known {
			return nil, fmt.Errorf("mirror URI variable %q", p.Var)
		}
		vars = true
		b.WriteString("${" + string(p.Var) + "}")
	}
	if !vars {
		// nginx would append the client's query to a URI without
		// variables; the builder always writes them.
		return nil, fmt.Errorf("mirror URI %q without a variable", b.String())
	}
	return &mirrorV{Source: m.Source, Host: m.Host, Pass: b.String(), RequestBody: m.RequestBody}, nil
}

// writeMirrorLocation is ingress-nginx's internal location of a mirror
// (buildMirrorLocations): only Host is set, so the copy carries the
// client's fields otherwise, over nginx's default HTTP/1.0 and
// "Connection: close".
func writeMirrorLocation(b *bytes.Buffer, m *mirrorV) {
	b.WriteString("\n        location = ")
	b.WriteString(quote(m.Source))
	b.WriteString(" {\n            internal;\n            proxy_set_header Host ")
	b.WriteString(quote(m.Host))
	b.WriteString(";\n            proxy_pass ")
	b.WriteString(quote(m.Pass))
	b.WriteString(";\n        }")
}

// writeMirror is the location's part: every request reaching its
// proxy_pass is copied to the mirror's location.
func writeMirror(b *bytes.Buffer, m *mirrorV) {
	b.WriteString("\n            mirror ")
	b.WriteString(quote(m.Source))
	b.WriteString(";\n            mirror_request_body ")
	b.WriteString(onoff(m.RequestBody))
	b.WriteByte(';')
}
