package harness

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-proxy/switchyard/controlplane/manifests"
)

// TestLocalServiceYAML loads what LocalServiceYAML writes through the
// controller's manifests loader: the IngressClass, the Service and its
// EndpointSlice with every address, and no file reported as unusable.
func TestLocalServiceYAML(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(LocalServiceYAML("ns", "web", 8081, "192.0.2.1", "192.0.2.2")), 0o600); err != nil {
		t.Fatal(err)
	}
	var bad []string
	src, err := manifests.Load(manifests.Config{Dir: dir, OnError: func(path string, err error) { bad = append(bad, path+": "+err.Error()) }})
	if err != nil || len(bad) > 0 {
		t.Fatalf("load: %v %v", err, bad)
	}
	ctx := context.Background()
	c := src.Client()
	if _, err := c.NetworkingV1().IngressClasses().Get(ctx, "switchyard", metav1.GetOptions{}); err != nil {
		t.Errorf("IngressClass: %v", err)
	}
	svc, err := c.CoreV1().Services("ns").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Service: %v", err)
	}
	if p := svc.Spec.Ports; len(p) != 1 || p[0].Name != "http" || p[0].Port != 80 || p[0].TargetPort.IntValue() != 8081 {
		t.Errorf("Service ports %+v; want http 80 → 8081", p)
	}
	es, err := c.DiscoveryV1().EndpointSlices("ns").Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("EndpointSlice: %v", err)
	}
	if es.Labels["kubernetes.io/service-name"] != "web" || len(es.Ports) != 1 || *es.Ports[0].Port != 8081 {
		t.Errorf("EndpointSlice labels %v ports %+v", es.Labels, es.Ports)
	}
	if len(es.Endpoints) != 1 || len(es.Endpoints[0].Addresses) != 2 || es.Endpoints[0].Addresses[1] != "192.0.2.2" {
		t.Errorf("EndpointSlice endpoints %+v; want one with both addresses", es.Endpoints)
	}
}
