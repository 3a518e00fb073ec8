package admission

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// store is a fixed store view: the builder Input a sync would read.
type store struct {
	in  builder.Input
	opt builder.Options
}

func (s *store) AdmissionInput(*networkingv1.Ingress) (builder.Input, error) { return s.in, nil }
func (s *store) BuildOptions() builder.Options                               { return s.opt }

const ann = "nginx.ingress.kubernetes.io/"

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ingress is an Ingress of class "switchyard" with one Prefix path per
// host:path pair ("a.example/"), all to Service web:80, created age
// seconds after base.
func ingress(ns, name string, age int, anns map[string]string, hostPaths ...string) *networkingv1.Ingress {
	class := "switchyard"
	pt := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name + "-uid"),
			CreationTimestamp: metav1.NewTime(base.Add(time.Duration(age) * time.Second)), Annotations: anns},
		Spec: networkingv1.IngressSpec{IngressClassName: &class},
	}
	for _, hp := range hostPaths {
		host, path, _ := strings.Cut(hp, "/")
		ing.Spec.Rules = append(ing.Spec.Rules, networkingv1.IngressRule{Host: host,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/" + path, PathType: &pt,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}}})
	}
	return ing
}

func service(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
}

// baseInput is a store with the "switchyard" IngressClass, Service web in
// ns1 and ns2, and Ingress ns1/owner serving a.example/ since base.
func baseInput() builder.Input {
	return builder.Input{
		IngressClasses: []*networkingv1.IngressClass{{ObjectMeta: metav1.ObjectMeta{Name: "switchyard"},
			Spec: networkingv1.IngressClassSpec{Controller: builder.DefaultControllerClass}}},
		Services:  []*corev1.Service{service("ns1", "web"), service("ns2", "web")},
		Ingresses: []*networkingv1.Ingress{ingress("ns1", "owner", 0, nil, "a.example/")},
	}
}

// reviewBody is the AdmissionReview the API server sends for obj.
func reviewBody(t testing.TB, op admissionv1.Operation, obj runtime.Object, ns string) []byte {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "review-uid", Kind: ingressKind,
			Resource:  metav1.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"},
			Namespace: ns, Operation: op, Object: runtime.RawExtension{Raw: raw}},
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends body to h and decodes the AdmissionReview answered.
func post(t testing.TB, h http.Handler, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d (%s); want 200", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decode response %q: %v", rec.Body, err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("response %s is not an AdmissionReview v1 with a response", rec.Body)
	}
	if out.Response.UID != "review-uid" {
		t.Errorf("response uid %q; want review-uid", out.Response.UID)
	}
	if out.Request != nil {
		t.Errorf("response echoes the request")
	}
	return out.Response
}

// builderErrors are what a full sync (builder.Build over the whole store
// with candidate added) reports about one object, as the webhook words
// them: the expected messages come from the builder, not from this test.
func builderErrors(in builder.Input, candidate *networkingv1.Ingress, ns, name string, keep func(model.ObjectError) bool) []string {
	var out []string
	for _, e := range builder.Build(with(in, candidate), builder.Options{}).Errors {
		if e.Object.Namespace == ns && e.Object.Name == name && keep(e) {
			out = append(out, describe(e))
		}
	}
	return out
}

// with is in with candidate added, replacing the Ingress of its name.
func with(in builder.Input, candidate *networkingv1.Ingress) builder.Input {
	var ings []*networkingv1.Ingress
	for _, ing := range in.Ingresses {
		if ing.Namespace != candidate.Namespace || ing.Name != candidate.Name {
			ings = append(ings, ing)
		}
	}
	in.Ingresses = append(ings, candidate)
	return in
}

func TestHandler(t *testing.T) {
	all := func(model.ObjectError) bool { return true }
	otherClass := ingress("ns2", "theirs", 5, map[string]string{ann + "configuration-snippet": "deny all;"}, "a.example/")
	otherClass.Spec.IngressClassName = ptr("nginx")
	update := ingress("ns1", "owner", 0, map[string]string{ann + "proxy-body-size": "8m"}, "a.example/", "b.example/")
	missingTLS := ingress("ns2", "tls", 5, nil, "t.example/")
	missingTLS.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"t.example"}, SecretName: "not-yet"}}
	for _, tc := range []struct {
		name string
		ing  *networkingv1.Ingress
		op   admissionv1.Operation
		// deniedBy lists the objects and fields whose builder errors make
		// the message; empty: allowed.
		deniedBy []func(builder.Input, *networkingv1.Ingress) []string
		// warnedBy selects the candidate's builder errors expected as
		// warnings.
		warnedBy func(model.ObjectError) bool
	}{
		{name: "good", ing: ingress("ns2", "good", 5, map[string]string{ann + "proxy-body-size": "8m"}, "b.example/")},
		{name: "update of the owner", op: admissionv1.Update, ing: update},
		{name: "other class", ing: otherClass},
		{name: "snippet", ing: ingress("ns2", "snippet", 5, map[string]string{ann + "configuration-snippet": "deny all;"}, "b.example/"),
			deniedBy: []func(builder.Input, *networkingv1.Ingress) []string{func(in builder.Input, c *networkingv1.Ingress) []string {
				return builderErrors(in, c, "ns2", "snippet", all)
			}}},
		{name: "invalid value", ing: ingress("ns2", "bad-value", 5, map[string]string{ann + "proxy-body-size": "lots"}, "b.example/"),
			deniedBy: []func(builder.Input, *networkingv1.Ingress) []string{func(in builder.Input, c *networkingv1.Ingress) []string {
				return builderErrors(in, c, "ns2", "bad-value", all)
			}}},
		{name: "fails closed", ing: ingress("ns2", "closed", 5, map[string]string{ann + "whitelist-source-range": "10.0.0.0/33"}, "b.example/"),
			deniedBy: []func(builder.Input, *networkingv1.Ingress) []string{func(in builder.Input, c *networkingv1.Ingress) []string {
				return builderErrors(in, c, "ns2", "closed", all)
			}}},
		{name: "host and path of an older Ingress", ing: ingress("ns2", "newer", 5, nil, "a.example/"),
			deniedBy: []func(builder.Input, *networkingv1.Ingress) []string{func(in builder.Input, c *networkingv1.Ingress) []string {
				return builderErrors(in, c, "ns2", "newer", all)
			}}},
		{name: "host and path of a newer Ingress", ing: ingress("ns2", "older", -5, nil, "a.example/"),
			deniedBy: []func(builder.Input, *networkingv1.Ingress) []string{func(in builder.Input, c *networkingv1.Ingress) []string {
				var out []string
				for _, e := range builder.Build(with(in, c), builder.Options{}).Errors {
					if e.Object.Name == "owner" && e.Field == "spec.rules[0].http.paths[0]" {
						out = append(out, describeDisplaced(e))
					}
				}
				return out
			}}},
		{name: "canary on the owner's path", ing: ingress("ns2", "canary", 5, map[string]string{ann + "canary": "true", ann + "canary-weight": "10"}, "a.example/")},
		{name: "unsupported annotation warns", ing: ingress("ns2", "unsupported", 5, map[string]string{ann + "enable-opentelemetry": "true"}, "b.example/"),
			warnedBy: func(model.ObjectError) bool { return true }},
		{name: "missing service warns", ing: func() *networkingv1.Ingress {
			ing := ingress("ns2", "nosvc", 5, nil, "b.example/")
			ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "later"
			return ing
		}(), warnedBy: func(model.ObjectError) bool { return true }},
		{name: "missing TLS secret warns", ing: missingTLS, warnedBy: func(model.ObjectError) bool { return true }},
		{name: "default-backend Service not there yet warns", ing: ingress("ns2", "later", 5, map[string]string{ann + "default-backend": "later"}, "b.example/"),
			warnedBy: func(model.ObjectError) bool { return true }},
		{name: "default-backend not a Service name", ing: ingress("ns2", "badname", 5, map[string]string{ann + "default-backend": "Not_A_Name"}, "b.example/"),
			deniedBy: []func(builder.Input, *networkingv1.Ingress) []string{func(in builder.Input, c *networkingv1.Ingress) []string {
				return builderErrors(in, c, "ns2", "badname", all)
			}}},
		{name: "auth Secret missing fails closed", ing: ingress("ns2", "auth", 5, map[string]string{ann + "auth-type": "basic", ann + "auth-secret": "nope"}, "b.example/"),
			deniedBy: []func(builder.Input, *networkingv1.Ingress) []string{func(in builder.Input, c *networkingv1.Ingress) []string {
				return builderErrors(in, c, "ns2", "auth", all)
			}}},
		{name: "path no data plane may get", ing: ingress("ns2", "path", 5, nil, "b.example/a;b"),
			deniedBy: []func(builder.Input, *networkingv1.Ingress) []string{func(in builder.Input, c *networkingv1.Ingress) []string {
				return builderErrors(in, c, "ns2", "path", all)
			}}},
		{name: "host not a DNS name", ing: ingress("ns2", "host", 5, nil, "B_.example/"),
			deniedBy: []func(builder.Input, *networkingv1.Ingress) []string{func(in builder.Input, c *networkingv1.Ingress) []string {
				return builderErrors(in, c, "ns2", "host", all)
			}}},
		{name: "canary without primary warns", ing: ingress("ns2", "lonely", 5, map[string]string{ann + "canary": "true", ann + "canary-weight": "10"}, "nobody.example/"),
			warnedBy: func(model.ObjectError) bool { return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput()
			reg := prometheus.NewRegistry()
			h, err := NewHandler(Config{Store: &store{in: in}, Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			op := tc.op
			if op == "" {
				op = admissionv1.Create
			}
			resp := post(t, h, reviewBody(t, op, tc.ing, tc.ing.Namespace))
			var want []string
			for _, f := range tc.deniedBy {
				want = append(want, f(in, tc.ing)...)
			}
			if len(tc.deniedBy) > 0 && len(want) == 0 {
				t.Fatal("BUG: the builder reports nothing the row expects to deny")
			}
			if len(want) == 0 {
				if !resp.Allowed {
					t.Fatalf("denied: %+v; want allowed", resp.Result)
				}
			} else {
				if resp.Allowed || resp.Result == nil {
					t.Fatalf("allowed; want denied with %q", want)
				}
				wantMsg := "Switchyard would not serve this Ingress as written: " + strings.Join(want, "; ")
				if diff := cmp.Diff(wantMsg, resp.Result.Message); diff != "" {
					t.Errorf("message (-want +got):\n%s", diff)
				}
				if resp.Result.Code != http.StatusBadRequest {
					t.Errorf("code %d; want 400", resp.Result.Code)
				}
			}
			var wantWarn []string
			if tc.warnedBy != nil {
				wantWarn = builderErrors(in, tc.ing, tc.ing.Namespace, tc.ing.Name, tc.warnedBy)
				if len(wantWarn) == 0 {
					t.Fatal("BUG: the builder reports nothing the row expects as warnings")
				}
			}
			if diff := cmp.Diff(wantWarn, resp.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			// ingress-nginx counts checks of its own class only.
			ours := tc.ing != otherClass
			okCount := testutil.ToFloat64(h.m.checks.WithLabelValues(tc.ing.Namespace, tc.ing.Name))
			errCount := testutil.ToFloat64(h.m.checkErrors.WithLabelValues(tc.ing.Namespace, tc.ing.Name))
			wantOK, wantErr := 0.0, 0.0
			if ours && resp.Allowed {
				wantOK = 1
			} else if ours {
				wantErr = 1
			}
			if okCount != wantOK || errCount != wantErr {
				t.Errorf("check_success %v, check_errors %v; want %v, %v", okCount, errCount, wantOK, wantErr)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The webhook reviews the Ingress against the store with the candidate
// replacing the stored one: an UPDATE that moves owner's path away frees it.
func TestHandlerUpdateReplacesStoredIngress(t *testing.T) {
	in := baseInput()
	in.Ingresses = append(in.Ingresses, ingress("ns2", "second", 5, nil, "a.example/"))
	h, err := NewHandler(Config{Store: &store{in: in}})
	if err != nil {
		t.Fatal(err)
	}
	// ns2/second is refused today (owner is older); the UPDATE of owner
	// moving to b.example makes a.example/ second's, with nothing lost.
	moved := ingress("ns1", "owner", 0, nil, "b.example/")
	if resp := post(t, h, reviewBody(t, admissionv1.Update, moved, "ns1")); !resp.Allowed {
		t.Errorf("moving owner away denied: %+v", resp.Result)
	}
	// Re-submitting second as is stays denied: owner still serves a.example/.
	if resp := post(t, h, reviewBody(t, admissionv1.Update, in.Ingresses[1], "ns2")); resp.Allowed {
		t.Error("second admitted while owner serves its host and path")
	}
}

func TestHandlerMalformed(t *testing.T) {
	h, err := NewHandler(Config{Store: &store{in: baseInput()}, MaxBodyBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	good := reviewBody(t, admissionv1.Create, ingress("ns2", "x", 5, nil, "b.example/"), "ns2")
	v1beta1 := bytes.Replace(good, []byte(`"admission.k8s.io/v1"`), []byte(`"admission.k8s.io/v1beta1"`), 1)
	noRequest := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`)
	for _, tc := range []struct {
		name   string
		method string
		body   []byte
		want   int
	}{
		{"not JSON", http.MethodPost, []byte("{"), http.StatusBadRequest},
		{"empty", http.MethodPost, nil, http.StatusBadRequest},
		{"v1beta1", http.MethodPost, v1beta1, http.StatusBadRequest},
		{"no request", http.MethodPost, noRequest, http.StatusBadRequest},
		{"wrong types", http.MethodPost, []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`), http.StatusBadRequest},
		{"too large", http.MethodPost, append(bytes.Repeat([]byte(" "), 5000), good...), http.StatusRequestEntityTooLarge},
		{"GET", http.MethodGet, nil, http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, Path, bytes.NewReader(tc.body)))
			if rec.Code != tc.want {
				t.Errorf("status %d (%s); want %d", rec.Code, strings.TrimSpace(rec.Body.String()), tc.want)
			}
		})
	}
	// An Ingress that does not decode is denied, not a 400: the review
	// itself was well formed.
	bad := bytes.Replace(good, []byte(`"spec":{`), []byte(`"spec":{"rules":7,`), 1)
	if resp := post(t, h, bad); resp.Allowed || resp.Result == nil || !strings.HasPrefix(resp.Result.Message, "decode the Ingress: ") {
		t.Errorf("undecodable Ingress: allowed=%v result=%+v; want denied by the decoder", resp.Allowed, resp.Result)
	}
	// A review of anything but an Ingress is refused.
	var other admissionv1.AdmissionReview
	if err := json.Unmarshal(good, &other); err != nil {
		t.Fatal(err)
	}
	other.Request.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "Service"}
	b, _ := json.Marshal(other)
	if resp := post(t, h, b); resp.Allowed {
		t.Error("a Service review was allowed")
	}
}

// The metrics carry ingress-nginx's names; admission_config_size is not
// exported (nothing is rendered).
func TestMetricNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := NewHandler(Config{Store: &store{in: baseInput()}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	post(t, h, reviewBody(t, admissionv1.Create, ingress("ns2", "x", 5, nil, "a.example/"), "ns2"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				got[mf.GetName()] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				got[mf.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	for _, name := range []string{"admission_roundtrip_duration", "admission_render_duration", "admission_tested_duration"} {
		if v, ok := got["nginx_ingress_controller_"+name]; !ok || v <= 0 {
			t.Errorf("%s = %v (present %v); want a positive duration", name, v, ok)
		}
	}
	// ns2/x shares a.example/ with ns1/owner: two built, two in the store.
	for name, want := range map[string]float64{"admission_tested_ingresses": 2, "admission_render_ingresses": 2, "check_errors": 1} {
		if v := got["nginx_ingress_controller_"+name]; v != want {
			t.Errorf("%s = %v; want %v", name, v, want)
		}
	}
	if _, ok := got["nginx_ingress_controller_admission_config_size"]; ok {
		t.Error("admission_config_size exported, but nothing is rendered")
	}
}

func TestNewHandlerNeedsStore(t *testing.T) {
	if _, err := NewHandler(Config{}); err == nil {
		t.Error("NewHandler without a Store succeeded")
	}
}

// A DELETE carries no new object, and an Ingress being deleted will not be
// served: both are admitted, even with a snippet.
func TestHandlerDeleteAndDeleting(t *testing.T) {
	h, err := NewHandler(Config{Store: &store{in: baseInput()}})
	if err != nil {
		t.Fatal(err)
	}
	bad := ingress("ns2", "bad", 5, map[string]string{ann + "configuration-snippet": "x"}, "b.example/")
	if resp := post(t, h, reviewBody(t, admissionv1.Create, bad, "ns2")); resp.Allowed {
		t.Fatal("BUG: the snippet Ingress is admitted on CREATE")
	}
	var del admissionv1.AdmissionReview
	if err := json.Unmarshal(reviewBody(t, admissionv1.Delete, bad, "ns2"), &del); err != nil {
		t.Fatal(err)
	}
	del.Request.Object, del.Request.OldObject = runtime.RawExtension{}, runtime.RawExtension{Raw: del.Request.Object.Raw}
	b, err := json.Marshal(del)
	if err != nil {
		t.Fatal(err)
	}
	if resp := post(t, h, b); !resp.Allowed {
		t.Errorf("DELETE denied: %+v", resp.Result)
	}
	deleting := bad.DeepCopy()
	deleting.DeletionTimestamp = ptr(metav1.NewTime(base))
	if resp := post(t, h, reviewBody(t, admissionv1.Update, deleting, "ns2")); !resp.Allowed {
		t.Errorf("UPDATE of an Ingress being deleted denied: %+v", resp.Result)
	}
}

// Reviews served concurrently over TLS, as the API server sends them,
// each get their own verdict.
func TestHandlerConcurrentTLS(t *testing.T) {
	h, err := NewHandler(Config{Store: &store{in: baseInput()}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	good := reviewBody(t, admissionv1.Create, ingress("ns2", "good", 5, nil, "b.example/"), "ns2")
	bad := reviewBody(t, admissionv1.Create, ingress("ns2", "bad", 5, nil, "a.example/"), "ns2")
	errs := make(chan error, 8)
	for w := range 8 {
		go func() {
			for range 20 {
				body, want := good, true
				if w%2 == 1 {
					body, want = bad, false
				}
				resp, err := srv.Client().Post(srv.URL+Path, "application/json", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				var out admissionv1.AdmissionReview
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if err != nil || out.Response == nil || out.Response.Allowed != want {
					errs <- fmt.Errorf("worker %d: %v, response %+v; want allowed %v", w, err, out.Response, want)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := testutil.ToFloat64(h.m.checkErrors.WithLabelValues("ns2", "bad")); got != 80 {
		t.Errorf("check_errors{ns2/bad} = %v; want 80", got)
	}
}
