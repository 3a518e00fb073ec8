package balancer

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// TestWireToModel: the wire form is read as ingress-nginx's Lua reads it.
func TestWireToModel(t *testing.T) {
	i64 := func(n int64) *int64 { return &n }
	tests := []struct {
		name string
		in   string
		want model.Backend
		err  string
	}{
		{"ports as strings or numbers, leading zero dropped",
			`{"name":"a","port":"http","endpoints":[{"address":"10.0.0.1","port":"080"},{"address":"fd00::1","port":8080}]}`,
			model.Backend{Name: "a", Port: model.ServicePort{Name: "http"},
				Endpoints: []model.Endpoint{{Address: "10.0.0.1", Port: 80}, {Address: "fd00::1", Port: 8080}}}, ""},
		{"a hostname endpoint only for an ExternalName Service",
			`{"name":"a","port":80,"endpoints":[{"address":"svc.example","port":"80"},{"address":"10.0.0.1","port":"80"}]}`,
			model.Backend{Name: "a", Port: model.ServicePort{Number: 80}, Endpoints: []model.Endpoint{{Address: "10.0.0.1", Port: 80}}}, ""},
		{"ExternalName",
			`{"name":"a","port":80,"service":{"metadata":{},"spec":{"type":"ExternalName","externalName":"svc.example"}},"endpoints":[{"address":"svc.example","port":"443"}]}`,
			model.Backend{Name: "a", Port: model.ServicePort{Number: 80}, HasService: true, ExternalName: "svc.example",
				Endpoints: []model.Endpoint{{Address: "svc.example", Port: 443}}}, ""},
		{"affinity only with name cookie; SameSite only in its exact case",
			`{"name":"a","sessionAffinityConfig":{"name":"cookie","mode":"persistent","cookieSessionAffinity":{"name":"r","expires":"10","maxage":"-5","samesite":"lax","path":"/p"}}}`,
			model.Backend{Name: "a", Affinity: &model.CookieAffinity{Persistent: true, Name: "r", Expires: i64(10), MaxAge: i64(-5), Path: "/p"}}, ""},
		{"no affinity without name cookie",
			`{"name":"a","sessionAffinityConfig":{"name":"","cookieSessionAffinity":{"name":"r"}}}`,
			model.Backend{Name: "a"}, ""},
		{"unknown load-balance is round robin; an empty hash-by is consistent hashing",
			`{"name":"a","load-balance":"nope","upstreamHashByConfig":{"upstream-hash-by":"","upstream-hash-by-subset-size":3}}`,
			model.Backend{Name: "a", HashBy: &model.HashBy{SubsetSize: 3}}, ""},
		{"canary",
			`{"name":"a","noServer":true,"alternativeBackends":["b"],"trafficShapingPolicy":{"weight":5,"weightTotal":1000,"header":"X","headerPattern":"^a+$","cookie":"c"}}`,
			model.Backend{Name: "a", NoServer: true, Alternatives: []string{"b"},
				Canary: model.Canary{Weight: 5, WeightTotal: 1000, Header: "X", HeaderPattern: model.NewRegexp("^a+$"), Cookie: "c"}}, ""},
		{"bad port", `{"name":"a","endpoints":[{"address":"10.0.0.1","port":"0"}]}`, model.Backend{}, `port "0" is not 1-65535`},
		{"bad expires", `{"name":"a","sessionAffinityConfig":{"name":"cookie","cookieSessionAffinity":{"expires":"1d"}}}`, model.Backend{}, `cookie expires "1d"`},
		{"no name", `{"port":80}`, model.Backend{}, "empty name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Backend
			if err := json.Unmarshal([]byte(tt.in), &b); err != nil {
				t.Fatal(err)
			}
			got, err := b.Model()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v; want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer((*model.Regexp).Equal), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestSyncKeepsInvalidBackend: a wire backend that does not convert keeps
// its previous balancer; the others are applied.
func TestSyncKeepsInvalidBackend(t *testing.T) {
	r := NewRegistry(Config{Resolve: noResolve})
	mustSync(t, r, Backend{Name: "a", Endpoints: eps("10.0.0.1:80")}, Backend{Name: "b", Endpoints: eps("10.0.0.2:80")})
	bad := Backend{Name: "a", Endpoints: []Endpoint{{Address: "10.0.0.9", Port: PortString("x")}}}
	if err := r.Sync([]Backend{bad, {Name: "b", Endpoints: eps("10.0.0.3:80")}}); err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("Sync error %v; want one naming backend a", err)
	}
	if got := r.Peers("a"); !cmp.Equal(got, []string{"10.0.0.1:80"}) {
		t.Errorf("a's peers %v; want the previous [10.0.0.1:80]", got)
	}
	if got := r.Peers("b"); !cmp.Equal(got, []string{"10.0.0.3:80"}) {
		t.Errorf("b's peers %v; want the new [10.0.0.3:80]", got)
	}
	// The same payload again still keeps a (nothing cached as applied).
	if err := r.Sync([]Backend{bad, {Name: "b", Endpoints: eps("10.0.0.3:80")}}); err == nil {
		t.Fatal("second Sync: no error")
	}
	if got := r.Peers("a"); !cmp.Equal(got, []string{"10.0.0.1:80"}) {
		t.Errorf("after a second Sync a's peers %v; want [10.0.0.1:80]", got)
	}
}

// TestApplyEqualKeepsVersion: typed backends equal to the previous ones,
// canary patterns made anew included, change nothing.
func TestApplyEqualKeepsVersion(t *testing.T) {
	r := NewRegistry(Config{Resolve: noResolve})
	mk := func() []*model.Backend {
		return []*model.Backend{{Name: "a", Endpoints: []model.Endpoint{{Address: "10.0.0.1", Port: 80}}, Alternatives: []string{"c"}},
			{Name: "c", NoServer: true, Endpoints: []model.Endpoint{{Address: "10.0.0.2", Port: 80}}, Canary: model.Canary{Header: "X", HeaderPattern: model.NewRegexp("a+")}}}
	}
	if err := r.Apply(mk()); err != nil {
		t.Fatal(err)
	}
	v := r.Version()
	if err := r.Apply(mk()); err != nil {
		t.Fatal(err)
	}
	if r.Version() != v {
		t.Errorf("Version %d after an equal Apply; want %d", r.Version(), v)
	}
	next := mk()
	next[1].Canary.HeaderPattern = model.NewRegexp("b+")
	if err := r.Apply(next); err != nil {
		t.Fatal(err)
	}
	if r.Version() == v {
		t.Error("Version unchanged after a new canary pattern")
	}
}

// TestApplyReusesOnlyWhatIsUnchanged: an Apply where one backend changed
// rebuilds that one; the others keep their very balancer (and round-robin
// position), and a primary whose canary changed learns the canary's new
// variables although the primary itself is unchanged.
func TestApplyReusesOnlyWhatIsUnchanged(t *testing.T) {
	r := NewRegistry(Config{Resolve: noResolve, Rand: seqRand(0)})
	ep := func(a string) []model.Endpoint {
		return []model.Endpoint{{Address: a, Port: 80}, {Address: a + "0", Port: 80}}
	}
	mk := func(canaryHeader, changedAddr string) []*model.Backend {
		return []*model.Backend{
			{Name: "primary", Endpoints: ep("10.0.0.1"), Alternatives: []string{"canary"}},
			{Name: "canary", NoServer: true, Endpoints: ep("10.0.0.2"), Canary: model.Canary{Header: canaryHeader}},
			{Name: "steady", Endpoints: ep("10.0.0.3")},
			{Name: "changed", Endpoints: ep(changedAddr)},
		}
	}
	if err := r.Apply(mk("X-One", "10.0.0.4")); err != nil {
		t.Fatal(err)
	}
	before := r.snap.Load()
	var a Attempt
	first, err := r.Pick("steady", vars{}, &a)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(mk("X-Two", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	after := r.snap.Load()
	if after.get("steady") != before.get("steady") {
		t.Error("the unchanged backend was rebuilt")
	}
	if after.get("changed") == before.get("changed") || !cmp.Equal(r.Peers("changed"), []string{"10.0.0.50:80", "10.0.0.5:80"}) {
		t.Errorf("the changed backend was not rebuilt: peers %v", r.Peers("changed"))
	}
	if got := r.NeededVars("primary"); !cmp.Equal(got, []string{"http_x_two"}) {
		t.Errorf("primary's needed variables %v; want [http_x_two]", got)
	}
	if got := before.get("primary").needVars; !cmp.Equal(got, []string{"http_x_one"}) {
		t.Errorf("the previous generation's primary was modified: %v", got)
	}
	var b Attempt
	second, err := r.Pick("steady", vars{}, &b)
	if err != nil {
		t.Fatal(err)
	}
	if second.Peer == first.Peer {
		t.Errorf("round robin restarted on the unchanged backend: %s twice", first.Peer)
	}
}
