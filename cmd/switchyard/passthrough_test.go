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
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// TestControllerSSLPassthroughAndHTTPS: with --enable-ssl-passthrough, for
// either data plane, the HTTPS port routes by SNI. A host with the
// ssl-passthrough annotation reaches its TLS backend untouched (the client
// sees the backend's own certificate); every other host is terminated by the
// data plane behind the SNI router (the Go proxy, or nginx on
// --ssl-passthrough-proxy-port) with its Secret's certificate, and the
// backend sees the real client address (a connection from 127.0.0.5 is
// X-Forwarded-For 127.0.0.5, not the router's 127.0.0.1), carried by the
// PROXY header.
//
// With use-proxy-protocol, the SNI router reads the client's PROXY header
// first, as ingress-nginx's router does (and takes a connection without
// one): the terminated host's backend sees the header's source when the
// peer is in proxy-real-ip-cidr, the passthrough backend gets the TLS
// without the header; a malformed header closes the connection.
func TestControllerSSLPassthroughAndHTTPS(t *testing.T) {
	// go-workers: the Go plane's HTTPS in two worker processes behind the
	// SNI router (--go-workers=2).
	for _, plane := range []string{"go", "go-workers", "nginx"} {
		t.Run(plane, func(t *testing.T) { testSSLPassthroughAndHTTPS(t, plane, false) })
		t.Run(plane+"/use-proxy-protocol", func(t *testing.T) { testSSLPassthroughAndHTTPS(t, plane, true) })
	}
}

func testSSLPassthroughAndHTTPS(t *testing.T, plane string, proxyProtocol bool) {
	// The passthrough backend: TLS with its own certificate.
	tlsBackend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "tls backend")
	}))
	tlsBackend.StartTLS()
	t.Cleanup(tlsBackend.Close)
	backendCert := tlsBackend.Certificate()
	// The HTTP backend behind the terminating proxy echoes what it was told.
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "xff=%s real=%s proto=%s", r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Real-IP"), r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(plain.Close)
	portOf := func(s *httptest.Server) int { return s.Listener.Addr().(*net.TCPAddr).Port }

	dir := quickstartDir(t, freePort(t), freePort(t))
	extra := localBackendYAML("pass", "pass.example", portOf(tlsBackend), `{nginx.ingress.kubernetes.io/ssl-passthrough: "true"}`, "") +
		localBackendYAML("plain", "tls.example", portOf(plain), "", "[{hosts: [tls.example], secretName: tls-example}]")
	certPEM, keyPEM := harness.SelfSignedPEM(t, "tls.example")
	extra += fmt.Sprintf(`---
apiVersion: v1
kind: Secret
metadata: {name: tls-example, namespace: demo}
type: kubernetes.io/tls
data:
  tls.crt: %s
  tls.key: %s
`, base64.StdEncoding.EncodeToString(certPEM), base64.StdEncoding.EncodeToString(keyPEM))
	if proxyProtocol {
		extra += "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: switchyard-controller, namespace: demo}\n" +
			"data: {use-proxy-protocol: \"true\", proxy-real-ip-cidr: \"127.0.0.5/32\"}\n"
	}
	certBlock, _ := pem.Decode(certPEM)
	if err := os.WriteFile(filepath.Join(dir, "40-tls.yaml"), []byte(extra), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--manifests", dir, "--http-port", strconv.Itoa(freePort(t)),
		"--https-port", strconv.Itoa(freePort(t)), "--status-port", strconv.Itoa(freePort(t)),
		"--listen-address", "127.0.0.1", "--enable-ssl-passthrough"}
	if proxyProtocol {
		args = append(args, "--configmap", "demo/switchyard-controller")
	}
	switch plane {
	case "nginx":
		args = append(args, nginxPlaneArgs(t)...)
		args = append(args, "--ssl-passthrough-proxy-port", strconv.Itoa(freePort(t)))
	case "go-workers":
		args = append(args, "--go-workers", "2")
	}
	ctx, l := startController(t, args)

	// getWith does one HTTPS request for host from the local address from,
	// after the bytes header, and returns the body and the certificate the
	// server presented.
	getWith := func(host, from, header string) (string, []byte, error) {
		dialer := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, l.HTTPS)
			if err == nil && header != "" {
				_, err = io.WriteString(c, header)
			}
			return c, err
		}, TLSClientConfig: &tls.Config{ServerName: host, InsecureSkipVerify: true}} //nolint:gosec // self-signed test certificates
		defer tr.CloseIdleConnections()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+"/", nil)
		if err != nil {
			return "", nil, err
		}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return "", nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("%d %s", resp.StatusCode, b), resp.TLS.PeerCertificates[0].Raw, nil
	}

	get := func(host, from string) (string, []byte, error) { return getWith(host, from, "") }

	body, cert, err := get("pass.example", "127.0.0.1")
	if err != nil {
		t.Fatalf("passthrough: %v", err)
	}
	if body != "200 tls backend" || string(cert) != string(backendCert.Raw) {
		t.Errorf("passthrough: %q, backend's certificate %v; want 200 from the TLS backend with its own certificate",
			body, string(cert) == string(backendCert.Raw))
	}

	body, cert, err = get("tls.example", "127.0.0.5")
	if err != nil {
		t.Fatalf("terminated behind the SNI router: %v", err)
	}
	if want := "200 xff=127.0.0.5 real=127.0.0.5 proto=https"; body != want {
		t.Errorf("terminated behind the SNI router: %q; want %q", body, want)
	}
	if string(cert) != string(certBlock.Bytes) {
		t.Error("tls.example was not answered with its Secret's certificate")
	}
	if !proxyProtocol {
		return
	}
	const hdr = "PROXY TCP4 203.0.113.7 192.0.2.1 40000 443\r\n"
	for _, tc := range []struct{ name, host, from, header, want string }{
		{"a header from a trusted peer", "tls.example", "127.0.0.5", hdr, "200 xff=203.0.113.7 real=203.0.113.7 proto=https"},
		{"a header from an untrusted peer", "tls.example", "127.0.0.6", hdr, "200 xff=127.0.0.6 real=127.0.0.6 proto=https"},
		{"passthrough after a header", "pass.example", "127.0.0.5", hdr, "200 tls backend"},
	} {
		body, _, err := getWith(tc.host, tc.from, tc.header)
		if err != nil || body != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, body, err, tc.want)
		}
	}
	if body, _, err := getWith("tls.example", "127.0.0.5", "PROXY TCP4 nonsense\r\n"); err == nil {
		t.Errorf("a malformed header: answered %q; want the connection closed", body)
	}
}
