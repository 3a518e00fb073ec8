package builder

import (
	"crypto/tls"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseProxySSL: ingress-nginx's defaults, its grammar, and what fails
// closed (an invalid proxy-ssl-secret or proxy-ssl-verify) against what is
// reported and defaulted.
func TestParseProxySSL(t *testing.T) {
	for _, tc := range []struct {
		name         string
		anns         map[string]string
		want         *proxySSLAnnotations
		bad, warned  []string
		failedClosed []string
	}{
		{name: "none", anns: map[string]string{}},
		{name: "kin without the secret", anns: map[string]string{"proxy-ssl-verify": "on", "proxy-ssl-name": "a.example"},
			warned: []string{"proxy-ssl-verify", "proxy-ssl-name"}},
		{name: "defaults", anns: map[string]string{"proxy-ssl-secret": "ns/s"},
			want: &proxySSLAnnotations{secret: "ns/s", depth: 1, protocols: []string{"TLSv1.2"}, ciphers: "DEFAULT"}},
		{name: "all set", anns: map[string]string{"proxy-ssl-secret": "s", "proxy-ssl-verify": "on", "proxy-ssl-verify-depth": "3",
			"proxy-ssl-name": "backend.internal", "proxy-ssl-server-name": "on", "proxy-ssl-protocols": "TLSv1.3 TLSv1.2",
			"proxy-ssl-ciphers": "ECDHE-RSA-AES128-GCM-SHA256:!aNULL"},
			want: &proxySSLAnnotations{secret: "s", verify: true, depth: 3, name: "backend.internal", serverName: true,
				protocols: []string{"TLSv1.2", "TLSv1.3"}, ciphers: "ECDHE-RSA-AES128-GCM-SHA256:!aNULL"}},
		{name: "invalid values keep their defaults", anns: map[string]string{"proxy-ssl-secret": "s", "proxy-ssl-server-name": "yes",
			"proxy-ssl-verify-depth": "-1", "proxy-ssl-name": "Not A Name", "proxy-ssl-protocols": "TLSv1.1 TLSv1.2", "proxy-ssl-ciphers": "ALL;"},
			want: &proxySSLAnnotations{secret: "s", depth: 1, protocols: []string{"TLSv1.2"}, ciphers: "DEFAULT"},
			bad:  []string{"proxy-ssl-server-name", "proxy-ssl-verify-depth", "proxy-ssl-name", "proxy-ssl-protocols", "proxy-ssl-ciphers"}},
		{name: "verify true fails closed", anns: map[string]string{"proxy-ssl-secret": "s", "proxy-ssl-verify": "true"},
			failedClosed: []string{"proxy-ssl-verify"}},
		{name: "a bad secret name fails closed", anns: map[string]string{"proxy-ssl-secret": "a/b/c"},
			failedClosed: []string{"proxy-ssl-secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bad, warned, closed []string
			get := func(k string) (string, bool) { v, ok := tc.anns[k]; return v, ok }
			integer := func(k string, lo, hi int) (int, bool) {
				v, ok := get(k)
				if !ok {
					return 0, false
				}
				n := 0
				for _, c := range v {
					if c < '0' || c > '9' {
						bad = append(bad, k)
						return 0, false
					}
					n = n*10 + int(c-'0')
				}
				if n < lo || n > hi {
					bad = append(bad, k)
					return 0, false
				}
				return n, true
			}
			got := parseProxySSL(get, func(k, _ string, _ ...any) { bad = append(bad, k) },
				func(k, _ string) { warned = append(warned, k) }, func(k, _ string) { closed = append(closed, k) }, integer)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(proxySSLAnnotations{})); diff != "" {
				t.Errorf("parsed (-want +got):\n%s", diff)
			}
			for _, c := range []struct {
				what      string
				want, got []string
			}{{"bad", tc.bad, bad}, {"warned", tc.warned, warned}, {"failed closed", tc.failedClosed, closed}} {
				if !cmp.Equal(c.want, c.got) {
					t.Errorf("%s: %v; want %v", c.what, c.got, c.want)
				}
			}
		})
	}
}

func TestGoCipherSuites(t *testing.T) {
	got, ok := goCipherSuites("ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305")
	if !ok || !cmp.Equal(got, []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}) {
		t.Errorf("got %v, %v", got, ok)
	}
	for _, l := range []string{"DEFAULT", "HIGH:!aNULL", "ECDHE-RSA-AES128-GCM-SHA256:RC4-SHA"} {
		if _, ok := goCipherSuites(l); ok {
			t.Errorf("%q mapped; want Go's defaults", l)
		}
	}
}
