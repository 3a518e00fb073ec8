package main

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/balancer/picksock"
)

// serveFrames sends frames to a real picksock.Server over one connection,
// as a shim's worker does, and returns what ServeConn returned once it has
// read them all.
func serveFrames(t *testing.T, m *nginxRequestMetrics, frames ...[]byte) error {
	t.Helper()
	srv := picksock.NewServer(picksock.Config{Picker: balancer.NewRegistry(balancer.Config{}), Requests: m.add})
	shim, goSide := net.Pipe()
	go func() {
		defer shim.Close()
		for _, f := range frames {
			if _, err := shim.Write(f); err != nil {
				return // the server closed the connection
			}
		}
	}()
	return srv.ServeConn(goSide)
}

// buckets returns histogram buckets (prometheus.DefBuckets plus +Inf) with
// all n requests in the first.
func buckets(n uint32) []uint32 {
	b := make([]uint32, len(prometheus.DefBuckets)+1)
	b[0] = n
	return b
}

// The upstream latency summary: exact count and sum from every frame,
// quantiles from the samples, one series per ingress, namespace, service and
// canary whatever the host, status, method and path.
func TestNginxUpstreamLatencySummary(t *testing.T) {
	const (
		echo200   = "echo.localhost\t200\tGET\t/\tdemo\techo\techo-svc\t"
		echo502   = "other.localhost\t502\tPOST\t/api\tdemo\techo\techo-svc\t"
		canary200 = "echo.localhost\t200\tGET\t/\tdemo\techo\techo-svc\tdemo-echo-canary-80"
		notFound  = "\t404\tGET\t\t\t\t\t"
	)
	many := make([]uint32, picksock.MaxSamples)
	for i := range many {
		many[i] = 5000
	}
	m := newNginxRequestMetrics()
	err := serveFrames(t, m,
		// An older shim's frame, or one to a server it has not seen
		// FlagConnectSamples from: requests, no connect times.
		picksock.AppendRequests(nil, echo200, 2, 2000, buckets(2)),
		picksock.AppendRequestsConnect(nil, echo200, 3, 9000, buckets(3), picksock.ConnectTimes{Count: 3, SumUS: 6000, Samples: []uint32{1000, 2000, 3000}}),
		// One of the two failed before connecting: one connect time.
		picksock.AppendRequestsConnect(nil, echo502, 2, 9000, buckets(2), picksock.ConnectTimes{Count: 1, SumUS: 4000, Samples: []uint32{4000}}),
		// 2000 connect times, 1024 of them sampled.
		picksock.AppendRequestsConnect(nil, canary200, 2000, 2000*5000, buckets(2000), picksock.ConnectTimes{Count: 2000, SumUS: 2000 * 5000, Samples: many}),
		// No upstream, no connect times, no series.
		picksock.AppendRequestsConnect(nil, notFound, 1, 100, buckets(1), picksock.ConnectTimes{}),
	)
	if err != nil {
		t.Fatalf("ServeConn: %v", err)
	}
	want := `
# HELP nginx_ingress_controller_ingress_upstream_latency_seconds DEPRECATED Upstream service latency per Ingress
# TYPE nginx_ingress_controller_ingress_upstream_latency_seconds summary
nginx_ingress_controller_ingress_upstream_latency_seconds{canary="",ingress="echo",namespace="demo",service="echo-svc",quantile="0.5"} 0.002
nginx_ingress_controller_ingress_upstream_latency_seconds{canary="",ingress="echo",namespace="demo",service="echo-svc",quantile="0.9"} 0.004
nginx_ingress_controller_ingress_upstream_latency_seconds{canary="",ingress="echo",namespace="demo",service="echo-svc",quantile="0.99"} 0.004
nginx_ingress_controller_ingress_upstream_latency_seconds_sum{canary="",ingress="echo",namespace="demo",service="echo-svc"} 0.01
nginx_ingress_controller_ingress_upstream_latency_seconds_count{canary="",ingress="echo",namespace="demo",service="echo-svc"} 4
nginx_ingress_controller_ingress_upstream_latency_seconds{canary="demo-echo-canary-80",ingress="echo",namespace="demo",service="echo-svc",quantile="0.5"} 0.005
nginx_ingress_controller_ingress_upstream_latency_seconds{canary="demo-echo-canary-80",ingress="echo",namespace="demo",service="echo-svc",quantile="0.9"} 0.005
nginx_ingress_controller_ingress_upstream_latency_seconds{canary="demo-echo-canary-80",ingress="echo",namespace="demo",service="echo-svc",quantile="0.99"} 0.005
nginx_ingress_controller_ingress_upstream_latency_seconds_sum{canary="demo-echo-canary-80",ingress="echo",namespace="demo",service="echo-svc"} 10
nginx_ingress_controller_ingress_upstream_latency_seconds_count{canary="demo-echo-canary-80",ingress="echo",namespace="demo",service="echo-svc"} 2000
# HELP switchyard_nginx_connect_samples_dropped_total Upstream connect times counted in nginx_ingress_controller_ingress_upstream_latency_seconds' count and sum but not in its quantiles: the Lua shim sends at most 1024 per label set and flush of each worker, a uniform sample of the rest.
# TYPE switchyard_nginx_connect_samples_dropped_total counter
switchyard_nginx_connect_samples_dropped_total 976
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want),
		"nginx_ingress_controller_ingress_upstream_latency_seconds", "switchyard_nginx_connect_samples_dropped_total"); err != nil {
		t.Error(err)
	}
	// The request counter still counts every request, the older frame's too.
	wantRequests := `
# HELP nginx_ingress_controller_requests The total number of client requests.
# TYPE nginx_ingress_controller_requests counter
nginx_ingress_controller_requests{canary="",host="",ingress="",method="GET",namespace="",path="",service="",status="404"} 1
nginx_ingress_controller_requests{canary="",host="echo.localhost",ingress="echo",method="GET",namespace="demo",path="/",service="echo-svc",status="200"} 5
nginx_ingress_controller_requests{canary="",host="other.localhost",ingress="echo",method="POST",namespace="demo",path="/api",service="echo-svc",status="502"} 2
nginx_ingress_controller_requests{canary="demo-echo-canary-80",host="echo.localhost",ingress="echo",method="GET",namespace="demo",path="/",service="echo-svc",status="200"} 2000
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(wantRequests), "nginx_ingress_controller_requests"); err != nil {
		t.Error(err)
	}
}

// An inconsistent frame closes the connection and changes nothing: frames
// are the shim's, but still input to check.
func TestNginxUpstreamLatencyRejectsInconsistentFrames(t *testing.T) {
	const labels = "echo.localhost\t200\tGET\t/\tdemo\techo\techo-svc\t"
	m := newNginxRequestMetrics()
	err := serveFrames(t, m,
		picksock.AppendRequestsConnect(nil, labels, 1, 1000, buckets(1), picksock.ConnectTimes{Count: 1, SumUS: 1000, Samples: []uint32{1000}}),
		// More connect times than requests.
		picksock.AppendRequestsConnect(nil, labels, 1, 1000, buckets(1), picksock.ConnectTimes{Count: 5, SumUS: 1000, Samples: []uint32{1000}}),
		picksock.AppendRequestsConnect(nil, labels, 1, 1000, buckets(1), picksock.ConnectTimes{Count: 1, SumUS: 1000, Samples: []uint32{1000}}),
	)
	if !errors.Is(err, picksock.ErrInvalid) {
		t.Fatalf("ServeConn: %v; want %v", err, picksock.ErrInvalid)
	}
	want := `
# HELP nginx_ingress_controller_ingress_upstream_latency_seconds DEPRECATED Upstream service latency per Ingress
# TYPE nginx_ingress_controller_ingress_upstream_latency_seconds summary
nginx_ingress_controller_ingress_upstream_latency_seconds{canary="",ingress="echo",namespace="demo",service="echo-svc",quantile="0.5"} 0.001
nginx_ingress_controller_ingress_upstream_latency_seconds{canary="",ingress="echo",namespace="demo",service="echo-svc",quantile="0.9"} 0.001
nginx_ingress_controller_ingress_upstream_latency_seconds{canary="",ingress="echo",namespace="demo",service="echo-svc",quantile="0.99"} 0.001
nginx_ingress_controller_ingress_upstream_latency_seconds_sum{canary="",ingress="echo",namespace="demo",service="echo-svc"} 0.001
nginx_ingress_controller_ingress_upstream_latency_seconds_count{canary="",ingress="echo",namespace="demo",service="echo-svc"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "nginx_ingress_controller_ingress_upstream_latency_seconds"); err != nil {
		t.Error(err)
	}
}
