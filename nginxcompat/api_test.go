package nginxcompat

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/balancer"
)

const backendsBody = `[{"name":"default-echo-80","port":80,"endpoints":[{"address":"10.0.0.1","port":"8080"}],"sessionAffinityConfig":{"name":"","mode":"","cookieSessionAffinity":{"name":""}},"upstreamHashByConfig":{},"noServer":false,"trafficShapingPolicy":{"weight":0,"weightTotal":0,"header":"","headerValue":"","headerPattern":"","cookie":""}}]`

func do(t *testing.T, h http.Handler, method, uri, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, uri, rd)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// The status codes and bodies of spec §1.1, in order, on one API.
func TestConfigurationAPI(t *testing.T) {
	reg := balancer.NewRegistry(balancer.Config{})
	api, err := NewConfigurationAPI(APIConfig{Backends: reg, MaxBodyBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		method, uri, body string
		status            int
		resp              string
	}{
		{"GET", "/healthz", "", 200, ""},
		{"GET", "/is-dynamic-lb-initialized", "", 500, "no backends have been stored yet"},
		{"POST", "/configuration/backends", "", 400, "empty body"},
		{"POST", "/configuration/backends", "{not json", 400, "decode backends"},
		{"POST", "/configuration/backends", "null", 400, "got null"},
		{"POST", "/configuration/backends", `[{"name":"x","endpoints":[{"address":"10.0.0.1","port":"99999"}]}]`, 400, `backend 0: backend "x"`},
		{"GET", "/is-dynamic-lb-initialized", "", 500, "no backends"},
		{"POST", "/configuration/backends", backendsBody, 201, ""},
		{"GET", "/configuration/backends", "", 200, backendsBody},
		{"GET", "/configuration/backends?x=1", "", 404, "Not found!"},
		{"GET", "/is-dynamic-lb-initialized", "", 200, "OK\n"},
		{"POST", "/configuration/backends", strings.Repeat(" ", 5000), 413, "limit"},
		{"PUT", "/configuration/backends", backendsBody, 400, "Only POST and GET requests are allowed!"},
		{"GET", "/configuration/servers", "", 400, "Only POST requests are allowed!"},
		{"POST", "/configuration/servers", "nope", 400, "decode servers"},
		{"POST", "/configuration/servers", `{"servers":{"a.example.com":"uid1","b.example.com":"-1"},"certificates":{"uid1":"PEM1"}}`, 201, ""},
		{"GET", "/configuration/certs?hostname=a.example.com", "", 200, "PEM1"},
		{"GET", "/configuration/certs?hostname=x.a.example.com", "", 404, "No key associated with this hostname."},
		{"GET", "/configuration/certs", "", 400, "Hostname must be specified."},
		{"POST", "/configuration/certs?hostname=a", "x", 400, "Only GET requests are allowed!"},
		{"POST", "/configuration/servers", `{"servers":{"a.example.com":"-1"},"certificates":{}}`, 201, ""},
		{"GET", "/configuration/certs?hostname=a.example.com", "", 404, "No key associated with this hostname."},
		{"POST", "/configuration/general", `{"x":1}`, 201, ""},
		{"GET", "/configuration/general", "", 200, `{"x":1}`},
		{"GET", "/configuration/unknown", "", 404, "Not found!"},
		{"GET", "/elsewhere", "", 404, "Not found!"},
	}
	for i, s := range steps {
		status, body := do(t, api, s.method, s.uri, s.body)
		if status != s.status || !strings.Contains(body, s.resp) {
			t.Errorf("step %d %s %s: %d %q; want %d containing %q", i, s.method, s.uri, status, body, s.status, s.resp)
		}
	}
	// The accepted payload reached the balancer; the rejected ones did not.
	var a balancer.Attempt
	if p, err := reg.Pick("default-echo-80", balancer.VarsFunc(func(string) ([]byte, bool) { return nil, false }), &a); err != nil || p.Peer != "10.0.0.1:8080" {
		t.Errorf("pick after POST = %q, %v", p.Peer, err)
	}
	if _, err := reg.Pick("x", balancer.VarsFunc(func(string) ([]byte, bool) { return nil, false }), &balancer.Attempt{}); err == nil {
		t.Error("a rejected payload changed the balancer")
	}
}

// Issue 20: every /configuration body is checked before it is stored.
// null and bodies of the wrong JSON type are refused with 400 on each path
// that takes a body; [] is a valid backends payload, as in ingress-nginx.
func TestConfigurationBodyTypes(t *testing.T) {
	rows := []struct {
		name, uri, body string
		status          int
	}{
		{"backends null", "/configuration/backends", "null", 400},
		{"backends null with spaces", "/configuration/backends", " null\n", 400},
		{"backends object", "/configuration/backends", `{"name":"x"}`, 400},
		{"backends string", "/configuration/backends", `"[]"`, 400},
		{"backends number", "/configuration/backends", "1", 400},
		{"backends true", "/configuration/backends", "true", 400},
		{"backends array of null", "/configuration/backends", "[null]", 400},
		{"backends array of numbers", "/configuration/backends", "[1]", 400},
		{"backends empty array", "/configuration/backends", "[]", 201},
		{"servers null", "/configuration/servers", "null", 400},
		{"servers array", "/configuration/servers", "[]", 400},
		{"servers string", "/configuration/servers", `"x"`, 400},
		{"servers empty object", "/configuration/servers", "{}", 400},
		{"servers null maps", "/configuration/servers", `{"servers":null,"certificates":null}`, 400},
		{"servers ok", "/configuration/servers", `{"servers":{},"certificates":{}}`, 201},
		{"general null", "/configuration/general", "null", 400},
		{"general array", "/configuration/general", "[]", 400},
		{"general string", "/configuration/general", `"x"`, 400},
		{"general not json", "/configuration/general", `{x`, 400},
		{"general object", "/configuration/general", `{}`, 201},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			reg := balancer.NewRegistry(balancer.Config{})
			api, err := NewConfigurationAPI(APIConfig{Backends: reg})
			if err != nil {
				t.Fatal(err)
			}
			if status, body := do(t, api, "POST", "/configuration/backends", backendsBody); status != 201 {
				t.Fatalf("seed: %d %q", status, body)
			}
			status, body := do(t, api, "POST", r.uri, r.body)
			if status != r.status {
				t.Fatalf("POST %s %q: got %d %q; want %d", r.uri, r.body, status, body, r.status)
			}
			_, stored := do(t, api, "GET", "/configuration/backends", "")
			want := backendsBody
			if r.uri == "/configuration/backends" && status == 201 {
				want = r.body
			}
			if stored != want {
				t.Errorf("stored backends after POST %s %q: got %.80q; want %.80q", r.uri, r.body, stored, want)
			}
		})
	}
}

// FuzzConfigurationBackends: no body panics the API, and a rejected body
// leaves the stored payload unchanged.
func FuzzConfigurationBackends(f *testing.F) {
	f.Add([]byte(backendsBody))
	f.Add([]byte(`[{"name":"a","endpoints":[{"address":"fd00::1","port":1}]}]`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		reg := balancer.NewRegistry(balancer.Config{Resolve: func(context.Context, string) ([]string, error) {
			return nil, errors.New("no DNS in tests")
		}})
		api, _ := NewConfigurationAPI(APIConfig{Backends: reg})
		if status, _ := do(t, api, "POST", "/configuration/backends", backendsBody); status != 201 {
			t.Fatal("seed payload rejected")
		}
		status, _ := do(t, api, "POST", "/configuration/backends", string(body))
		_, stored := do(t, api, "GET", "/configuration/backends", "")
		switch status {
		case 201:
			if stored != string(body) {
				t.Fatal("accepted body not stored verbatim")
			}
		default:
			if stored != backendsBody {
				t.Fatalf("rejected body (status %d) changed the stored payload", status)
			}
		}
	})
}
