package builder

import (
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

func urlVar(v model.URLVar) model.URLPart { return model.URLPart{Var: v} }

// TestParseMirror: the mirror-* annotations as ingress-nginx reads them, the
// URI resolved as nginx's proxy_pass sends it from the mirror's subrequest
// (measured with Debian's nginx: "http://h" sends /_mirror-<uid>?<query>,
// "http://h/m" sends /m?<query>, "$uri" is /_mirror-<uid>).
func TestParseMirror(t *testing.T) {
	const src = "/_mirror-0f1e2d3c-aaaa-bbbb-cccc-1234567890ab"
	isArgs := []model.URLPart{urlVar(model.VarIsArgs), urlVar(model.VarArgs)}
	for _, tt := range []struct {
		name string
		anns map[string]string
		want *model.Mirror
	}{
		{"request_uri", map[string]string{"mirror-target": "https://test.env.com$request_uri"},
			&model.Mirror{Source: src, Scheme: "https", HostPort: "test.env.com", Host: "test.env.com", RequestBody: true,
				URI: model.URLTemplate{urlVar(model.VarRequestURI)}}},
		{"port, mirror-host, body off", map[string]string{"mirror-target": "http://1.2.3.4:8080$request_uri",
			"mirror-host": "Test.Env.Com", "mirror-request-body": "off"},
			&model.Mirror{Source: src, Scheme: "http", HostPort: "1.2.3.4:8080", Host: "test.env.com",
				URI: model.URLTemplate{urlVar(model.VarRequestURI)}}},
		{"no path", map[string]string{"mirror-target": "HTTP://Mirror.Example:81"},
			&model.Mirror{Source: src, Scheme: "http", HostPort: "mirror.example:81", Host: "mirror.example", RequestBody: true,
				URI: append(model.URLTemplate{lit(src)}, isArgs...)}},
		{"literal path", map[string]string{"mirror-target": "http://localhost/mirror"},
			&model.Mirror{Source: src, Scheme: "http", HostPort: "localhost", Host: "localhost", RequestBody: true,
				URI: append(model.URLTemplate{lit("/mirror")}, isArgs...)}},
		{"uri, args, host, scheme", map[string]string{"mirror-target": "http://m.example/m$uri?${query_string}&h=$host&s=$scheme"},
			&model.Mirror{Source: src, Scheme: "http", HostPort: "m.example", Host: "m.example", RequestBody: true,
				URI: model.URLTemplate{lit("/m" + src + "?"), urlVar(model.VarArgs), lit("&h="), urlVar(model.VarHost),
					lit("&s="), urlVar(model.VarScheme)}}},
		{"slash before request_uri", map[string]string{"mirror-target": "https://test.env.com/$request_uri"},
			&model.Mirror{Source: src, Scheme: "https", HostPort: "test.env.com", Host: "test.env.com", RequestBody: true,
				URI: model.URLTemplate{lit("/"), urlVar(model.VarRequestURI)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw := map[string]string{}
			for k, v := range tt.anns {
				raw[annotationPrefix+k] = v
			}
			a, errs := parseAnnotations(raw)
			if len(errs) != 0 {
				t.Fatalf("errors %+v; want none", errs)
			}
			got := withSource(a.mirror, strings.TrimPrefix(src, "/_mirror-"))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("mirror (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseMirrorInvalid: every refused value is one error naming its
// annotation, and no mirror.
func TestParseMirrorInvalid(t *testing.T) {
	for _, tt := range []struct {
		name, field string
		anns        map[string]string
		mirror      bool
	}{
		{"scheme", "mirror-target", map[string]string{"mirror-target": "ftp://m.example/"}, false},
		{"no scheme", "mirror-target", map[string]string{"mirror-target": "m.example$request_uri"}, false},
		{"host injection", "mirror-target", map[string]string{"mirror-target": "http://m.example;return 200;$request_uri"}, false},
		{"quote", "mirror-target", map[string]string{"mirror-target": "http://m.example/\"x"}, false},
		{"blank", "mirror-target", map[string]string{"mirror-target": "http://m.example/a b"}, false},
		{"brace", "mirror-target", map[string]string{"mirror-target": "http://m.example/{x}"}, false},
		{"variable host", "mirror-target", map[string]string{"mirror-target": "http://$host/x"}, false},
		{"userinfo", "mirror-target", map[string]string{"mirror-target": "http://u@m.example/x"}, false},
		{"port 0", "mirror-target", map[string]string{"mirror-target": "http://m.example:0/x"}, false},
		{"port too big", "mirror-target", map[string]string{"mirror-target": "http://m.example:65536/x"}, false},
		{"variable after host", "mirror-target", map[string]string{"mirror-target": "http://m.example$host/x"}, false},
		{"args after host", "mirror-target", map[string]string{"mirror-target": "http://m.example$args"}, false},
		{"unknown variable", "mirror-target", map[string]string{"mirror-target": "http://m.example/$http_cookie"}, false},
		{"unterminated", "mirror-target", map[string]string{"mirror-target": "http://m.example/${request_uri"}, false},
		{"fragment", "mirror-target", map[string]string{"mirror-target": "http://m.example/a#b"}, false},
		{"query without variables", "mirror-target", map[string]string{"mirror-target": "http://m.example/a?b=1"}, false},
		{"empty", "mirror-target", map[string]string{"mirror-target": ""}, false},
		{"host header injection", "mirror-host", map[string]string{"mirror-target": "http://m.example$request_uri", "mirror-host": "a\"; proxy_pass http://evil"}, true},
		{"body value", "mirror-request-body", map[string]string{"mirror-target": "http://m.example$request_uri", "mirror-request-body": "yes"}, true},
		{"host alone", "mirror-host", map[string]string{"mirror-host": "m.example"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw := map[string]string{}
			for k, v := range tt.anns {
				raw[annotationPrefix+k] = v
			}
			a, errs := parseAnnotations(raw)
			if len(errs) != 1 || errs[0].key != annotationPrefix+tt.field || errs[0].reason == model.ReasonFailedClosed {
				t.Fatalf("errors %+v; want one naming %s, not failing closed", errs, tt.field)
			}
			if (a.mirror != nil) != tt.mirror {
				t.Errorf("mirror %+v; want one: %v", a.mirror, tt.mirror)
			}
			if a.denied != nil {
				t.Errorf("denied %+v; a mirror setting restricts no access", a.denied)
			}
		})
	}
}

// TestMirrorBuild: every path of the Ingress gets the mirror, with the
// Ingress's UID in its Source; an invalid target is an error on the
// Ingress naming the annotation, and its paths are served without mirror.
func TestMirrorBuild(t *testing.T) {
	in := loadInput(t, "testdata/basic.yaml")
	if len(in.Ingresses) == 0 {
		t.Fatal("no Ingress in basic.yaml")
	}
	ing := in.Ingresses[0].DeepCopy()
	ing.UID = "1234-abcd"
	ing.Annotations = map[string]string{annotationPrefix + "mirror-target": "http://127.0.0.9:8080$request_uri"}
	in.Ingresses = append(in.Ingresses[:0:0], ing)
	cfg := Build(in, Options{})
	n := 0
	for _, s := range cfg.Servers {
		for _, l := range s.Locations {
			if l.Ingress.Name != ing.Name {
				continue
			}
			n++
			want := &model.Mirror{Source: "/_mirror-1234-abcd", Scheme: "http", HostPort: "127.0.0.9:8080", Host: "127.0.0.9",
				RequestBody: true, URI: model.URLTemplate{urlVar(model.VarRequestURI)}}
			if diff := cmp.Diff(want, l.Mirror); diff != "" {
				t.Errorf("%s%s: mirror (-want +got):\n%s", s.Hostname, l.Path, diff)
			}
		}
	}
	if n == 0 {
		t.Fatal("no location of the Ingress")
	}

	ing.Annotations[annotationPrefix+"mirror-target"] = "gopher://127.0.0.9/"
	cfg = Build(in, Options{})
	found := false
	for _, e := range cfg.Errors {
		if e.Object.Name == ing.Name && e.Field == annotationPrefix+"mirror-target" && e.Reason != model.ReasonFailedClosed {
			found = true
		}
	}
	if !found {
		t.Errorf("errors %+v; want one on Ingress %s naming mirror-target", cfg.Errors, ing.Name)
	}
	for _, s := range cfg.Servers {
		for _, l := range s.Locations {
			if l.Mirror != nil || l.Denied != nil {
				t.Errorf("%s%s: mirror %+v, denied %+v; want neither", s.Hostname, l.Path, l.Mirror, l.Denied)
			}
		}
	}
}

// FuzzMirrorTarget: whatever parseMirrorTarget accepts is an http(s) URL
// with a valid host whose literal parts are URL characters only and whose
// variables are MirrorVars (or $uri, replaced by withSource).
func FuzzMirrorTarget(f *testing.F) {
	for _, s := range []string{"https://test.env.com$request_uri", "http://1.2.3.4:8080", "http://h/m$uri?$args&x=$host",
		"http://h/${request_uri}", "http://h;x", "http://h/\"", "ftp://h/", "http://h:99999/", "http://h/$is_args$query_string"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMirrorTarget(s)
		if err != nil {
			return
		}
		m = withSource(m, "uid")
		if m.Scheme != "http" && m.Scheme != "https" || !model.ValidUpstreamVhost(m.HostPort) || !model.ValidUpstreamVhost(m.Host) ||
			!model.ValidMirrorSource(m.Source) {
			t.Fatalf("%q: accepted %+v", s, m)
		}
		var b strings.Builder
		b.WriteString(m.Scheme + "://" + m.HostPort)
		for _, p := range m.URI {
			switch {
			case p.Var == "":
				if !reURLText.MatchString(p.Literal) || strings.ContainsAny(p.Literal, "#$") {
					t.Fatalf("%q: literal %q", s, p.Literal)
				}
				b.WriteString(p.Literal)
			default:
				known := false
				for _, v := range model.MirrorVars {
					known = known || v == p.Var
				}
				if !known {
					t.Fatalf("%q: variable %q", s, p.Var)
				}
				b.WriteString("/x")
			}
		}
		u, err := url.Parse(b.String())
		if err != nil || u.Host != m.HostPort {
			t.Fatalf("%q: %q does not parse as a URL with host %q: %v", s, b.String(), m.HostPort, err)
		}
	})
}
