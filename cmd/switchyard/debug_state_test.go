package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// runCLI runs the switchyard command line as main does.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestDebugBackendsAndConfig runs a real controller on the quickstart
// manifests, sends traffic through its Go data plane, and checks that
// `switchyard debug backends|config` print what the controller serves.
func TestDebugBackendsAndConfig(t *testing.T) {
	ctx, l, p1, p2 := startQuickstartController(t)

	// Four requests round robin over both echo endpoints: two picks each.
	for range 4 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.HTTP+"/", nil)
		req.Host = "echo.localhost"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ep1, ep2 := "127.0.0.1:"+strconv.Itoa(p1), "127.0.0.1:"+strconv.Itoa(p2)

	// debug backends: every balancer, as the status port serves it.
	code, out, errOut := runCLI("debug", "backends", "--status-address", l.Status)
	if code != 0 {
		t.Fatalf("debug backends: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "\n  {\n    \"name\": ") {
		t.Errorf("debug backends output is not indented:\n%s", out)
	}
	var backends []balancer.BackendStatus
	if err := json.Unmarshal([]byte(out), &backends); err != nil {
		t.Fatalf("debug backends printed no JSON array: %v\n%s", err, out)
	}
	byName := map[string]balancer.BackendStatus{}
	for _, b := range backends {
		byName[b.Name] = b
	}
	echo, ok := byName["demo-echo-http"]
	if !ok {
		t.Fatalf("debug backends lacks demo-echo-http: %v", slices.Sorted(maps.Keys(byName)))
	}
	if echo.Algorithm != "round_robin" {
		t.Errorf("demo-echo-http algorithm = %q, want round_robin", echo.Algorithm)
	}
	gotEP := map[string]uint64{}
	for _, e := range echo.Endpoints {
		gotEP[e.Address] = e.Requests
	}
	if diff := cmp.Diff(map[string]uint64{ep1: 2, ep2: 2}, gotEP); diff != "" {
		t.Errorf("demo-echo-http endpoints and their requests (-want +got):\n%s", diff)
	}
	if len(echo.Alternatives) != 1 || byName[echo.Alternatives[0]].Name == "" {
		t.Errorf("demo-echo-http alternatives = %v; want the canary backend, listed too", echo.Alternatives)
	} else if canary := byName[echo.Alternatives[0]]; len(canary.Endpoints) != 1 || canary.Endpoints[0].Address != ep2 {
		t.Errorf("canary %s endpoints = %+v, want only %s", canary.Name, canary.Endpoints, ep2)
	}
	if sticky := byName["demo-echo-80"]; sticky.Algorithm != "sticky_balanced" || len(sticky.Endpoints) != 2 {
		t.Errorf("demo-echo-80 = %+v; want sticky_balanced over two endpoints", sticky)
	}

	// --name prints that backend alone, the same as in the list.
	code, out, errOut = runCLI("debug", "backends", "--status-address", l.Status, "--name", "demo-echo-80")
	if code != 0 {
		t.Fatalf("debug backends --name: exit %d: %s", code, errOut)
	}
	var one balancer.BackendStatus
	if err := json.Unmarshal([]byte(out), &one); err != nil {
		t.Fatalf("debug backends --name printed no JSON object: %v\n%s", err, out)
	}
	if diff := cmp.Diff(byName["demo-echo-80"], one); diff != "" {
		t.Errorf("debug backends --name demo-echo-80 differs from the list (-list +one):\n%s", diff)
	}
	code, out, errOut = runCLI("debug", "backends", "--status-address", l.Status, "--names")
	if want := strings.Join(slices.Sorted(maps.Keys(byName)), "\n") + "\n"; code != 0 || out != want {
		t.Errorf("debug backends --names: exit %d, stdout %q, stderr %q; want stdout %q", code, out, errOut, want)
	}
	code, out, errOut = runCLI("debug", "backends", "--status-address", l.Status, "--name", "no-such-backend")
	if code != 1 || out != "" || !strings.Contains(errOut, `404 Not Found: no backend named "no-such-backend"`) {
		t.Errorf("unknown backend: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// debug config: the Configuration the data plane serves.
	code, out, errOut = runCLI("debug", "config", "--status-address", l.Status)
	if code != 0 {
		t.Fatalf("debug config: exit %d: %s", code, errOut)
	}
	var cfg model.Configuration
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("debug config printed no Configuration: %v\n%s", err, out)
	}
	if cfg.Version == 0 {
		t.Error("debug config: version 0")
	}
	routes := map[string]string{}
	for _, s := range cfg.Servers {
		for _, loc := range s.Locations {
			routes[s.Hostname+loc.Path] = loc.Backend
			if _, ok := byName[loc.Backend]; !ok {
				t.Errorf("debug config: %s%s routes to %q, which debug backends does not list", s.Hostname, loc.Path, loc.Backend)
			}
		}
	}
	for route, want := range map[string]string{"echo.localhost/": "demo-echo-http", "sticky.localhost/": "demo-echo-80", "_/": model.DefaultBackendName} {
		if got, ok := routes[route]; !ok || got != want {
			t.Errorf("debug config: route %s -> %q (present %v), want %q", route, got, ok, want)
		}
	}
	var cfgNames []string
	for _, b := range cfg.Backends {
		cfgNames = append(cfgNames, b.Name)
		if b.Name == "demo-echo-http" {
			var addrs []string
			for _, e := range b.Endpoints {
				addrs = append(addrs, e.HostPort())
			}
			slices.Sort(addrs)
			want := []string{ep1, ep2}
			slices.Sort(want)
			if diff := cmp.Diff(want, addrs); diff != "" {
				t.Errorf("debug config: demo-echo-http endpoints (-want +got):\n%s", diff)
			}
		}
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(byName)), cfgNames); diff != "" {
		t.Errorf("debug config backends differ from debug backends (-balancer +config):\n%s", diff)
	}

	// A status port that is not a controller's: the echo backend answers
	// text.
	code, _, errOut = runCLI("debug", "config", "--status-address", ep1)
	if code != 1 || !strings.Contains(errOut, "is not JSON") {
		t.Errorf("debug config against a non-controller: exit %d, stderr %q", code, errOut)
	}
}

// TestDebugCommandErrors checks the exit codes and messages of the debug
// subcommands when nothing is listening or the flags are wrong.
func TestDebugCommandErrors(t *testing.T) {
	closed := "127.0.0.1:" + strconv.Itoa(freePort(t))
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"backends unreachable", []string{"debug", "backends", "--status-address", closed}, 1, "cannot reach a controller's status port at " + closed},
		{"config unreachable", []string{"debug", "config", "--status-address", closed}, 1, "cannot reach a controller's status port at " + closed},
		{"unknown flag", []string{"debug", "backends", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"config unknown flag", []string{"debug", "config", "--name", "x"}, 2, "flag provided but not defined: -name"},
		{"no port", []string{"debug", "config", "--status-address", "127.0.0.1"}, 2, "-status-address: \"127.0.0.1\" is not HOST:PORT"},
		{"bad port", []string{"debug", "backends", "--status-address", "127.0.0.1:99999"}, 2, "port \"99999\" is not 1-65535"},
		{"no host", []string{"debug", "backends", "--status-address", ":10254"}, 2, "has no host"},
		{"empty name", []string{"debug", "backends", "--status-address", closed, "--name="}, 2, "-name: empty backend name"},
		{"name and names", []string{"debug", "backends", "--status-address", closed, "--name", "a", "--names"}, 2, "-name and -names exclude each other"},
		{"extra argument", []string{"debug", "backends", "list"}, 2, `unexpected argument "list"`},
		{"unknown subcommand", []string{"debug", "conf"}, 2, `unknown subcommand "conf"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(tt.args...)
			if code != tt.wantCode || out != "" || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and stderr containing %q", code, out, errOut, tt.wantCode, tt.wantErr)
			}
		})
	}
}

// configValue is a configSource the test swaps, as a controller does.
type configValue struct {
	cfg atomic.Pointer[model.Configuration]
}

func (c *configValue) Current() *model.Configuration { return c.cfg.Load() }

// backendsValue is a backendLister holding fixed balancer state.
type backendsValue []balancer.BackendStatus

func (b backendsValue) Backends() []balancer.BackendStatus { return b }

// TestDebugHandlers checks the handlers' answers that a healthy quickstart
// controller never gives: before the first sync, certificates, methods.
func TestDebugHandlers(t *testing.T) {
	const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\nsecret\n-----END PRIVATE KEY-----\n"
	withCert := &model.Configuration{Version: 7, Certificates: map[string]model.Certificate{
		"uid-1": {UID: "uid-1", Secret: model.ObjectRef{Kind: "Secret", Namespace: "demo", Name: "tls"}, PEM: pem, Hosts: []string{"a.example"}},
	}}
	src := &configValue{}
	mux := http.NewServeMux()
	registerDebugHandlers(mux, src, backendsValue{{Name: "b", Algorithm: "ewma"}})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	// Before the first sync.
	code, _, errOut := runCLI("debug", "config", "--status-address", addr)
	if code != 1 || !strings.Contains(errOut, "503 Service Unavailable: no configuration yet") {
		t.Errorf("before the first sync: exit %d, stderr %q", code, errOut)
	}

	// Certificates are shown without their key; the served snapshot keeps it.
	src.cfg.Store(withCert)
	code, out, errOut := runCLI("debug", "config", "--status-address", addr)
	if code != 0 {
		t.Fatalf("debug config: exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, "MIIB") || !strings.Contains(out, `"pem": "<redacted: `) {
		t.Errorf("debug config shows key material:\n%s", out)
	}
	var got model.Configuration
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := *withCert
	want.Certificates = map[string]model.Certificate{"uid-1": withCert.Certificates["uid-1"]}
	c := want.Certificates["uid-1"]
	c.PEM = fmt.Sprintf("<redacted: %d bytes>", len(pem))
	want.Certificates["uid-1"] = c
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("debug config (-want +got):\n%s", diff)
	}
	if withCert.Certificates["uid-1"].PEM != pem {
		t.Error("redaction modified the served Configuration")
	}

	// Only GET and HEAD.
	resp, err := http.Post(srv.URL+debugBackendsPath, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST %s: %d, Allow %q", debugBackendsPath, resp.StatusCode, resp.Header.Get("Allow"))
	}

	// A status port without the debug paths (an older controller).
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	code, _, errOut = runCLI("debug", "backends", "--status-address", strings.TrimPrefix(plain.URL, "http://"))
	if code != 1 || !strings.Contains(errOut, "has no /debug/backends") {
		t.Errorf("status port without /debug: exit %d, stderr %q", code, errOut)
	}
}
