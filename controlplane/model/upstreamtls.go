package model

// UpstreamTLS is how a data plane speaks TLS to an HTTPS upstream: the
// proxy-ssl-* annotations, as ingress-nginx writes them into proxy_ssl_*
// directives. Without it, an HTTPS upstream's certificate is not verified
// and no SNI or client certificate is sent (nginx's defaults).
type UpstreamTLS struct {
	// Secret is proxy-ssl-secret, in the Ingress's namespace.
	Secret ObjectRef `json:"secret"`
	// CA is the Secret's ca.crt: PEM certificates that verification trusts.
	CA string `json:"ca"`
	// CertificateKey is the Secret's tls.crt and tls.key, PEM, sent as the
	// client certificate; empty when the Secret holds none.
	CertificateKey string `json:"certificateKey,omitempty"`
	// Verify is proxy-ssl-verify: "on" checks the upstream's chain against
	// CA and its name against Name (default off).
	Verify bool `json:"verify,omitempty"`
	// VerifyDepth is proxy-ssl-verify-depth: at most this many certificates
	// above the upstream's own in its chain (default 1).
	VerifyDepth int `json:"verifyDepth"`
	// Name is proxy-ssl-name, the name the upstream's certificate must
	// hold and, with ServerName, the SNI sent. Empty means nginx's
	// $proxy_host, which ingress-nginx's proxy_pass makes the word
	// UpstreamTLSDefaultName.
	Name string `json:"name,omitempty"`
	// ServerName is proxy-ssl-server-name: send Name as SNI (default off).
	ServerName bool `json:"serverName,omitempty"`
	// Protocols is proxy-ssl-protocols, sorted, each TLSv1.2 or TLSv1.3
	// (default TLSv1.2 alone, as ingress-nginx).
	Protocols []string `json:"protocols"`
	// Ciphers is proxy-ssl-ciphers, an OpenSSL cipher list (default
	// DEFAULT).
	Ciphers string `json:"ciphers"`
	// CipherSuites are Ciphers as Go's TLS 1.2 suite IDs, for the Go data
	// plane; nil means Go's defaults, which is what DEFAULT and any list
	// with words Go does not know become (the builder says so).
	CipherSuites []uint16 `json:"cipherSuites,omitempty"`
}

// UpstreamTLSDefaultName is the name an upstream's certificate is checked
// against, and sent as SNI, without proxy-ssl-name: nginx's $proxy_host of
// ingress-nginx's "proxy_pass https://upstream_balancer".
const UpstreamTLSDefaultName = "upstream_balancer"

// VerifyName is the name the upstream's certificate must hold.
func (u *UpstreamTLS) VerifyName() string {
	if u.Name != "" {
		return u.Name
	}
	return UpstreamTLSDefaultName
}
