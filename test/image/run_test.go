package image

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// defaultTestTimeout bounds one wait: the controller's readiness, a request.
const defaultTestTimeout = 90 * time.Second

// testHost is the Ingress host of the HTTP requests; tlsHost's Ingress has
// TLS (its own, so that testHost is not redirected to HTTPS).
const (
	testHost = "image.test"
	tlsHost  = "tls.image.test"
)

// manifestsDir is where, inside the root filesystem, the test puts the
// Ingress, Service and EndpointSlice the controller serves.
const manifestsDir = "/run/switchyard-test/manifests"

// manifestsYAML routes testHost, and tlsHost over TLS with certPEM and
// keyPEM, to a selector-less Service whose EndpointSlice names backend
// (ip:port), with the IngressClass the controller serves by default
// (--ingress-class switchyard, --controller-class
// switchyard.dev/ingress-controller; deploy/quickstart).
func manifestsYAML(ip string, port int, certPEM, keyPEM []byte) string {
	return harness.LocalServiceYAML("image", "backend", port, ip) + fmt.Sprintf(`---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: backend, namespace: image}
spec:
  ingressClassName: switchyard
  rules:
  - host: %[1]s
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: backend, port: {name: http}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: backend-tls, namespace: image}
spec:
  ingressClassName: switchyard
  tls:
  - {hosts: [%[2]s], secretName: backend-tls}
  rules:
  - host: %[2]s
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: backend, port: {name: http}}}}
---
apiVersion: v1
kind: Secret
metadata: {name: backend-tls, namespace: image}
type: kubernetes.io/tls
data:
  tls.crt: %[3]s
  tls.key: %[4]s
`, testHost, tlsHost, base64.StdEncoding.EncodeToString(certPEM), base64.StdEncoding.EncodeToString(keyPEM))
}

// mountRuntimeFS mounts what a container runtime gives every container
// into root: /proc, and a tmpfs /dev with the usual nodes and links (the
// image's /dev is empty). The test binary has its own mount namespace
// (harness.Main), so nothing leaks; the mounts go at t.Cleanup, before
// anything removes root.
func mountRuntimeFS(t *testing.T, root string) {
	t.Helper()
	mount := func(src, dir, fstype string, flags uintptr, data string) {
		t.Helper()
		if err := syscall.Mount(src, dir, fstype, flags, data); err != nil {
			t.Fatalf("mount %s on %s: %v", fstype, dir, err)
		}
		t.Cleanup(func() {
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
			}
		})
	}
	// Private, so that the mounts below stay in this namespace even if
	// harness's unshare left the tree shared.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make / private: %v", err)
	}
	mount("proc", filepath.Join(root, "proc"), "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	dev := filepath.Join(root, "dev")
	mount("tmpfs", dev, "tmpfs", syscall.MS_NOSUID, "mode=755,size=65536k")
	for _, n := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		path := filepath.Join(dev, n.name)
		if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, int(n.major<<8|n.minor)); err != nil {
			t.Fatalf("mknod %s: %v", path, err)
		}
		if err := os.Chmod(path, 0o666); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// procStatus returns the fields of /proc/pid/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("status of %d: %v", pid, err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out
}

// checkCredentials fails unless pid runs as uid and gid 10001, with no
// supplementary groups, and holds exactly NET_BIND_SERVICE, permitted and
// effective (from the file capability: nothing ambient, nothing inherited).
func checkCredentials(t *testing.T, what string, pid int) {
	t.Helper()
	s := procStatus(t, pid)
	want := map[string]string{
		"Uid": "10001 10001 10001 10001", "Gid": "10001 10001 10001 10001", "Groups": "",
		"CapPrm": fmt.Sprintf("%016x", 1<<capNetBindBit), "CapEff": fmt.Sprintf("%016x", 1<<capNetBindBit),
		"CapInh": "0000000000000000", "CapAmb": "0000000000000000",
		"CapBnd": fmt.Sprintf("%016x", 1<<capNetBindBit),
	}
	for k, v := range want {
		if s[k] != v {
			t.Errorf("%s (pid %d, %s): %s %q; want %q", what, pid, s["Name"], k, s[k], v)
		}
	}
}

// TestImageServes runs the image's entrypoint and cmd (`switchyard
// controller`) inside the unpacked root filesystem, as a Kubernetes node
// would run the DaemonSet (deploy/base): uid and gid 10001, no supplementary
// groups, NET_BIND_SERVICE the only capability in the bounding set, no
// ambient capabilities, so ports 80 and 443 bind only through the image's
// file capabilities. It serves manifests (--manifests) routing to a backend
// on 127.0.0.2, once with --data-plane=go and once with --data-plane=nginx,
// on the default ports (80, 443, status 10254), and each must answer 200
// from the backend over HTTP on port 80 and over HTTPS on port 443.
func TestImageServes(t *testing.T) {
	harness.RequireNetNS(t)
	img := image(t)
	requireTools(t, "umoci", "unshare", "env")
	root := filepath.Join(unpacked(t, img), "rootfs")

	// Port 80 must need the capability here, or this test proves nothing.
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start"); err != nil {
		t.Fatal(err)
	} else if start, _ := strconv.Atoi(strings.TrimSpace(string(b))); start <= 80 {
		t.Fatalf("net.ipv4.ip_unprivileged_port_start is %d: binding port 80 would not need the capability", start)
	}

	mountRuntimeFS(t, root)

	// The backend, on a loopback address of this network namespace.
	var hits atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "backend saw %s %s", r.Host, r.URL.Path)
	})}
	go func() { _ = backend.Serve(ln) }()
	t.Cleanup(func() { _ = backend.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	dir := filepath.Join(root, manifestsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := harness.SelfSignedPEM(t, tlsHost)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(certPEM) {
		t.Fatal("the test certificate does not parse")
	}
	// 0644: the controller (10001) reads it; the key is a throwaway.
	if err := os.WriteFile(filepath.Join(dir, "backend.yaml"), []byte(manifestsYAML("127.0.0.2", port, certPEM, keyPEM)), 0o644); err != nil {
		t.Fatal(err)
	}

	// env -i: the process sees the image's Env only. unshare --root (the
	// host's) enters the root filesystem; the image's own setpriv (Debian's
	// util-linux) leaves NET_BIND_SERVICE alone in the bounding set and
	// nothing inheritable, becomes the image's user with no supplementary
	// groups, and execs the entrypoint.
	uid, gid, ok := strings.Cut(img.config.Config.User, ":")
	if !ok {
		t.Fatalf("image User %q is not uid:gid", img.config.Config.User)
	}
	prefix := append([]string{"-i"}, img.config.Config.Env...)
	prefix = append(prefix, "HOSTNAME=switchyard-image-test",
		"unshare", "--root="+root, "--wd=/",
		"/usr/bin/setpriv", "--reuid="+uid, "--regid="+gid, "--clear-groups",
		"--bounding-set=-all,+net_bind_service", "--inh-caps=-all")
	prefix = append(prefix, img.config.Config.Entrypoint...)
	prefix = append(prefix, img.config.Config.Cmd...)

	// go-workers: the Go plane in two worker processes (--go-workers, as
	// deploy/base runs it with 0: one per CPU), which take their sockets
	// from the controller and need no capability of their own.
	for _, plane := range []string{"go", "go-workers", "nginx"} {
		t.Run(plane, func(t *testing.T) {
			dataPlane := strings.TrimSuffix(plane, "-workers")
			args := append(append([]string(nil), prefix...), "--manifests", manifestsDir, "--data-plane", dataPlane,
				// Other test binaries share the 2 cores in CI.
				"--pick-timeout", "2s")
			if plane == "go-workers" {
				args = append(args, "--go-workers", "2")
			}
			// The process's stdout and stderr belong to its user, as runc
			// makes them (fixStdioPermissions): nginx reopens them as
			// /dev/stdout for its access log. harness truncates this file
			// and keeps its owner.
			name, logDir := "switchyard-"+plane, t.TempDir()
			logFile := filepath.Join(logDir, name+".log")
			if err := os.WriteFile(logFile, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(logFile, imageUID, imageUID); err != nil {
				t.Fatal(err)
			}
			p := harness.StartProcess(t, harness.Cmd{Name: name, Path: "/usr/bin/env", Args: args, LogDir: logDir})
			harness.WaitFor(t, defaultTestTimeout, "the controller's /readyz", p,
				harness.HTTPReady("http://127.0.0.1:10254/readyz", http.StatusOK, nil, nil))

			before := hits.Load()
			for _, r := range []struct{ url, host string }{
				{"http://127.0.0.1:80/", testHost},
				{"http://127.0.0.1/some/path", testHost},
				{"https://127.0.0.1:443/", tlsHost},
			} {
				status, body := get(t, r.url, r.host, roots)
				if status != http.StatusOK || !strings.HasPrefix(body, "backend saw "+r.host) {
					t.Errorf("GET %s Host %s through --data-plane=%s: %d %q; want 200 from the backend", r.url, r.host, plane, status, body)
				}
			}
			if got := hits.Load() - before; got != 3 {
				t.Errorf("the backend saw %d requests; want 3", got)
			}

			checkCredentials(t, "switchyard", p.Pid())
			if plane == "go-workers" {
				var workers int
				for _, pid := range harness.ChildPIDs(p.Pid()) {
					if strings.Contains(harness.Cmdline(pid), " worker -index=") {
						workers++
						checkCredentials(t, "go worker", pid)
					}
				}
				if workers != 2 {
					t.Errorf("%d go workers under switchyard (pid %d); want 2", workers, p.Pid())
				}
			}
			if plane == "nginx" {
				var masters int
				for _, pid := range harness.ChildPIDs(p.Pid()) {
					if strings.HasPrefix(harness.Cmdline(pid), "nginx: master process") {
						masters++
						checkCredentials(t, "nginx master", pid)
						for _, w := range harness.ChildPIDs(pid) {
							if s := procStatus(t, w); s["Uid"] != "10001 10001 10001 10001" {
								t.Errorf("nginx worker %d: Uid %q; want 10001", w, s["Uid"])
							}
						}
					}
				}
				if masters != 1 {
					t.Errorf("%d nginx masters under switchyard (pid %d); want 1", masters, p.Pid())
				}
			}
		})
	}
}

// get sends one GET for host (Host header, and SNI for https, verified
// against roots), bounded by defaultTestTimeout.
func get(t *testing.T, url, host string, roots *x509.CertPool) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{ServerName: host, RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}
