package admission

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoDataPlaneImports: the webhook cannot render nginx.conf or run
// nginx -t on an object under review (CVE-2025-1974 in ingress-nginx)
// because nothing that could is linked into it: no data plane package is
// among its dependencies.
func TestNoDataPlaneImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/switchyard-proxy/switchyard/"
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), out)
	}
	for _, dep := range deps {
		for _, banned := range []string{"nginxcompat", "proxy", "tcpproxy", "lua", "cmd", "test"} {
			if dep == module+banned || strings.HasPrefix(dep, module+banned+"/") {
				t.Errorf("controlplane/admission depends on %s", dep)
			}
		}
		if dep == "os/exec" {
			t.Error("controlplane/admission links os/exec: it runs no program")
		}
	}
}
