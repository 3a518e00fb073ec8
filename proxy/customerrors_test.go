package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// errorPages is a real default backend in the manner of ingress-nginx's
// custom-error-pages: it answers with the status in X-Code and tells what
// it was asked.
func errorPages(t *testing.T, name string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.Header.Get("X-Code"))
		if code == 0 {
			code = 404
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "%s %s %s host=%s code=%s format=%s uri=%s ns=%s ing=%s svc=%s port=%s rid=%s",
			name, r.Method, r.URL.Path, r.Host, r.Header.Get("X-Code"), r.Header.Get("X-Format"), r.Header.Get("X-Original-URI"),
			r.Header.Get("X-Namespace"), r.Header.Get("X-Ingress-Name"), r.Header.Get("X-Service-Name"), r.Header.Get("X-Service-Port"),
			r.Header.Get("X-Request-ID"))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// statusBackend answers /status/<code> with that code.
func statusBackend(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
		if err != nil {
			code = 200
		}
		w.Header().Set("X-From", "app")
		w.WriteHeader(code)
		fmt.Fprintf(w, "app %d", code)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestCustomHTTPErrors: custom-http-errors replaces an upstream answer
// with one of the listed codes by the default backend's (or the
// default-backend annotation's) answer for it, asked with ingress-nginx's
// X-Code, X-Format, X-Original-URI, X-Namespace, X-Ingress-Name,
// X-Service-Name, X-Service-Port and X-Request-ID; other codes pass. Both
// front ends behave alike. Without a default backend service the built-in
// default server answers.
func TestCustomHTTPErrors(t *testing.T) {
	app, def, custom := statusBackend(t), errorPages(t, "default"), errorPages(t, "custom")
	intercepting := loc("/", model.PathTypePrefix, "app")
	intercepting.CustomHTTPErrors = []int{404, 503}
	intercepting.Ingress = model.ObjectRef{Kind: "Ingress", Namespace: "prod", Name: "shop"}
	intercepting.Service, intercepting.ServicePort = "web", "80"
	annotated := intercepting.Clone()
	annotated.CustomDefaultBackend = "custom-default-backend-prod-errors"
	rewritten := intercepting.Clone()
	rewritten.Path, rewritten.Regex, rewritten.PathType, rewritten.Rewrite.Target = "/rw(/|$)(.*)", true, model.PathTypeImplementationSpecific, "/status/$2"
	rewritten.SetPathRegexp()
	servers := []model.Server{
		{Hostname: "errors.test", Locations: []model.Location{intercepting, rewritten}},
		{Hostname: "annotated.test", Locations: []model.Location{annotated}},
	}
	cfg := &model.Configuration{
		Backends: []*model.Backend{
			{Name: "app", Endpoints: endpoints(app)},
			{Name: model.DefaultBackendName, Endpoints: endpoints(def)},
			{Name: "custom-default-backend-prod-errors", Endpoints: endpoints(custom)},
		},
		Servers: servers,
	}
	builtin := &model.Configuration{
		Backends: []*model.Backend{
			{Name: "app", Endpoints: endpoints(app)},
			{Name: model.DefaultBackendName, Endpoints: endpoints(builtinDefaultPeer)},
		},
		Servers: servers,
	}
	p, _ := newProxy(t, cfg, Config{})
	h1, h2 := "http://"+serve(t, p.Serve), "https://"+serve(t, p.ServeTLS)
	pb, _ := newProxy(t, builtin, Config{})
	h1builtin := "http://" + serve(t, pb.Serve)
	hdr := map[string]string{"Accept": "application/json", "X-Request-ID": "rid-9"}
	const asked = " host=%s code=%s format=application/json uri=%s ns=prod ing=shop svc=web port=80 rid=rid-9"
	for _, tc := range []struct {
		name, host, path string
		status           int
		body             string
	}{
		{"404 replaced", "errors.test", "/status/404", 404, "default GET /" + fmt.Sprintf(asked, "errors.test", "404", "/status/404")},
		{"503 replaced", "errors.test", "/status/503?x=1", 503, "default GET /" + fmt.Sprintf(asked, "errors.test", "503", "/status/503?x=1")},
		{"500 not listed", "errors.test", "/status/500", 500, "app 500"},
		{"200 passes", "errors.test", "/status/200", 200, "app 200"},
		{"original URI before rewrite", "errors.test", "/rw/404", 404, "default GET /" + fmt.Sprintf(asked, "errors.test", "404", "/rw/404")},
		{"default-backend annotation", "annotated.test", "/status/404", 404, "custom GET /" + fmt.Sprintf(asked, "annotated.test", "404", "/status/404")},
	} {
		for _, front := range []struct {
			name string
			do   func() (*http.Response, string)
		}{
			{"http1", func() (*http.Response, string) { return get(t, h1+tc.path, tc.host, hdr) }},
			{"h2", func() (*http.Response, string) { return h2Do(t, h2Client(t), "GET", h2+tc.path, tc.host, nil, hdr) }},
		} {
			t.Run(tc.name+"/"+front.name, func(t *testing.T) {
				resp, body := front.do()
				if resp.StatusCode != tc.status || body != tc.body {
					t.Errorf("got %d %q; want %d %q", resp.StatusCode, body, tc.status, tc.body)
				}
			})
		}
	}
	t.Run("built-in default server", func(t *testing.T) {
		resp, body := get(t, h1builtin+"/status/404", "errors.test", hdr)
		if resp.StatusCode != 404 || body != "default backend - 404" {
			t.Errorf("got %d %q; want 404 %q", resp.StatusCode, body, "default backend - 404")
		}
	})
}
