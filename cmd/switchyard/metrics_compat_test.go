package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/switchyard-proxy/switchyard/test/harness"
)

// dashboardFact is one line of testdata/ingress_nginx_dashboard_metrics.txt.
type dashboardFact struct {
	series string
	labels []string
}

func readDashboardFacts(t *testing.T) []dashboardFact {
	t.Helper()
	f, err := os.Open("testdata/ingress_nginx_dashboard_metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var facts []dashboardFact
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		fact := dashboardFact{series: fields[0]}
		for _, l := range fields[1:] {
			if l == "D1" || l == "D2" || l == "A" {
				continue // sources
			}
			fact.labels = append(fact.labels, l)
		}
		facts = append(facts, fact)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(facts) < 10 {
		t.Fatalf("read %d facts from the dashboard list", len(facts))
	}
	return facts
}

// metricsExceptions are the series (or series and label, "name{label}") of
// the dashboard list that a data plane does not provide yet, with the
// reason. An exception that is no longer needed fails the test.
var metricsExceptions = map[string]map[string]string{
	"go": {
		"nginx_ingress_controller_nginx_process_connections": "the Go data plane keeps no connection gauge yet (proxy/ counts requests, not connections)",
		"nginx_ingress_controller_ssl_expire_time_seconds{ingress}": "ingress-nginx's metric has no ingress label either; " +
			"the dashboard's ingress=~\"$ingress\" matches only with the variable at All",
	},
	"nginx": {
		"nginx_ingress_controller_ssl_expire_time_seconds{ingress}": "ingress-nginx's metric has no ingress label either; " +
			"the dashboard's ingress=~\"$ingress\" matches only with the variable at All",
		"nginx_ingress_controller_request_size_sum":                 "the Lua shim reports request counts, durations and connect times, not sizes",
		"nginx_ingress_controller_response_size_sum":                "the Lua shim reports request counts, durations and connect times, not sizes",
		"nginx_ingress_controller_response_size_count":              "the Lua shim reports request counts, durations and connect times, not sizes",
		"nginx_ingress_controller_response_size_bucket":             "the Lua shim reports request counts, durations and connect times, not sizes",
		"nginx_ingress_controller_response_duration_seconds_bucket": "the Lua shim does not report $upstream_response_time yet",
		"nginx_ingress_controller_response_duration_seconds_sum":    "the Lua shim does not report $upstream_response_time yet",
	},
}

// scrapeTargetLabels are added by Prometheus at scrape time, not exposed
// ("namespace" only where the metric has no namespace label of its own).
var scrapeTargetLabels = map[string]bool{"instance": true, "kubernetes_pod_name": true}

// TestMetricsAsIngressNginx starts the controller on each data plane, sends
// requests, and checks the live /metrics scrape against the series and
// labels ingress-nginx's Grafana dashboards and example alerts use
// (testdata/ingress_nginx_dashboard_metrics.txt), then the values of the
// configuration metrics: controller labels, certificate expiry, orphaned
// Ingresses, process metrics.
func TestMetricsAsIngressNginx(t *testing.T) {
	facts := readDashboardFacts(t)
	t.Setenv("POD_NAME", "switchyard-7d9f-abcde")
	t.Setenv("POD_NAMESPACE", "ingress-nginx")
	for _, plane := range []string{"go", "nginx"} {
		t.Run(plane, func(t *testing.T) { testMetricsAsIngressNginx(t, plane, facts) })
	}
}

func testMetricsAsIngressNginx(t *testing.T, plane string, facts []dashboardFact) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "shop")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	dir := quickstartDir(t, freePort(t), freePort(t))
	certPEM, keyPEM := harness.SelfSignedPEM(t, "shop.example")
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	yaml := localBackendYAML("shop", "shop.example", port, `{nginx.ingress.kubernetes.io/ssl-redirect: "false"}`, "[{hosts: [shop.example], secretName: shop-tls}]") +
		fmt.Sprintf("---\napiVersion: v1\nkind: Secret\nmetadata: {name: shop-tls, namespace: demo}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: %s\n  tls.key: %s\n",
			base64.StdEncoding.EncodeToString(certPEM), base64.StdEncoding.EncodeToString(keyPEM)) +
		// An Ingress whose Service does not exist, and one whose Service
		// has no endpoints.
		`---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: lost, namespace: demo}
spec:
  ingressClassName: switchyard
  rules:
  - host: lost.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: no-such-service, port: {number: 80}}}}
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: demo}
spec:
  ports:
  - {name: http, port: 80}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: empty, namespace: demo}
spec:
  ingressClassName: switchyard
  rules:
  - host: empty.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: empty, port: {name: http}}}}
`
	if err := os.WriteFile(filepath.Join(dir, "40-metrics.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--manifests", dir, "--http-port", strconv.Itoa(freePort(t)),
		"--https-port", strconv.Itoa(freePort(t)), "--status-port", strconv.Itoa(freePort(t)), "--listen-address", "127.0.0.1"}
	if plane == "nginx" {
		args = append(args, nginxPlaneArgs(t)...)
	}
	ctx, l := startController(t, args)

	for range 3 {
		if code := metricsGet(ctx, t, "http://"+l.HTTP+"/", "shop.example"); code != http.StatusOK {
			t.Fatalf("shop.example answered %d; want 200", code)
		}
	}
	if code := metricsGet(ctx, t, "http://"+l.HTTP+"/", "unknown.example"); code != http.StatusNotFound {
		t.Fatalf("unknown.example answered %d; want 404", code)
	}

	// With nginx the request metrics arrive with the shim's next flush.
	families := scrapeUntil(ctx, t, "http://"+l.Status+"/metrics", func(fams map[string]*dto.MetricFamily) bool {
		return findMetric(fams["nginx_ingress_controller_requests"], map[string]string{"ingress": "shop", "status": "200"}) != nil
	})

	exceptions := metricsExceptions[plane]
	used := map[string]bool{}
	for _, f := range facts {
		fam, found := familyOf(families, f.series)
		if reason, ok := exceptions[f.series]; ok {
			used[f.series] = true
			if found {
				t.Errorf("%s is exposed; remove its exception (%s)", f.series, reason)
			} else {
				t.Logf("missing by exception: %s: %s", f.series, reason)
			}
			continue
		}
		if !found {
			t.Errorf("/metrics has no %s (ingress-nginx dashboards select on it)", f.series)
			continue
		}
		for _, label := range f.labels {
			want, required := exposedLabel(fam, f.series, label)
			if !required {
				continue
			}
			key := f.series + "{" + label + "}"
			has := len(fam.GetMetric()) > 0
			for _, m := range fam.GetMetric() {
				if labelValue(m, want) == nil {
					has = false
				}
			}
			if reason, ok := exceptions[key]; ok {
				used[key] = true
				if has {
					t.Errorf("%s has label %s; remove its exception (%s)", f.series, want, reason)
				}
				continue
			}
			if !has {
				t.Errorf("%s: some series lack label %q (the dashboards' %q)", f.series, want, label)
			}
		}
	}
	for key, reason := range exceptions {
		if !used[key] {
			t.Errorf("exception %s (%s) names nothing in the dashboard list", key, reason)
		}
	}

	// The constant labels, as ingress-nginx sets them.
	want := map[string]string{"controller_class": "switchyard.dev/ingress-controller", "controller_namespace": "ingress-nginx", "controller_pod": "switchyard-7d9f-abcde"}
	if findMetric(families["nginx_ingress_controller_requests"], want) == nil {
		t.Errorf("nginx_ingress_controller_requests has no series with %v", want)
	}
	for _, name := range []string{"nginx_ingress_controller_config_hash", "nginx_ingress_controller_config_last_reload_successful",
		"nginx_ingress_controller_success", "nginx_ingress_controller_leader_election_status", "nginx_ingress_controller_nginx_process_num_procs",
		"nginx_ingress_controller_build_info"} {
		if findMetric(families[name], want) == nil {
			t.Errorf("%s has no series with %v", name, want)
		}
	}
	gauge := func(name string, labels map[string]string) float64 {
		t.Helper()
		m := findMetric(families[name], labels)
		if m == nil {
			t.Errorf("/metrics has no %s%v", name, labels)
			return -1
		}
		return m.GetGauge().GetValue()
	}
	if got := gauge("nginx_ingress_controller_config_hash", nil); got <= 0 {
		t.Errorf("config_hash = %v; want a hash", got)
	}
	if got := gauge("nginx_ingress_controller_config_last_reload_successful", nil); got != 1 {
		t.Errorf("config_last_reload_successful = %v; want 1", got)
	}
	if got := gauge("nginx_ingress_controller_ssl_expire_time_seconds", map[string]string{"host": "shop.example", "secret_name": "shop-tls", "namespace": "demo"}); got != float64(cert.NotAfter.Unix()) {
		t.Errorf("ssl_expire_time_seconds{host=shop.example} = %v; want %d", got, cert.NotAfter.Unix())
	}
	if got := gauge("nginx_ingress_controller_ssl_certificate_info", map[string]string{"host": "shop.example", "serial_number": cert.SerialNumber.String(),
		"issuer_common_name": "shop.example", "public_key_algorithm": "ECDSA"}); got != 1 {
		t.Errorf("ssl_certificate_info{host=shop.example} = %v; want 1", got)
	}
	for _, c := range []struct {
		ingress, typ string
		want         float64
	}{
		{"lost", orphanNoService, 1},
		{"empty", orphanNoService, 0},
		{"empty", orphanNoEndpoint, 1},
		{"shop", orphanNoService, 0},
		{"shop", orphanNoEndpoint, 0},
	} {
		if got := gauge("nginx_ingress_controller_orphan_ingress", map[string]string{"namespace": "demo", "ingress": c.ingress, "type": c.typ}); got != c.want {
			t.Errorf("orphan_ingress{ingress=%s,type=%s} = %v; want %v", c.ingress, c.typ, got, c.want)
		}
	}
	// Without --publish-service no election runs: a follower.
	if got := gauge("nginx_ingress_controller_leader_election_status", map[string]string{"name": "switchyard-leader"}); got != 0 {
		t.Errorf("leader_election_status = %v; want 0", got)
	}
	// nginx: the master and at least one worker; go: this process.
	minProcs := 1.0
	if plane == "nginx" {
		minProcs = 2
	}
	if got := gauge("nginx_ingress_controller_nginx_process_num_procs", nil); got < minProcs {
		t.Errorf("nginx_process_num_procs = %v; want at least %v", got, minProcs)
	}
	if got := gauge("nginx_ingress_controller_nginx_process_resident_memory_bytes", nil); got <= 0 {
		t.Errorf("nginx_process_resident_memory_bytes = %v; want > 0", got)
	}
	if plane == "nginx" {
		if got := gauge("nginx_ingress_controller_nginx_process_connections", map[string]string{"state": "active"}); got < 1 {
			t.Errorf("nginx_process_connections{state=active} = %v; want at least 1 (the scrape's own)", got)
		}
	}
}

// familyOf finds the family of a series name: the family itself, or a
// histogram's _bucket, _sum or _count, or a summary's _sum or _count.
func familyOf(fams map[string]*dto.MetricFamily, series string) (*dto.MetricFamily, bool) {
	if f, ok := fams[series]; ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(series, suffix)
		if !ok {
			continue
		}
		f, ok := fams[base]
		if !ok {
			return nil, false
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			return f, true
		case dto.MetricType_SUMMARY:
			return f, suffix != "_bucket"
		}
	}
	return nil, false
}

// exposedLabel maps a label the dashboards use to the label the controller
// must expose, and says whether it must: see the fact list's header.
func exposedLabel(fam *dto.MetricFamily, series, label string) (string, bool) {
	switch {
	case scrapeTargetLabels[label]:
		return "", false
	case label == "le":
		// A histogram's buckets.
		return "", !strings.HasSuffix(series, "_bucket") || fam.GetType() != dto.MetricType_HISTOGRAM
	case label == "exported_namespace":
		return "namespace", true
	case label == "namespace":
		// The target's namespace, unless the metric has its own.
		for _, m := range fam.GetMetric() {
			if labelValue(m, "namespace") != nil {
				return "namespace", true
			}
		}
		return "", false
	}
	return label, true
}

func labelValue(m *dto.Metric, name string) *string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			v := lp.GetValue()
			return &v
		}
	}
	return nil
}

// findMetric returns the first metric of fam carrying all of labels.
func findMetric(fam *dto.MetricFamily, labels map[string]string) *dto.Metric {
	for _, m := range fam.GetMetric() {
		ok := true
		for k, v := range labels {
			if got := labelValue(m, k); got == nil || *got != v {
				ok = false
				break
			}
		}
		if ok {
			return m
		}
	}
	return nil
}

func metricsGet(ctx context.Context, t *testing.T, url, host string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// scrapeUntil scrapes url until done accepts the families, and returns
// them; it fails the test when ctx ends first.
func scrapeUntil(ctx context.Context, t *testing.T, url string, done func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		fams, err := scrape(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if done(fams) {
			return fams
		}
		select {
		case <-ctx.Done():
			t.Fatalf("scraping %s: %v; last scrape has %d families", url, ctx.Err(), len(fams))
		case <-tick.C:
		}
	}
}

func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse the scrape: %w", err)
	}
	return fams, nil
}

func TestMetricsStubStatus(t *testing.T) {
	page := "Active connections: 3 \nserver accepts handled requests\n 17 16 42 \nReading: 1 Writing: 2 Waiting: 0 \n"
	got, err := parseStubStatus(page)
	if err != nil {
		t.Fatal(err)
	}
	want := stubStatus{active: 3, accepted: 17, handled: 16, requests: 42, reading: 1, writing: 2, waiting: 0}
	if got != want {
		t.Errorf("parseStubStatus = %+v; want %+v", got, want)
	}
	for _, bad := range []string{"", "Active connections: x\nserver accepts handled requests\n 1 1 1\nReading: 0 Writing: 0 Waiting: 0\n", "<html>404</html>"} {
		if _, err := parseStubStatus(bad); err == nil {
			t.Errorf("parseStubStatus(%q) succeeded; want an error", bad)
		}
	}
}
