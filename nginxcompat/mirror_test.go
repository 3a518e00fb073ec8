package nginxcompat

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// TestMirrorView: a sound Mirror becomes ingress-nginx's directives; a model
// the builder would not make (anything that could end the quoted string,
// add a variable or change how nginx builds the URI) is refused, and the
// location then answers 503 as for every value the renderer refuses.
func TestMirrorView(t *testing.T) {
	good := model.Mirror{Source: "/_mirror-0f1e-uid", Scheme: "https", HostPort: "test.env.com:8443", Host: "test.env.com",
		URI: model.URLTemplate{{Literal: "/m"}, {Var: model.VarRequestURI}}, RequestBody: true}
	got, err := mirrorView(&good)
	if err != nil {
		t.Fatal(err)
	}
	want := &mirrorV{Source: "/_mirror-0f1e-uid", Host: "test.env.com", Pass: "https://test.env.com:8443/m${request_uri}", RequestBody: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mirrorView (-want +got):\n%s", diff)
	}
	for name, edit := range map[string]func(m *model.Mirror){
		"source quote":        func(m *model.Mirror) { m.Source = `/_mirror-a"; return 200; "` },
		"source other":        func(m *model.Mirror) { m.Source = "/api" },
		"scheme":              func(m *model.Mirror) { m.Scheme = "unix" },
		"host port":           func(m *model.Mirror) { m.HostPort = "a.example;b" },
		"host header":         func(m *model.Mirror) { m.Host = `a" ; proxy_pass "http://evil` },
		"literal dollar":      func(m *model.Mirror) { m.URI = model.URLTemplate{{Literal: "/$http_cookie"}, {Var: model.VarArgs}} },
		"literal quote":       func(m *model.Mirror) { m.URI = model.URLTemplate{{Literal: `/"`}, {Var: model.VarArgs}} },
		"literal brace":       func(m *model.Mirror) { m.URI = model.URLTemplate{{Literal: "/{"}, {Var: model.VarArgs}} },
		"literal start":       func(m *model.Mirror) { m.URI = model.URLTemplate{{Literal: "@evil/x"}, {Var: model.VarArgs}} },
		"host variable first": func(m *model.Mirror) { m.URI = model.URLTemplate{{Var: model.VarHost}, {Literal: "/x"}} },
		"unknown variable":    func(m *model.Mirror) { m.URI = model.URLTemplate{{Var: "http_cookie"}} },
		"auth-url variable":   func(m *model.Mirror) { m.URI = model.URLTemplate{{Var: model.VarEscapedRequestURI}} },
		"no variable":         func(m *model.Mirror) { m.URI = model.URLTemplate{{Literal: "/x"}} },
	} {
		t.Run(name, func(t *testing.T) {
			m := good
			edit(&m)
			if v, err := mirrorView(&m); err == nil {
				t.Errorf("mirrorView(%+v) = %+v; want an error", m, v)
			}
		})
	}
}
