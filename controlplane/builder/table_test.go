package builder

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func svcWithSlice(ns, name string, eps ...discoveryv1.Endpoint) (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
		Endpoints:   eps,
	}
	return svc, es
}

func ep(addr string, ready, serving, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}}
}

func TestEndpoints(t *testing.T) {
	yes, no := ptr(true), ptr(false)
	e := func(addrs ...string) []model.Endpoint {
		var out []model.Endpoint
		for _, a := range addrs {
			out = append(out, model.Endpoint{Address: a, Port: 8080})
		}
		return out
	}
	// Many endpoints, each given twice, the second time after more
	// distinct ones than endpointSet scans.
	var manyEps []discoveryv1.Endpoint
	var manyAddrs []string
	for i := range 2 * (linearScanMax + 4) {
		addr := fmt.Sprintf("10.0.1.%d", i%(linearScanMax+4))
		manyEps = append(manyEps, ep(addr, yes, nil, nil))
		if i < linearScanMax+4 {
			manyAddrs = append(manyAddrs, addr)
		}
	}
	tests := []struct {
		name string
		eps  []discoveryv1.Endpoint
		want []model.Endpoint
		// bad is how many addresses are reported invalid.
		bad int
	}{
		{"many duplicates removed", manyEps, e(manyAddrs...), 0},
		{"ready, nil conditions count as ready", []discoveryv1.Endpoint{ep("10.0.0.1", yes, yes, no), ep("10.0.0.2", nil, nil, nil)}, e("10.0.0.1", "10.0.0.2"), 0},
		{"not ready left out", []discoveryv1.Endpoint{ep("10.0.0.1", no, no, no), ep("10.0.0.2", yes, nil, nil)}, e("10.0.0.2"), 0},
		{"terminating and not ready left out", []discoveryv1.Endpoint{ep("10.0.0.1", no, yes, yes), ep("10.0.0.2", yes, yes, no)}, e("10.0.0.2"), 0},
		// ingress-nginx reads Ready only: nothing stands in for it.
		{"serving but not ready: none", []discoveryv1.Endpoint{ep("10.0.0.1", no, yes, yes), ep("10.0.0.2", no, no, yes)}, nil, 0},
		// publishNotReadyAddresses keeps terminating endpoints ready.
		{"ready and terminating kept", []discoveryv1.Endpoint{ep("10.0.0.1", yes, yes, yes), ep("10.0.0.2", yes, yes, no)}, e("10.0.0.1", "10.0.0.2"), 0},
		{"duplicates removed", []discoveryv1.Endpoint{ep("10.0.0.1", yes, nil, nil), ep("10.0.0.1", yes, nil, nil)}, e("10.0.0.1"), 0},
		{"none", nil, nil, 0},
		{"invalid addresses skipped, the rest kept", []discoveryv1.Endpoint{ep("127.0.0.1;X", yes, nil, nil), ep("10.0.0.2", yes, nil, nil),
			ep("010.0.0.3", yes, nil, nil), ep("::1", yes, nil, nil), ep("10.0.0.4 ", yes, nil, nil)}, e("10.0.0.2"), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, es := svcWithSlice("ns", "web", tt.eps...)
			b := &builder{cfg: &model.Configuration{}}
			e := &serviceEntry{svc: svc, slices: []*discoveryv1.EndpointSlice{es}}
			if diff := cmp.Diff(tt.want, b.endpoints(e, svc.Spec.Ports[0], corev1.ProtocolTCP)); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			// A second use of the same Service reports nothing again.
			b.endpoints(e, svc.Spec.Ports[0], corev1.ProtocolTCP)
			if len(b.cfg.Errors) != tt.bad {
				t.Errorf("errors %v, want %d", b.cfg.Errors, tt.bad)
			}
			for _, e := range b.cfg.Errors {
				if e.Object.Kind != "EndpointSlice" || e.Object.Name != es.Name {
					t.Errorf("error on %+v, want the EndpointSlice %s", e.Object, es.Name)
				}
			}
		})
	}
}

// TestEndpointPorts: which port of an EndpointSlice an endpoint gets, as
// ingress-nginx chooses it (its #7390 fallback to a numeric target port).
func TestEndpointPorts(t *testing.T) {
	tcp, udp := ptr(corev1.ProtocolTCP), ptr(corev1.ProtocolUDP)
	port := func(name string, n int32, proto *corev1.Protocol) discoveryv1.EndpointPort {
		p := discoveryv1.EndpointPort{Port: ptr(n), Protocol: proto}
		if name != "" {
			p.Name = ptr(name)
		}
		return p
	}
	tests := []struct {
		name  string
		sp    corev1.ServicePort
		ports []discoveryv1.EndpointPort
		proto corev1.Protocol
		want  []string
	}{
		{"name matches", corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			[]discoveryv1.EndpointPort{port("metrics", 9090, tcp), port("http", 8081, tcp)}, corev1.ProtocolTCP, []string{"9.0.0.1:8080", "9.0.0.1:8081"}},
		{"name differs, numeric target port used", corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			[]discoveryv1.EndpointPort{port("web", 8081, tcp)}, corev1.ProtocolTCP, []string{"9.0.0.1:8080"}},
		{"name differs, named target port: none", corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromString("web")},
			[]discoveryv1.EndpointPort{port("web", 8081, tcp)}, corev1.ProtocolTCP, nil},
		{"unnamed Service port takes every slice port", corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(8080)},
			[]discoveryv1.EndpointPort{port("a", 8081, tcp), port("", 8082, tcp)}, corev1.ProtocolTCP, []string{"9.0.0.1:8081", "9.0.0.1:8082"}},
		{"slice without ports, numeric target port", corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			nil, corev1.ProtocolTCP, []string{"9.0.0.1:8080"}},
		{"slice without ports, named target port: none", corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromString("http")},
			nil, corev1.ProtocolTCP, nil},
		{"other protocol skipped", corev1.ServicePort{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(53)},
			[]discoveryv1.EndpointPort{port("dns", 5353, tcp), port("dns", 53, udp)}, corev1.ProtocolUDP, []string{"9.0.0.1:53"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{tt.sp}}}
			es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1"}, AddressType: discoveryv1.AddressTypeIPv4,
				Ports: tt.ports, Endpoints: []discoveryv1.Endpoint{ep("9.0.0.1", nil, nil, nil)}}
			b := &builder{cfg: &model.Configuration{}}
			var got []string
			for _, e := range b.endpoints(&serviceEntry{svc: svc, slices: []*discoveryv1.EndpointSlice{es}}, tt.sp, tt.proto) {
				got = append(got, e.HostPort())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExternalNamePorts: an ExternalName Service's endpoint is its name and
// the port the Ingress names, through the Service's ports when it has them
// (a numeric backend port is enough when it has none, the usual case).
func TestExternalNamePorts(t *testing.T) {
	tests := []struct {
		name    string
		ext     string
		ports   []corev1.ServicePort
		backend networkingv1.ServiceBackendPort
		want    []model.Endpoint
	}{
		{"no ports, numbered backend", "api.example.com", nil, networkingv1.ServiceBackendPort{Number: 443},
			[]model.Endpoint{{Address: "api.example.com", Port: 443}}},
		{"port by number, its target port", "api.example.com", []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			networkingv1.ServiceBackendPort{Number: 80}, []model.Endpoint{{Address: "api.example.com", Port: 8080}}},
		{"port by name", "10.9.9.9", []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)}},
			networkingv1.ServiceBackendPort{Name: "web"}, []model.Endpoint{{Address: "10.9.9.9", Port: 8080}}},
		{"no ports, named backend: none", "api.example.com", nil, networkingv1.ServiceBackendPort{Name: "web"}, nil},
		{"not a DNS name: none", "api_example com", nil, networkingv1.ServiceBackendPort{Number: 80}, nil},
		{"loopback: none", "localhost", nil, networkingv1.ServiceBackendPort{Number: 80}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ext"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: tt.ext, Ports: tt.ports}}
			b := &builder{cfg: &model.Configuration{}, services: map[string]*serviceEntry{"ns/ext": {svc: svc}}, backends: map[string]*model.Backend{}}
			ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ing"}}
			be := b.backend(ing, &annotations{}, &networkingv1.IngressServiceBackend{Name: "ext", Port: tt.backend}, pathField{name: "spec"})
			if diff := cmp.Diff(tt.want, be.Endpoints); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			if len(tt.want) == 0 && len(b.cfg.Errors) == 0 {
				t.Errorf("no endpoints and no error")
			}
		})
	}
}

// A canary Ingress with only a default backend becomes the alternative of the
// primary's default backend on the catch-all server.
func TestCanaryDefaultBackend(t *testing.T) {
	class := "switchyard"
	mk := func(name string, created int64, svc string, ann map[string]string) *networkingv1.Ingress {
		return &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: ann, CreationTimestamp: metav1.Unix(created, 0)},
			Spec: networkingv1.IngressSpec{IngressClassName: &class, DefaultBackend: &networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Name: "http"}}}},
		}
	}
	main, mainES := svcWithSlice("ns", "main", ep("10.0.0.1", nil, nil, nil))
	canary, canaryES := svcWithSlice("ns", "canary", ep("10.0.0.2", nil, nil, nil))
	in := Input{
		IngressClasses: []*networkingv1.IngressClass{{ObjectMeta: metav1.ObjectMeta{Name: class},
			Spec: networkingv1.IngressClassSpec{Controller: DefaultControllerClass}}},
		Services:       []*corev1.Service{main, canary},
		EndpointSlices: []*discoveryv1.EndpointSlice{mainES, canaryES},
		Ingresses: []*networkingv1.Ingress{
			mk("c", 2, "canary", map[string]string{annotationPrefix + "canary": "true", annotationPrefix + "canary-weight": "30"}),
			mk("m", 1, "main", nil),
		},
	}
	cfg := Build(in, Options{})
	if len(cfg.Errors) != 0 {
		t.Fatalf("errors: %+v", cfg.Errors)
	}
	got := map[string]model.Backend{}
	for _, be := range cfg.Backends {
		got[be.Name] = *be
	}
	if diff := cmp.Diff([]string{"ns-canary-http"}, got["ns-main-http"].Alternatives); diff != "" {
		t.Errorf("primary alternativeBackends (-want +got):\n%s", diff)
	}
	want := model.Canary{Weight: 30, WeightTotal: 100}
	if diff := cmp.Diff(want, got["ns-canary-http"].Canary); diff != "" {
		t.Errorf("canary policy (-want +got):\n%s", diff)
	}
	if !got["ns-canary-http"].NoServer {
		t.Error("canary backend must have noServer")
	}
	if diff := cmp.Diff("ns-main-http", cfg.Servers[0].Locations[0].Backend); cfg.Servers[0].Hostname != model.CatchAllHost || diff != "" {
		t.Errorf("catch-all / backend (-want +got):\n%s", diff)
	}
}

// Every annotation with an invalid value is reported under its own key and
// ignored: the parsed result equals the one without that annotation. (Access
// annotations are the exception: TestAccessAnnotationsFailClosed.)
func TestInvalidAnnotationValues(t *testing.T) {
	bad := map[string]string{
		"load-balance": "random", "upstream-hash-by": "$a;b", "upstream-hash-by-subset": "yes please",
		"upstream-hash-by-subset-size": "0", "affinity-mode": "sticky", "affinity-canary-behavior": "other",
		"session-cookie-name": "a;b", "session-cookie-path": "/a b", "session-cookie-domain": "a..b",
		"session-cookie-expires": "-1", "session-cookie-max-age": "1h", "session-cookie-samesite": "Always",
		"session-cookie-conditional-samesite-none": "maybe", "session-cookie-change-on-failure": "2",
		"session-cookie-secure": "on", "canary-by-header": "X Canary", "canary-by-header-value": "a\nb",
		"canary-by-header-pattern": "(", "canary-by-cookie": "c=d", "canary-weight": "-5", "canary-weight-total": "0",
		"backend-protocol": "FTP", "ssl-redirect": "sometimes", "force-ssl-redirect": "1x", "ssl-passthrough": "y",
		"rewrite-target": "/a;return 200", "use-regex": "regex", "app-root": "app", "permanent-redirect": "javascript:alert(1)",
		"permanent-redirect-code": "200", "temporal-redirect": "http://a.example.com/\"x", "proxy-connect-timeout": "5s",
		"proxy-send-timeout": "0", "proxy-read-timeout": "forever", "proxy-body-size": "1t",
		"proxy-next-upstream": "error; rm", "proxy-next-upstream-tries": "many", "proxy-next-upstream-timeout": "-1",
		"proxy-buffering":   "true",
		"cors-allow-origin": "evil\"", "cors-allow-methods": "GET;", "cors-allow-headers": "X{}", "cors-expose-headers": "a\nb",
		"cors-allow-credentials": "si", "cors-max-age": "old", "custom-http-errors": "200,abc", "default-backend": "Bad_Name",
		"x-forwarded-prefix": "/a\"b", "server-alias": "bad host", "upstream-vhost": "a b", "configuration-snippet": "return 200;",
		"server-snippet": "x", "enable-cors": "enable", "mirror-target": "ftp://mirror.example/$request_uri",
	}
	base := map[string]string{annotationPrefix + "affinity": "cookie", annotationPrefix + "canary": "true",
		annotationPrefix + "enable-cors": "true", annotationPrefix + "permanent-redirect": "https://x.example.com/"}
	want, errs := parseAnnotations(base)
	if len(errs) != 0 {
		t.Fatalf("base annotations rejected: %+v", errs)
	}
	for key, value := range bad {
		t.Run(key, func(t *testing.T) {
			raw := map[string]string{}
			for k, v := range base {
				raw[k] = v
			}
			raw[annotationPrefix+key] = value
			got, errs := parseAnnotations(raw)
			if len(errs) != 1 || errs[0].key != annotationPrefix+key || errs[0].msg == "" {
				t.Fatalf("errors = %+v; want one naming %s", errs, key)
			}
			if strings.HasPrefix(key, "canary-") {
				// The canary Ingress is then not used (TestInvalidCanaryNotUsed).
				if got.canaryInvalid != annotationPrefix+key {
					t.Errorf("canaryInvalid = %q; want %s", got.canaryInvalid, key)
				}
				got.canaryInvalid = ""
			}
			want := want
			if _, inBase := base[annotationPrefix+key]; inBase {
				// An invalid value is the same as no value.
				without := map[string]string{}
				for k, v := range base {
					if k != annotationPrefix+key {
						without[k] = v
					}
				}
				want, _ = parseAnnotations(without)
			}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(annotations{}, corsAnnotations{})); diff != "" {
				t.Errorf("an invalid value changed the result (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInvalidCanaryNotUsed: a canary Ingress with a canary annotation whose
// value is refused is not merged at all (ingress-nginx refuses the whole
// Ingress), so a header alone never routes to it without its value or
// pattern; one error names the annotation.
func TestInvalidCanaryNotUsed(t *testing.T) {
	class := "switchyard"
	for _, tt := range []struct{ key, value string }{
		{"canary-by-header-pattern", "(unclosed"},
		{"canary-by-header-value", "a\tb"},
		{"canary-weight", "thirty"},
		{"canary-weight-total", "-1"},
	} {
		t.Run(tt.key, func(t *testing.T) {
			mk := func(name string, created int64, svc string, ann map[string]string) *networkingv1.Ingress {
				return &networkingv1.Ingress{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: ann, CreationTimestamp: metav1.Unix(created, 0)},
					Spec: networkingv1.IngressSpec{IngressClassName: &class, DefaultBackend: &networkingv1.IngressBackend{
						Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Name: "http"}}}},
				}
			}
			main, mainES := svcWithSlice("ns", "main", ep("10.0.0.1", nil, nil, nil))
			canary, canaryES := svcWithSlice("ns", "canary", ep("10.0.0.2", nil, nil, nil))
			cfg := Build(Input{
				IngressClasses: []*networkingv1.IngressClass{{ObjectMeta: metav1.ObjectMeta{Name: class},
					Spec: networkingv1.IngressClassSpec{Controller: DefaultControllerClass}}},
				Services:       []*corev1.Service{main, canary},
				EndpointSlices: []*discoveryv1.EndpointSlice{mainES, canaryES},
				Ingresses: []*networkingv1.Ingress{
					mk("c", 2, "canary", map[string]string{annotationPrefix + "canary": "true", annotationPrefix + "canary-by-header": "X-Canary",
						annotationPrefix + tt.key: tt.value}),
					mk("m", 1, "main", nil),
				},
			}, Options{})
			for _, be := range cfg.Backends {
				if len(be.Alternatives) > 0 || be.Name == "ns-canary-http" {
					t.Errorf("backend %s: alternatives %v; the canary must not be used", be.Name, be.Alternatives)
				}
			}
			var fields []string
			for _, e := range cfg.Errors {
				if e.Object.Name == "c" {
					fields = append(fields, e.Field)
				}
			}
			if !slices.Contains(fields, annotationPrefix+tt.key) {
				t.Errorf("errors on the canary name %q; want %s", fields, tt.key)
			}
		})
	}
}

// TestIngressDefaultBackend: spec.defaultBackend as ingress-nginx uses it.
// With rules, it is the "/" of each host the Ingress is the first to name
// (any Ingress's "/" path replaces it), with the Ingress's annotations;
// with no rules, the catch-all server's "/". Its backend is made first, with
// port 0.
func TestIngressDefaultBackend(t *testing.T) {
	class := "switchyard"
	backend := func(svc string) networkingv1.IngressBackend {
		return networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}}
	}
	rule := func(host string, paths ...string) networkingv1.IngressRule {
		r := networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{}}}
		for _, p := range paths {
			r.HTTP.Paths = append(r.HTTP.Paths, networkingv1.HTTPIngressPath{Path: p, PathType: ptr(networkingv1.PathTypePrefix), Backend: backend("paths")})
		}
		return r
	}
	mk := func(name string, created int64, def string, ann map[string]string, rules ...networkingv1.IngressRule) *networkingv1.Ingress {
		ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: ann, CreationTimestamp: metav1.Unix(created, 0)},
			Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: rules}}
		if def != "" {
			b := backend(def)
			ing.Spec.DefaultBackend = &b
		}
		return ing
	}
	var svcs []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	for i, name := range []string{"paths", "fallback", "late", "catch"} {
		svc, es := svcWithSlice("ns", name, ep(fmt.Sprintf("10.0.0.%d", i+1), nil, nil, nil))
		svc.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
		svcs, slices = append(svcs, svc), append(slices, es)
	}
	cfg := Build(Input{
		IngressClasses: []*networkingv1.IngressClass{{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: networkingv1.IngressClassSpec{Controller: DefaultControllerClass}}},
		Services:       svcs, EndpointSlices: slices,
		Ingresses: []*networkingv1.Ingress{
			// a.test and b.test are first named here: their "/" is "fallback"'s.
			mk("first", 1, "fallback", map[string]string{annotationPrefix + "limit-connections": "-5"}, rule("a.test", "/api"), rule("b.test", "/api")),
			// b.test's "/" path replaces it; c.test was first named by an
			// Ingress without default backend, so "late" does not apply.
			mk("second", 2, "", nil, rule("b.test", "/"), rule("c.test", "/x")),
			mk("third", 3, "late", nil, rule("c.test", "/y")),
			// No rules: the catch-all's "/".
			mk("fourth", 4, "catch", nil),
		},
	}, Options{})
	got := map[string]string{}
	for _, s := range cfg.Servers {
		for _, l := range s.Locations {
			v := l.Backend
			if l.Denied != nil {
				v += " denied"
			}
			got[s.Hostname+l.Path] = v
		}
	}
	want := map[string]string{
		"a.test/": "ns-fallback-80 denied", "a.test/api": "ns-paths-80 denied",
		"b.test/": "ns-paths-80", "b.test/api": "ns-paths-80 denied",
		"c.test/x": "ns-paths-80", "c.test/y": "ns-paths-80",
		"_/": "ns-catch-80",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("locations (-want +got):\n%s", diff)
	}
	for _, be := range cfg.Backends {
		wantPort := "80"
		switch be.Name {
		case "ns-fallback-80", "ns-catch-80", "ns-late-80":
			wantPort = "0"
		case model.DefaultBackendName:
			continue
		}
		if be.Port.String() != wantPort {
			t.Errorf("backend %s port %q; want %s", be.Name, be.Port.String(), wantPort)
		}
	}
}

// TestServiceUpstream: service-upstream gives the Service's cluster IP and
// port as the one endpoint; without a cluster IP (or for an ExternalName)
// it says so and the endpoints come from the slices (or the name).
func TestServiceUpstream(t *testing.T) {
	var fromSlices []model.Endpoint
	for k := range 5 {
		fromSlices = append(fromSlices, model.Endpoint{Address: fmt.Sprintf("10.0.0.%d", k+1), Port: 8080})
	}
	tests := []struct {
		name         string
		clusterIP    string
		externalName string
		want         []model.Endpoint
		wantErr      bool
	}{
		{"cluster IP", "10.96.0.7", "", []model.Endpoint{{Address: "10.96.0.7", Port: 80}}, false},
		{"no cluster IP: the slices", "", "", fromSlices, true},
		{"headless: the slices", "None", "", fromSlices, true},
		{"ExternalName: its name", "", "db.example.com", []model.Endpoint{{Address: "db.example.com", Port: 8080}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := syntheticInput(1)
			in.Ingresses[0].Annotations[annotationPrefix+"service-upstream"] = "true"
			in.Services[1].Spec.ClusterIP = "10.96.0.8" // the other path's
			svc := in.Services[0]
			svc.Spec.ClusterIP = tt.clusterIP
			if tt.externalName != "" {
				svc.Spec.Type, svc.Spec.ExternalName = corev1.ServiceTypeExternalName, tt.externalName
			}
			cfg := Build(in, Options{})
			i := slices.IndexFunc(cfg.Backends, func(be *model.Backend) bool { return be.Name == "ns0-svc0-0-http" })
			if i < 0 {
				t.Fatalf("no backend ns0-svc0-0-http in %d backends", len(cfg.Backends))
			}
			if diff := cmp.Diff(tt.want, cfg.Backends[i].Endpoints); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			var got []string
			for _, e := range cfg.Errors {
				got = append(got, e.Field)
			}
			want := []string(nil)
			if tt.wantErr {
				want = []string{annotationPrefix + "service-upstream"}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("error fields (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBodySize: proxy-body-size's grammar, ^([0-9]{1,12})([kKmMgG]?)$.
func TestBodySize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"8m", 8 << 20, true}, {"8M", 8 << 20, true}, {"512k", 512 << 10, true}, {"512K", 512 << 10, true},
		{"1g", 1 << 30, true}, {"2G", 2 << 30, true}, {"100", 100, true}, {"007k", 7 << 10, true},
		{"999999999999", 999999999999, true},
		{"", 0, false}, {"m", 0, false}, {"1234567890123", 0, false}, {"8mm", 0, false}, {"8t", 0, false},
		{" 8m", 0, false}, {"8m ", 0, false}, {"8m\n", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {"1.5m", 0, false},
		{"８m", 0, false},
	}
	grammar := regexp.MustCompile(`^([0-9]{1,12})([kKmMgG]?)$`) // what bodySize replaced
	for _, tt := range tests {
		if grammar.MatchString(tt.in) != tt.ok {
			t.Errorf("row %q: ok %v disagrees with the grammar", tt.in, tt.ok)
		}
		got, ok := bodySize(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("bodySize(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestServicePort: the first Service port whose number, target port or
// name spells the Ingress backend's port, as ingress-nginx finds it.
func TestServicePort(t *testing.T) {
	ports := []corev1.ServicePort{
		{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "admin", Port: 9000, TargetPort: intstr.FromString("metrics")},
		{Name: "8443", Port: 443, TargetPort: intstr.FromInt32(8443)},
	}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: ports}}
	tests := []struct {
		name string
		port networkingv1.ServiceBackendPort
		want string // the port's name; "" for none
	}{
		{"by number", networkingv1.ServiceBackendPort{Number: 80}, "http"},
		{"by target number", networkingv1.ServiceBackendPort{Number: 8080}, "http"},
		{"by name", networkingv1.ServiceBackendPort{Name: "admin"}, "admin"},
		{"by target name", networkingv1.ServiceBackendPort{Name: "metrics"}, "admin"},
		{"a name that is also a target number", networkingv1.ServiceBackendPort{Name: "8443"}, "8443"},
		{"a name spelling a number", networkingv1.ServiceBackendPort{Name: "9000"}, "admin"},
		{"leading zero: no port", networkingv1.ServiceBackendPort{Name: "080"}, ""},
		{"unknown number", networkingv1.ServiceBackendPort{Number: 81}, ""},
		{"unknown name", networkingv1.ServiceBackendPort{Name: "https"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp, ok := servicePort(svc, tt.port)
			got := ""
			if sp != nil {
				got = sp.Name
			}
			if ok != (tt.want != "") || got != tt.want {
				t.Errorf("servicePort(%+v) = %q, %v; want %q", tt.port, got, ok, tt.want)
			}
		})
	}
}
