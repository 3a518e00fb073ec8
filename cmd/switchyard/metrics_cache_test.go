package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	"github.com/switchyard-proxy/switchyard/controlplane/builder/synthetic"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// exposition is what h serves on /metrics but the Go runtime's and the
// process's metrics.
func exposition(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics answered %d: %s", rec.Code, rec.Body)
	}
	var out []string
	for _, l := range strings.SplitAfter(rec.Body.String(), "\n") {
		name := strings.TrimPrefix(strings.TrimPrefix(l, "# HELP "), "# TYPE ")
		if !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// referenceCollector exports orphan_ingress, config_hash and the balancer
// series the way the controller did before metrics_cache.go: every series
// built at scrape time through a Registerer wrapped with the controller
// labels, the hash of the whole Configuration's JSON.
type referenceCollector struct {
	cfg *model.Configuration
	reg *balancer.Registry
}

var (
	refOrphan = prometheus.NewDesc(ingressNS+"_orphan_ingress",
		"Gauge reporting status of ingress orphanity, 1 indicates orphaned ingress. 'type' is no-service or no-endpoint.", []string{"namespace", "ingress", "type"}, nil)
	refRequests = prometheus.NewDesc("switchyard_balancer_endpoint_requests_total", "Attempts completed per endpoint.", []string{"backend", "endpoint"}, nil)
	refFailures = prometheus.NewDesc("switchyard_balancer_endpoint_failures_total", "Failed attempts per endpoint.", []string{"backend", "endpoint"}, nil)
	refInFlight = prometheus.NewDesc("switchyard_balancer_endpoint_in_flight", "Requests in flight per endpoint.", []string{"backend", "endpoint"}, nil)
	refEWMA     = prometheus.NewDesc("switchyard_balancer_endpoint_ewma_seconds", "Decayed EWMA latency score per endpoint (ewma, peak_ewma).", []string{"backend", "endpoint"}, nil)
)

func (r referenceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{refOrphan, refRequests, refFailures, refInFlight, refEWMA} {
		ch <- d
	}
}

func (r referenceCollector) Collect(ch chan<- prometheus.Metric) {
	backends := map[string]int{}
	for i := range r.cfg.Backends {
		backends[r.cfg.Backends[i].Name] = i
	}
	type key struct{ ns, name, typ string }
	state := map[key]float64{}
	set := func(k key, orphaned bool) {
		if orphaned {
			state[k] = 1
		} else if _, ok := state[k]; !ok {
			state[k] = 0
		}
	}
	for i := range r.cfg.Servers {
		for j := range r.cfg.Servers[i].Locations {
			loc := &r.cfg.Servers[i].Locations[j]
			if loc.Ingress.Name == "" || loc.Service == "" || loc.IsDefaultBackend {
				continue
			}
			bi, ok := backends[loc.Backend]
			if !ok {
				continue
			}
			be := r.cfg.Backends[bi]
			set(key{loc.Ingress.Namespace, loc.Ingress.Name, orphanNoService}, !be.HasService)
			if be.HasService {
				set(key{loc.Ingress.Namespace, loc.Ingress.Name, orphanNoEndpoint}, len(be.Endpoints) == 0)
			}
		}
	}
	for k, v := range state {
		ch <- prometheus.MustNewConstMetric(refOrphan, prometheus.GaugeValue, v, k.ns, k.name, k.typ)
	}
	for _, b := range r.reg.Backends() {
		for _, e := range b.Endpoints {
			ch <- prometheus.MustNewConstMetric(refRequests, prometheus.CounterValue, float64(e.Requests), b.Name, e.Address)
			ch <- prometheus.MustNewConstMetric(refFailures, prometheus.CounterValue, float64(e.Failures), b.Name, e.Address)
			ch <- prometheus.MustNewConstMetric(refInFlight, prometheus.GaugeValue, float64(e.InFlight), b.Name, e.Address)
			if e.EWMA >= 0 {
				ch <- prometheus.MustNewConstMetric(refEWMA, prometheus.GaugeValue, e.EWMA, b.Name, e.Address)
			}
		}
	}
}

// configHashLine is the config_hash series of an exposition.
func configHashLine(t *testing.T, text string) string {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, ingressNS+"_config_hash{") {
			return l
		}
	}
	t.Fatalf("no config_hash in\n%s", text)
	return ""
}

// withoutConfigHash drops config_hash, whose value the reference computes
// differently.
func withoutConfigHash(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.Contains(l, ingressNS+"_config_hash") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestScrapeCache: through a series of endpoint changes (Refresh, then the
// balancer, as the controller makes them), a long-lived collector's
// scrape equals the scrape of a fresh one (so nothing cached goes stale,
// config_hash included), its series equal the ones the controller
// exported before the caches (names, labels and values), orphan_ingress
// follows the endpoints, and config_hash changes with every change and
// comes back with the content.
func TestScrapeCache(t *testing.T) {
	t.Setenv("POD_NAME", "switchyard-abc")
	in := synthetic.Input(synthetic.Shape{Ingresses: 12, Services: 2, Endpoints: 2})
	// ing0 also routes to a Service that does not exist: no-service.
	pt := networkingv1.PathTypePrefix
	in.Ingresses[0].Spec.Rules[0].HTTP.Paths = append(in.Ingresses[0].Spec.Rules[0].HTTP.Paths, networkingv1.HTTPIngressPath{
		Path: "/missing", PathType: &pt,
		Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
			Name: "missing", Port: networkingv1.ServiceBackendPort{Number: 80}}},
	})
	cfg, idx := builder.BuildIndexed(in, builder.Options{})
	slices := map[string][]*discoveryv1.EndpointSlice{}
	for _, es := range in.EndpointSlices {
		k := es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
		slices[k] = append(slices[k], es)
	}
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Apply(cfg.Backends); err != nil {
		t.Fatal(err)
	}
	newMetrics := func(cfg *model.Configuration) (*controllerMetrics, *staticSource) {
		m := newControllerMetrics(controllerMetricsConfig{Balancer: reg, ControllerClass: "k8s.io/ingress-nginx", ElectionID: "leader"})
		src := &staticSource{}
		src.cfg.Store(cfg)
		m.ingress.attach(src)
		return m, src
	}
	long, src := newMetrics(cfg)
	hashes := map[string]int{}
	first, firstHash := "", ""
	for step := range 8 {
		// Step 4 empties ing3's first Service, step 7 restores the start.
		if step > 0 {
			i, addrs := step, []string{fmt.Sprintf("10.200.0.%d", step)}
			switch step {
			case 4:
				i, addrs = 3, nil
			case 7:
				i, addrs = 3, []string{synthetic.Address(3, 0, 0), synthetic.Address(3, 0, 1)}
			}
			if step == 7 {
				for j := 1; j < 7; j++ {
					if j == 3 || j == 4 {
						continue
					}
					ns, svc := synthetic.Namespace(j), synthetic.Service(j, 0)
					slices[ns+"/"+svc] = []*discoveryv1.EndpointSlice{synthetic.Slice(ns, svc, synthetic.Address(j, 0, 0), synthetic.Address(j, 0, 1))}
					cfg = refresh(t, idx, cfg, slices, ns+"/"+svc)
				}
			}
			ns, svc := synthetic.Namespace(i), synthetic.Service(i, 0)
			slices[ns+"/"+svc] = []*discoveryv1.EndpointSlice{synthetic.Slice(ns, svc, addrs...)}
			cfg = refresh(t, idx, cfg, slices, ns+"/"+svc)
			if err := reg.Apply(cfg.Backends); err != nil {
				t.Fatal(err)
			}
			src.cfg.Store(cfg)
		}
		got := exposition(t, long.handler)
		fresh, _ := newMetrics(cfg)
		if want := exposition(t, fresh.handler); got != want {
			t.Fatalf("step %d: long-lived scrape differs from a fresh one:\n%s\nwant\n%s", step, got, want)
		}
		ref := prometheus.NewRegistry()
		prometheus.WrapRegistererWith(controllerLabels("k8s.io/ingress-nginx"), ref).MustRegister(referenceCollector{cfg: cfg, reg: reg})
		for _, l := range strings.Split(exposition(t, promhttp.HandlerFor(ref, promhttp.HandlerOpts{})), "\n") {
			if l != "" && !strings.Contains(got, l+"\n") {
				t.Errorf("step %d: the scrape lacks %q", step, l)
			}
		}
		h := configHashLine(t, got)
		if step == 0 {
			first, firstHash = withoutConfigHash(got), h
		}
		if prev, ok := hashes[h]; ok && step != 7 {
			t.Errorf("step %d: config_hash %s as at step %d", step, h, prev)
		}
		hashes[h] = step
		orphan := fmt.Sprintf(`%s_orphan_ingress{controller_class="k8s.io/ingress-nginx",controller_namespace="default",controller_pod="switchyard-abc",ingress="ing3",namespace="ns3",type="no-endpoint"} `, ingressNS)
		want := "0"
		if step >= 4 && step < 7 {
			want = "1"
		}
		if !strings.Contains(got, orphan+want+"\n") {
			t.Errorf("step %d: want %s%s in\n%s", step, orphan, want, got)
		}
		if step == 7 && h != firstHash {
			t.Errorf("step 7: config_hash %s, want step 0's (same content)", h)
		}
		if step == 7 && withoutConfigHash(got) != first {
			t.Errorf("step 7: scrape differs from step 0's")
		}
	}
	if !strings.Contains(first, `type="no-service"} 1`) {
		t.Errorf("no no-service orphan in\n%s", first)
	}
}

func refresh(t *testing.T, idx *builder.EndpointIndex, cfg *model.Configuration, slices map[string][]*discoveryv1.EndpointSlice, key string) *model.Configuration {
	t.Helper()
	next, ok := idx.Refresh(cfg, []string{key}, func(ns, svc string) []*discoveryv1.EndpointSlice { return slices[ns+"/"+svc] })
	if !ok {
		t.Fatal("refresh refused")
	}
	return next
}

// TestConfigHashContent: config_hash follows every part of the
// Configuration it covers (servers, certificates, passthrough, global),
// not the Version or the Errors, now that the parts are hashed one by one.
func TestConfigHashContent(t *testing.T) {
	base := func() *model.Configuration {
		cfg := builder.Build(synthetic.Input(synthetic.Shape{Ingresses: 4}), builder.Options{})
		cfg.Certificates = map[string]model.Certificate{"u1": {UID: "u1", PEM: "a"}, "u2": {UID: "u2", PEM: "b"}}
		return cfg
	}
	want := structuralHash(base())
	seen := map[uint64]string{want: "base"}
	for name, edit := range map[string]func(*model.Configuration){
		"server path":         func(c *model.Configuration) { c.Servers[1].Locations[0].Path = "/other" },
		"server order":        func(c *model.Configuration) { c.Servers[1], c.Servers[2] = c.Servers[2], c.Servers[1] },
		"certificate PEM":     func(c *model.Configuration) { c.Certificates["u2"] = model.Certificate{UID: "u2", PEM: "c"} },
		"certificate removed": func(c *model.Configuration) { delete(c.Certificates, "u1") },
		"server to passthrough": func(c *model.Configuration) {
			c.PassthroughBackends = []model.PassthroughBackend{{Hostname: c.Servers[1].Hostname}}
			c.Servers = slices.Delete(c.Servers, 1, 2)
		},
		"global": func(c *model.Configuration) { c.DefaultCertificate = "u1" },
	} {
		c := base()
		edit(c)
		got := structuralHash(c)
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: hash %x as %s", name, got, prev)
		}
		seen[got] = name
	}
	c := base()
	c.Version, c.Errors = 99, []model.ObjectError{{Message: "x"}}
	if got := structuralHash(c); got != want {
		t.Errorf("Version and Errors changed the hash: %x; want %x", got, want)
	}
}

// TestConfigHashMemory: hashing a Configuration of 10k Ingresses
// allocates a small fraction of its JSON, which encoding it whole built in
// one buffer grown by doubling (issue 22).
func TestConfigHashMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 10k Ingresses")
	}
	cfg := builder.Build(synthetic.Input(synthetic.Shape{Ingresses: 10000}), builder.Options{})
	structuralHash(cfg) // encoding/json's type caches
	// Two collections empty the sync.Pools (encoding/json keeps its
	// buffers in one), as a build an hour later finds them.
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	structuralHash(cfg)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("hashing 10k Ingresses allocated %d bytes; want at most 1 MiB", got)
	}
}
