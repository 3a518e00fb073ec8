package chaos

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// backendEnv makes the test binary a backend instead of running tests:
// "name@ip:port@ip:tlsport", HTTP on the first address and HTTPS (a
// self-signed certificate, for SSL passthrough) on the second. A backend
// in a process of its own is what kill -9 needs.
const backendEnv = "SWITCHYARD_CHAOS_BACKEND"

// backendDelay is how long a backend takes per request, so that requests
// are in flight on it when it is killed.
const backendDelay = 5 * time.Millisecond

// binary is the switchyard binary built for this test binary.
var binary string

// TestMain runs a backend when backendEnv is set, else the tests inside
// harness's network namespace (whose stray check fails the binary if a
// controller, nginx or backend outlives them).
func TestMain(m *testing.M) {
	if spec := os.Getenv(backendEnv); spec != "" {
		os.Exit(serveBackend(spec))
	}
	harness.Main(suiteM{m})
}

// suiteM builds the binary inside the namespace (the outer process only
// re-executes the test binary).
type suiteM struct{ m *testing.M }

func (s suiteM) Run() int {
	if binary = os.Getenv("SWITCHYARD_CHAOS_BINARY"); binary != "" {
		return s.m.Run() // a given build, measured as it is
	}
	dir, err := os.MkdirTemp("", "switchyard-chaos")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binary = filepath.Join(dir, "switchyard")
	build := exec.Command("go", "build", "-o", binary, "./cmd/switchyard")
	build.Dir = "../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build switchyard:", err)
		return 1
	}
	return s.m.Run()
}

// serveBackend answers every request with the backend's name after
// backendDelay, until SIGTERM or SIGKILL.
func serveBackend(spec string) int {
	f := strings.Split(spec, "@")
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "%s=%q: want name@ip:port@ip:tlsport\n", backendEnv, spec)
		return 2
	}
	name := f[0]
	ln, err := net.Listen("tcp", f[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cert, err := selfSigned(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tlsLn, err := tls.Listen("tcp", f[2], &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(backendDelay)
		_, _ = io.WriteString(w, name)
	})}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(tlsLn) }()
	go func() { errc <- srv.Serve(ln) }()
	if err := <-errc; err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// selfSigned returns a fresh self-signed certificate for host.
func selfSigned(host string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate a key: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create a certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// backend is a backend process.
type backend struct {
	name, addr, tlsAddr string
	proc                *harness.Process
}

// startBackends starts one backend process per IP, all on one port (an
// EndpointSlice has one port for all its addresses), and waits until each
// accepts connections.
func startBackends(t *testing.T, ips ...string) []*backend {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	port, tlsPort := harness.FreePort(t, ips[0]), harness.FreePort(t, ips[0])
	var out []*backend
	for i, ip := range ips {
		b := &backend{name: fmt.Sprintf("backend-%d", i+1), addr: net.JoinHostPort(ip, fmt.Sprint(port)),
			tlsAddr: net.JoinHostPort(ip, fmt.Sprint(tlsPort))}
		b.proc = harness.StartProcess(t, harness.Cmd{Name: b.name, Path: exe,
			Env: []string{backendEnv + "=" + b.name + "@" + b.addr + "@" + b.tlsAddr}})
		out = append(out, b)
	}
	for _, b := range out {
		harness.WaitFor(t, readyTimeout, b.name, b.proc, harness.TCPReady(b.addr))
		harness.WaitFor(t, readyTimeout, b.name+" (TLS)", b.proc, harness.TCPReady(b.tlsAddr))
	}
	return out
}

// readyTimeout bounds every wait for a process to come up.
const readyTimeout = 30 * time.Second
