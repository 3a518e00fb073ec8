package main

import (
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane"
	"github.com/switchyard-proxy/switchyard/controlplane/builder"
	"github.com/switchyard-proxy/switchyard/controlplane/builder/synthetic"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// referenceCerts exports the certificate families the way the controller
// did before metrics_text.go: a const metric per series through a
// Registerer wrapped with the controller labels.
type referenceCerts struct {
	cfg   *model.Configuration
	class string
}

var (
	refSSLExpire = prometheus.NewDesc(ingressNS+"_ssl_expire_time_seconds", "Number of seconds since 1970 to the SSL Certificate expire.",
		[]string{"namespace", "class", "host", "secret_name", "identifier"}, nil)
	refSSLInfo = prometheus.NewDesc(ingressNS+"_ssl_certificate_info", "Hold all labels associated to a certificate",
		[]string{"namespace", "class", "host", "secret_name", "identifier", "issuer_organization", "issuer_common_name", "serial_number", "public_key_algorithm"}, nil)
)

func (r referenceCerts) Describe(ch chan<- *prometheus.Desc) {
	ch <- refSSLExpire
	ch <- refSSLInfo
}

func (r referenceCerts) Collect(ch chan<- prometheus.Metric) {
	for _, s := range r.cfg.Servers {
		if s.TLS == nil || s.Hostname == model.CatchAllHost || s.Hostname == "" {
			continue
		}
		cert, ok := r.cfg.Certificates[s.TLS.CertificateUID]
		if !ok {
			continue
		}
		var x *x509.Certificate
		if b, _ := pem.Decode([]byte(cert.PEM)); b != nil && b.Type == "CERTIFICATE" {
			x, _ = x509.ParseCertificate(b.Bytes)
		}
		id := ""
		if x != nil {
			id = x.Issuer.SerialNumber + "-" + x.SerialNumber.String()
		}
		if cert.NotAfter > 0 {
			ch <- prometheus.MustNewConstMetric(refSSLExpire, prometheus.GaugeValue, float64(cert.NotAfter),
				cert.Secret.Namespace, r.class, s.Hostname, cert.Secret.Name, id)
		}
		if x != nil {
			org := ""
			if len(x.Issuer.Organization) > 0 {
				org = x.Issuer.Organization[0]
			}
			ch <- prometheus.MustNewConstMetric(refSSLInfo, prometheus.GaugeValue, 1, cert.Secret.Namespace, r.class, s.Hostname, cert.Secret.Name, id,
				org, x.Issuer.CommonName, x.SerialNumber.String(), x.PublicKeyAlgorithm.String())
		}
	}
}

// awkwardCertPEM is a self-signed certificate whose issuer needs every
// escape of the text format.
func awkwardCertPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	name := pkix.Name{CommonName: `CA "one" \ two`, Organization: []string{"Acme\\Corp\n\"Labs\""}, SerialNumber: `s\n"1"`}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(4242), Subject: name, Issuer: name, NotBefore: time.Unix(1e9, 0), NotAfter: time.Unix(2e9, 0),
		DNSNames: []string{"h1.example.com"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// textFixture is a controller's metrics over a Configuration with every
// kind of series the handler writes: endpoints with and without EWMA and
// with requests, failures and picks in flight, Ingresses orphaned both
// ways and not, certificates that parse or not, with or without an
// expiry; controller labels and issuers that need escaping.
func textFixture(t *testing.T) (*controllerMetrics, http.Handler) {
	t.Helper()
	const class = `k8s.io/ingress-"nginx"\`
	t.Setenv("POD_NAME", "switchyard\\abc\n\"7\"")
	t.Setenv("POD_NAMESPACE", "ingress-nginx")
	in := synthetic.Input(synthetic.Shape{Ingresses: 8, Services: 2, Endpoints: 3})
	pt := networkingv1.PathTypePrefix
	in.Ingresses[0].Spec.Rules[0].HTTP.Paths = append(in.Ingresses[0].Spec.Rules[0].HTTP.Paths, networkingv1.HTTPIngressPath{
		Path: "/missing", PathType: &pt,
		Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "missing", Port: networkingv1.ServiceBackendPort{Number: 80}}},
	})
	in.EndpointSlices = slices.DeleteFunc(in.EndpointSlices, func(es *discoveryv1.EndpointSlice) bool { return es.Namespace == synthetic.Namespace(3) })
	cfg := builder.Build(in, builder.Options{})
	awkward := awkwardCertPEM(t)
	certs := []model.Certificate{
		{UID: "u1", Secret: model.ObjectRef{Namespace: "ns1", Name: "tls-1"}, PEM: awkward, NotAfter: 2e9},
		{UID: "u2", Secret: model.ObjectRef{Namespace: "ns2", Name: "tls-2"}, PEM: "not a certificate", NotAfter: 1.9e9},
		{UID: "u3", Secret: model.ObjectRef{Namespace: "ns3", Name: "tls-3"}, PEM: awkward},
	}
	cfg.Certificates = map[string]model.Certificate{}
	for i, c := range certs {
		cfg.Certificates[c.UID] = c
		for j := range cfg.Servers {
			if cfg.Servers[j].Hostname == fmt.Sprintf("h%d.example.com", i+1) || (i == 0 && cfg.Servers[j].Hostname == "h5.example.com") {
				cfg.Servers[j].TLS = &model.ServerTLS{CertificateUID: c.UID}
			}
		}
	}

	// A stopped clock: the EWMA score decays with time.
	now := time.Unix(1.8e9, 0)
	reg := balancer.NewRegistry(balancer.Config{Now: func() time.Time { return now }})
	if err := reg.Apply(cfg.Backends); err != nil {
		t.Fatal(err)
	}
	var withEndpoints []*model.Backend
	for _, b := range cfg.Backends {
		if len(b.Endpoints) > 0 {
			withEndpoints = append(withEndpoints, b)
		}
	}
	if len(withEndpoints) < 3 {
		t.Fatalf("%d backends with endpoints", len(withEndpoints))
	}
	peers := reg.Peers(withEndpoints[0].Name)
	reg.SetEWMA(withEndpoints[0].Name, peers[1], 0.125, float64(now.Unix()-3))
	reg.Count(withEndpoints[1].Name, reg.Peers(withEndpoints[1].Name)[2], 7, 3)
	noVars := balancer.VarsFunc(func(string) ([]byte, bool) { return nil, false })
	for range 2 {
		if _, err := reg.Pick(withEndpoints[2].Name, noVars, &balancer.Attempt{}); err != nil {
			t.Fatal(err)
		}
	}

	m := newControllerMetrics(controllerMetricsConfig{Balancer: reg, ControllerClass: class, ElectionID: "leader", SyncMetrics: true})
	src := &staticSource{}
	src.cfg.Store(cfg)
	m.ingress.attach(src)
	m.observeSync(controlplane.SyncEvent{Time: time.Unix(1.7e9, 0), Duration: 3 * time.Millisecond})

	// The exposition before metrics_text.go: the same registry's
	// families plus these through promhttp.
	old := prometheus.NewRegistry()
	prometheus.WrapRegistererWith(controllerLabels(class), old).MustRegister(referenceCollector{cfg: cfg, reg: reg}, referenceCerts{cfg: cfg, class: class})
	return m, promhttp.HandlerFor(prometheus.Gatherers{m.registry, old}, promhttp.HandlerOpts{})
}

// get scrapes url with the request headers hdr and returns the response
// and its body.
func get(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	// A Transport that does not ask for gzip itself.
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return resp, body
}

// family is a parsed family: HELP, TYPE and each series' value by its
// labels.
type family struct {
	Help, Type string
	Series     map[string]float64
}

// parseExposition parses a text exposition, failing on anything the
// Prometheus parser refuses (a second HELP or TYPE of a name included),
// and checks that each family has its HELP and TYPE once.
func parseExposition(t *testing.T, text string) map[string]family {
	t.Helper()
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, text)
	}
	comments := map[string]int{}
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" {
			comments[f[1]+" "+f[2]]++
		}
	}
	out := map[string]family{}
	for name, mf := range mfs {
		if comments["HELP "+name] != 1 || comments["TYPE "+name] != 1 {
			t.Errorf("%s: %d HELP and %d TYPE lines; want 1 each", name, comments["HELP "+name], comments["TYPE "+name])
		}
		f := family{Help: mf.GetHelp(), Type: mf.GetType().String(), Series: map[string]float64{}}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+strconv.Quote(lp.GetValue()))
			}
			slices.Sort(labels)
			key := strings.Join(labels, ",")
			if _, dup := f.Series[key]; dup {
				t.Errorf("%s{%s} twice", name, key)
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				f.Series[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				f.Series[key] = m.GetGauge().GetValue()
			default:
				f.Series[key] = float64(len(m.String())) // histograms, summaries: present
			}
		}
		out[name] = f
	}
	return out
}

// runtimeFree drops the series of the Go runtime's and the process's
// families, whose values move between two scrapes, keeping their HELP
// and TYPE.
func runtimeFree(fams map[string]family) map[string]family {
	out := map[string]family{}
	for name, f := range fams {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			f.Series = nil
		}
		out[name] = f
	}
	return out
}

// TestMetricsTextAsRegistry: /metrics, with the per-endpoint, per-Ingress
// and per-TLS-host families written as text, parses with Prometheus's
// parser into the same families, HELP, TYPE, series, labels and values as
// the exposition promhttp made when every series went through the
// registry, label values that need escaping included; with gzip too; and
// it honours the name[] filter.
func TestMetricsTextAsRegistry(t *testing.T) {
	m, oldHandler := textFixture(t)
	srv := httptest.NewServer(m.handler)
	defer srv.Close()
	oldSrv := httptest.NewServer(oldHandler)
	defer oldSrv.Close()

	resp, body := get(t, srv.URL, nil)
	oldResp, oldBody := get(t, oldSrv.URL, nil)
	if got, want := resp.Header.Get("Content-Type"), oldResp.Header.Get("Content-Type"); got != want {
		t.Errorf("Content-Type %q; want %q", got, want)
	}
	got, want := parseExposition(t, string(body)), parseExposition(t, string(oldBody))
	if diff := cmp.Diff(runtimeFree(want), runtimeFree(got)); diff != "" {
		t.Errorf("/metrics differs from the registry's exposition (-old +new):\n%s", diff)
	}
	// The fixture has every kind of series.
	for name, n := range map[string]int{
		"switchyard_balancer_endpoint_requests_total": 43, "switchyard_balancer_endpoint_ewma_seconds": 1,
		ingressNS + "_orphan_ingress": 16, ingressNS + "_ssl_expire_time_seconds": 3, ingressNS + "_ssl_certificate_info": 3,
	} {
		if len(got[name].Series) != n {
			t.Errorf("%s: %d series; want %d", name, len(got[name].Series), n)
		}
	}
	// The text is the registry's line for line, but for the runtime.
	if a, b := exposition(t, m.handler), exposition(t, oldHandler); a != b {
		t.Errorf("text differs:\n%s\nwant\n%s", a, b)
	}

	// gzip, when asked for.
	resp, zipped := get(t, srv.URL, map[string]string{"Accept-Encoding": "gzip"})
	if enc := resp.Header.Get("Content-Encoding"); enc != "gzip" {
		t.Fatalf("Content-Encoding %q; want gzip", enc)
	}
	zr, err := gzip.NewReader(strings.NewReader(string(zipped)))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(runtimeFree(want), runtimeFree(parseExposition(t, string(unzipped)))); diff != "" {
		t.Errorf("gzipped /metrics differs (-old +new):\n%s", diff)
	}
	if resp, _ := get(t, srv.URL, map[string]string{"Accept-Encoding": "gzip;q=0, identity"}); resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("gzip;q=0 answered with Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}

	// Text even when protobuf is preferred.
	resp, body = get(t, srv.URL, map[string]string{"Accept": "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3"})
	if ft := expfmt.ResponseFormat(resp.Header).FormatType(); ft != expfmt.TypeTextPlain {
		t.Errorf("format %v; want text", ft)
	}
	parseExposition(t, string(body))

	// name[] as promhttp.
	names := []string{ingressNS + "_orphan_ingress", ingressNS + "_config_hash", "switchyard_balancer_endpoint_in_flight"}
	_, body = get(t, srv.URL+"/metrics?name[]="+strings.Join(names, "&name[]="), nil)
	var gotNames []string
	for name := range parseExposition(t, string(body)) {
		gotNames = append(gotNames, name)
	}
	slices.Sort(gotNames)
	slices.Sort(names)
	if !slices.Equal(gotNames, names) {
		t.Errorf("name[] filter: families %v; want %v", gotNames, names)
	}
}

// TestMetricsTextReserved: a collector registering one of the names the
// handler writes fails, as it would when the registry exported it.
func TestMetricsTextReserved(t *testing.T) {
	reg := balancer.NewRegistry(balancer.Config{})
	m := newControllerMetrics(controllerMetricsConfig{Balancer: reg, ControllerClass: "c"})
	for _, f := range m.handler.families {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: f.name, Help: "other"})
		if err := m.registerer.Register(g); err == nil {
			t.Errorf("registering %s succeeded; want an error", f.name)
		}
	}
}
