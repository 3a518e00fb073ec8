package proxy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

func routerConfig() *model.Configuration {
	return &model.Configuration{Servers: []model.Server{
		{Hostname: "_", Locations: []model.Location{{Path: "/", PathType: model.PathTypePrefix, Backend: "default", IsDefaultBackend: true}}},
		{Hostname: "a.example.com", Aliases: []string{"alias.test"}, Locations: []model.Location{
			{Path: "/exact", PathType: model.PathTypeExact, Backend: "exact"},
			{Path: "/api/v[0-9]+", PathType: model.PathTypeImplementationSpecific, Regex: true, Backend: "regex", PathRegexp: model.NewRegexp("(?i)/api/v[0-9]+")},
			{Path: "/foo", PathType: model.PathTypePrefix, Backend: "foo"},
			{Path: "/foo/bar/", PathType: model.PathTypePrefix, Backend: "foobar"},
			{Path: "/", PathType: model.PathTypePrefix, Backend: "root"},
		}},
		{Hostname: "*.example.com", Locations: []model.Location{{Path: "/", PathType: model.PathTypePrefix, Backend: "wild"}}},
		{Hostname: "*.deep.example.com", Locations: []model.Location{{Path: "/", PathType: model.PathTypePrefix, Backend: "deepwild"}}},
		{Hostname: "only.test", Locations: []model.Location{{Path: "/x", PathType: model.PathTypePrefix, Backend: "x"}}},
	}}
}

func TestRouterLookup(t *testing.T) {
	tab := newTable(routerConfig(), nil)
	type got struct{ Server, Backend string }
	for _, tc := range []struct {
		host, path string
		want       got
	}{
		{"a.example.com", "/exact", got{"a.example.com", "exact"}},
		{"a.example.com", "/exact/", got{"a.example.com", "root"}},
		{"a.example.com", "/API/V2/list", got{"a.example.com", "regex"}}, // ~* is case-insensitive
		{"a.example.com", "/foo", got{"a.example.com", "foo"}},
		{"a.example.com", "/foo/", got{"a.example.com", "foo"}},
		{"a.example.com", "/foobar", got{"a.example.com", "root"}}, // element-wise
		{"a.example.com", "/foo/bar", got{"a.example.com", "foobar"}},
		{"a.example.com", "/foo/bar/baz", got{"a.example.com", "foobar"}},
		{"a.example.com", "/foo/barn", got{"a.example.com", "foo"}},
		{"alias.test", "/foo", got{"a.example.com", "foo"}},
		{"b.example.com", "/anything", got{"*.example.com", "wild"}},
		{"x.y.example.com", "/", got{"*.example.com", "wild"}},
		{"x.deep.example.com", "/", got{"*.deep.example.com", "deepwild"}}, // longest wildcard
		{"example.com", "/", got{"_", "default"}},                          // wildcard needs a label
		{"unknown.test", "/", got{"_", "default"}},
		{"only.test", "/x/y", got{"only.test", "x"}},
		{"only.test", "/y", got{"only.test", ""}}, // no fallback to another server
	} {
		vh, rt := tab.lookup([]byte(tc.host), []byte(tc.path))
		var g got
		if vh != nil {
			g.Server = vh.name
		}
		if rt != nil {
			g.Backend = rt.loc.Backend
		}
		if diff := cmp.Diff(tc.want, g); diff != "" {
			t.Errorf("lookup(%q, %q) (-want +got):\n%s", tc.host, tc.path, diff)
		}
	}
}

func TestRouterLookupDoesNotAllocate(t *testing.T) {
	tab := newTable(routerConfig(), nil)
	host, path := []byte("b.example.com"), []byte("/foo/bar/baz")
	if n := testing.AllocsPerRun(100, func() { tab.lookup(host, path) }); n != 0 {
		t.Errorf("lookup allocates %v times per call, want 0", n)
	}
}

func TestHostOnly(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM:8080": "example.com",
		"example.com":      "example.com",
		"[::1]:443":        "[::1]",
		"[::1]":            "[::1]",
		"":                 "",
	} {
		if got := string(hostOnly([]byte(in))); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzLookup feeds arbitrary Host headers and paths (outside input) through
// hostOnly and the router: it must never panic, and a result's location
// must belong to the server returned.
func FuzzLookup(f *testing.F) {
	for _, s := range [][2]string{{"a.example.com", "/foo/bar"}, {"B.EXAMPLE.COM:80", "/API/v1"}, {"[::1]:1", "/"}, {":", ""}, {"*.example.com", "//"}} {
		f.Add(s[0], s[1])
	}
	tab := newTable(routerConfig(), nil)
	f.Fuzz(func(t *testing.T, host, path string) {
		vh, rt := tab.lookup(hostOnly([]byte(host)), []byte(path))
		if vh == nil {
			t.Fatal("catch-all server exists, lookup returned no server")
		}
		if rt == nil {
			return
		}
		for _, r := range vh.regex {
			if r == rt {
				return
			}
		}
		for _, r := range vh.prefix {
			if r == rt {
				return
			}
		}
		for _, r := range vh.exact {
			if r == rt {
				return
			}
		}
		t.Fatalf("route %q not in server %q", rt.loc.Path, vh.name)
	})
}
