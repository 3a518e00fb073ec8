package nginxcompat

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/render")

// goldenRenderConfig is the RenderConfig of the golden files: fixed paths.
var goldenRenderConfig = RenderConfig{APISocket: "/run/switchyard/api.sock"}

// loadCase reads a golden Configuration; t may be nil (it then panics).
func loadCase(t testing.TB, path string) *model.Configuration {
	fail := func(format string, args ...any) {
		if t == nil {
			panic(fmt.Sprintf(format, args...))
		}
		t.Helper()
		t.Fatalf(format, args...)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	var cfg model.Configuration
	if err := json.Unmarshal(b, &cfg); err != nil {
		fail("decode %s: %v", path, err)
	}
	return &cfg
}

// requireNginx returns the nginx binary. Without one the test fails under
// CI=true and is skipped loudly elsewhere.
func requireNginx(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("nginx")
	if err != nil {
		for _, c := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
			if _, err := os.Stat(c); err == nil {
				return c
			}
		}
		if os.Getenv("CI") != "" {
			t.Fatalf("nginx not found (CI=true): test/setup.sh installs nginx and libnginx-mod-http-lua")
		}
		t.Skip("SKIPPED LOUDLY: nginx not installed; install nginx libnginx-mod-http-lua lua-resty-core lua-cjson")
	}
	return p
}

// testDirs is a RenderConfig whose files all live under dir, with the Lua
// stand-in of testdata/lua unless luaDir is given. Reusable by e2e tests.
func testDirs(t testing.TB, dir, luaDir string) RenderConfig {
	t.Helper()
	if luaDir == "" {
		abs, err := filepath.Abs("testdata/lua")
		if err != nil {
			t.Fatal(err)
		}
		luaDir = abs
	}
	return RenderConfig{
		LuaDir:    luaDir,
		CertDir:   filepath.Join(dir, "certs"),
		TempDir:   filepath.Join(dir, "tmp"),
		PIDFile:   filepath.Join(dir, "nginx.pid"),
		ErrorLog:  "stderr",
		AccessLog: filepath.Join(dir, "access.log"),
	}
}

// nginxTest runs the real `nginx -t` on conf, writing cfg's certificates
// and client CA bundles.
func nginxTest(t testing.TB, nginx string, rc RenderConfig, cfg *model.Configuration, conf []byte) error {
	t.Helper()
	if err := PrepareDirs(rc); err != nil {
		t.Fatal(err)
	}
	if err := WriteCertificates(rc.CertDir, cfg.Certificates); err != nil {
		t.Fatal(err)
	}
	cas := map[string]string{}
	for _, s := range cfg.Servers {
		if s.ClientAuth != nil {
			cas[clientCAFile(rc.CertDir, s.ClientAuth.CA)] = s.ClientAuth.CA
			if s.ClientAuth.CRL != "" {
				cas[clientCRLFile(rc.CertDir, s.ClientAuth.CRL)] = s.ClientAuth.CRL
			}
		}
	}
	if err := WriteClientCAs(cas); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(rc.PIDFile)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(nginx, "-t", "-q", "-e", "stderr", "-p", dir, "-c", path).CombinedOutput()
	if err != nil {
		return &nginxTestError{out: string(out), err: err}
	}
	return nil
}

type nginxTestError struct {
	out string
	err error
}

func (e *nginxTestError) Error() string { return "nginx -t: " + e.err.Error() + ": " + e.out }

// Golden pairs: testdata/render/<case>.json → <case>.conf (and the errors
// reported, <case>.errors.json), each rendered again with test paths and
// passed through the real `nginx -t`.
func TestRenderGolden(t *testing.T) {
	nginx := requireNginx(t)
	cases, err := filepath.Glob("testdata/render/*.json")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	type goldenCase struct {
		in, out string // testdata/render/<case>.json, and the path without .conf
		tweak   func(*RenderConfig)
		// edit, when set, changes the Configuration read from in.
		edit func(*model.Configuration)
	}
	var all []goldenCase
	for _, in := range cases {
		if !strings.HasSuffix(in, ".errors.json") {
			all = append(all, goldenCase{in: in, out: strings.TrimSuffix(in, ".json"), tweak: func(*RenderConfig) {}})
		}
	}
	// The same Configuration rendered with other RenderConfigs.
	all = append(all, goldenCase{in: "testdata/render/tls.json", out: "testdata/render/tls.passthrough",
		tweak: func(rc *RenderConfig) { rc.HTTPSListen, rc.HTTPSProxyProtocol = []string{"127.0.0.1:442"}, true }})
	// auth-type: digest on app.example.com's "/", with the digest socket
	// and without it (503, fail closed).
	digest := func(cfg *model.Configuration) {
		creds, err := digestauth.Parse([]byte("alice:Staff only:" + digestauth.HA1("alice", "Staff only", "s3cret") + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range cfg.Servers {
			for j := range cfg.Servers[i].Locations {
				if l := &cfg.Servers[i].Locations[j]; cfg.Servers[i].Hostname == "app.example.com" && l.Path == "/" {
					l.DigestAuth = &model.DigestAuth{Realm: "Staff only", Credentials: creds}
				}
			}
		}
	}
	all = append(all, goldenCase{in: "testdata/render/basic.json", out: "testdata/render/digest", edit: digest,
		tweak: func(rc *RenderConfig) { rc.DigestSocket = "/run/switchyard/digest.sock" }},
		goldenCase{in: "testdata/render/basic.json", out: "testdata/render/digest.nosocket", edit: digest, tweak: func(*RenderConfig) {}})
	// mirror-target on app.example.com's locations: one Ingress's mirror
	// (one internal location for both), body off on "/"; another location
	// with a variable-free target resolved by the builder.
	mirror := func(cfg *model.Configuration) {
		for i := range cfg.Servers {
			for j := range cfg.Servers[i].Locations {
				l := &cfg.Servers[i].Locations[j]
				if cfg.Servers[i].Hostname != "app.example.com" {
					continue
				}
				l.Mirror = &model.Mirror{Source: "/_mirror-4f0c5a9e-uid", Scheme: "https", HostPort: "test.env.com", Host: "test.env.com",
					URI: model.URLTemplate{{Var: model.VarRequestURI}}, RequestBody: l.Path != "/"}
				if j == 0 {
					l.Mirror = &model.Mirror{Source: "/_mirror-other", Scheme: "http", HostPort: "10.0.0.9:8080", Host: "shadow.example",
						URI: model.URLTemplate{{Literal: "/copy"}, {Var: model.VarIsArgs}, {Var: model.VarArgs}}, RequestBody: true}
				}
			}
		}
	}
	all = append(all, goldenCase{in: "testdata/render/basic.json", out: "testdata/render/mirror", edit: mirror, tweak: func(*RenderConfig) {}})
	// use-proxy-protocol, with big head buffers: every listen takes a
	// PROXY header; behind the SNI router too; and with
	// use-forwarded-headers, which fails allow and deny lists closed.
	proxyProtocol := func(fwd bool) func(*model.Configuration) {
		return func(cfg *model.Configuration) {
			cfg.Global.RealIP = &model.RealIP{Header: "X-Forwarded-For", From: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ProxyProtocol: true}
			cfg.Global.UseForwardedHeaders = fwd
			cfg.Global.ClientHeaderBufferSize, cfg.Global.LargeClientHeaderBuffers, cfg.Global.LargeClientHeaderBufferSize = 2<<10, 8, 16<<10
		}
	}
	all = append(all, goldenCase{in: "testdata/render/tls.json", out: "testdata/render/tls.proxyprotocol", edit: proxyProtocol(false), tweak: func(*RenderConfig) {}},
		goldenCase{in: "testdata/render/tls.json", out: "testdata/render/tls.passthrough.proxyprotocol", edit: proxyProtocol(false),
			tweak: func(rc *RenderConfig) { rc.HTTPSListen, rc.HTTPSProxyProtocol = []string{"127.0.0.1:442"}, true }},
		goldenCase{in: "testdata/render/annotations.json", out: "testdata/render/annotations.proxyprotocol.forwarded", edit: proxyProtocol(true), tweak: func(*RenderConfig) {}})
	// Head buffers at nginx's smallest, and below it (a large buffer under
	// connection_pool_size, 512, which nginx -t refuses: nginx's defaults
	// are written instead, and the ConfigMap gets an error).
	headBuffers := func(small, n, large int) func(*model.Configuration) {
		return func(cfg *model.Configuration) {
			cfg.Global.ClientHeaderBufferSize, cfg.Global.LargeClientHeaderBuffers, cfg.Global.LargeClientHeaderBufferSize = small, n, large
		}
	}
	all = append(all, goldenCase{in: "testdata/render/basic.json", out: "testdata/render/basic.headbuffers.smallest", edit: headBuffers(1, 1, 512), tweak: func(*RenderConfig) {}},
		goldenCase{in: "testdata/render/basic.json", out: "testdata/render/basic.headbuffers.refused", edit: headBuffers(2<<10, 4, 100), tweak: func(*RenderConfig) {}})
	for _, gc := range all {
		in := gc.in
		t.Run(filepath.Base(gc.out), func(t *testing.T) {
			cfg := loadCase(t, in)
			if gc.edit != nil {
				gc.edit(cfg)
			}
			grc := goldenRenderConfig
			gc.tweak(&grc)
			r, err := Render(cfg, grc)
			if err != nil {
				t.Fatal(err)
			}
			errs, err := json.MarshalIndent(r.Errors, "", " ")
			if err != nil {
				t.Fatal(err)
			}
			errs = append(errs, '\n')
			confPath := gc.out + ".conf"
			errPath := gc.out + ".errors.json"
			if *update {
				if err := os.WriteFile(confPath, r.Conf, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(errPath, errs, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(confPath)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if diff := cmp.Diff(string(want), string(r.Conf)); diff != "" {
				t.Errorf("%s differs (-want +got):\n%s", confPath, diff)
			}
			wantErrs, err := os.ReadFile(errPath)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(wantErrs), string(errs)); diff != "" {
				t.Errorf("%s differs (-want +got):\n%s", errPath, diff)
			}
			if _, err := parseNginxConf(string(r.Conf)); err != nil {
				t.Errorf("rendered file does not parse: %v", err)
			}

			// The same Configuration with this machine's paths through nginx -t.
			rc := testDirs(t, t.TempDir(), "")
			gc.tweak(&rc)
			rt, err := Render(cfg, rc)
			if err != nil {
				t.Fatal(err)
			}
			if err := nginxTest(t, nginx, rc, cfg, rt.Conf); err != nil {
				t.Error(err)
			}
		})
	}
}

// The checksum on /config-checksum is that of the file, and changes with it.
func TestRenderChecksum(t *testing.T) {
	cfg := loadCase(t, "testdata/render/basic.json")
	a, err := Render(cfg, goldenRenderConfig)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Render(cfg, goldenRenderConfig)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Conf, b.Conf) {
		t.Fatal("two renders of one Configuration differ")
	}
	ds, err := parseNginxConf(string(a.Conf))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	walk(ds, func(d *directive, parent *directive) {
		if d.Name == "location" && len(d.Args) == 2 && d.Args[1] == "/config-checksum" {
			for _, k := range d.Block {
				if k.Name == "return" {
					got = k.Args[1]
				}
			}
		}
	})
	if got != a.Checksum || len(got) != 64 {
		t.Errorf("config-checksum answers %q; want %q", got, a.Checksum)
	}
	cfg.Servers[1].Hostname = "other.example.com"
	c, err := Render(cfg, goldenRenderConfig)
	if err != nil {
		t.Fatal(err)
	}
	if c.Checksum == a.Checksum {
		t.Errorf("checksum unchanged after the host changed")
	}
}

func walk(ds []*directive, f func(d, parent *directive)) {
	var rec func([]*directive, *directive)
	rec = func(ds []*directive, parent *directive) {
		for _, d := range ds {
			f(d, parent)
			rec(d.Block, d)
		}
	}
	rec(ds, nil)
}

func TestRenderConfigRejected(t *testing.T) {
	cfg := loadCase(t, "testdata/render/basic.json")
	for name, rc := range map[string]RenderConfig{
		"lua dir with quote":   {LuaDir: `/x";`},
		"relative cert dir":    {CertDir: "certs"},
		"listen with spaces":   {HTTPListen: []string{"80 ssl"}},
		"socket with brace":    {APISocket: "/run/a{b"},
		"status on a hostname": {StatusListen: "localhost:1"},
	} {
		if _, err := Render(cfg, rc); err == nil {
			t.Errorf("%s: Render accepted %+v", name, rc)
		}
	}
}
