package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// TestConnections: the ConfigMap keys of client connections and request
// heads, as ingress-nginx renders them; an invalid value is reported and
// leaves the default (the zero value).
func TestConnections(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string]string
		want model.Global
		bad  []string
	}{
		{name: "none", data: map[string]string{}},
		{name: "all set", data: map[string]string{
			"keep-alive": "30", "keep-alive-requests": "100", "max-worker-connections": "2048", "worker-processes": "4",
			"client-header-timeout": "10", "client-header-buffer-size": "2k", "large-client-header-buffers": "8 16k",
		}, want: model.Global{KeepAliveSeconds: 30, KeepAliveRequests: 100, MaxWorkerConnections: 2048, WorkerProcesses: 4,
			ClientHeaderTimeoutSeconds: 10, ClientHeaderBufferSize: 2048, LargeClientHeaderBuffers: 8, LargeClientHeaderBufferSize: 16384}},
		{name: "keep-alive 0", data: map[string]string{"keep-alive": "0"}, want: model.Global{DisableKeepAlive: true}},
		{name: "keep-alive-requests 0", data: map[string]string{"keep-alive-requests": "0"}, want: model.Global{DisableKeepAlive: true}},
		{name: "worker-processes auto", data: map[string]string{"worker-processes": "auto"}},
		{name: "sizes in bytes and megabytes", data: map[string]string{"client-header-buffer-size": "1024", "large-client-header-buffers": "2 1M"},
			want: model.Global{ClientHeaderBufferSize: 1024, LargeClientHeaderBuffers: 2, LargeClientHeaderBufferSize: 1 << 20}},
		{name: "invalid", data: map[string]string{
			"keep-alive": "75s", "keep-alive-requests": "-1", "max-worker-connections": "many", "worker-processes": "0",
			"client-header-timeout": "0", "client-header-buffer-size": "1x", "large-client-header-buffers": "4",
		}, bad: []string{"keep-alive", "keep-alive-requests", "max-worker-connections", "worker-processes",
			"client-header-timeout", "client-header-buffer-size", "large-client-header-buffers"}},
		{name: "large buffers of size 0", data: map[string]string{"large-client-header-buffers": "4 0"}, bad: []string{"large-client-header-buffers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got model.Global
			var bad []string
			connections(tc.data, &got, func(key, _ string) { bad = append(bad, key) })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Global (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.bad, bad); diff != "" {
				t.Errorf("reported keys (-want +got):\n%s", diff)
			}
		})
	}
}
