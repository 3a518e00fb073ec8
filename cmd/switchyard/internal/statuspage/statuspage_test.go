package statuspage

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestHistoryKeepsNewestFirst(t *testing.T) {
	h := &History{Size: 3}
	base := time.Unix(1700000000, 0)
	for i := range 5 {
		h.Record(Event{Time: base.Add(time.Duration(i) * time.Second), Kind: "sync", Reason: string(rune('a' + i))})
	}
	var got []string
	for _, e := range h.Events() {
		got = append(got, e.Reason)
	}
	if want := []string{"e", "d", "c"}; !cmp.Equal(got, want) {
		t.Errorf("events = %q; want %q", got, want)
	}
}

func TestStatusJSONComputesRates(t *testing.T) {
	now := time.Unix(1700000000, 0)
	picks := uint64(100)
	hist := &History{}
	hist.Record(Event{Time: now, Kind: "reload", Reason: "ingress demo/echo changed", Duration: 40 * time.Millisecond})
	h := New(Config{
		Now:     func() time.Time { return now },
		History: hist,
		Snapshot: func() Snapshot {
			return Snapshot{Version: 7, Ready: true, Backends: []Backend{{
				Name: "demo-echo-80", Algorithm: "round_robin",
				Endpoints: []Endpoint{{Address: "10.0.0.1:8080", Picks: picks, EWMA: -1}},
			}}}
		},
	})
	get := func() pageData {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status.json", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("status = %d; want 200", rec.Code)
		}
		var d pageData
		if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := get(); d.Backends[0].Endpoints[0].RatePerSecond != 0 {
		t.Errorf("first rate = %v; want 0 (no previous sample)", d.Backends[0].Endpoints[0].RatePerSecond)
	}
	now = now.Add(2 * time.Second)
	picks = 150
	d := get()
	if got := d.Backends[0].Endpoints[0].RatePerSecond; got != 25 {
		t.Errorf("rate = %v; want 25 (50 picks in 2 s)", got)
	}
	if len(d.Events) != 1 || d.Events[0].Kind != "reload" || d.Version != 7 {
		t.Errorf("page data = %+v; want version 7 and the reload event", d)
	}
}

func TestServeRejectsOtherMethodsAndPaths(t *testing.T) {
	h := New(Config{Snapshot: func() Snapshot { return Snapshot{} }})
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/", http.StatusOK},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
		{http.MethodGet, "/nope", http.StatusNotFound},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.want {
			t.Errorf("%s %s = %d; want %d", tc.method, tc.path, rec.Code, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if !strings.Contains(rec.Header().Get("Content-Type"), "text/html") {
		t.Errorf("content type = %q", rec.Header().Get("Content-Type"))
	}
}

func TestStatusJSONGroupsProblemsByObject(t *testing.T) {
	const (
		authURL = "nginx.ingress.kubernetes.io/auth-url"
		mirror  = "nginx.ingress.kubernetes.io/mirror-target"
		global  = "ConfigMap ingress-nginx/controller: global-auth-url"
	)
	for _, tc := range []struct {
		name string
		in   Snapshot
		want []ObjectProblems
	}{{
		name: "no problems",
		want: nil,
	}, {
		name: "split by effect",
		in: Snapshot{Errors: []ObjError{
			{Object: "Ingress a/x", Reason: ReasonUnsupported, Field: mirror, Message: "ignored"},
			{Object: "Ingress a/x", Reason: ReasonFailedClosed, Field: authURL, Message: "503"},
			{Object: "Ingress a/x", Reason: ReasonInvalid, Field: "spec.rules[0].host", Message: "bad host"},
			{Object: "Ingress a/x", Reason: "", Field: "spec.rules[1].host", Message: "bad host too"},
		}},
		want: []ObjectProblems{{
			Object:       "Ingress a/x",
			FailedClosed: []Problem{{Field: authURL, Message: "503"}},
			Invalid:      []Problem{{Field: "spec.rules[0].host", Message: "bad host"}, {Field: "spec.rules[1].host", Message: "bad host too"}},
			Unsupported:  []Problem{{Field: mirror, Message: "ignored"}},
		}},
	}, {
		name: "identical rows shown once",
		in: Snapshot{Errors: []ObjError{
			{Object: "Ingress a/x", Reason: ReasonUnsupported, Field: mirror, Message: "ignored"},
			{Object: "Ingress a/x", Reason: ReasonUnsupported, Field: mirror, Message: "ignored"},
		}},
		want: []ObjectProblems{{Object: "Ingress a/x", Unsupported: []Problem{{Field: mirror, Message: "ignored"}}}},
	}, {
		name: "denied paths listed under their Ingress, whichever object denies them",
		in: Snapshot{
			Servers: []Server{{Host: "a.example.com", Paths: []Path{
				{Path: "/", Backend: "a-x-80", Ingress: "Ingress a/x", Denied: global},
				{Path: "/open", Backend: "a-x-80", Ingress: "Ingress a/x"},
				{Path: "/default", Backend: "upstream-default-backend", Denied: global},
			}}},
			Errors: []ObjError{{Object: "ConfigMap ingress-nginx/controller", Reason: ReasonFailedClosed, Field: "global-auth-url", Message: "every Ingress path answers 503"}},
		},
		want: []ObjectProblems{
			{Object: "ConfigMap ingress-nginx/controller", FailedClosed: []Problem{{Field: "global-auth-url", Message: "every Ingress path answers 503"}}},
			{Object: "Ingress a/x", Denied: []DeniedRoute{{Route: "a.example.com/", Field: global}}},
		},
	}, {
		name: "routes answering 503 first, then invalid, then ignored, by name within each",
		in: Snapshot{Errors: []ObjError{
			{Object: "Ingress a/ignored", Reason: ReasonUnsupported, Field: mirror, Message: "ignored"},
			{Object: "Ingress b/invalid", Reason: ReasonInvalid, Field: "spec", Message: "bad"},
			{Object: "Ingress c/closed", Reason: ReasonFailedClosed, Field: authURL, Message: "503"},
			{Object: "Ingress a/invalid", Reason: ReasonInvalid, Field: "spec", Message: "bad"},
		}},
		want: []ObjectProblems{
			{Object: "Ingress c/closed", FailedClosed: []Problem{{Field: authURL, Message: "503"}}},
			{Object: "Ingress a/invalid", Invalid: []Problem{{Field: "spec", Message: "bad"}}},
			{Object: "Ingress b/invalid", Invalid: []Problem{{Field: "spec", Message: "bad"}}},
			{Object: "Ingress a/ignored", Unsupported: []Problem{{Field: mirror, Message: "ignored"}}},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(Config{Snapshot: func() Snapshot { return tc.in }})
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status.json", nil))
			var got pageData
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
