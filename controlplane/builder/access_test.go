package builder

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/test/harness"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every access annotation Switchyard cannot carry out, and every invalid
// value of one it can, makes the Ingress fail closed with one FailedClosed
// error naming the key; every other unsupported or unknown annotation is
// reported and changes nothing else.
func TestAccessAnnotationsFailClosed(t *testing.T) {
	base, errs := parseAnnotations(nil)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	type tc struct {
		key, value string
		failClosed bool
		reason     string
	}
	var cases []tc
	for _, e := range Catalogue {
		switch {
		case e.Access && (e.Support == Unsupported || e.Support == Refused):
			cases = append(cases, tc{e.Name, "x", true, model.ReasonFailedClosed})
		case e.Support == Unsupported:
			cases = append(cases, tc{e.Name, "x", false, model.ReasonUnsupported})
		}
	}
	cases = append(cases,
		tc{"whitelist-source-range", "10.0.0.0/33", true, model.ReasonFailedClosed},
		tc{"allowlist-source-range", "anywhere", true, model.ReasonFailedClosed},
		tc{"denylist-source-range", "10.0.0.1, nope", true, model.ReasonFailedClosed},
		tc{"denylist-source-range", "fe80::1%eth0", true, model.ReasonFailedClosed},
		tc{"enable-global-auth", "maybe", true, model.ReasonFailedClosed},
		tc{"no-such-annotation", "x", false, model.ReasonUnsupported},
		tc{"auth-url", "x", true, model.ReasonFailedClosed},
		tc{"auth-url", "ftp://auth.example.com/", true, model.ReasonFailedClosed},
		tc{"auth-url", "http://$remote_addr/", true, model.ReasonFailedClosed},
		tc{"auth-url", "http://auth.example.com/a b", true, model.ReasonFailedClosed},
		tc{"auth-url", `http://auth.example.com/";return 200;"`, true, model.ReasonFailedClosed},
		tc{"auth-url", "http://auth.example.com/${host", true, model.ReasonFailedClosed},
		tc{"auth-method", "GET", false, model.ReasonUnsupported}, // without auth-url
		tc{"auth-signin", "https://x/", false, model.ReasonUnsupported},
		tc{"configuration-snippet", "return 200;", false, ""},
	)
	seen := map[string]bool{}
	for _, c := range cases {
		name := c.key + "=" + c.value
		if seen[name] {
			continue
		}
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			a, errs := parseAnnotations(map[string]string{annotationPrefix + c.key: c.value})
			if len(errs) != 1 || errs[0].key != annotationPrefix+c.key || errs[0].reason != c.reason {
				t.Fatalf("errors = %+v; want one %q naming %s", errs, c.reason, c.key)
			}
			if c.failClosed {
				if a.denied == nil || a.denied.Field != annotationPrefix+c.key {
					t.Fatalf("denied = %+v; want the location denied by %s", a.denied, c.key)
				}
				if !strings.Contains(errs[0].msg, "503") {
					t.Errorf("message %q does not say the paths answer 503", errs[0].msg)
				}
				a.denied = nil
			}
			a.globalAuth = base.globalAuth // an invalid enable-global-auth reads as false
			if diff := cmp.Diff(base, a, cmp.AllowUnexported(annotations{}, corsAnnotations{})); diff != "" {
				t.Errorf("the annotation changed more than the denial (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSourceRangeAnnotations(t *testing.T) {
	a, errs := parseAnnotations(map[string]string{
		annotationPrefix + "whitelist-source-range": "10.0.0.0/8, 192.168.1.7,::ffff:10.1.2.3",
		annotationPrefix + "denylist-source-range":  "10.1.0.0/16 ,2001:db8::/32",
	})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	p := netip.MustParsePrefix
	if diff := cmp.Diff([]netip.Prefix{p("10.0.0.0/8"), p("192.168.1.7/32"), p("10.1.2.3/32")}, a.allowSourceRanges, cmp.Comparer(func(x, y netip.Prefix) bool { return x == y })); diff != "" {
		t.Errorf("allow (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Prefix{p("10.1.0.0/16"), p("2001:db8::/32")}, a.denySourceRanges, cmp.Comparer(func(x, y netip.Prefix) bool { return x == y })); diff != "" {
		t.Errorf("deny (-want +got):\n%s", diff)
	}
	loc := model.Location{LocationSettings: &model.LocationSettings{AllowSourceRanges: a.allowSourceRanges, DenySourceRanges: a.denySourceRanges}}
	for addr, want := range map[string]bool{
		"10.0.0.1": true, "10.1.0.1": false, "192.168.1.7": true, "192.168.1.8": false,
		"::ffff:10.0.0.1": true, "::ffff:10.1.0.1": false, "2001:db8::1": false, "127.0.0.1": false,
	} {
		if got := loc.SourceAllowed(netip.MustParseAddr(addr)); got != want {
			t.Errorf("SourceAllowed(%s) = %v; want %v", addr, got, want)
		}
	}
	if !(&model.Location{LocationSettings: &model.LocationSettings{DenySourceRanges: a.denySourceRanges}}).SourceAllowed(netip.MustParseAddr("127.0.0.1")) {
		t.Error("a deny list alone must let other clients through")
	}
}

// accessInput is two Ingresses on their own hosts (one optionally a canary
// of the other's host) and a ConfigMap.
func accessInput(protected, other map[string]string, cm map[string]string) Input {
	class := "switchyard"
	mk := func(name, host string, created int64, ann map[string]string) *networkingv1.Ingress {
		return &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: ann, CreationTimestamp: metav1.Unix(created, 0)},
			Spec: networkingv1.IngressSpec{IngressClassName: &class,
				DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}},
				Rules: []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{
						{Path: "/", PathType: ptr(networkingv1.PathTypePrefix), Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}}},
						{Path: "/api", PathType: ptr(networkingv1.PathTypeExact), Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}}},
					}}}}}},
		}
	}
	svc, es := svcWithSlice("ns", "web", ep("10.0.0.1", nil, nil, nil))
	in := Input{
		IngressClasses: []*networkingv1.IngressClass{{ObjectMeta: metav1.ObjectMeta{Name: class},
			Spec: networkingv1.IngressClassSpec{Controller: DefaultControllerClass}}},
		Services:       []*corev1.Service{svc},
		EndpointSlices: []*discoveryv1.EndpointSlice{es},
		Ingresses:      []*networkingv1.Ingress{mk("protected", "p.example.com", 1, protected), mk("other", "o.example.com", 2, other)},
	}
	if cm != nil {
		in.ConfigMap = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "sys", Name: "switchyard"}, Data: cm}
	}
	return in
}

// deniedBy returns, per host, the Denied field of each location ("" when the
// location serves).
func deniedBy(cfg *model.Configuration) map[string][]string {
	out := map[string][]string{}
	for _, s := range cfg.Servers {
		for _, l := range s.Locations {
			f := ""
			if l.Denied != nil {
				f = l.Denied.Field
			}
			out[s.Hostname] = append(out[s.Hostname], f)
		}
	}
	return out
}

func TestBuildFailsClosed(t *testing.T) {
	const limitConns = annotationPrefix + "limit-connections"
	const cmSnippet = "ConfigMap sys/switchyard: global-auth-snippet"
	tests := []struct {
		name             string
		protected, other map[string]string
		cm               map[string]string
		want             map[string][]string
		reasons          []string // Event reasons of cfg.Errors, in order
	}{
		{
			name:      "an invalid limit-connections denies every location of its Ingress",
			protected: map[string]string{limitConns: "ten"},
			want:      map[string][]string{"_": {""}, "p.example.com": {limitConns, limitConns}, "o.example.com": {"", ""}},
			reasons:   []string{model.ReasonFailedClosed},
		},
		{
			name:      "an access annotation on a canary is reported, the primary governs",
			protected: nil,
			other: map[string]string{annotationPrefix + "canary": "true", annotationPrefix + "canary-weight": "10",
				limitConns: "ten"},
			want: map[string][]string{"_": {""}, "p.example.com": {"", ""}},
			// and its host o.example.com has no primary
			reasons: []string{model.ReasonUnsupported, ""},
		},
		{
			name:    "global-auth-snippet is refused: every Ingress fails closed",
			cm:      map[string]string{"global-auth-url": "http://auth.example.com/", "global-auth-snippet": "return 200;"},
			want:    map[string][]string{"_": {""}, "p.example.com": {cmSnippet, cmSnippet}, "o.example.com": {cmSnippet, cmSnippet}},
			reasons: []string{model.ReasonFailedClosed},
		},
		{
			name:      "block-user-agents denies every Ingress, enable-global-auth or not",
			protected: map[string]string{annotationPrefix + "enable-global-auth": "false"},
			cm:        map[string]string{"block-user-agents": "~*curl"},
			want: map[string][]string{"_": {""},
				"p.example.com": {"ConfigMap sys/switchyard: block-user-agents", "ConfigMap sys/switchyard: block-user-agents"},
				"o.example.com": {"ConfigMap sys/switchyard: block-user-agents", "ConfigMap sys/switchyard: block-user-agents"}},
			reasons: []string{model.ReasonFailedClosed},
		},
		{
			name:    "an invalid ConfigMap allow list denies every Ingress",
			cm:      map[string]string{"whitelist-source-range": "10.0.0.0/8,nope"},
			want:    map[string][]string{"_": {""}, "p.example.com": {"ConfigMap sys/switchyard: whitelist-source-range", "ConfigMap sys/switchyard: whitelist-source-range"}, "o.example.com": {"ConfigMap sys/switchyard: whitelist-source-range", "ConfigMap sys/switchyard: whitelist-source-range"}},
			reasons: []string{model.ReasonFailedClosed},
		},
		{
			name:    "a refused auth-snippet denies, a configuration-snippet does not",
			other:   map[string]string{annotationPrefix + "auth-snippet": "return 200;", annotationPrefix + "configuration-snippet": "return 200;"},
			want:    map[string][]string{"_": {""}, "p.example.com": {"", ""}, "o.example.com": {annotationPrefix + "auth-snippet", annotationPrefix + "auth-snippet"}},
			reasons: []string{model.ReasonFailedClosed, ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Build(accessInput(tt.protected, tt.other, tt.cm), Options{})
			if diff := cmp.Diff(tt.want, deniedBy(cfg)); diff != "" {
				t.Errorf("denied locations per host (-want +got):\n%s", diff)
			}
			var reasons []string
			for _, e := range cfg.Errors {
				reasons = append(reasons, e.Reason)
			}
			if diff := cmp.Diff(tt.reasons, reasons); diff != "" {
				t.Errorf("error reasons (-want +got):\n%s\nerrors: %+v", diff, cfg.Errors)
			}
		})
	}
}

// The ConfigMap's allow and deny lists are the annotations' defaults, and
// block-cidrs is refused everywhere, the default server included.
func TestConfigMapSourceRanges(t *testing.T) {
	cfg := Build(accessInput(
		map[string]string{annotationPrefix + "whitelist-source-range": "192.168.0.0/16", annotationPrefix + "denylist-source-range": "192.168.9.0/24"},
		nil,
		map[string]string{"whitelist-source-range": "10.0.0.0/8", "denylist-source-range": "10.9.0.0/16", "block-cidrs": "203.0.113.0/24"}), Options{})
	if len(cfg.Errors) != 0 {
		t.Fatalf("errors: %+v", cfg.Errors)
	}
	got := map[string][2]string{}
	for _, s := range cfg.Servers {
		l := s.Locations[0]
		got[s.Hostname] = [2]string{fmtPrefixes(l.DenySourceRanges), fmtPrefixes(l.AllowSourceRanges)}
	}
	want := map[string][2]string{
		"_":             {"203.0.113.0/24", ""}, // the default server: block-cidrs only
		"p.example.com": {"203.0.113.0/24 192.168.9.0/24", "192.168.0.0/16"},
		"o.example.com": {"203.0.113.0/24 10.9.0.0/16", "10.0.0.0/8"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deny and allow lists per host (-want +got):\n%s", diff)
	}
}

func fmtPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, " ")
}

// auth-tls-secret: the CA Secret is looked up and validated; the first
// Ingress of a host that sets it gives the server its client
// authentication; a missing, foreign or malformed Secret, or a ca.crl that
// does not parse or that no certificate of ca.crt signed, fails the Ingress
// closed.
func TestBuildClientAuth(t *testing.T) {
	caPEM, _ := harness.SelfSignedPEM(t, "ca.example")
	rca := harness.NewRevokingCA(t, "Revoking CA")
	other := harness.NewRevokingCA(t, "Other CA")
	leaf, _ := rca.ClientCert(t, "alice")
	crl := rca.CRL(t, leaf)
	both := append(append([]byte(nil), caPEM...), rca.PEM...)
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: data}
	}
	const key = annotationPrefix + "auth-tls-secret"
	for _, tc := range []struct {
		name, ref string
		secret    *corev1.Secret
		denied    bool
		crl       bool // served, with the Secret's ca.crl
	}{
		{name: "a CRL of the CA", ref: "ca", secret: secret("ca", map[string][]byte{"ca.crt": rca.PEM, "ca.crl": crl}), crl: true},
		{name: "a CRL of the second CA of the bundle", ref: "ca", secret: secret("ca", map[string][]byte{"ca.crt": both, "ca.crl": crl}), crl: true},
		{"valid", "ca", secret("ca", map[string][]byte{"ca.crt": caPEM}), false, false},
		{"valid, namespaced", "ns/ca", secret("ca", map[string][]byte{"ca.crt": caPEM}), false, false},
		{"missing", "ca", nil, true, false},
		{"another namespace", "other/ca", secret("ca", map[string][]byte{"ca.crt": caPEM}), true, false},
		{"not PEM", "ca", secret("ca", map[string][]byte{"ca.crt": []byte("hello")}), true, false},
		{"a key, not a certificate", "ca", secret("ca", map[string][]byte{"ca.crt": []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")}), true, false},
		{"a CRL that is not PEM", "ca", secret("ca", map[string][]byte{"ca.crt": rca.PEM, "ca.crl": []byte("x")}), true, false},
		{"a CRL of another CA", "ca", secret("ca", map[string][]byte{"ca.crt": rca.PEM, "ca.crl": other.CRL(t)}), true, false},
		{"a CRL and a certificate", "ca", secret("ca", map[string][]byte{"ca.crt": rca.PEM, "ca.crl": append(append([]byte(nil), crl...), rca.PEM...)}), true, false},
		{"an empty CRL", "ca", secret("ca", map[string][]byte{"ca.crt": rca.PEM, "ca.crl": nil}), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := accessInput(map[string]string{key: tc.ref, annotationPrefix + "auth-tls-verify-client": "optional",
				annotationPrefix + "auth-tls-match-cn": "CN=(alice|bob)"}, nil, nil)
			if tc.secret != nil {
				in.Secrets = []*corev1.Secret{tc.secret}
			}
			cfg := Build(in, Options{})
			for _, s := range cfg.Servers {
				switch s.Hostname {
				case "p.example.com":
					if tc.crl {
						if s.ClientAuth == nil || s.ClientAuth.CRL != string(tc.secret.Data["ca.crl"]) || s.Locations[0].Denied != nil {
							t.Errorf("ClientAuth %+v, denied %+v; want the CRL carried", s.ClientAuth, s.Locations[0].Denied)
						}
						continue
					}
					if tc.denied {
						if s.ClientAuth != nil || s.Locations[0].Denied == nil || s.Locations[0].Denied.Field != key {
							t.Errorf("ClientAuth %+v, denied %+v; want the Ingress denied by %s", s.ClientAuth, s.Locations[0].Denied, key)
						}
						continue
					}
					ca := s.ClientAuth
					if ca == nil || ca.CA != string(caPEM) || ca.Verify != model.VerifyOptional || ca.Depth != 1 || ca.MatchCN.String() != "CN=(alice|bob)" || s.Locations[0].Denied != nil {
						t.Errorf("ClientAuth %+v, denied %+v", ca, s.Locations[0].Denied)
					}
				case "o.example.com":
					if s.ClientAuth != nil {
						t.Errorf("another host got client authentication")
					}
				}
			}
		})
	}
}

// auth-type: basic: the credentials Secret is looked up and every line
// validated; a missing Secret, a bad line or another namespace fail the
// Ingress closed.
func TestBuildBasicAuth(t *testing.T) {
	file := []byte("alice:{PLAIN}pw\n")
	secret := func(data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "users"}, Data: data}
	}
	for _, tc := range []struct {
		name   string
		ann    map[string]string
		secret *corev1.Secret
		denied string
	}{
		{"auth-file", map[string]string{"auth-type": "basic", "auth-secret": "users", "auth-realm": "Staff only"}, secret(map[string][]byte{"auth": file}), ""},
		{"auth-map", map[string]string{"auth-type": "basic", "auth-secret": "ns/users", "auth-secret-type": "auth-map"}, secret(map[string][]byte{"alice": []byte("{PLAIN}pw")}), ""},
		{"missing Secret", map[string]string{"auth-type": "basic", "auth-secret": "users"}, nil, "auth-secret"},
		{"no auth key", map[string]string{"auth-type": "basic", "auth-secret": "users"}, secret(map[string][]byte{"htpasswd": file}), "auth-secret"},
		{"a line without a hash", map[string]string{"auth-type": "basic", "auth-secret": "users"}, secret(map[string][]byte{"auth": []byte("alice:{PLAIN}pw\nbob\n")}), "auth-secret"},
		{"another namespace", map[string]string{"auth-type": "basic", "auth-secret": "other/users"}, secret(map[string][]byte{"auth": file}), "auth-secret"},
		{"no auth-secret", map[string]string{"auth-type": "basic"}, nil, "auth-type"},
		{"bad realm", map[string]string{"auth-type": "basic", "auth-secret": "users", "auth-realm": `a" x`}, secret(map[string][]byte{"auth": file}), "auth-realm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			for k, v := range tc.ann {
				ann[annotationPrefix+k] = v
			}
			in := accessInput(ann, nil, nil)
			if tc.secret != nil {
				in.Secrets = []*corev1.Secret{tc.secret}
			}
			cfg := Build(in, Options{})
			for _, s := range cfg.Servers {
				if s.Hostname != "p.example.com" {
					continue
				}
				l := s.Locations[0]
				if tc.denied != "" {
					if l.Denied == nil || l.Denied.Field != annotationPrefix+tc.denied || l.BasicAuth != nil {
						t.Errorf("denied %+v, basic auth %+v; want denied by %s", l.Denied, l.BasicAuth, tc.denied)
					}
					continue
				}
				if l.Denied != nil || l.BasicAuth == nil || !l.BasicAuth.Credentials.Verify("alice", "pw") || l.BasicAuth.Realm != tc.ann["auth-realm"] {
					t.Errorf("denied %+v, basic auth %+v", l.Denied, l.BasicAuth)
				}
			}
		})
	}
}

// auth-type: digest: an htdigest file (or auth-map of realm:HA1) whose
// every line is valid, and auth-realm; anything else fails closed, and so
// does digest together with an auth-url.
func TestBuildDigestAuth(t *testing.T) {
	line := "alice:Staff only:" + digestauth.HA1("alice", "Staff only", "pw")
	secret := func(data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "users"}, Data: data}
	}
	for _, tc := range []struct {
		name   string
		ann    map[string]string
		secret *corev1.Secret
		denied string
	}{
		{"auth-file", map[string]string{"auth-type": "digest", "auth-secret": "users", "auth-realm": "Staff only"}, secret(map[string][]byte{"auth": []byte(line + "\n")}), ""},
		{"auth-map", map[string]string{"auth-type": "digest", "auth-secret": "users", "auth-realm": "Staff only", "auth-secret-type": "auth-map"},
			secret(map[string][]byte{"alice": []byte(strings.TrimPrefix(line, "alice:"))}), ""},
		{"no realm", map[string]string{"auth-type": "digest", "auth-secret": "users"}, secret(map[string][]byte{"auth": []byte(line)}), "auth-realm"},
		{"missing Secret", map[string]string{"auth-type": "digest", "auth-secret": "users", "auth-realm": "Staff only"}, nil, "auth-secret"},
		{"a basic line", map[string]string{"auth-type": "digest", "auth-secret": "users", "auth-realm": "Staff only"}, secret(map[string][]byte{"auth": []byte(line + "\nbob:{PLAIN}pw\n")}), "auth-secret"},
		{"with auth-url", map[string]string{"auth-type": "digest", "auth-secret": "users", "auth-realm": "Staff only", "auth-url": "http://auth.example.com/"},
			secret(map[string][]byte{"auth": []byte(line)}), "auth-type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			for k, v := range tc.ann {
				ann[annotationPrefix+k] = v
			}
			in := accessInput(ann, nil, nil)
			if tc.secret != nil {
				in.Secrets = []*corev1.Secret{tc.secret}
			}
			cfg := Build(in, Options{})
			for _, s := range cfg.Servers {
				if s.Hostname != "p.example.com" {
					continue
				}
				l := s.Locations[0]
				if tc.denied != "" {
					if l.Denied == nil || l.Denied.Field != annotationPrefix+tc.denied {
						t.Errorf("denied %+v; want denied by %s", l.Denied, tc.denied)
					}
					continue
				}
				if l.Denied != nil || l.DigestAuth == nil || l.DigestAuth.Realm != "Staff only" || l.DigestAuth.Credentials.Users() != 1 || l.BasicAuth != nil {
					t.Errorf("denied %+v, digest auth %+v", l.Denied, l.DigestAuth)
				}
			}
		})
	}
}

// global-auth-url is the external authentication of every Ingress location
// without its own auth-url, but those of Ingresses that opt out and those
// under no-auth-locations.
func TestBuildGlobalAuth(t *testing.T) {
	own := "http://own.example.com/auth"
	cfg := Build(accessInput(map[string]string{annotationPrefix + "enable-global-auth": "false"},
		map[string]string{annotationPrefix + "auth-url": own},
		map[string]string{"global-auth-url": "http://global.example.com/auth", "global-auth-signin": "https://login.example.com/start",
			"global-auth-response-headers": "X-User", "no-auth-locations": "/.well-known/acme-challenge, /api"}), Options{})
	if len(cfg.Errors) != 0 {
		t.Fatalf("errors: %+v", cfg.Errors)
	}
	got := map[string]string{}
	for _, s := range cfg.Servers {
		for _, l := range s.Locations {
			u := ""
			if l.ExternalAuth != nil {
				u = l.ExternalAuth.URL[0].Literal
				if l.ExternalAuth.URL[0].Literal == "http://global.example.com/auth" && (len(l.ExternalAuth.SigninURL) == 0 || l.ExternalAuth.ResponseHeaders[0] != "X-User") {
					t.Errorf("global auth without its signin or headers: %+v", l.ExternalAuth)
				}
			}
			got[s.Hostname+l.Path] = u
		}
	}
	want := map[string]string{"_/": "", "p.example.com/": "", "p.example.com/api": "", "o.example.com/": own, "o.example.com/api": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("auth URL per location (-want +got):\n%s", diff)
	}
	cfg = Build(accessInput(nil, nil, map[string]string{"global-auth-url": "http://global.example.com/auth"}), Options{})
	for _, s := range cfg.Servers {
		for _, l := range s.Locations {
			if l.IsDefaultBackend {
				continue // the built-in 404 proxies nowhere
			}
			if l.ExternalAuth == nil || l.ExternalAuth.URL[0].Literal != "http://global.example.com/auth" {
				t.Errorf("%s%s: no global auth", s.Hostname, l.Path)
			}
		}
	}
	cfg = Build(accessInput(nil, nil, map[string]string{"global-auth-url": "http://$remote_addr/"}), Options{})
	if len(cfg.Errors) != 1 || cfg.Errors[0].Field != "global-auth-url" || cfg.Servers[1].Locations[0].Denied == nil {
		t.Errorf("an invalid global-auth-url: errors %+v", cfg.Errors)
	}
}

// With use-forwarded-headers (or enable-real-ip) the model says where the
// client's address is read, and deny lists are served, not failed closed.
// Invalid real-IP keys fail every location closed when in use, and are only
// reported when not.
func TestBuildRealIP(t *testing.T) {
	xff := &model.RealIP{Header: "X-Forwarded-For", From: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}
	pfx := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		cm       map[string]string
		want     *model.RealIP
		denied   bool // every Ingress location fails closed
		reported []string
	}{
		{name: "off", cm: map[string]string{"forwarded-for-header": "X-Client", "proxy-real-ip-cidr": "10.0.0.0/8"}},
		{name: "use-forwarded-headers", cm: map[string]string{"use-forwarded-headers": "true"}, want: xff},
		{name: "enable-real-ip", cm: map[string]string{"enable-real-ip": "true"}, want: xff},
		{name: "header and ranges", cm: map[string]string{"enable-real-ip": "true", "forwarded-for-header": "X-Client-IP",
			"proxy-real-ip-cidr": " 10.1.2.3/8, 192.0.2.7,2001:db8::/32"},
			want: &model.RealIP{Header: "X-Client-IP", From: pfx("10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32")}},
		{name: "invalid header in use", cm: map[string]string{"use-forwarded-headers": "true", "forwarded-for-header": "proxy_protocol"},
			want: xff, denied: true, reported: []string{"forwarded-for-header"}},
		{name: "injected header in use", cm: map[string]string{"use-forwarded-headers": "true", "forwarded-for-header": "X-A;\nreturn 200"},
			want: xff, denied: true, reported: []string{"forwarded-for-header"}},
		{name: "invalid ranges in use", cm: map[string]string{"use-forwarded-headers": "true", "proxy-real-ip-cidr": "10.0.0.0/8,"},
			want: xff, denied: true, reported: []string{"proxy-real-ip-cidr"}},
		{name: "invalid ranges not in use", cm: map[string]string{"proxy-real-ip-cidr": "everyone"}, reported: []string{"proxy-real-ip-cidr"}},
		{name: "invalid enable-real-ip", cm: map[string]string{"enable-real-ip": "yes please"}, denied: true, reported: []string{"enable-real-ip"}},
		// use-proxy-protocol turns real IP on by itself, with
		// proxy-real-ip-cidr's ranges; an invalid value fails closed (the
		// listeners may or may not want a PROXY header).
		{name: "use-proxy-protocol", cm: map[string]string{"use-proxy-protocol": "true", "proxy-real-ip-cidr": "10.0.0.0/8"},
			want: &model.RealIP{Header: "X-Forwarded-For", From: pfx("10.0.0.0/8"), ProxyProtocol: true}},
		{name: "use-proxy-protocol false", cm: map[string]string{"use-proxy-protocol": "false"}},
		{name: "invalid use-proxy-protocol", cm: map[string]string{"use-proxy-protocol": "on"}, denied: true, reported: []string{"use-proxy-protocol"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := map[string]string{}
			for k, v := range tc.cm {
				cm[k] = v
			}
			cfg := Build(accessInput(map[string]string{annotationPrefix + "denylist-source-range": "203.0.113.0/24"}, nil, cm), Options{})
			if diff := cmp.Diff(tc.want, cfg.Global.RealIP, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("RealIP (-want +got):\n%s", diff)
			}
			var fields []string
			for _, e := range cfg.Errors {
				fields = append(fields, e.Field)
			}
			if diff := cmp.Diff(tc.reported, fields); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			for _, s := range cfg.Servers {
				for _, l := range s.Locations {
					if l.IsDefaultBackend {
						continue // the built-in 404 has no allow or deny list to fail
					}
					if (l.Denied != nil) != tc.denied {
						t.Errorf("%s%s: denied %+v; want denied %v", s.Hostname, l.Path, l.Denied, tc.denied)
					}
				}
			}
		})
	}
}

// The recursive walk a data plane runs with RealIP trusts IPv4 ranges for
// IPv4-mapped addresses too, as nginx's ngx_cidr_match.
func TestRealIPTrusted(t *testing.T) {
	r := &model.RealIP{From: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}}
	for addr, want := range map[string]bool{"10.1.1.1": true, "::ffff:10.1.1.1": true, "11.0.0.1": false, "2001:db8::1": true, "::1": false} {
		if got := r.Trusted(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Trusted(%s) = %v; want %v", addr, got, want)
		}
	}
}

// auth-proxy-set-headers: the ConfigMap's data reach the model sorted; a
// missing or foreign ConfigMap, or a field the planes could not send alike,
// fails the Ingress closed; without auth-url the annotation only warns.
func TestBuildAuthProxySetHeaders(t *testing.T) {
	const key = annotationPrefix + "auth-proxy-set-headers"
	cm := func(ns, name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	}
	for _, tc := range []struct {
		name, ref string
		cms       []*corev1.ConfigMap
		noURL     bool
		want      []model.HeaderField // nil: denied (unless noURL)
	}{
		{name: "fields", ref: "auth-headers", cms: []*corev1.ConfigMap{cm("ns", "auth-headers", map[string]string{"X-Tenant": "blue", "X_Team": "a b", "X-Empty": ""})},
			want: []model.HeaderField{{Name: "X-Empty", Value: ""}, {Name: "X-Tenant", Value: "blue"}, {Name: "X_Team", Value: "a b"}}},
		{name: "namespaced", ref: "ns/auth-headers", cms: []*corev1.ConfigMap{cm("ns", "auth-headers", map[string]string{"X-Tenant": "blue"})},
			want: []model.HeaderField{{Name: "X-Tenant", Value: "blue"}}},
		{name: "missing", ref: "auth-headers"},
		{name: "another namespace", ref: "other/auth-headers", cms: []*corev1.ConfigMap{cm("other", "auth-headers", map[string]string{"X-Tenant": "blue"})}},
		{name: "a variable", ref: "h", cms: []*corev1.ConfigMap{cm("ns", "h", map[string]string{"X-Client": "$remote_addr"})}},
		{name: "an injection", ref: "h", cms: []*corev1.ConfigMap{cm("ns", "h", map[string]string{"X-A": "x\";\nreturn 200 \"y"})}},
		{name: "a bad name", ref: "h", cms: []*corev1.ConfigMap{cm("ns", "h", map[string]string{"X A": "x"})}},
		{name: "a field the subrequest sets", ref: "h", cms: []*corev1.ConfigMap{cm("ns", "h", map[string]string{"x-forwarded-for": "1.2.3.4"})}},
		{name: "a blank at the end", ref: "h", cms: []*corev1.ConfigMap{cm("ns", "h", map[string]string{"X-A": "x "})}},
		{name: "not a reference", ref: "a b"},
		{name: "without auth-url", ref: "h", noURL: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{key: tc.ref, annotationPrefix + "auth-url": "http://auth.example.com/check"}
			if tc.noURL {
				delete(ann, annotationPrefix+"auth-url")
			}
			in := accessInput(ann, nil, nil)
			in.ConfigMaps = tc.cms
			cfg := Build(in, Options{})
			var loc *model.Location
			for i, s := range cfg.Servers {
				if s.Hostname == "p.example.com" {
					loc = &cfg.Servers[i].Locations[0]
				}
			}
			var reasons []string
			for _, e := range cfg.Errors {
				if e.Field == key {
					reasons = append(reasons, e.Reason)
				}
			}
			switch {
			case tc.noURL:
				if loc.Denied != nil || loc.ExternalAuth != nil || !cmp.Equal(reasons, []string{model.ReasonUnsupported}) {
					t.Errorf("denied %+v, auth %+v, reasons %v; want served, one warning", loc.Denied, loc.ExternalAuth, reasons)
				}
			case tc.want == nil:
				if loc.Denied == nil || loc.Denied.Field != key || !cmp.Equal(reasons, []string{model.ReasonFailedClosed}) {
					t.Errorf("denied %+v, reasons %v; want denied by %s", loc.Denied, reasons, key)
				}
			default:
				if loc.Denied != nil || loc.ExternalAuth == nil || len(reasons) != 0 {
					t.Fatalf("denied %+v, auth %+v, reasons %v", loc.Denied, loc.ExternalAuth, reasons)
				}
				if diff := cmp.Diff(tc.want, loc.ExternalAuth.ProxySetHeaders); diff != "" {
					t.Errorf("ProxySetHeaders (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// limit-rps and its kin as ingress-nginx reads them: one zone per Ingress
// for all its paths, burst multiplier 5 by default, the allow list (the
// newer name winning), and an invalid value failing the Ingress closed.
func TestRateLimitAnnotations(t *testing.T) {
	tests := []struct {
		name   string
		ann    map[string]string
		want   *model.RateLimit // of p.example.com's paths
		denied string
	}{
		{name: "none", ann: nil},
		{name: "limit-burst-multiplier alone limits nothing", ann: map[string]string{"limit-burst-multiplier": "2"}},
		{name: "limit-rps", ann: map[string]string{"limit-rps": "10"},
			want: &model.RateLimit{Zone: "ns_protected_", RPS: 10, BurstMultiplier: 5}},
		{name: "both, multiplier and allow lists",
			ann: map[string]string{"limit-rps": "3", "limit-rpm": "100", "limit-burst-multiplier": "0",
				"limit-whitelist": "10.0.0.0/8", "limit-allowlist": "192.0.2.1, 198.51.100.0/24"},
			want: &model.RateLimit{Zone: "ns_protected_", RPS: 3, RPM: 100, BurstMultiplier: 0,
				Allowlist: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("198.51.100.0/24")}}},
		{name: "limit-connections", ann: map[string]string{"limit-connections": "2", "limit-allowlist": "10.0.0.0/8"},
			want: &model.RateLimit{Zone: "ns_protected_", Connections: 2, BurstMultiplier: 5,
				Allowlist: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}},
		{name: "limit-connections beside limit-rps", ann: map[string]string{"limit-connections": "1", "limit-rps": "4"},
			want: &model.RateLimit{Zone: "ns_protected_", RPS: 4, Connections: 1, BurstMultiplier: 5}},
		{name: "limit-connections not a number fails closed", ann: map[string]string{"limit-connections": "1.5"},
			denied: annotationPrefix + "limit-connections"},
		{name: "limit-connections negative fails closed", ann: map[string]string{"limit-connections": "-1"},
			denied: annotationPrefix + "limit-connections"},
		{name: "not a number fails closed", ann: map[string]string{"limit-rps": "ten"}, denied: annotationPrefix + "limit-rps"},
		{name: "negative fails closed", ann: map[string]string{"limit-rpm": "-1"}, denied: annotationPrefix + "limit-rpm"},
		{name: "an invalid allow list fails closed", ann: map[string]string{"limit-rps": "1", "limit-allowlist": "10.0.0.0/33"},
			denied: annotationPrefix + "limit-allowlist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ann := map[string]string{}
			for k, v := range tt.ann {
				ann[annotationPrefix+k] = v
			}
			cfg := Build(accessInput(ann, nil, nil), Options{})
			for _, s := range cfg.Servers {
				if s.Hostname != "p.example.com" {
					continue
				}
				for _, l := range s.Locations {
					denied := ""
					if l.Denied != nil {
						denied = l.Denied.Field
					}
					if denied != tt.denied {
						t.Errorf("%s: denied by %q; want %q", l.Path, denied, tt.denied)
					}
					if tt.denied != "" {
						continue
					}
					if diff := cmp.Diff(tt.want, l.RateLimit, cmpopts.EquateComparable(netip.Prefix{})); diff != "" {
						t.Errorf("%s: rate limit (-want +got):\n%s", l.Path, diff)
					}
				}
			}
		})
	}
	if z := rateLimitZone(model.ObjectRef{Namespace: "a", Name: "b", UID: "1f2e-x y"}); z != "a_b_1f2e-x_y" {
		t.Errorf("zone %q", z)
	}
}

// limit-rate and limit-rate-after (KiB) as ingress-nginx reads them: the
// annotation over the ConfigMap's key, for every path of an Ingress but
// not the catch-all; an invalid value is reported (no fail closed: it
// restricts no access) and the ConfigMap's value used, as ingress-nginx's
// parser falls back to it; limit_rate_after alone does nothing.
func TestLimitRateAnnotations(t *testing.T) {
	tests := []struct {
		name    string
		ann, cm map[string]string
		want    *model.ResponseRate // of p.example.com's paths
		errs    []string            // fields of cfg.Errors
	}{
		{name: "none"},
		{name: "limit-rate", ann: map[string]string{"limit-rate": "100"}, want: &model.ResponseRate{KBPerSecond: 100}},
		{name: "limit-rate and limit-rate-after", ann: map[string]string{"limit-rate": "100", "limit-rate-after": "1024"},
			want: &model.ResponseRate{KBPerSecond: 100, AfterKB: 1024}},
		{name: "limit-rate-after alone", ann: map[string]string{"limit-rate-after": "10"}},
		{name: "limit-rate 0 is none", ann: map[string]string{"limit-rate": "0"}, cm: map[string]string{"limit-rate": "50"}},
		{name: "the ConfigMap's defaults", cm: map[string]string{"limit-rate": "50", "limit-rate-after": "5"},
			want: &model.ResponseRate{KBPerSecond: 50, AfterKB: 5}},
		{name: "the annotation over the ConfigMap", ann: map[string]string{"limit-rate": "70"},
			cm: map[string]string{"limit-rate": "50", "limit-rate-after": "5"}, want: &model.ResponseRate{KBPerSecond: 70, AfterKB: 5}},
		{name: "an invalid annotation keeps the ConfigMap's", ann: map[string]string{"limit-rate": "100k"},
			cm: map[string]string{"limit-rate": "50"}, want: &model.ResponseRate{KBPerSecond: 50},
			errs: []string{annotationPrefix + "limit-rate"}},
		{name: "an invalid ConfigMap value", cm: map[string]string{"limit-rate": "-3"}, errs: []string{"limit-rate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ann := map[string]string{}
			for k, v := range tt.ann {
				ann[annotationPrefix+k] = v
			}
			cfg := Build(accessInput(ann, nil, tt.cm), Options{})
			var errs []string
			for _, e := range cfg.Errors {
				errs = append(errs, e.Field)
			}
			if diff := cmp.Diff(tt.errs, errs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			for _, s := range cfg.Servers {
				want := tt.want
				switch s.Hostname {
				case "p.example.com":
				case model.CatchAllHost:
					want = nil
				default:
					continue
				}
				for _, l := range s.Locations {
					if l.Denied != nil {
						t.Errorf("%s%s: denied by %s", s.Hostname, l.Path, l.Denied.Field)
					}
					if diff := cmp.Diff(want, l.ResponseRate); diff != "" {
						t.Errorf("%s%s: response rate (-want +got):\n%s", s.Hostname, l.Path, diff)
					}
				}
			}
		})
	}
}
