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
