package main

import (
	"context"
	"crypto/tls"
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

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// TestControllerClientCertificates runs auth-tls-* on both data planes: a
// certificate the CA signed passes and its subject, issuer, verification
// result and (escaped) PEM reach the upstream as ingress-nginx sends them;
// no certificate, a stranger's certificate, a subject auth-tls-match-cn
// refuses and plain HTTP do not; optional lets a client without one through.
func TestControllerClientCertificates(t *testing.T) {
	ca := harness.NewCA(t, "Test CA")
	stranger := harness.NewCA(t, "Other CA")
	certs := map[string]tls.Certificate{}
	for name, c := range map[string]struct {
		ca *harness.CA
		cn string
	}{"alice": {ca, "alice"}, "bob": {ca, "bob"}, "stranger": {stranger, "alice"}} {
		cp, kp := c.ca.ClientCert(t, c.cn)
		pair, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		certs[name] = pair
	}
	for _, plane := range []string{"go", "nginx"} {
		t.Run(plane, func(t *testing.T) { testClientCertificates(t, plane, ca, certs) })
	}
}

func testClientCertificates(t *testing.T, plane string, ca *harness.CA, certs map[string]tls.Certificate) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "verify=%s\nsubject=%s\nissuer=%s\ncert=%s\n", r.Header.Get("ssl-client-verify"), r.Header.Get("ssl-client-subject-dn"),
			r.Header.Get("ssl-client-issuer-dn"), r.Header.Get("ssl-client-cert"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	dir := quickstartDir(t, freePort(t), freePort(t))
	var yaml strings.Builder
	for _, host := range []string{"mtls.example", "optional.example", "cn.example", "noca.example"} {
		name := strings.TrimSuffix(host, ".example")
		ann := map[string]string{
			"mtls":     `{nginx.ingress.kubernetes.io/auth-tls-secret: demo/client-ca, nginx.ingress.kubernetes.io/auth-tls-pass-certificate-to-upstream: "true"}`,
			"optional": `{nginx.ingress.kubernetes.io/auth-tls-secret: client-ca, nginx.ingress.kubernetes.io/auth-tls-verify-client: optional}`,
			"cn":       `{nginx.ingress.kubernetes.io/auth-tls-secret: client-ca, nginx.ingress.kubernetes.io/auth-tls-match-cn: "CN=alice", nginx.ingress.kubernetes.io/ssl-redirect: "false"}`,
			"noca":     `{nginx.ingress.kubernetes.io/auth-tls-secret: client-ca, nginx.ingress.kubernetes.io/auth-tls-verify-client: optional_no_ca}`,
		}[name]
		yaml.WriteString(localBackendYAML(name, host, port, ann, fmt.Sprintf("[{hosts: [%s], secretName: %s-tls}]", host, name)))
		certPEM, keyPEM := harness.SelfSignedPEM(t, host)
		fmt.Fprintf(&yaml, "---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s-tls, namespace: demo}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: %s\n  tls.key: %s\n",
			name, base64.StdEncoding.EncodeToString(certPEM), base64.StdEncoding.EncodeToString(keyPEM))
	}
	fmt.Fprintf(&yaml, "---\napiVersion: v1\nkind: Secret\nmetadata: {name: client-ca, namespace: demo}\ntype: Opaque\ndata:\n  ca.crt: %s\n",
		base64.StdEncoding.EncodeToString(ca.PEM))
	if err := os.WriteFile(filepath.Join(dir, "40-mtls.yaml"), []byte(yaml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--manifests", dir, "--http-port", strconv.Itoa(freePort(t)),
		"--https-port", strconv.Itoa(freePort(t)), "--status-port", strconv.Itoa(freePort(t)), "--listen-address", "127.0.0.1"}
	if plane == "nginx" {
		args = append(args, nginxPlaneArgs(t)...)
	}
	ctx, l := startController(t, args)

	do := func(scheme, host, cert string) (int, string) {
		t.Helper()
		addr := l.HTTPS
		if scheme == "http" {
			addr = l.HTTP
		}
		tc := &tls.Config{ServerName: host, InsecureSkipVerify: true} //nolint:gosec // self-signed test certificates
		if cert != "" {
			// Sent whatever CAs the server names, as a misconfigured or
			// hostile client would.
			c := certs[cert]
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
		}
		tr := &http.Transport{TLSClientConfig: tc, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
		}}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+host+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s://%s with %q: %v", scheme, host, cert, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	alicePEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certs["alice"].Certificate[0]}))
	escaped := nginxEscape(alicePEM)
	for _, tc := range []struct {
		name, scheme, host, cert string
		status                   int
		body                     string
	}{
		{"the CA's certificate", "https", "mtls.example", "alice", 200,
			"verify=SUCCESS\nsubject=CN=alice,O=Switchyard Test\nissuer=CN=Test CA,O=Switchyard Test\ncert=" + escaped + "\n"},
		{"no certificate", "https", "mtls.example", "", 400, ""},
		{"a stranger's certificate", "https", "mtls.example", "stranger", 400, ""},
		{"plain HTTP is redirected", "http", "mtls.example", "", 308, ""},
		{"optional, none sent", "https", "optional.example", "", 200, "verify=NONE\nsubject=\nissuer=\ncert=\n"},
		{"optional, a stranger's certificate", "https", "optional.example", "stranger", 400, ""},
		{"optional_no_ca, a stranger's certificate", "https", "noca.example", "stranger", 200,
			"verify=FAILED:unable to verify the first certificate\nsubject=CN=alice,O=Switchyard Test\nissuer=CN=Other CA,O=Switchyard Test\ncert=\n"},
		{"match-cn: alice", "https", "cn.example", "alice", 200, ""},
		{"match-cn: bob refused", "https", "cn.example", "bob", 403, ""},
		{"match-cn: plain HTTP refused", "http", "cn.example", "", 403, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := do(tc.scheme, tc.host, tc.cert)
			if status != tc.status || (tc.body != "" && body != tc.body) {
				t.Errorf("%d\n%s\nwant %d\n%s", status, body, tc.status, tc.body)
			}
		})
	}
}

// nginxEscape is nginx's URI-component escaping ($ssl_client_escaped_cert):
// every byte but ALPHA, DIGIT and "-._~" as %XX.
func nginxEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
