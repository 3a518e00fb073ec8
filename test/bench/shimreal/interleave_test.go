package main

import "testing"

// The requests are wrk.lua's: per URI, one bare, one with the cookie, one
// per header value.
func TestLoadRequests(t *testing.T) {
	got := loadRequests("h:1", benchCase{path: "/p/", nkeys: 2, header: "X-Canary", values: []string{"yes", "no"}}, "route=abc")
	want := []string{
		"GET /p/k0 HTTP/1.1\r\nHost: h:1\r\n\r\n",
		"GET /p/k0 HTTP/1.1\r\nHost: h:1\r\nCookie: route=abc\r\n\r\n",
		"GET /p/k0 HTTP/1.1\r\nHost: h:1\r\nX-Canary: yes\r\n\r\n",
		"GET /p/k0 HTTP/1.1\r\nHost: h:1\r\nX-Canary: no\r\n\r\n",
		"GET /p/k1 HTTP/1.1\r\nHost: h:1\r\n\r\n",
		"GET /p/k1 HTTP/1.1\r\nHost: h:1\r\nCookie: route=abc\r\n\r\n",
		"GET /p/k1 HTTP/1.1\r\nHost: h:1\r\nX-Canary: yes\r\n\r\n",
		"GET /p/k1 HTTP/1.1\r\nHost: h:1\r\nX-Canary: no\r\n\r\n",
	}
	if len(got) != len(want) {
		t.Fatalf("%d requests, want %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("request %d = %q, want %q", i, got[i], want[i])
		}
	}
}
