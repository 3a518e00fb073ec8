package tcpproxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// gathered flattens the switchyard_tcpproxy_* samples into name{labels} -> value.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			out[key+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	echo := listen(t, func(c net.Conn) {
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = io.WriteString(c, "echo: "+line)
	})
	reg := registry(t,
		balancer.Backend{Name: "tcp-ns-echo-7", Endpoints: []balancer.Endpoint{endpoint(echo)}},
		balancer.Backend{Name: "tcp-ns-empty-7"},
	)
	prom := prometheus.NewRegistry()
	p, err := newProxy(Config{Picker: reg, Registerer: prom})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newProxy(Config{Picker: reg, Registerer: prom}); err == nil {
		t.Error("registering the metrics twice on one Registerer: got no error")
	}
	var ports [3]int
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	p.Update(RoutesFrom(&model.Configuration{TCPServices: []model.L4Service{
		{Port: ports[0], Backend: "tcp-ns-echo-7"},
		{Port: ports[1], Backend: "tcp-ns-empty-7"},
		{Port: ports[2], Backend: "tcp-ns-echo-7", DecodeProxyProtocol: true},
	}}))
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := p.SyncTCP(ctx, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	send := func(port int, msg string) string {
		t.Helper()
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, msg)
		got, _ := io.ReadAll(c)
		return string(got)
	}
	if got := send(ports[0], "hi\n"); got != "echo: hi\n" {
		t.Errorf("echo answered %q", got)
	}
	if got := send(ports[1], "hi\n"); got != "" {
		t.Errorf("a service without endpoints answered %q", got)
	}
	if got := send(ports[2], "PROXY nonsense\r\n"); got != "" {
		t.Errorf("a malformed PROXY header answered %q", got)
	}
	p.Wait()
	want := map[string]float64{
		"switchyard_tcpproxy_connections_total{service=tcp-ns-echo-7}":                  2,
		"switchyard_tcpproxy_connections_total{service=tcp-ns-empty-7}":                 1,
		"switchyard_tcpproxy_bytes_total{direction=upstream,service=tcp-ns-echo-7}":     3,
		"switchyard_tcpproxy_bytes_total{direction=downstream,service=tcp-ns-echo-7}":   9,
		"switchyard_tcpproxy_errors_total{reason=no_peer,service=tcp-ns-empty-7}":       1,
		"switchyard_tcpproxy_errors_total{reason=proxy_protocol,service=tcp-ns-echo-7}": 1,
	}
	if diff := cmp.Diff(want, gathered(t, prom)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
