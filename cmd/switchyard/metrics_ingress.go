package main

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"hash/fnv"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"k8s.io/klog/v2"
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
// and orphan_ingress.
type ingressCollector struct {
	// immutable
	class, electionID string

	// atomic
	src atomic.Pointer[ingressSource]

	// guarded by mu
	mu       sync.Mutex
	hashOf   *model.Configuration // the configuration hash was computed for
	hash     uint64
	certInfo map[string]certInfo // by Certificate.UID and PEM
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

var (
	descConfigHash = prometheus.NewDesc(ingressNS+"_config_hash", "Running configuration hash actually running", nil, nil)
	// ingress-nginx's label sets: "namespace" is the Secret's, "class" the
	// controller class.
	descSSLExpire = prometheus.NewDesc(ingressNS+"_ssl_expire_time_seconds", "Number of seconds since 1970 to the SSL Certificate expire.",
		[]string{"namespace", "class", "host", "secret_name", "identifier"}, nil)
	descSSLInfo = prometheus.NewDesc(ingressNS+"_ssl_certificate_info", "Hold all labels associated to a certificate",
		[]string{"namespace", "class", "host", "secret_name", "identifier", "issuer_organization", "issuer_common_name", "serial_number", "public_key_algorithm"}, nil)
	descLeader = prometheus.NewDesc(ingressNS+"_leader_election_status",
		"Gauge reporting status of the leader election, 0 indicates follower, 1 indicates leader. 'name' is the string used to identify the lease", []string{"name"}, nil)
	descBuildInfo = prometheus.NewDesc(ingressNS+"_build_info", "A metric with a constant '1' labeled with information about the build.",
		[]string{"release", "build", "repository"}, nil)
	descOrphan = prometheus.NewDesc(ingressNS+"_orphan_ingress",
		"Gauge reporting status of ingress orphanity, 1 indicates orphaned ingress. 'type' is no-service or no-endpoint.", []string{"namespace", "ingress", "type"}, nil)
)

func newIngressCollector(class, electionID string) *ingressCollector {
	return &ingressCollector{class: class, electionID: electionID, certInfo: map[string]certInfo{}}
}

// attach sets the source read at scrape time; before it the collector
// exports nothing.
func (c *ingressCollector) attach(src ingressSource) { c.src.Store(&src) }

func (c *ingressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConfigHash
	ch <- descSSLExpire
	ch <- descSSLInfo
	ch <- descLeader
	ch <- descOrphan
	ch <- descBuildInfo
}

func (c *ingressCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.src.Load()
	if p == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, version, buildRevision(), "https://github.com/switchyard-proxy/switchyard")
	src := *p
	leader := 0.0
	if src.IsLeader() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader, c.electionID)
	cfg := src.Current()
	if cfg == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descConfigHash, prometheus.GaugeValue, float64(c.configHash(cfg)))
	c.collectCertificates(ch, cfg)
	collectOrphans(ch, cfg)
}

// configHash hashes the configuration's content, without its Version and
// Errors, so replicas serving the same objects report the same value (as
// ingress-nginx's hash of its configuration). Called with mu held; computed
// once per configuration.
func (c *ingressCollector) configHash(cfg *model.Configuration) uint64 {
	if c.hashOf == cfg {
		return c.hash
	}
	content := *cfg
	content.Version, content.Errors = 0, nil
	h := fnv.New64a()
	if err := json.NewEncoder(h).Encode(&content); err != nil {
		klog.ErrorS(err, "hash the configuration")
		return 0
	}
	c.hashOf, c.hash = cfg, h.Sum64()
	return c.hash
}

// collectCertificates exports the expiry and issuer of the certificate of
// each server with TLS, as ingress-nginx: one series per host and
// certificate. Called with mu held.
func (c *ingressCollector) collectCertificates(ch chan<- prometheus.Metric, cfg *model.Configuration) {
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
			ch <- prometheus.MustNewConstMetric(descSSLExpire, prometheus.GaugeValue, float64(cert.NotAfter),
				cert.Secret.Namespace, c.class, s.Hostname, cert.Secret.Name, info.identifier)
		}
		if info.ok {
			ch <- prometheus.MustNewConstMetric(descSSLInfo, prometheus.GaugeValue, 1,
				cert.Secret.Namespace, c.class, s.Hostname, cert.Secret.Name, info.identifier, info.issuerOrg, info.issuerCN, info.serial, info.keyAlg)
		}
	}
	for uid := range c.certInfo {
		if !seen[uid] {
			delete(c.certInfo, uid)
		}
	}
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

// collectOrphans exports orphan_ingress for every Ingress path backed by a
// Service: no-service is 1 when the builder found no usable Service port for
// it (the Service is missing, lacks the port, or is an unusable
// ExternalName: its backend's HasService is false); no-endpoint
// is 1 when the Service was found but the backend has no endpoints. An
// Ingress with several paths is orphaned if any of them is, as ingress-nginx
// sets the gauge per path.
func collectOrphans(ch chan<- prometheus.Metric, cfg *model.Configuration) {
	backends := make(map[string]int, len(cfg.Backends))
	for i := range cfg.Backends {
		backends[cfg.Backends[i].Name] = i
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
	for i := range cfg.Servers {
		for j := range cfg.Servers[i].Locations {
			loc := &cfg.Servers[i].Locations[j]
			if loc.Ingress.Name == "" || loc.Service == "" || loc.IsDefaultBackend {
				continue
			}
			bi, ok := backends[loc.Backend]
			if !ok {
				continue
			}
			be := &cfg.Backends[bi]
			noService := !be.HasService
			set(key{loc.Ingress.Namespace, loc.Ingress.Name, orphanNoService}, noService)
			if !noService {
				set(key{loc.Ingress.Namespace, loc.Ingress.Name, orphanNoEndpoint}, len(be.Endpoints) == 0)
			}
		}
	}
	for k, v := range state {
		ch <- prometheus.MustNewConstMetric(descOrphan, prometheus.GaugeValue, v, k.ns, k.name, k.typ)
	}
}
