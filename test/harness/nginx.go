package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// NginxPlaneArgs returns the `switchyard controller` flags that run
// --data-plane=nginx with Debian's nginx, the repository's Lua shim in
// luaDir and a fresh nginx directory (0755, outside t.TempDir, so that
// nginx's workers, running as nobody, reach the pick socket inside it), on
// a free loopback status port. It fails the test when nginx's Lua module or
// root is missing (test/setup.sh installs the one; CI runs as the other).
func NginxPlaneArgs(t testing.TB, luaDir string) []string {
	t.Helper()
	if _, err := os.Stat("/usr/lib/nginx/modules/ngx_http_lua_module.so"); err != nil {
		t.Fatalf("nginx with the Lua module is not installed (run test/setup.sh): %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("nginx workers switch to nobody: run as root (CI does)")
	}
	dir, err := os.MkdirTemp("", "switchyard-nginx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lua, err := filepath.Abs(luaDir)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--data-plane", "nginx", "--nginx-status-port", strconv.Itoa(FreePort(t, "127.0.0.1")),
		"--nginx-dir", dir, "--lua-dir", lua,
		// Other test binaries run beside this one in CI: give the
		// balancer time to answer, so the assertions see Go's picks and
		// not the shim's fallback.
		"--pick-timeout", "2s"}
}
