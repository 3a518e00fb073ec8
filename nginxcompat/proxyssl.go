package nginxcompat

import (
	"bytes"
	"crypto/sha1" // #nosec G505 -- file names only
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// proxySSLV is a location's proxy-ssl-*, as ingress-nginx's template writes
// its proxy_ssl_* lines; the PEM files are written beside the client CA
// bundles (WriteClientCAs), mode 0600.
type proxySSLV struct {
	CAFile, CertFile   string
	Ciphers, Protocols string
	Verify, ServerName string // on or off
	Depth              int
	Name               string // empty: nginx's $proxy_host (upstream_balancer)
	// Upstream is the upstream block the location proxies to: one per
	// distinct settings, each with its own keep-alive cache, since nginx
	// reuses a kept-alive connection by peer address alone, so a location
	// that verifies its upstream would otherwise be handed a connection
	// another location opened without verifying (or with another client
	// certificate). "upstream_balancer_tls_" and 16 hex digits of the
	// settings' SHA-1.
	Upstream          string
	caPEM, certKeyPEM string
}

// proxySSLView checks u again where a value reaches nginx.conf bare (the
// builder validated it) and names its files.
func proxySSLView(u *model.UpstreamTLS, certDir string) (*proxySSLV, error) {
	if !strings.HasPrefix(u.CA, "-----BEGIN CERTIFICATE-----") || strings.Contains(u.CA, "PRIVATE KEY") {
		return nil, fmt.Errorf("proxy-ssl-secret: ca.crt is not PEM certificates")
	}
	if !model.ValidCipherList(u.Ciphers) {
		return nil, fmt.Errorf("proxy-ssl-ciphers %q", u.Ciphers)
	}
	for _, p := range u.Protocols {
		if p != "TLSv1.2" && p != "TLSv1.3" {
			return nil, fmt.Errorf("proxy-ssl-protocols %q", p)
		}
	}
	if len(u.Protocols) == 0 {
		return nil, fmt.Errorf("proxy-ssl-protocols: none")
	}
	if u.Name != "" && (!validHost(u.Name) || strings.HasPrefix(u.Name, "*.") || u.Name == model.CatchAllHost) {
		return nil, fmt.Errorf("proxy-ssl-name %q", u.Name)
	}
	if u.VerifyDepth < 0 || u.VerifyDepth > 100 {
		return nil, fmt.Errorf("proxy-ssl-verify-depth %d", u.VerifyDepth)
	}
	v := &proxySSLV{CAFile: pemFile(certDir, "upstream-ca-", ".crt", u.CA), Ciphers: u.Ciphers,
		Protocols: strings.Join(u.Protocols, " "), Verify: onoff(u.Verify), ServerName: onoff(u.ServerName),
		Depth: u.VerifyDepth, Name: u.Name, caPEM: u.CA}
	if u.CertificateKey != "" {
		v.CertFile = pemFile(certDir, "upstream-cert-", ".key", u.CertificateKey)
		v.certKeyPEM = u.CertificateKey
	}
	var lines bytes.Buffer
	writeProxySSL(&lines, v)
	h := sha1.Sum(lines.Bytes()) // #nosec G401 -- a name
	v.Upstream = "upstream_balancer_tls_" + hex.EncodeToString(h[:8])
	return v, nil
}

// pemFile names a file of dir by its content: prefix, 10 bytes of its SHA-1
// in hex, ext. An unchanged file keeps its name across renders.
func pemFile(dir, prefix, ext, pem string) string {
	h := sha1.Sum([]byte(pem)) // #nosec G401 -- a file name
	return filepath.Join(dir, prefix+hex.EncodeToString(h[:10])+ext)
}

// writeProxySSL writes a location's proxy_ssl_* lines.
func writeProxySSL(b *bytes.Buffer, v *proxySSLV) {
	b.WriteString("\n            proxy_ssl_trusted_certificate ")
	b.WriteString(quote(v.CAFile))
	b.WriteString(";\n            proxy_ssl_ciphers ")
	b.WriteString(v.Ciphers)
	b.WriteString(";\n            proxy_ssl_protocols ")
	b.WriteString(v.Protocols)
	b.WriteString(";\n            proxy_ssl_verify ")
	b.WriteString(v.Verify)
	b.WriteString(";\n            proxy_ssl_verify_depth ")
	writeInt(b, v.Depth)
	b.WriteByte(';')
	if v.Name != "" {
		b.WriteString("\n            proxy_ssl_name ")
		b.WriteString(v.Name)
		b.WriteByte(';')
	}
	b.WriteString("\n            proxy_ssl_server_name ")
	b.WriteString(v.ServerName)
	b.WriteByte(';')
	if v.CertFile != "" {
		b.WriteString("\n            proxy_ssl_certificate ")
		b.WriteString(quote(v.CertFile))
		b.WriteString(";\n            proxy_ssl_certificate_key ")
		b.WriteString(quote(v.CertFile))
		b.WriteByte(';')
	}
}
