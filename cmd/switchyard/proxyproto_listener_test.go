package main

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/tcpproxy/proxyproto"
)

// The listeners' policy follows the configuration: off without
// use-proxy-protocol; on with proxy-real-ip-cidr's ranges, waiting
// client-header-timeout on the data planes' ports and
// proxy-protocol-header-timeout on the SNI router's, which also takes
// connections without a header.
func TestProxyProtocolPolicy(t *testing.T) {
	from := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		name         string
		g            model.Global
		data, router proxyproto.Policy
	}{
		{name: "off", g: model.Global{RealIP: &model.RealIP{Header: "X-Forwarded-For", From: from}}},
		{name: "defaults", g: model.Global{RealIP: &model.RealIP{Header: "X-Forwarded-For", From: from, ProxyProtocol: true}},
			data:   proxyproto.Policy{On: true, Trusted: from, Timeout: 60 * time.Second, MaxPending: 16384},
			router: proxyproto.Policy{On: true, Optional: true, Trusted: from, Timeout: 5 * time.Second, MaxPending: 16384}},
		{name: "timeouts", g: model.Global{RealIP: &model.RealIP{Header: "X-Forwarded-For", From: from, ProxyProtocol: true},
			ClientHeaderTimeoutSeconds: 7, ProxyProtocolHeaderTimeout: 1500 * time.Millisecond, MaxWorkerConnections: 100},
			data:   proxyproto.Policy{On: true, Trusted: from, Timeout: 7 * time.Second, MaxPending: 100},
			router: proxyproto.Policy{On: true, Optional: true, Trusted: from, Timeout: 1500 * time.Millisecond, MaxPending: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p proxyProtocolListeners
			p.update(&tc.g)
			opt := cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })
			if diff := cmp.Diff(tc.data, p.policy(false), opt); diff != "" {
				t.Errorf("data plane listeners (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.router, p.policy(true), opt); diff != "" {
				t.Errorf("SNI router (-want +got):\n%s", diff)
			}
		})
	}
}
