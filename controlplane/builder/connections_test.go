package builder

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		{name: "proxy-protocol-header-timeout", data: map[string]string{"proxy-protocol-header-timeout": " 500ms"},
			want: model.Global{ProxyProtocolHeaderTimeout: 500 * time.Millisecond}},
		{name: "proxy-protocol-header-timeout without a unit", data: map[string]string{"proxy-protocol-header-timeout": "5"}, bad: []string{"proxy-protocol-header-timeout"}},
		{name: "proxy-protocol-header-timeout negative", data: map[string]string{"proxy-protocol-header-timeout": "-1s"}, bad: []string{"proxy-protocol-header-timeout"}},
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

// TestConnectionsFromTheControllerConfigMap: Build reads the keys from the
// controller ConfigMap into Global, and an invalid one becomes an error
// naming the ConfigMap and the key.
func TestConnectionsFromTheControllerConfigMap(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ingress", Name: "controller"},
		Data: map[string]string{"keep-alive": "10", "max-worker-connections": "512", "large-client-header-buffers": "4 16k"}}
	cfg := Build(Input{ConfigMap: cm}, Options{})
	if got := cfg.Global; got.KeepAliveSeconds != 10 || got.MaxWorkerConnections != 512 || got.LargeClientHeaderBufferSize != 16<<10 {
		t.Errorf("got keep-alive %d, max-worker-connections %d, large buffers of %d; want 10, 512 and 16384", got.KeepAliveSeconds, got.MaxWorkerConnections, got.LargeClientHeaderBufferSize)
	}
	var fields []string
	for _, e := range cfg.Errors {
		// Invalid values only: a key honoured by one plane is also
		// reported, with a reason (configmapkeys.go).
		if e.Object.Kind == "ConfigMap" && e.Object.Name == "controller" && e.Reason == "" {
			fields = append(fields, e.Field)
		}
	}
	if diff := cmp.Diff([]string(nil), fields); diff != "" {
		t.Errorf("ConfigMap errors (-want +got):\n%s", diff)
	}
	cm.Data["keep-alive"] = "75s"
	cfg = Build(Input{ConfigMap: cm}, Options{})
	fields = nil
	for _, e := range cfg.Errors {
		if e.Reason == "" {
			fields = append(fields, e.Field)
		}
	}
	if diff := cmp.Diff([]string{"keep-alive"}, fields); diff != "" {
		t.Errorf("ConfigMap errors (-want +got):\n%s", diff)
	}
	if cfg.Global.KeepAliveSeconds != 0 {
		t.Errorf("got keep-alive %d after an invalid value; want the default (0)", cfg.Global.KeepAliveSeconds)
	}
}
