package balancer

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// checkEndpoint and nodeID give the node ids (and the errors) of the
// net.ParseIP and strconv.Itoa formulation they replace.
func TestNodeIDMatchesParseIP(t *testing.T) {
	ref := func(e Endpoint) (string, bool) {
		port, err := strconv.Atoi(e.Port.Str)
		if err != nil || port < 1 || port > 65535 || e.Address == "" {
			return "", false
		}
		if ip := net.ParseIP(e.Address); ip != nil {
			if ip.To4() != nil && !strings.Contains(e.Address, ":") {
				return e.Address + ":" + strconv.Itoa(port), true
			}
			return "[" + e.Address + "]:" + strconv.Itoa(port), true
		}
		if !validHostname(e.Address) {
			return "", false
		}
		return e.Address + ":" + strconv.Itoa(port), true
	}
	addrs := []string{"10.0.0.1", "010.0.0.1", "1.2.3", "255.255.255.255", "::1", "fd00::1", "::ffff:10.0.0.1",
		"fe80::1%eth0", "[::1]", "svc.ns.svc.cluster.local", "-bad.example", "a..b", "", " 10.0.0.1", "1.2.3.4.5"}
	ports := []string{"80", "080", "+80", "8080", "65535", "65536", "0", "-1", "x", "", "1_0"}
	for _, a := range addrs {
		for _, p := range ports {
			e := Endpoint{Address: a, Port: PortString(p)}
			want, wantOK := ref(e)
			port, kind, err := checkEndpoint(e)
			if (err == nil) != wantOK {
				t.Errorf("%q %q: error %v; want ok %v", a, p, err, wantOK)
				continue
			}
			if got := nodeID(a, port, kind); err == nil && got != want {
				t.Errorf("%q %q: got %q; want %q", a, p, got, want)
			}
		}
	}
}
