package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

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
// build_info, config_hash, leader_election_status through the registry,
// and the families with a series per Ingress or TLS host (orphan_ingress,
// ssl_certificate_info, ssl_expire_time_seconds) in the text format
// (metrics_text.go). Its registry series carry the controller labels
// themselves (it is registered unwrapped: a wrapping Registerer builds a
// new Desc for every series of every scrape), and everything derived from
// a Configuration is computed once per Configuration, most of it once per
// build (metrics_cache.go).
type ingressCollector struct {
	// immutable
	class, electionID string
	d                 ingressDescs
	buildInfo         prometheus.Metric

	// atomic
	src atomic.Pointer[ingressSource]

	// guarded by mu
	mu       sync.Mutex
	certInfo map[string]*certInfo // by Certificate.UID, for its PEM
	// shape is what was derived from the last build's structure;
	// current what was derived from the last Configuration scraped.
	shape   *configShape
	current *configMetrics
}

// ingressDescs are the ingressCollector's descriptors, with the controller
// labels as constant labels.
type ingressDescs struct {
	configHash, leader, buildInfo *prometheus.Desc
}

// certInfo is what ssl_certificate_info says about a certificate.
// Immutable once parsed.
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
// labels labels.
func newIngressDescs(labels prometheus.Labels) ingressDescs {
	return ingressDescs{
		configHash: prometheus.NewDesc(ingressNS+"_config_hash", "Running configuration hash actually running", nil, labels),
		leader: prometheus.NewDesc(ingressNS+"_leader_election_status",
			"Gauge reporting status of the leader election, 0 indicates follower, 1 indicates leader. 'name' is the string used to identify the lease", []string{"name"}, labels),
		buildInfo: prometheus.NewDesc(ingressNS+"_build_info", "A metric with a constant '1' labeled with information about the build.",
			[]string{"release", "build", "repository"}, labels),
	}
}

// newIngressCollector returns the collector of a controller whose
// controller labels (controllerLabels) are labels.
func newIngressCollector(class, electionID string, labels prometheus.Labels) *ingressCollector {
	c := &ingressCollector{class: class, electionID: electionID, d: newIngressDescs(labels), certInfo: map[string]*certInfo{}}
	c.buildInfo = prometheus.MustNewConstMetric(c.d.buildInfo, prometheus.GaugeValue, 1, version, buildRevision(), "https://github.com/switchyard-proxy/switchyard")
	return c
}

// attach sets the source read at scrape time; before it the collector
// exports nothing.
func (c *ingressCollector) attach(src ingressSource) { c.src.Store(&src) }

func (c *ingressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.d.configHash
	ch <- c.d.leader
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
	if cfg := src.Current(); cfg != nil {
		ch <- c.metricsOf(cfg).hash
	}
}

// Label sets as ingress-nginx's: "namespace" is the Secret's (the
// Ingress's for orphan_ingress), "class" the controller class.
var (
	orphanLabelNames    = []string{"namespace", "ingress", "type"}
	sslExpireLabels     = []string{"namespace", "class", "host", "secret_name", "identifier"}
	sslInfoLabels       = []string{"namespace", "class", "host", "secret_name", "identifier", "issuer_organization", "issuer_common_name", "serial_number", "public_key_algorithm"}
	ingressTextFamilies = []textFamily{
		{name: ingressNS + "_orphan_ingress", typ: "gauge", labels: orphanLabelNames, write: writeOrphans,
			help: "Gauge reporting status of ingress orphanity, 1 indicates orphaned ingress. 'type' is no-service or no-endpoint."},
		{name: ingressNS + "_ssl_certificate_info", typ: "gauge", labels: sslInfoLabels, write: writeCertInfo,
			help: "Hold all labels associated to a certificate"},
		{name: ingressNS + "_ssl_expire_time_seconds", typ: "gauge", labels: sslExpireLabels, write: writeCertExpiry,
			help: "Number of seconds since 1970 to the SSL Certificate expire."},
	}
)

// ingressState returns the Configuration of the scrape and what was derived
// from it; a nil cfg when there is none yet.
func (s *textScrape) ingressState() ingressSnapshot {
	if !s.ingressTaken {
		s.ingressTaken = true
		c := s.h.ingress
		if p := c.src.Load(); p != nil {
			if cfg := (*p).Current(); cfg != nil {
				s.ingress = ingressSnapshot{cfg: cfg, shape: c.metricsOf(cfg).shape}
			}
		}
	}
	return s.ingress
}

// ingressSnapshot is a Configuration and its shape.
type ingressSnapshot struct {
	cfg   *model.Configuration
	shape *configShape
}

// writeOrphans writes orphan_ingress: {controller labels, ingress,
// namespace, type}.
func writeOrphans(w *textWriter, s *textScrape) {
	st := s.ingressState()
	if st.cfg == nil {
		return
	}
	for i := range st.shape.orphans {
		o := &st.shape.orphans[i]
		line := w.begin()
		line = append(line, '{')
		line = s.h.constFirst(line)
		line = appendLabel(line, "ingress", o.name)
		line = append(line, ',')
		line = appendLabel(line, "namespace", o.ns)
		line = append(line, ',')
		line = appendLabel(line, "type", o.typ)
		line = append(line, '}')
		w.end(appendValue(line, o.value(st.cfg)))
	}
}

// writeCertExpiry writes ssl_expire_time_seconds: {class, controller
// labels, host, identifier, namespace, secret_name}.
func writeCertExpiry(w *textWriter, s *textScrape) {
	st := s.ingressState()
	if st.cfg == nil {
		return
	}
	for i := range st.shape.certs {
		cs := &st.shape.certs[i]
		if cs.notAfter <= 0 {
			continue
		}
		line := cs.appendHead(w.begin(), s.h)
		line = append(line, ',')
		line = appendLabel(line, "namespace", cs.namespace)
		line = append(line, ',')
		line = appendLabel(line, "secret_name", cs.secret)
		line = append(line, '}')
		w.end(appendValue(line, float64(cs.notAfter)))
	}
}

// writeCertInfo writes ssl_certificate_info: {class, controller labels,
// host, identifier, issuer_common_name, issuer_organization, namespace,
// public_key_algorithm, secret_name, serial_number}.
func writeCertInfo(w *textWriter, s *textScrape) {
	st := s.ingressState()
	if st.cfg == nil {
		return
	}
	for i := range st.shape.certs {
		cs := &st.shape.certs[i]
		if !cs.info.ok {
			continue
		}
		line := cs.appendHead(w.begin(), s.h)
		for _, l := range [...]struct{ name, value string }{
			{"issuer_common_name", cs.info.issuerCN}, {"issuer_organization", cs.info.issuerOrg}, {"namespace", cs.namespace},
			{"public_key_algorithm", cs.info.keyAlg}, {"secret_name", cs.secret}, {"serial_number", cs.info.serial},
		} {
			line = append(line, ',')
			line = appendLabel(line, l.name, l.value)
		}
		line = append(line, '}')
		w.end(appendValue(line, 1))
	}
}

// certSeries is the certificate of one server with TLS: a series of
// ssl_expire_time_seconds when it has an expiry, one of
// ssl_certificate_info when it parsed.
type certSeries struct {
	host, namespace, secret string
	notAfter                int64
	info                    *certInfo
}

// appendHead appends the labels the two certificate families share:
// {class, controller labels, host, identifier.
func (cs *certSeries) appendHead(b []byte, h *metricsHandler) []byte {
	b = append(b, '{')
	b = appendLabel(b, "class", h.ingress.class)
	b = h.constAfter(b)
	b = append(b, ',')
	b = appendLabel(b, "host", cs.host)
	b = append(b, ',')
	return appendLabel(b, "identifier", cs.info.identifier)
}

// collectCertificates returns the certificate of each server with TLS, as
// ingress-nginx: one series per host and certificate, sorted by their
// labels (host, identifier, namespace, secret). Called with mu held.
func (c *ingressCollector) collectCertificates(cfg *model.Configuration) []certSeries {
	var out []certSeries
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
		out = append(out, certSeries{host: s.Hostname, namespace: cert.Secret.Namespace, secret: cert.Secret.Name, notAfter: cert.NotAfter, info: c.info(cert)})
	}
	for uid := range c.certInfo {
		if !seen[uid] {
			delete(c.certInfo, uid)
		}
	}
	slices.SortFunc(out, func(a, b certSeries) int {
		return cmpStrings(a.host, b.host, a.info.identifier, b.info.identifier, a.namespace, b.namespace, a.secret, b.secret)
	})
	return out
}

// info parses the leaf certificate of cert once per PEM. Called with mu
// held.
func (c *ingressCollector) info(cert model.Certificate) *certInfo {
	if ci, ok := c.certInfo[cert.UID]; ok && ci.pem == cert.PEM {
		return ci
	}
	ci := &certInfo{pem: cert.PEM}
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
