package builder

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }

var update = flag.Bool("update", false, "rewrite the golden testdata/*.json files")

// loadInput decodes a multi-document YAML file of Kubernetes objects.
func loadInput(t *testing.T, path string) Input {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var in Input
	r := utilyaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch o := obj.(type) {
		case *networkingv1.Ingress:
			in.Ingresses = append(in.Ingresses, o)
		case *networkingv1.IngressClass:
			in.IngressClasses = append(in.IngressClasses, o)
		case *corev1.Service:
			in.Services = append(in.Services, o)
		case *discoveryv1.EndpointSlice:
			in.EndpointSlices = append(in.EndpointSlices, o)
		case *corev1.Secret:
			in.Secrets = append(in.Secrets, o)
		case *corev1.ConfigMap:
			switch o.Name {
			case "tcp-services":
				in.TCPServices = o
			case "udp-services":
				in.UDPServices = o
			default:
				in.ConfigMap = o
			}
		default:
			t.Fatalf("%s: unsupported %T", path, obj)
		}
	}
	return in
}

// caseOptions are the controller flags of the golden cases that need any.
var caseOptions = map[string]Options{
	"tls": {DefaultSSLCertificate: "ingress/default-cert"},
}

// TestGolden builds every testdata/<case>.yaml and compares the Configuration
// with testdata/<case>.json (go test -run TestGolden -update rewrites them).
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			got := Build(loadInput(t, f), caseOptions[name])
			golden := strings.TrimSuffix(f, ".yaml") + ".json"
			if *update {
				b, _ := json.MarshalIndent(got, "", "  ")
				if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			data, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			// Compare as generic JSON values: the golden file is indented,
			// raw Service specs included.
			var want, gotRT any
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(got)
			_ = json.Unmarshal(b, &gotRT)
			if diff := cmp.Diff(want, gotRT); diff != "" {
				t.Errorf("Configuration mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// The same input always builds the same Configuration.
func TestBuildIsDeterministic(t *testing.T) {
	in := loadInput(t, "testdata/canary.yaml")
	first, _ := json.Marshal(Build(in, Options{}))
	for range 20 {
		// Reverse the input order each time.
		for i, j := 0, len(in.EndpointSlices)-1; i < j; i, j = i+1, j-1 {
			in.EndpointSlices[i], in.EndpointSlices[j] = in.EndpointSlices[j], in.EndpointSlices[i]
		}
		for i, j := 0, len(in.Ingresses)-1; i < j; i, j = i+1, j-1 {
			in.Ingresses[i], in.Ingresses[j] = in.Ingresses[j], in.Ingresses[i]
		}
		again, _ := json.Marshal(Build(in, Options{}))
		if !bytes.Equal(first, again) {
			t.Fatal("Build depends on input order")
		}
	}
}

func TestIsOurs(t *testing.T) {
	ours := &networkingv1.IngressClass{Spec: networkingv1.IngressClassSpec{Controller: DefaultControllerClass}}
	ours.Name = "switchyard"
	theirs := &networkingv1.IngressClass{Spec: networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}}
	theirs.Name = "nginx"
	deflt := ours.DeepCopy()
	deflt.Annotations = map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}
	ing := func(class *string, ann string) *networkingv1.Ingress {
		i := &networkingv1.Ingress{Spec: networkingv1.IngressSpec{IngressClassName: class}}
		i.Namespace = "ns"
		if ann != "" {
			i.Annotations = map[string]string{legacyClassAnnotation: ann}
		}
		return i
	}
	s := func(v string) *string { return &v }
	tests := []struct {
		name    string
		ing     *networkingv1.Ingress
		classes []*networkingv1.IngressClass
		opt     Options
		want    bool
	}{
		{"class name ours", ing(s("switchyard"), ""), []*networkingv1.IngressClass{ours, theirs}, Options{}, true},
		{"class name theirs", ing(s("nginx"), ""), []*networkingv1.IngressClass{ours, theirs}, Options{}, false},
		{"class missing", ing(s("gone"), ""), []*networkingv1.IngressClass{ours}, Options{}, false},
		{"drop-in controller class", ing(s("nginx"), ""), []*networkingv1.IngressClass{theirs}, Options{ControllerClass: "k8s.io/ingress-nginx"}, true},
		{"legacy annotation", ing(nil, "switchyard"), nil, Options{}, true},
		{"legacy annotation other", ing(nil, "nginx"), []*networkingv1.IngressClass{deflt}, Options{}, false},
		{"no class, default ours", ing(nil, ""), []*networkingv1.IngressClass{deflt}, Options{}, true},
		{"no class, no default", ing(nil, ""), []*networkingv1.IngressClass{ours}, Options{}, false},
		{"other namespace", ing(s("switchyard"), ""), []*networkingv1.IngressClass{ours}, Options{WatchNamespace: "x"}, false},
		{"class by name, other controller", ing(s("switchyard"), ""), []*networkingv1.IngressClass{func() *networkingv1.IngressClass {
			c := theirs.DeepCopy()
			c.Name = "switchyard"
			return c
		}()}, Options{IngressClassByName: true}, true},
		{"class by name off", ing(s("switchyard"), ""), nil, Options{}, false},
		{"class by name, other name", ing(s("nginx"), ""), []*networkingv1.IngressClass{theirs}, Options{IngressClassByName: true}, false},
		{"without class watched", ing(nil, ""), []*networkingv1.IngressClass{ours}, Options{WatchIngressWithoutClass: true}, true},
		{"without class watched, legacy other", ing(nil, "nginx"), nil, Options{WatchIngressWithoutClass: true}, false},
	}
	for _, tt := range tests {
		if got := IsOurs(tt.ing, tt.classes, tt.opt); got != tt.want {
			t.Errorf("%s: got %v; want %v", tt.name, got, tt.want)
		}
	}
}

func TestValidatePath(t *testing.T) {
	for _, tc := range []struct {
		path  string
		regex bool
		ok    bool
	}{
		{"/", false, true}, {"/api/v1", false, true}, {"/a%20b", false, true},
		{"/a;b", false, false}, {"/a b", false, false}, {`/a"b`, false, false}, {"/a{b}", false, false},
		{"a", false, false}, {"/a\nb", false, false}, {"/a\\b", false, false},
		{"/api/(.*)", true, true}, {"/x{2}", true, true}, {"/(", true, false}, {"/a;b", true, false}, {"/${x}", true, false},
	} {
		if err := validatePath(tc.path, tc.regex); (err == nil) != tc.ok {
			t.Errorf("validatePath(%q, %v) = %v; want ok=%v", tc.path, tc.regex, err, tc.ok)
		}
	}
}

// FuzzAnnotations: no input panics, and every accepted value matches the
// grammar that keeps it out of a config file's or a cookie's syntax. The
// canary header value and pattern reach neither: the balancers compare them
// with the request's header (and no nginx.conf line carries them), so a ';'
// is a character they may match, as in ingress-nginx; only control
// characters are refused there.
func FuzzAnnotations(f *testing.F) {
	f.Add("load-balance", "ewma")
	f.Add("upstream-hash-by", "$request_uri")
	f.Add("session-cookie-path", "/app")
	f.Add("canary-by-header-pattern", "a|b")
	f.Add("session-cookie-name", "route;x")
	f.Fuzz(func(t *testing.T, key, value string) {
		a, _ := parseAnnotations(map[string]string{annotationPrefix + key: value, annotationPrefix + "affinity": "cookie", annotationPrefix + "canary": "true"})
		for _, s := range []string{a.cookie.Name, a.cookie.Path, a.cookie.Domain, a.canaryHeader, a.canaryCookie} {
			if strings.ContainsAny(s, "\n\r\x00;") {
				t.Fatalf("accepted %q for %s", s, key)
			}
		}
		for _, s := range []string{a.canaryHeaderValue, a.canaryHeaderPattern} {
			if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
				t.Fatalf("accepted %q for %s", s, key)
			}
		}
		if a.hashBy != nil && !reHashBy.MatchString(*a.hashBy) {
			t.Fatalf("accepted hash-by %q", *a.hashBy)
		}
	})
}

func FuzzValidatePath(f *testing.F) {
	f.Add("/api", false)
	f.Add("/api/(.*)", true)
	f.Fuzz(func(t *testing.T, p string, regex bool) {
		if validatePath(p, regex) == nil && strings.ContainsAny(p, " \t\r\n;\"'`{}\x00") && !regex {
			t.Fatalf("accepted %q", p)
		}
		if validatePath(p, regex) == nil && strings.ContainsAny(p, " \t\r\n;\"'`\x00") {
			t.Fatalf("accepted %q (regex)", p)
		}
	})
}

// FuzzLocationAnnotations: every per-location value the parser accepts is
// free of what would break out of an nginx directive or a header (control
// characters, quotes, ';', braces, backslash), and every rejection names the
// annotation.
func FuzzLocationAnnotations(f *testing.F) {
	for _, s := range [][2]string{
		{"rewrite-target", "/$1"}, {"app-root", "/app"}, {"permanent-redirect", "https://x.example.com/a"},
		{"temporal-redirect", "http://x:8080/"}, {"x-forwarded-prefix", "/p"}, {"upstream-vhost", "svc.local:80"},
		{"server-alias", "a.example.com, b.example.com"}, {"cors-allow-origin", "https://a.example.com, *"},
		{"cors-allow-methods", "GET, PUT"}, {"cors-allow-headers", "X-A"}, {"whitelist-source-range", "10.0.0.0/8"},
		{"proxy-next-upstream", "error timeout"}, {"custom-http-errors", "404,503"}, {"default-backend", "errors"},
		{"proxy-body-size", "8m"}, {"backend-protocol", "grpcs"}, {"rewrite-target", "/a;return 200"},
		{"limit-connections", "5"}, {"limit-rate", "100"}, {"limit-rate-after", "1k"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		a, errs := parseAnnotations(map[string]string{annotationPrefix + key: value, annotationPrefix + "enable-cors": "true"})
		for _, e := range errs {
			if !strings.HasPrefix(e.key, annotationPrefix) || e.msg == "" {
				t.Fatalf("error without key or message: %+v", e)
			}
		}
		vals := []string{a.rewriteTarget, a.appRoot, a.redirectURL, a.xForwardedPrefix, a.upstreamVhost,
			a.cors.allowMethods, a.cors.allowHeaders, a.cors.exposeHeaders, a.defaultBackend, a.backendProtocol}
		vals = append(vals, a.serverAliases...)
		vals = append(vals, a.cors.allowOrigin...)
		for _, p := range append(a.allowSourceRanges, a.denySourceRanges...) {
			vals = append(vals, p.String())
		}
		vals = append(vals, a.nextUpstream...)
		for _, v := range vals {
			if strings.ContainsAny(v, "\x00\r\n\t;\"'`{}\\") || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("%s=%q accepted, giving %q", key, value, v)
			}
		}
		if strings.Contains(a.rewriteTarget, "${") {
			t.Fatalf("rewrite-target %q accepted", a.rewriteTarget)
		}
		if rl := a.rateLimit; rl != nil && (rl.Connections < 0 || rl.Connections > maxRateLimit || rl.RPS+rl.RPM+rl.Connections == 0) {
			t.Fatalf("%s=%q accepted, giving %+v", key, value, rl)
		}
		for _, n := range []*int{a.limitRate, a.limitRateAfter} {
			if n != nil && (*n < 0 || *n > maxLimitRate) {
				t.Fatalf("%s=%q accepted, giving %d", key, value, *n)
			}
		}
	})
}

func FuzzValidateHost(f *testing.F) {
	for _, h := range []string{"example.com", "*.example.com", "a-b.c", "A.com", "x..y", "*.*.x", "a.com;"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if validateHost(h) != nil {
			return
		}
		if len(h) == 0 || len(h) > 253 || strings.Count(h, "*") > 1 || (strings.Contains(h, "*") && !strings.HasPrefix(h, "*.")) {
			t.Fatalf("accepted %q", h)
		}
		for _, r := range h {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '*') {
				t.Fatalf("accepted %q with %q", h, r)
			}
		}
	})
}

// FuzzL4Services: a tcp-services entry either becomes an L4Service whose
// backend exists, or an error naming the key; never a panic.
func FuzzL4Services(f *testing.F) {
	for _, s := range [][2]string{{"9000", "app/db:5432"}, {"9001", "app/db:pg:PROXY:PROXY"}, {"x", "app/db:1"},
		{"70000", "app/db:5432"}, {"9002", "app/db:5432:TLS"}, {"9003", "app/db"}} {
		f.Add(s[0], s[1])
	}
	svc := &corev1.Service{}
	svc.Namespace, svc.Name = "app", "db"
	svc.Spec.Ports = []corev1.ServicePort{{Name: "pg", Port: 5432}}
	f.Fuzz(func(t *testing.T, key, value string) {
		cm := &corev1.ConfigMap{Data: map[string]string{key: value}}
		cm.Namespace, cm.Name = "ingress", "tcp-services"
		cfg := Build(Input{Services: []*corev1.Service{svc}, TCPServices: cm}, Options{})
		if len(cfg.TCPServices)+len(cfg.Errors) != 1 {
			t.Fatalf("%q=%q: %d services, %d errors", key, value, len(cfg.TCPServices), len(cfg.Errors))
		}
		for _, s := range cfg.TCPServices {
			found := false
			for _, be := range cfg.Backends {
				found = found || be.Name == s.Backend
			}
			if !found || s.Port < 1 || s.Port > 65535 {
				t.Fatalf("%q=%q: bad service %+v", key, value, s)
			}
		}
		for _, e := range cfg.Errors {
			if e.Field != key || e.Object.Name != "tcp-services" {
				t.Fatalf("error does not name the entry: %+v", e)
			}
		}
	})
}

// TestErrorOrder: every Ingress's annotation errors come first, then the
// default certificate's, then the Ingresses' own (oldest first), whichever
// pass finds them.
func TestErrorOrder(t *testing.T) {
	in := syntheticInput(2)
	for i, ing := range in.Ingresses {
		ing.Annotations[annotationPrefix+"load-balance"] = fmt.Sprintf("bogus%d", i)
		ing.Spec.Rules[0].HTTP.Paths[1].Path = fmt.Sprintf("/bad path %d", i)
	}
	cfg := Build(in, Options{DefaultSSLCertificate: "ns/missing"})
	var got []string
	for _, e := range cfg.Errors {
		got = append(got, e.Object.Name+" "+e.Field)
	}
	want := []string{
		"ing0 " + annotationPrefix + "load-balance",
		"ing1 " + annotationPrefix + "load-balance",
		"missing --default-ssl-certificate",
		"ing0 spec.rules[0].http.paths[1].path",
		"ing1 spec.rules[0].http.paths[1].path",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}

// TestHandWrittenGrammars: isPath and isHost accept exactly what the
// regular expressions they replaced accept, on edge cases and on random
// strings over the characters that matter.
func TestHandWrittenGrammars(t *testing.T) {
	rePath := regexp.MustCompile(`^/[A-Za-z0-9\-._~!&()*+,=:@/%]*$`)
	reHost := regexp.MustCompile(`^(\*\.)?([a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?$`)
	label63 := strings.Repeat("a", 63)
	cases := []string{"", "/", "//", "/a", "a", "/a b", "/a;b", "/é", "/a\xff", "/$x", "/a\n", "/a%2F", "/~!&()*+,=:@",
		"a", "a.b", "*.a", "*.", "*", "*.*.a", "a.*", ".a", "a.", "a..b", "-a", "a-", "a-b", "A.b", "a_b", "é.a",
		label63, label63 + "a", label63 + "." + label63, "*." + label63, "a.-b", "a.b-", "0.0", "xn--bcher-kva.example"}
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = "/aZ09-._~!&()*+,=:@%$; \n\xc3\xa9"
	for range 20000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
		for i := range b {
			b[i] = "ab9-.*"[rng.IntN(6)]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := isPath(s), rePath.MatchString(s); got != want {
			t.Errorf("isPath(%q) = %v; the expression says %v", s, got, want)
		}
		if got, want := isHost(s), reHost.MatchString(s); got != want {
			t.Errorf("isHost(%q) = %v; the expression says %v", s, got, want)
		}
	}
}
