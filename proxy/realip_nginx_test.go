package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRealIPAgainstNginx sends realIPCases and the checked-in fuzz corpus of
// FuzzForwardedAddr to the real nginx, configured with the same realip
// settings and answering $remote_addr, and compares its answers with the
// Go walk's. Skipped without an nginx binary.
func TestRealIPAgainstNginx(t *testing.T) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
			t.Skip("no nginx binary")
		}
		bin = "/usr/sbin/nginx"
	}
	inputs := map[string][]string{}
	for _, tc := range realIPCases {
		inputs[tc.name] = tc.fields
	}
	corpus, _ := filepath.Glob("testdata/fuzz/FuzzForwardedAddr/*")
	for _, path := range corpus {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, arg, ok := strings.Cut(string(b), "string(")
		if !ok {
			continue
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimSpace(arg), ")"))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if s != "" {
			inputs[filepath.Base(path)] = strings.Split(s, "\n")
		}
	}

	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events {}
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    real_ip_header X-Forwarded-For;
    real_ip_recursive on;
    set_real_ip_from 127.0.0.0/8;
    set_real_ip_from 10.0.0.0/8;
    set_real_ip_from 2001:db8::/32;
    server {
        listen %[2]s;
        location / {
            return 200 "$remote_addr";
        }
    }
}
`, dir, addr)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", confPath)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ask := func(fields []string) (string, error) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		var b strings.Builder
		b.WriteString("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n")
		for _, f := range fields {
			b.WriteString("X-Forwarded-For: " + f + "\r\n")
		}
		b.WriteString("\r\n")
		if _, err := io.WriteString(c, b.String()); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("status %d", resp.StatusCode)
		}
		return string(body), err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := ask(nil); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("nginx did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ri := newRealIP(trustedRanges, false)
	conn := netip.MustParseAddr("127.0.0.1")
	compared := 0
	for name, fields := range inputs {
		sendable := true
		var wire [][]byte
		for _, f := range fields {
			for i := 0; i < len(f); i++ {
				if f[i] < 0x20 || f[i] >= 0x7f {
					sendable = false
				}
			}
			// nginx drops the blanks around a field's value, as fasthttp
			// and net/http do.
			wire = append(wire, []byte(strings.Trim(f, " ")))
		}
		if !sendable {
			continue
		}
		got, err := ask(fields)
		if err != nil {
			t.Errorf("%s: %q: %v", name, fields, err)
			continue
		}
		compared++
		if want := string(appendNginxAddr(nil, ri.client(conn, wire))); got != want {
			t.Errorf("%s: fields %q: nginx gives $remote_addr %s; Go %s", name, fields, got, want)
		}
	}
	t.Logf("compared %d inputs with nginx", compared)
}
