package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const debugBackends = `[
 {"name":"default-echo-80","port":80,"endpoints":[{"address":"10.0.0.1","port":"8080"},{"address":"10.0.0.2","port":"8080"},{"address":"10.0.0.3","port":"8080"}],
  "sessionAffinityConfig":{"name":"","mode":"","cookieSessionAffinity":{"name":""}},"upstreamHashByConfig":{"upstream-hash-by":"$request_uri"},
  "noServer":false,"alternativeBackends":["default-echo-canary-80"],
  "trafficShapingPolicy":{"weight":0,"weightTotal":0,"header":"","headerValue":"","headerPattern":"","cookie":""}},
 {"name":"default-echo-canary-80","port":80,"endpoints":[{"address":"10.0.1.1","port":"8080"}],
  "sessionAffinityConfig":{"name":"","mode":"","cookieSessionAffinity":{"name":""}},"upstreamHashByConfig":{"upstream-hash-by-subset-size":3},
  "noServer":true,"trafficShapingPolicy":{"weight":0,"weightTotal":100,"header":"X-Canary","headerValue":"","headerPattern":"","cookie":"canary"}},
 {"name":"default-sticky-80","port":80,"endpoints":[{"address":"10.0.0.3","port":"8080"}],
  "sessionAffinityConfig":{"name":"cookie","mode":"persistent","cookieSessionAffinity":{"name":"INGRESSCOOKIE","expires":"172800","maxage":"172800","samesite":"None","locations":{"echo.example.com":["/"]}}},
  "upstreamHashByConfig":{"upstream-hash-by-subset-size":3},"noServer":false,
  "trafficShapingPolicy":{"weight":0,"weightTotal":0,"header":"","headerValue":"","headerPattern":"","cookie":""}},
 {"name":"default-ewma-80","port":80,"load-balance":"ewma","endpoints":[{"address":"10.0.0.1","port":"8080"},{"address":"10.0.0.2","port":"8080"}],
  "sessionAffinityConfig":{"name":"","mode":"","cookieSessionAffinity":{"name":""}},"upstreamHashByConfig":{},
  "noServer":false,"trafficShapingPolicy":{"weight":0,"weightTotal":0,"header":"","headerValue":"","headerPattern":"","cookie":""}},
 {"name":"default-empty-80","port":80,"sessionAffinityConfig":{"name":"","mode":"","cookieSessionAffinity":{"name":""}},"upstreamHashByConfig":{},
  "noServer":false,"trafficShapingPolicy":{"weight":0,"weightTotal":0,"header":"","headerValue":"","headerPattern":"","cookie":""}}
]`

func TestDebugPick(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "backends.json")
	if err := os.WriteFile(file, []byte(debugBackends), 0o600); err != nil {
		t.Fatal(err)
	}
	// The spec's sticky vector is for a backend named default-echo-80.
	stickyFile := filepath.Join(dir, "sticky.json")
	var all []json.RawMessage
	if err := json.Unmarshal([]byte(debugBackends), &all); err != nil {
		t.Fatal(err)
	}
	sticky := "[" + strings.ReplaceAll(string(all[2]), "default-sticky-80", "default-echo-80") + "]"
	if err := os.WriteFile(stickyFile, []byte(sticky), 0o600); err != nil {
		t.Fatal(err)
	}
	condFile := filepath.Join(dir, "cond.json")
	cond := strings.Replace(sticky, `"samesite":"None"`, `"samesite":"None","conditional_samesite_none":true`, 1)
	if err := os.WriteFile(condFile, []byte(cond), 0o600); err != nil {
		t.Fatal(err)
	}
	const fullCookie = "INGRESSCOOKIE=5d7bb003ea5eff5dd462c931c5761887|df61074cff0dc933beb37e1d8124ac6f; Expires=Thu, 16-Nov-23 22:13:20 GMT; Max-Age=172800; Path=/; Secure; HttpOnly; SameSite=None"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"chash /foo", []string{"--backend", "default-echo-80", "--var", "request_uri=/foo"}, `{"backend":"default-echo-80","peer":"10.0.0.3:8080","setCookie":"","ewmaScore":-1}`},
		{"chash /bar", []string{"--backend", "default-echo-80", "--var", "request_uri=/bar"}, `{"backend":"default-echo-80","peer":"10.0.0.2:8080","setCookie":"","ewmaScore":-1}`},
		{"chash /", []string{"--backend", "default-echo-80", "--var", "request_uri=/"}, `{"backend":"default-echo-80","peer":"10.0.0.1:8080","setCookie":"","ewmaScore":-1}`},
		{"canary by header", []string{"--backend", "default-echo-80", "--header", "x-canary: always"}, `{"backend":"default-echo-canary-80","peer":"10.0.1.1:8080","setCookie":"","ewmaScore":-1}`},
		{"canary by cookie", []string{"--backend", "default-echo-80", "--cookie", "Canary=always", "--var", "request_uri=/"}, `{"backend":"default-echo-canary-80","peer":"10.0.1.1:8080","setCookie":"","ewmaScore":-1}`},
		{"header never beats cookie", []string{"--backend", "default-echo-80", "--header", "X-Canary: never", "--cookie", "canary=always", "--var", "request_uri=/"}, `{"backend":"default-echo-80","peer":"10.0.0.1:8080","setCookie":"","ewmaScore":-1}`},
		{"sticky cookie vector", []string{"--backends", stickyFile, "--backend", "default-echo-80", "--host", "echo.example.com", "--https", "--now", "1700000000"}, `{"backend":"default-echo-80","peer":"10.0.0.3:8080","setCookie":"` + fullCookie + `","ewmaScore":-1}`},
		{"sticky cookie vector over plain http: no Secure", []string{"--backends", stickyFile, "--backend", "default-echo-80", "--host", "echo.example.com", "--now", "1700000000"},
			`{"backend":"default-echo-80","peer":"10.0.0.3:8080","setCookie":"` + strings.Replace(fullCookie, "; Secure", "", 1) + `","ewmaScore":-1}`},
		{"sticky existing cookie is honoured, no new cookie", []string{"--backends", stickyFile, "--backend", "default-echo-80", "--host", "echo.example.com", "--cookie", "INGRESSCOOKIE=5d7bb003ea5eff5dd462c931c5761887|df61074cff0dc933beb37e1d8124ac6f"},
			`{"backend":"default-echo-80","peer":"10.0.0.3:8080","setCookie":"","ewmaScore":-1}`},
		{"chash empty key", []string{"--backend", "default-echo-80", "--var", "request_uri="}, `{"backend":"default-echo-80","peer":"10.0.0.1:8080","setCookie":"","ewmaScore":-1}`},
		{"chash retry hits the same peer", []string{"--backend", "default-echo-80", "--var", "request_uri=/foo", "--tried", "10.0.0.3:8080", "--last-failure", "failed"}, `{"backend":"default-echo-80","peer":"10.0.0.3:8080","setCookie":"","ewmaScore":-1}`},
		{"sticky other host: no cookie", []string{"--backend", "default-sticky-80", "--host", "other.example.com", "--now", "1700000000"}, `{"backend":"default-sticky-80","peer":"10.0.0.3:8080","setCookie":"","ewmaScore":-1}`},
		{"sticky cookie vector with conditional SameSite=None and Chrome/51", []string{"--backends", condFile, "--backend", "default-echo-80", "--host", "echo.example.com", "--https", "--now", "1700000000",
			"--user-agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/51.0.2704.103 Safari/537.36"},
			`{"backend":"default-echo-80","peer":"10.0.0.3:8080","setCookie":"` + strings.TrimSuffix(fullCookie, "; SameSite=None") + `","ewmaScore":-1}`},
		{"ewma retry excludes tried", []string{"--backend", "default-ewma-80", "--tried", "10.0.0.1:8080", "--last-failure", "failed", "--seed", "1"}, `{"backend":"default-ewma-80","peer":"10.0.0.2:8080","setCookie":"","ewmaScore":0}`},
		{"unknown backend", []string{"--backend", "nope"}, `{"status":503}`},
		{"no endpoints", []string{"--backend", "default-empty-80"}, `{"status":503}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"debug", "pick", "--backends", file}, tt.args...), &out, &errb)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var got, want any
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
			_ = json.Unmarshal([]byte(tt.want), &want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("output mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDebugPickBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`[{"name":"x","port":true}]`), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--backend", "x"}, "required"},
		{[]string{"--backends", bad, "--backend", "x"}, `backend 0 ("x")`},
		{[]string{"--backends", filepath.Join(dir, "missing"), "--backend", "x"}, "no such file"},
		{[]string{"--backends", bad, "--backend", "x", "--header", "novalue"}, "Name: value"},
		{[]string{"--backends", bad, "--backend", "x", "--last-failure", "boom"}, "failed or next"},
		{[]string{"--bogus"}, "bogus"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"debug", "pick"}, tc.args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d; want 2", tc.args, code)
		}
		if !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: stderr %q; want it to mention %q", tc.args, errb.String(), tc.want)
		}
	}
}
