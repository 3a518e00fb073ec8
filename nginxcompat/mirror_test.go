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

// FuzzRenderMirror renders a location with an arbitrary Mirror and parses
// the file: it must parse; a Mirror the renderer accepts gives the location
// `mirror <Source>` and the server one internal location whose Host and
// proxy_pass are each one argument, the values given (variables written
// ${name}); one it refuses makes the location answer 503 with an error.
func FuzzRenderMirror(f *testing.F) {
	f.Add("/_mirror-uid", "http", "m.example:8080", "m.example", "/copy", "request_uri", true)
	f.Add("/_mirror-uid\"; return 200; #", "https", "m.example", "m.example", "/", "args", false)
	f.Add("/_mirror-uid", "http", "m.example", "a\" ; proxy_pass \"http://evil", "/x", "host", true)
	f.Add("/_mirror-uid", "http", "m.example", "m.example", "/a${b}", "scheme", true)
	f.Add("/_mirror-uid", "http", "m.example", "m.example", "", "host", true)
	f.Fuzz(func(t *testing.T, source, scheme, hostPort, host, literal, variable string, body bool) {
		mi := &model.Mirror{Source: source, Scheme: scheme, HostPort: hostPort, Host: host, RequestBody: body}
		if literal != "" {
			mi.URI = append(mi.URI, model.URLPart{Literal: literal})
		}
		mi.URI = append(mi.URI, model.URLPart{Var: model.URLVar(variable)})
		cfg := &model.Configuration{Servers: []model.Server{
			{Hostname: "_", Locations: []model.Location{{Path: "/", Backend: model.DefaultBackendName}}},
			{Hostname: "m.test", Locations: []model.Location{{Path: "/", PathType: model.PathTypePrefix, Backend: "be",
				Ingress:          model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "ing"},
				LocationSettings: &model.LocationSettings{Mirror: mi}}}},
		}}
		r, err := Render(cfg, goldenRenderConfig)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := parseNginxConf(string(r.Conf))
		if err != nil {
			t.Fatalf("rendered file does not parse: %v\n%s", err, r.Conf)
		}
		var server *directive
		walk(ds, func(d, parent *directive) {
			if d.Name == "server_name" && len(d.Args) == 1 && d.Args[0] == "m.test" {
				server = parent
			}
		})
		if server == nil {
			t.Fatalf("no server m.test\n%s", r.Conf)
		}
		_, viewErr := mirrorView(mi)
		var locs []*directive
		for _, d := range server.Block {
			if d.Name == "location" {
				locs = append(locs, d)
			}
		}
		if viewErr != nil {
			if len(locs) != 1 || len(r.Errors) == 0 {
				t.Fatalf("refused mirror (%v): %d locations, errors %+v; want the one location, failed closed", viewErr, len(locs), r.Errors)
			}
			for _, d := range locs[0].Block {
				if d.Name == "mirror" {
					t.Fatalf("refused mirror (%v) written: %q", viewErr, d.Args)
				}
			}
			return
		}
		if len(locs) != 2 || len(locs[0].Args) != 2 || locs[0].Args[0] != "=" || locs[0].Args[1] != source {
			t.Fatalf("locations %d, first %v; want the mirror's %q then the path", len(locs), locs[0].Args, source)
		}
		wantPass := scheme + "://" + hostPort + literal + "${" + variable + "}"
		for _, d := range locs[0].Block {
			switch d.Name {
			case "internal":
			case "proxy_set_header":
				if len(d.Args) != 2 || d.Args[0] != "Host" || d.Args[1] != host {
					t.Fatalf("proxy_set_header %q; want Host %q", d.Args, host)
				}
			case "proxy_pass":
				if len(d.Args) != 1 || d.Args[0] != wantPass {
					t.Fatalf("proxy_pass %q; want %q", d.Args, wantPass)
				}
			default:
				t.Fatalf("the mirror's location has %s %q", d.Name, d.Args)
			}
		}
		found := false
		for _, d := range locs[1].Block {
			if d.Name == "mirror" {
				found = len(d.Args) == 1 && d.Args[0] == source
			}
		}
		if !found {
			t.Fatalf("the location has no mirror %q", source)
		}
	})
}
