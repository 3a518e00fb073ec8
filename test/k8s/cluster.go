package k8s

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
	"k8s.io/client-go/rest"
)

// Versions the harness expects; test/tools/build-k8s.sh builds these.
const (
	KubeVersion = "v1.33.13"
	EtcdVersion = "v3.5.21"
)

// ControllerUser is the identity bound to the controller's RBAC from
// deploy/base/rbac.yaml.
const ControllerUser = "switchyard-controller"

// readyTimeout bounds the start of etcd plus kube-apiserver (3-4 s idle; far
// more on a loaded 2-core machine).
const readyTimeout = 2 * time.Minute

// Options configure a cluster; the zero value is a loopback cluster.
type Options struct {
	// Address is the IP etcd and kube-apiserver bind to; zero means
	// 127.0.0.1. Inside harness's namespace a TEST-NET-1 address works too.
	Address string
	// DataDir, if set, holds etcd's data and outlives the cluster: a later
	// cluster on the same directory starts with the objects an earlier one
	// stored (staging 150,000 objects takes tens of minutes). Zero means a
	// directory of the test's own, removed with it.
	DataDir string
}

// Cluster is a running etcd + kube-apiserver.
type Cluster struct {
	// immutable
	host   string
	caPEM  []byte
	tokens tokens
	procs  []*harness.Process
	dir    string

	nsSeq atomic.Uint64
}

type tokens struct{ admin, controller, nobody string }

// BinDir returns where the binaries are: $SWITCHYARD_K8S_BIN, or the cache
// path build-k8s.sh uses by default, CacheDir()/k8s-<v>-etcd-<v>.
func BinDir() string {
	if d := os.Getenv("SWITCHYARD_K8S_BIN"); d != "" {
		return d
	}
	return filepath.Join(CacheDir(), "k8s-"+KubeVersion+"-etcd-"+EtcdVersion)
}

// CacheDir is where test/tools/*.sh cache what they build:
// $SWITCHYARD_K8S_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/switchyard.
func CacheDir() string {
	if d := os.Getenv("SWITCHYARD_K8S_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "switchyard")
}

// errNoBinaries says the binaries are not built; tests then fail under CI
// and skip elsewhere.
var errNoBinaries = errors.New("k8s: binaries not built")

func checkBinaries() error {
	bin := BinDir()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return fmt.Errorf("%w: %s not found in %s: run test/setup.sh (it builds it once)", errNoBinaries, b, bin)
		}
	}
	return nil
}

// skipOrFail fails under CI=true and skips loudly elsewhere.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(err)
	}
	t.Skip("SKIPPING: " + err.Error())
}

// Start runs a cluster for this test alone and stops it at cleanup, also
// when the test fails. Prefer Main + Shared when a package has several tests.
func Start(t testing.TB) *Cluster { return StartWith(t, Options{}) }

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if err := checkBinaries(); err != nil {
		skipOrFail(t, err)
	}
	start := time.Now()
	c, err := launch(t.TempDir(), opts)
	if err == nil {
		t.Logf("k8s: cluster ready in %v at %s", time.Since(start).Round(time.Millisecond), c.host)
	}
	if c != nil {
		t.Cleanup(func() {
			if t.Failed() {
				for _, p := range c.procs {
					t.Logf("last output of %s (%s):\n%s", p.Name(), p.LogPath(), p.Tail(3000))
				}
			}
			if err := c.Stop(); err != nil {
				t.Errorf("stop cluster: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// launch starts etcd and kube-apiserver with files under dir, waits for
// /readyz and applies the controller's RBAC. On error the returned cluster
// (if any) still needs Stop.
func launch(dir string, opts Options) (*Cluster, error) {
	ip := opts.Address
	if ip == "" {
		ip = "127.0.0.1"
	}
	if net.ParseIP(ip) == nil {
		return nil, fmt.Errorf("k8s: Options.Address %q is not an IP", ip)
	}
	p, err := newPKI(dir, ip)
	if err != nil {
		return nil, fmt.Errorf("generate certificates: %w", err)
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = harness.FreePortErr(ip); err != nil {
			return nil, err
		}
	}
	hostport := func(port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
	etcdURL, peerURL := "http://"+hostport(ports[0]), "http://"+hostport(ports[1])
	c := &Cluster{host: "https://" + hostport(ports[2]), caPEM: p.caPEM, tokens: p.tokens, dir: dir}
	bin := BinDir()

	etcd, err := harness.Launch(harness.Cmd{Name: "etcd", Path: filepath.Join(bin, "etcd"), LogDir: dir, Args: []string{
		"--name", "e2e", "--data-dir", cmp.Or(opts.DataDir, filepath.Join(dir, "etcd")),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e2e=" + peerURL, "--unsafe-no-fsync", "--log-level", "warn",
	}})
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, etcd)
	ctx := context.Background()
	if err := harness.WaitUntil(ctx, readyTimeout, "etcd "+etcdURL+"/health", etcd, harness.HTTPReady(etcdURL+"/health", http.StatusOK, nil, nil)); err != nil {
		return c, err
	}

	// The Service range is a /16: a /24 holds 254 ClusterIPs, and Stage
	// creates up to 50,000 Services (issue 22).
	api, err := harness.Launch(harness.Cmd{Name: "kube-apiserver", Path: filepath.Join(bin, "kube-apiserver"), LogDir: dir, Args: []string{
		"--etcd-servers=" + etcdURL, "--bind-address=" + ip, "--advertise-address=" + ip,
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--tls-cert-file=" + p.serverCert, "--tls-private-key-file=" + p.serverKey,
		"--client-ca-file=" + p.caCert, "--token-auth-file=" + p.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPub, "--service-account-signing-key-file=" + p.saKey,
		"--service-cluster-ip-range=10.0.0.0/16", "--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true", "--endpoint-reconciler-type=none", "--v=0",
	}})
	if err != nil {
		return c, err
	}
	c.procs = append(c.procs, api)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	auth := http.Header{"Authorization": {"Bearer " + p.tokens.admin}}
	if err := harness.WaitUntil(ctx, readyTimeout, "kube-apiserver /readyz", api,
		harness.HTTPReady(c.host+"/readyz", http.StatusOK, &tls.Config{RootCAs: pool}, auth)); err != nil {
		return c, err
	}
	if err := c.applyControllerRBAC(ctx); err != nil {
		return c, fmt.Errorf("apply the controller's RBAC: %w", err)
	}
	return c, nil
}

// Stop stops kube-apiserver, then etcd. It is idempotent.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		errs = append(errs, c.procs[i].Stop())
	}
	return errors.Join(errs...)
}

// Dir is where the cluster's certificates, data and logs are.
func (c *Cluster) Dir() string { return c.dir }

// Host is the API server's URL.
func (c *Cluster) Host() string { return c.host }

func (c *Cluster) config(token string) *rest.Config {
	return &rest.Config{Host: c.host, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), c.caPEM...)},
		QPS:             100, Burst: 200}
}

// AdminConfig is a fresh config for an identity in system:masters.
func (c *Cluster) AdminConfig() *rest.Config { return c.config(c.tokens.admin) }

// ControllerConfig is a fresh config for ControllerUser, which holds exactly
// the RBAC of deploy/base/rbac.yaml: its ClusterRoles cluster-wide, its Roles
// in their own namespace and in every namespace made by Namespace or
// BindController.
func (c *Cluster) ControllerConfig() *rest.Config { return c.config(c.tokens.controller) }

// UnprivilegedConfig is a fresh config for an authenticated identity with no
// bindings at all.
func (c *Cluster) UnprivilegedConfig() *rest.Config { return c.config(c.tokens.nobody) }

// Namespace creates a namespace unique to this test (named after it) with
// the controller's Roles bound in it, and returns its name. Without a
// namespace controller a deleted namespace never goes away, so it is left
// in place; the cluster ends with the test binary.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	name := nsName(t.Name(), c.nsSeq.Add(1))
	if err := c.createNamespace(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	c.BindController(t, name)
	return name
}

// nsName makes a DNS label from a test name and a sequence number.
func nsName(test string, seq uint64) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	suffix := "-" + strconv.FormatUint(seq, 10)
	s := strings.Trim(b.String(), "-")
	if len(s) > 63-len(suffix) {
		s = strings.Trim(s[:63-len(suffix)], "-")
	}
	if s == "" {
		s = "t"
	}
	return s + suffix
}

// Shared cluster for a whole test binary (Main).
var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Main runs the package's tests inside harness's network namespace with one
// cluster shared by all of them (see Shared), stops it afterwards, and
// exits. Call it from TestMain. The cluster starts lazily, at the first
// Shared call, so a filtered run that needs no cluster starts none.
func Main(m *testing.M) {
	harness.Main(&sharedM{m})
}

// sharedM stops the shared cluster after the tests, inside the namespace.
type sharedM struct{ m *testing.M }

func (s *sharedM) Run() int {
	code := s.m.Run()
	if shared.c != nil {
		start := time.Now()
		err := shared.c.Stop()
		if testing.Verbose() {
			fmt.Fprintf(os.Stderr, "k8s: shared cluster stopped in %v\n", time.Since(start).Round(time.Millisecond))
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "k8s: stop the shared cluster: %v\n", err)
			code = max(code, 1)
		}
		if code != 0 {
			for _, p := range shared.c.procs {
				fmt.Fprintf(os.Stderr, "k8s: last output of %s:\n%s\n", p.Name(), p.Tail(3000))
			}
		}
		_ = os.RemoveAll(shared.c.dir)
	}
	return code
}

// Shared returns the binary's cluster, starting it on first use. It needs
// Main in TestMain.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if err := checkBinaries(); err != nil {
		skipOrFail(t, err)
	}
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "switchyard-k8s-")
		if err != nil {
			shared.err = err
			return
		}
		start := time.Now()
		shared.c, shared.err = launch(dir, Options{})
		if shared.err == nil {
			t.Logf("k8s: shared cluster ready in %v at %s", time.Since(start).Round(time.Millisecond), shared.c.host)
		}
	})
	if shared.err != nil {
		t.Fatalf("start the shared cluster: %v", shared.err)
	}
	return shared.c
}
