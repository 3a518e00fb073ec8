package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// sources are the Lua trees both configurations load, checked once.
type sources struct {
	ingressLua string // ingress-nginx's rootfs/etc/nginx/lua
	ingressTag string // its TAG file, when the checkout has one
	shimLua    string // this repository's lua/ (or -lua)
	libs       []string
	clib       string // directory holding librestychash.so (buildChash)
	// jitProfile (-jitprofile), when set, is where each front's workers
	// write LuaJIT's profile of their Lua when they exit.
	jitProfile string
}

// checkSources resolves the checkouts and fails with what is missing, so a
// wrong path is not discovered as an nginx start-up error.
func checkSources(o options) (sources, error) {
	var s sources
	for _, p := range []struct{ flag, val string }{
		{"--ingress-nginx", o.ingressLua}, {"--resty-balancer", o.restyBalancer},
		{"--resty-cookie", o.restyCookie}, {"--resty-lock", o.restyLock}, {"--resty-dns", o.restyDNS},
	} {
		if p.val == "" {
			return s, fmt.Errorf("%s is required (see test/bench/shim-real.sh's header)", p.flag)
		}
	}
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			return p
		}
		return a
	}
	s.ingressLua = abs(o.ingressLua)
	if _, err := os.Stat(filepath.Join(s.ingressLua, "rootfs/etc/nginx/lua/balancer.lua")); err == nil {
		if tag, err := os.ReadFile(filepath.Join(s.ingressLua, "TAG")); err == nil {
			s.ingressTag = strings.TrimSpace(string(tag))
		}
		s.ingressLua = filepath.Join(s.ingressLua, "rootfs/etc/nginx/lua")
	}
	if s.ingressTag == "" {
		s.ingressTag = "(no TAG file)"
	}
	s.shimLua = abs(o.shimLua)
	want := []string{
		filepath.Join(s.ingressLua, "balancer.lua"),
		filepath.Join(s.ingressLua, "configuration.lua"),
		filepath.Join(s.ingressLua, "balancer/sticky_persistent.lua"),
		filepath.Join(s.ingressLua, "util/nodemap.lua"),
		filepath.Join(s.shimLua, "balancer.lua"),
		filepath.Join(s.shimLua, "configuration.lua"),
		filepath.Join(s.shimLua, "switchyard/pick.lua"),
	}
	for _, l := range []struct{ dir, file string }{
		{o.restyBalancer, "resty/chash.lua"}, {o.restyBalancer, "resty/roundrobin.lua"},
		{o.restyCookie, "resty/cookie.lua"}, {o.restyLock, "resty/lock.lua"}, {o.restyDNS, "resty/dns/resolver.lua"},
	} {
		lib := filepath.Join(abs(l.dir), "lib")
		want = append(want, filepath.Join(lib, l.file))
		if !strings.HasSuffix(l.file, "roundrobin.lua") {
			s.libs = append(s.libs, lib)
		}
	}
	want = append(want, filepath.Join(abs(o.restyBalancer), "chash.c"))
	for _, f := range want {
		if _, err := os.Stat(f); err != nil {
			return s, fmt.Errorf("source missing: %w", err)
		}
	}
	return s, nil
}

// buildChash compiles lua-resty-balancer's chash.c into the
// librestychash.so its chash.lua loads from package.cpath, as
// ingress-nginx's image build does (make in lua-resty-balancer).
func buildChash(dir, restyBalancer string) (string, error) {
	out := filepath.Join(dir, "clib")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	src, err := filepath.Abs(filepath.Join(restyBalancer, "chash.c"))
	if err != nil {
		return "", err
	}
	cmd := exec.Command("cc", "-O2", "-shared", "-fPIC", "-o", filepath.Join(out, "librestychash.so"), src)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build librestychash.so: %v\n%s", err, b)
	}
	return out, nil
}

// sha returns the first 12 hex digits of a file's SHA-256, or "?".
func sha(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])[:12]
}
