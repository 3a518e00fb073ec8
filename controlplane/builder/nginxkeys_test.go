package builder

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// TestNginxSettings: the nginx-only ConfigMap keys become typed values; an
// invalid value is reported and leaves the default (the zero value).
func TestNginxSettings(t *testing.T) {
	zero, five := 0, 5*time.Second
	for _, tc := range []struct {
		name string
		data map[string]string
		want model.NginxSettings
		bad  []string
	}{
		{name: "none", data: map[string]string{}},
		{name: "all set", data: map[string]string{
			"worker-shutdown-timeout": "10m", "server-tokens": "true", "enable-access-log-for-default-backend": "true",
			"ssl-protocols": " TLSv1.2  TLSv1.3 ", "ssl-ciphers": "HIGH:!aNULL:!MD5",
			"upstream-keepalive-connections": "0", "upstream-keepalive-time": "90", "upstream-keepalive-timeout": "5000ms",
			"upstream-keepalive-requests": "7",
		}, want: model.NginxSettings{WorkerShutdownTimeout: 10 * time.Minute, ServerTokens: true, AccessLogDefaultBackend: true,
			SSLProtocols: []string{"TLSv1.2", "TLSv1.3"}, SSLCiphers: "HIGH:!aNULL:!MD5",
			UpstreamKeepalive: model.UpstreamKeepalive{Connections: &zero, Time: 90 * time.Second, Timeout: &five, Requests: 7}}},
		{name: "invalid", data: map[string]string{
			"worker-shutdown-timeout": "240 s", "server-tokens": "yes please", "enable-access-log-for-default-backend": "2",
			"ssl-protocols": "TLSv1.2 SSLv3", "ssl-ciphers": "HIGH;\n}",
			"upstream-keepalive-connections": "-1", "upstream-keepalive-time": "1w", "upstream-keepalive-timeout": "",
			"upstream-keepalive-requests": "0",
		}, bad: []string{"worker-shutdown-timeout", "server-tokens", "enable-access-log-for-default-backend", "ssl-protocols",
			"ssl-ciphers", "upstream-keepalive-connections", "upstream-keepalive-time",
			"upstream-keepalive-timeout", "upstream-keepalive-requests"}},
		{name: "zero durations and repeated protocols", data: map[string]string{
			"worker-shutdown-timeout": "0", "upstream-keepalive-time": "0s", "ssl-protocols": "TLSv1.3 TLSv1.3",
		}, bad: []string{"worker-shutdown-timeout", "ssl-protocols", "upstream-keepalive-time"}},
		{name: "ten digits", data: map[string]string{"worker-shutdown-timeout": "1234567890s"}, bad: []string{"worker-shutdown-timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bad []string
			got := nginxSettings(tc.data, func(key, _ string) { bad = append(bad, key) })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.bad, bad); diff != "" {
				t.Errorf("reported keys (-want +got):\n%s", diff)
			}
		})
	}
}
