package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// controllerLabels are the constant labels ingress-nginx puts on its
// metrics: the controller class (--controller-class), the pod's namespace
// (POD_NAMESPACE, "default" when unset, as ingress-nginx) and the pod's name
// (POD_NAME). The Grafana dashboards select on all three.
func controllerLabels(class string) prometheus.Labels {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	return prometheus.Labels{"controller_class": class, "controller_namespace": ns, "controller_pod": os.Getenv("POD_NAME")}
}

// ingressSource is what the ingress collector reads at scrape time: the
// configuration last handed to the sinks (nil before the first) and whether
// this controller holds the Lease. *controlplane.Controller implements it.
type ingressSource interface {
	Current() *model.Configuration
	IsLeader() bool
}

// ingressCollector exports, at scrape time, ingress-nginx's metrics that
// describe the controller and its configuration rather than requests:
// build_info, config_hash, the certificate metrics, leader_election_status
// and orphan_ingress. Its series carry the controller labels themselves
// (it is registered unwrapped: a wrapping Registerer builds a new Desc for
// every series of every scrape), and everything derived from a
// Configuration is computed once per Configuration, most of it once per
// build (metrics_cache.go): a scrape sends what is cached.
type ingressCollector struct {
	// immutable
	class, electionID string
	d                 ingressDescs
	// constPairs are the controller labels as label pairs, sorted.
	constPairs []*dto.LabelPair
	buildInfo  prometheus.Metric

	// atomic
	src atomic.Pointer[ingressSource]

	// guarded by mu
	mu       sync.Mutex
	certInfo map[string]certInfo // by Certificate.UID and PEM
	// shape is what was derived from the last build's structure;
	// current what was derived from the last Configuration scraped.
	shape   *configShape
	current *configMetrics
}

// ingressDescs are the ingressCollector's descriptors, with the controller
// labels as constant labels.
type ingressDescs struct {
	configHash, sslExpire, sslInfo, leader, buildInfo, orphan *prometheus.Desc
}

// certInfo is what ssl_certificate_info says about a certificate.
type certInfo struct {
	pem                                 string
	issuerOrg, issuerCN, serial, keyAlg string
	// identifier is ingress-nginx's: the issuer's serialNumber attribute,
	// "-", the certificate's serial number.
	identifier string
	ok         bool
}

const ingressNS = "nginx_ingress_controller"

// newIngressDescs returns ingress-nginx's descriptors with the constant
// labels labels. Label sets as ingress-nginx's: "namespace" is the
// Secret's, "class" the controller class.
func newIngressDescs(labels prometheus.Labels) ingressDescs {
	return ingressDescs{
		configHash: prometheus.NewDesc(ingressNS+"_config_hash", "Running configuration hash actually running", nil, labels),
		sslExpire: prometheus.NewDesc(ingressNS+"_ssl_expire_time_seconds", "Number of seconds since 1970 to the SSL Certificate expire.",
			[]string{"namespace", "class", "host", "secret_name", "identifier"}, labels),
		sslInfo: prometheus.NewDesc(ingressNS+"_ssl_certificate_info", "Hold all labels associated to a certificate",
			[]string{"namespace", "class", "host", "secret_name", "identifier", "issuer_organization", "issuer_common_name", "serial_number", "public_key_algorithm"}, labels),
		leader: prometheus.NewDesc(ingressNS+"_leader_election_status",
			"Gauge reporting status of the leader election, 0 indicates follower, 1 indicates leader. 'name' is the string used to identify the lease", []string{"name"}, labels),
		buildInfo: prometheus.NewDesc(ingressNS+"_build_info", "A metric with a constant '1' labeled with information about the build.",
			[]string{"release", "build", "repository"}, labels),
		orphan: prometheus.NewDesc(ingressNS+"_orphan_ingress",
			"Gauge reporting status of ingress orphanity, 1 indicates orphaned ingress. 'type' is no-service or no-endpoint.", []string{"namespace", "ingress", "type"}, labels),
	}
}

// newIngressCollector returns the collector of a controller whose
// controller labels (controllerLabels) are labels.
func newIngressCollector(class, electionID string, labels prometheus.Labels) *ingressCollector {
	c := &ingressCollector{class: class, electionID: electionID, d: newIngressDescs(labels),
		constPairs: labelPairs(labels), certInfo: map[string]certInfo{}}
	c.buildInfo = prometheus.MustNewConstMetric(c.d.buildInfo, prometheus.GaugeValue, 1, version, buildRevision(), "https://github.com/switchyard-proxy/switchyard")
	return c
}

// attach sets the source read at scrape time; before it the collector
// exports nothing.
func (c *ingressCollector) attach(src ingressSource) { c.src.Store(&src) }

func (c *ingressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.d.configHash
	ch <- c.d.sslExpire
	ch <- c.d.sslInfo
	ch <- c.d.leader
	ch <- c.d.orphan
	ch <- c.d.buildInfo
}

func (c *ingressCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.src.Load()
	if p == nil {
		return
	}
	ch <- c.buildInfo
	src := *p
	leader := 0.0
	if src.IsLeader() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(c.d.leader, prometheus.GaugeValue, leader, c.electionID)
	cfg := src.Current()
	if cfg == nil {
		return
	}
	m := c.metricsOf(cfg)
	ch <- m.hash
	for _, s := range m.shape.certs {
		ch <- s
	}
	for i := range m.orphans {
		ch <- &m.orphans[i]
	}
}

// collectCertificates returns the expiry and issuer of the certificate of
// each server with TLS, as ingress-nginx: one series per host and
// certificate. Called with mu held.
func (c *ingressCollector) collectCertificates(cfg *model.Configuration) []prometheus.Metric {
	var out []prometheus.Metric
	seen := make(map[string]bool, len(cfg.Certificates))
	for i := range cfg.Servers {
		s := &cfg.Servers[i]
		if s.TLS == nil || s.Hostname == model.CatchAllHost || s.Hostname == "" {
			continue
		}
		cert, ok := cfg.Certificates[s.TLS.CertificateUID]
		if !ok {
			continue
		}
		seen[cert.UID] = true
		info := c.info(cert)
		if cert.NotAfter > 0 {
			out = append(out, prometheus.MustNewConstMetric(c.d.sslExpire, prometheus.GaugeValue, float64(cert.NotAfter),
				cert.Secret.Namespace, c.class, s.Hostname, cert.Secret.Name, info.identifier))
		}
		if info.ok {
			out = append(out, prometheus.MustNewConstMetric(c.d.sslInfo, prometheus.GaugeValue, 1,
				cert.Secret.Namespace, c.class, s.Hostname, cert.Secret.Name, info.identifier, info.issuerOrg, info.issuerCN, info.serial, info.keyAlg))
		}
	}
	for uid := range c.certInfo {
		if !seen[uid] {
			delete(c.certInfo, uid)
		}
	}
	return out
}

// info parses the leaf certificate of cert once per PEM. Called with mu
// held.
func (c *ingressCollector) info(cert model.Certificate) certInfo {
	if ci, ok := c.certInfo[cert.UID]; ok && ci.pem == cert.PEM {
		return ci
	}
	ci := certInfo{pem: cert.PEM}
	rest := []byte(cert.PEM)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		x, err := x509.ParseCertificate(b.Bytes)
		if err != nil || x.SerialNumber == nil {
			break
		}
		ci.issuerCN, ci.serial, ci.keyAlg, ci.ok = x.Issuer.CommonName, x.SerialNumber.String(), x.PublicKeyAlgorithm.String(), true
		ci.identifier = x.Issuer.SerialNumber + "-" + ci.serial
		if len(x.Issuer.Organization) > 0 {
			ci.issuerOrg = x.Issuer.Organization[0]
		}
		break
	}
	c.certInfo[cert.UID] = ci
	return ci
}

// buildRevision is the VCS revision the binary was built from, or "".
func buildRevision() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

// orphanNoService and orphanNoEndpoint are ingress-nginx's orphan_ingress
// types.
const (
	orphanNoService  = "no-service"
	orphanNoEndpoint = "no-endpoint"
)
