package nginxcompat

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// benchConfig has n servers of two locations each, plus the catch-all.
func benchConfig(n int) *model.Configuration {
	cfg := &model.Configuration{Servers: []model.Server{{Hostname: "_", Locations: []model.Location{{Path: "/", Backend: model.DefaultBackendName}}}}}
	for i := range n {
		ing := model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: fmt.Sprintf("ing-%d", i)}
		be := fmt.Sprintf("ns-svc-%d-80", i)
		cfg.Servers = append(cfg.Servers, model.Server{Hostname: fmt.Sprintf("host-%d.example.com", i), Locations: []model.Location{
			{Path: "/api", PathType: model.PathTypePrefix, Ingress: ing, Backend: be, LocationSettings: &model.LocationSettings{AllowSourceRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}},
			{Path: "/", PathType: model.PathTypePrefix, Ingress: ing, Backend: be},
		}})
	}
	return cfg
}

// BenchmarkRender reports the time and the file size (bytes/file) of one
// render; servers=1 is the same-run baseline.
func BenchmarkRender(b *testing.B) {
	for _, n := range []int{1, 1000, 10000} {
		cfg := benchConfig(n)
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				r, err := Render(cfg, goldenRenderConfig)
				if err != nil {
					b.Fatal(err)
				}
				size = len(r.Conf)
			}
			b.ReportMetric(float64(size), "bytes/file")
		})
	}
}
