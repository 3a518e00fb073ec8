package nginxcompat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// Tester checks a configuration file, as `nginx -t -c` does. It is the
// first half of the seam to the nginx binary (ingress-nginx NginxExecTester).
type Tester interface {
	Test(ctx context.Context, confPath string) error
}

// Reloader asks the running master to load the configuration file again.
type Reloader interface {
	Reload() error
}

// TesterFunc adapts a function to Tester.
type TesterFunc func(ctx context.Context, confPath string) error

// Test calls f.
func (f TesterFunc) Test(ctx context.Context, confPath string) error { return f(ctx, confPath) }

var _ Tester = TesterFunc(nil)

// ControllerConfig configures a Controller. Zero values take the defaults.
type ControllerConfig struct {
	// Nginx is the binary. Default "/usr/sbin/nginx".
	Nginx string
	// ConfPath is where nginx.conf is written; the prefix (-p) is its
	// directory. Default "/etc/switchyard/nginx/nginx.conf".
	ConfPath string
	// Render says where the file's parts live and what it listens on.
	Render RenderConfig
	// Backends receives every Configuration's backends; nil: not synced.
	Backends BackendSyncer
	// Registerer gets the reload metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Logf logs; nil: discarded.
	Logf func(format string, args ...any)
	// ReloadTimeout bounds the wait for the new checksum after SIGHUP.
	// Default 30s.
	ReloadTimeout time.Duration
	// Stdout and Stderr receive nginx's output; nil: os.Stderr.
	Stderr io.Writer
}

// Controller renders, tests, reloads and supervises one nginx master.
// Update is safe for concurrent use; calls are serialized.
type Controller struct {
	cfg ControllerConfig

	success     prometheus.Counter
	errorsTotal prometheus.Counter
	lastOK      prometheus.Gauge
	lastOKTime  prometheus.Gauge

	serving     chan struct{} // closed once the first generation answers
	servingOnce sync.Once

	mu       sync.Mutex // guards the fields below and serializes Update
	running  []byte     // the file nginx serves (rendered bytes)
	checksum string
	master   *exec.Cmd
	exited   chan struct{} // closed when master exits
	reloads  int
}

// NewController validates cfg.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if cfg.Nginx == "" {
		cfg.Nginx = "/usr/sbin/nginx"
	}
	if cfg.ConfPath == "" {
		cfg.ConfPath = "/etc/switchyard/nginx/nginx.conf"
	}
	if !filepath.IsAbs(cfg.ConfPath) {
		return nil, fmt.Errorf("nginxcompat: ConfPath %q must be absolute", cfg.ConfPath)
	}
	if cfg.ReloadTimeout == 0 {
		cfg.ReloadTimeout = 30 * time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	cfg.Render = cfg.Render.withDefaults()
	if err := checkRenderConfig(cfg.Render); err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, serving: make(chan struct{}),
		success: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nginx_ingress_controller", Name: "success",
			Help: "Cumulative number of Ingress controller reload operations"}),
		errorsTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nginx_ingress_controller", Name: "errors",
			Help: "Cumulative number of Ingress controller errors during reload operations"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nginx_ingress_controller", Name: "config_last_reload_successful",
			Help: "Whether the last configuration reload attempt was successful"}),
		lastOKTime: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nginx_ingress_controller", Name: "config_last_reload_successful_timestamp_seconds",
			Help: "Timestamp of the last successful configuration reload."}),
	}
	if cfg.Registerer != nil {
		for _, m := range []prometheus.Collector{c.success, c.errorsTotal, c.lastOK, c.lastOKTime} {
			if err := cfg.Registerer.Register(m); err != nil {
				return nil, fmt.Errorf("register reload metrics: %w", err)
			}
		}
	}
	return c, nil
}

// Test runs `nginx -t -q -e stderr -p <dir> -c <confPath>`.
func (c *Controller) Test(ctx context.Context, confPath string) error {
	out, err := exec.CommandContext(ctx, c.cfg.Nginx, "-t", "-q", "-e", "stderr",
		"-p", filepath.Dir(c.cfg.ConfPath), "-c", confPath).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nginx -t: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Reload sends SIGHUP to the master.
func (c *Controller) Reload() error {
	c.mu.Lock()
	m := c.master
	c.mu.Unlock()
	if m == nil || m.Process == nil {
		return errors.New("nginxcompat: nginx is not running")
	}
	return m.Process.Signal(syscall.SIGHUP)
}

var (
	_ Tester   = (*Controller)(nil)
	_ Reloader = (*Controller)(nil)
)

// Reloads is the number of successful reloads (SIGHUPs that took effect).
func (c *Controller) Reloads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reloads
}

// ConfigError is a rendered file that `nginx -t` refused: the running
// configuration keeps serving. Ingress is the object whose location holds
// the line nginx named, when it can be found.
type ConfigError struct {
	Ingress model.ObjectRef
	Output  string
}

func (e *ConfigError) Error() string {
	if e.Ingress.Name != "" {
		return fmt.Sprintf("nginx refused the configuration (Ingress %s/%s): %s", e.Ingress.Namespace, e.Ingress.Name, e.Output)
	}
	return "nginx refused the configuration: " + e.Output
}

// ObjectErrors names the Ingress nginx's error points at (when found), so
// the control plane attaches a Warning Event to it.
func (e *ConfigError) ObjectErrors() []model.ObjectError {
	if e.Ingress.Name == "" {
		return nil
	}
	out := strings.TrimSpace(e.Output)
	if i := strings.IndexByte(out, '\n'); i >= 0 {
		out = out[:i]
	}
	return []model.ObjectError{{Object: e.Ingress, Message: "nginx -t refused the configuration; the previous one keeps serving: " + out}}
}

var (
	reConfLine = regexp.MustCompile(`in (\S+):([0-9]+)`)
	// "cannot load certificate "<file>"" and OpenSSL's
	// "SSL_CTX_use_certificate("<file>") failed" (a key OpenSSL refuses).
	reCertFile = regexp.MustCompile(`certificate(?: key)?(?: |\()"([^"]+)"`)
)

// offendingIngress finds the Ingress of the location holding the line nginx
// named in out: the last "set $namespace/$ingress_name" at or above it.
func offendingIngress(conf []byte, out string) model.ObjectRef {
	ds := bytes.Split(conf, []byte("\n"))
	line := 0
	if m := reConfLine.FindStringSubmatch(out); m != nil {
		line, _ = strconv.Atoi(m[2])
	} else if m := reCertFile.FindStringSubmatch(out); m != nil {
		// "cannot load certificate <file>": the line that names it.
		for i, l := range ds {
			if bytes.Contains(l, []byte(quote(m[1]))) {
				line = i + 1
				break
			}
		}
	}
	if line == 0 {
		return model.ObjectRef{}
	}
	var ref model.ObjectRef
	// Walk down to the line, remembering the last location's Ingress;
	// a new server resets it.
	for i := 0; i < line && i < len(ds); i++ {
		l := bytes.TrimSpace(ds[i])
		switch {
		case bytes.HasPrefix(l, []byte("server {")):
			ref = model.ObjectRef{}
		case bytes.HasPrefix(l, []byte("set $namespace ")):
			ref.Namespace = unquoteSet(l)
		case bytes.HasPrefix(l, []byte("set $ingress_name ")):
			ref.Name = unquoteSet(l)
			ref.Kind = "Ingress"
		case bytes.HasPrefix(l, []byte("ssl_certificate ")):
			// A certificate error names the server's line: its
			// Ingress comes from the first location below.
			for j := i + 1; j < len(ds); j++ {
				k := bytes.TrimSpace(ds[j])
				if bytes.HasPrefix(k, []byte("set $namespace ")) {
					ref.Namespace = unquoteSet(k)
				}
				if bytes.HasPrefix(k, []byte("set $ingress_name ")) {
					ref.Name, ref.Kind = unquoteSet(k), "Ingress"
					break
				}
			}
		}
	}
	if ref.Name == "" {
		return model.ObjectRef{}
	}
	return ref
}

func unquoteSet(l []byte) string {
	f := bytes.SplitN(l, []byte(" "), 3)
	if len(f) < 3 {
		return ""
	}
	v := bytes.TrimSuffix(f[2], []byte(";"))
	v = bytes.TrimPrefix(bytes.TrimSuffix(v, []byte(`"`)), []byte(`"`))
	return string(v)
}

// Update is the sink: it syncs the backends to the balancer (never a
// reload), writes the certificates, renders nginx.conf and, only when the
// rendered bytes differ from what nginx serves, writes a temp file, tests it
// with nginx -t, renames it into place, sends SIGHUP and waits until the
// status server answers the new checksum and the old workers stopped
// accepting. A refused file leaves the running
// configuration serving and returns a *ConfigError.
func (c *Controller) Update(ctx context.Context, cfg *model.Configuration) error {
	if c.cfg.Backends != nil {
		if err := c.cfg.Backends.Sync(cfg.Backends); err != nil {
			return fmt.Errorf("sync backends: %w", err)
		}
	}
	r, err := Render(cfg, c.cfg.Render)
	if err != nil {
		return err
	}
	for _, e := range r.Errors {
		c.cfg.Logf("nginxcompat: %s %s/%s %s: %s", e.Object.Kind, e.Object.Namespace, e.Object.Name, e.Field, e.Message)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if bytes.Equal(r.Conf, c.running) {
		return nil
	}
	if err := PrepareDirs(c.cfg.Render); err != nil {
		return err
	}
	if err := WriteCertificates(c.cfg.Render.CertDir, cfg.Certificates); err != nil {
		return err
	}
	if err := WriteClientCAs(r.ClientCAs); err != nil {
		return err
	}
	if err := WriteAuthFiles(c.cfg.Render.AuthDir, r.AuthFiles); err != nil {
		return err
	}
	if err := c.install(ctx, r); err != nil {
		c.errorsTotal.Inc()
		c.lastOK.Set(0)
		return err
	}
	if err := RemoveStaleCertificates(c.cfg.Render.CertDir, cfg.Certificates); err != nil {
		c.cfg.Logf("nginxcompat: %v", err)
	}
	if err := RemoveStaleClientCAs(c.cfg.Render.CertDir, r.ClientCAs); err != nil {
		c.cfg.Logf("nginxcompat: %v", err)
	}
	if err := RemoveStaleAuthFiles(c.cfg.Render.AuthDir, r.AuthFiles); err != nil {
		c.cfg.Logf("nginxcompat: %v", err)
	}
	return nil
}

// install tests r in a temp file, renames it into place and reloads (or, if
// nginx is not running yet, leaves it for Run to start). c.mu is held.
func (c *Controller) install(ctx context.Context, r *Rendered) error {
	dir := filepath.Dir(c.cfg.ConfPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create config dir: %w", err)
	}
	tmp := c.cfg.ConfPath + ".new"
	if err := writeFileAtomic(tmp, r.Conf, 0o644); err != nil {
		return fmt.Errorf("write nginx.conf: %w", err)
	}
	if err := c.Test(ctx, tmp); err != nil {
		_ = os.Remove(tmp)
		cerr := &ConfigError{Ingress: offendingIngress(r.Conf, err.Error()), Output: err.Error()}
		c.cfg.Logf("nginxcompat: %v", cerr)
		return cerr
	}
	if err := os.Rename(tmp, c.cfg.ConfPath); err != nil {
		return fmt.Errorf("install nginx.conf: %w", err)
	}
	c.running, c.checksum = r.Conf, r.Checksum
	if c.master == nil {
		// Run starts nginx on this file, which nginx -t accepted.
		c.lastOK.Set(1)
		c.lastOKTime.SetToCurrentTime()
		return nil
	}
	master := c.master.Process.Pid
	oldWorkers := workerPIDs(master)
	if err := c.master.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("signal nginx: %w", err)
	}
	if err := c.waitChecksum(ctx, r.Checksum); err != nil {
		return err
	}
	// The new generation serves; done once the old one stopped accepting,
	// so a connection made after Update returns gets the new file.
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReloadTimeout)
	err := waitRetired(rctx, master, oldWorkers)
	cancel()
	if err != nil {
		c.cfg.Logf("nginxcompat: reload: %v", err)
	}
	c.reloads++
	c.success.Inc()
	c.lastOK.Set(1)
	c.lastOKTime.SetToCurrentTime()
	return nil
}

// waitChecksum polls the status server until it answers sum: the new
// generation's workers are serving.
func (c *Controller) waitChecksum(ctx context.Context, sum string) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReloadTimeout)
	defer cancel()
	url := "http://" + c.cfg.Render.StatusListen + "/config-checksum"
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 128))
			_ = resp.Body.Close()
			if string(b) == sum {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for nginx to serve checksum %s: %w", sum, ctx.Err())
		case <-tick.C:
		}
	}
}

// Serving is closed once nginx, started by Run, first answers the checksum
// of the file it was started on: from then on it serves the configuration
// (readiness).
func (c *Controller) Serving() <-chan struct{} { return c.serving }

// Run starts the nginx master (foreground, own process group) on the file
// installed by the first successful Update, restarts it whenever it dies,
// and on ctx's end sends SIGQUIT (graceful: nginx stops accepting and drains
// for worker-shutdown-timeout) and waits for the group to exit. Call Update
// once before Run.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running == nil {
		c.mu.Unlock()
		return errors.New("nginxcompat: Run before a successful Update")
	}
	c.mu.Unlock()
	backoff := 50 * time.Millisecond
	for {
		started := time.Now()
		exited, err := c.start()
		if err != nil {
			return err
		}
		// The first generation counts as loaded once it answers.
		c.mu.Lock()
		sum := c.checksum
		c.mu.Unlock()
		if err := c.waitChecksum(ctx, sum); err != nil {
			if ctx.Err() == nil {
				c.cfg.Logf("nginxcompat: nginx did not come up: %v", err)
			}
		} else {
			c.servingOnce.Do(func() { close(c.serving) })
		}
		select {
		case <-ctx.Done():
			c.stop()
			return nil
		case <-exited:
		}
		c.cfg.Logf("nginxcompat: nginx master exited; restarting")
		if time.Since(started) > 10*time.Second {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (c *Controller) start() (<-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd := exec.Command(c.cfg.Nginx, "-e", "stderr", "-g", "daemon off; master_process on;",
		"-p", filepath.Dir(c.cfg.ConfPath), "-c", c.cfg.ConfPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = c.cfg.Stderr
	cmd.Stderr = c.cfg.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	exited := make(chan struct{})
	pgid := cmd.Process.Pid
	go func() {
		// Process.Wait, not cmd.Wait: the workers hold the output pipe,
		// so cmd.Wait would not return before they are gone.
		_, _ = cmd.Process.Wait()
		// Workers outlive a killed master and keep the listening
		// sockets: end the whole group before a new master binds.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = cmd.Wait() // release the output copier
		close(exited)
	}()
	c.master, c.exited = cmd, exited
	return exited, nil
}

// stop sends SIGQUIT and waits for the master (which waits for its
// draining workers).
func (c *Controller) stop() {
	c.mu.Lock()
	m, exited := c.master, c.exited
	c.master = nil
	c.mu.Unlock()
	if m == nil {
		return
	}
	_ = m.Process.Signal(syscall.SIGQUIT)
	<-exited
}
