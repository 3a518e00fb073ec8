package builder

import (
	"hash/maphash"
	"reflect"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// Locations share LocationSettings: all of an Ingress's paths, and
// Ingresses whose settings are the same. An Ingress whose annotations
// differ gets its own, and writing nothing through the shared value is
// what keeps them apart.
func TestLocationSettingsShared(t *testing.T) {
	in := syntheticInput(4)
	in.Ingresses[2].Annotations[annotationPrefix+"proxy-read-timeout"] = "30"
	in.Ingresses[3].Annotations[annotationPrefix+"proxy-read-timeout"] = "30"
	in.Ingresses[3].Annotations[annotationPrefix+"enable-cors"] = "true"
	cfg := Build(in, Options{})
	if len(cfg.Errors) != 0 {
		t.Fatalf("errors: %v", cfg.Errors)
	}
	byIngress := map[string][]*model.Location{}
	for i := range cfg.Servers {
		for j := range cfg.Servers[i].Locations {
			l := &cfg.Servers[i].Locations[j]
			if l.LocationSettings == nil {
				t.Fatalf("%s%s: no settings", cfg.Servers[i].Hostname, l.Path)
			}
			byIngress[l.Ingress.Name] = append(byIngress[l.Ingress.Name], l)
		}
	}
	for _, name := range []string{"ing0", "ing1", "ing2", "ing3"} {
		locs := byIngress[name]
		if len(locs) != 2 || locs[0].LocationSettings != locs[1].LocationSettings {
			t.Errorf("%s: its %d locations do not share settings", name, len(locs))
		}
	}
	s0, s1, s2, s3 := byIngress["ing0"][0].LocationSettings, byIngress["ing1"][0].LocationSettings,
		byIngress["ing2"][0].LocationSettings, byIngress["ing3"][0].LocationSettings
	if s0 != s1 {
		t.Error("ing0 and ing1, with the same annotations, do not share settings")
	}
	if s2 == s0 || s3 == s2 {
		t.Error("Ingresses with other annotations share settings")
	}
	if s0.Proxy.ReadTimeoutSeconds != 60 || s2.Proxy.ReadTimeoutSeconds != 30 || s3.Proxy.ReadTimeoutSeconds != 30 {
		t.Errorf("proxy-read-timeout: %d %d %d; want 60 30 30", s0.Proxy.ReadTimeoutSeconds, s2.Proxy.ReadTimeoutSeconds, s3.Proxy.ReadTimeoutSeconds)
	}
	if s0.CORS.Enabled || s2.CORS.Enabled || !s3.CORS.Enabled {
		t.Errorf("enable-cors: %v %v %v; want false false true", s0.CORS.Enabled, s2.CORS.Enabled, s3.CORS.Enabled)
	}
	if s0.Proxy.BodySizeBytes != 8<<20 {
		t.Errorf("proxy-body-size: %d; want 8m", s0.Proxy.BodySizeBytes)
	}
}

// Settings of the same bytes are shared; a difference in any byte (a
// scalar, or where a string lives) keeps them apart.
func TestSharedSettings(t *testing.T) {
	b := &builder{madeSettings: map[uint64]*model.LocationSettings{}, settingsSeed: maphash.MakeSeed()}
	first := b.sharedSettings(&model.LocationSettings{BackendProtocol: model.ProtocolHTTP, UpstreamVhost: "a.example"})
	if got := b.sharedSettings(&model.LocationSettings{BackendProtocol: model.ProtocolHTTP, UpstreamVhost: "a.example"}); got != first {
		t.Error("the same settings are not shared")
	}
	other := string([]byte("a.example")) // equal contents, another string
	for name, s := range map[string]*model.LocationSettings{
		"another protocol": {BackendProtocol: model.ProtocolHTTPS, UpstreamVhost: "a.example"},
		"another string":   {BackendProtocol: model.ProtocolHTTP, UpstreamVhost: other},
		"a timeout":        {BackendProtocol: model.ProtocolHTTP, UpstreamVhost: "a.example", Proxy: model.Proxy{ReadTimeoutSeconds: 1}},
	} {
		got := b.sharedSettings(s)
		if got == first {
			t.Errorf("%s: shared with other settings", name)
		}
		if got == s || !reflect.DeepEqual(*got, *s) {
			t.Errorf("%s: not a copy of the settings", name)
		}
	}
}
