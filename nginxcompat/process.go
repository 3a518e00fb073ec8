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
	// ReassertInterval is how often Run syncs the last Configuration's
	// backends to Backends again, so that a foreign POST
	// /configuration/backends (which replaces the balancer's payload, `[]`
	// included) is undone within it (issue 20). Zero means 10s; negative
	// means never. A Sync of the payload the balancer already holds changes
	// nothing, not even its generation, so the cost is one comparison of
	// the payload per interval; 10s bounds the outage of a stray `[]` to
	// about what one failed readiness probe period is in Kubernetes. A
	// payload with an ExternalName backend is built again (its names
	// resolved again) at every Sync.
	ReassertInterval time.Duration
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

	stderr *lastEmerg // immutable; wraps cfg.Stderr
	fake   string     // immutable; the fake certificate's PEM (withFakeCertificate)

	mu       sync.Mutex // guards the fields below and serializes Update
	running  []byte     // the file nginx serves (rendered bytes)
	checksum string
	master   *exec.Cmd
	cur      *nginxProc // master's
	reloads  int

	syncMu       sync.Mutex // serializes backend syncs; guards the fields below
	backends     []*model.Backend
	haveBackends bool

	readyMu  sync.Mutex // guards the fields below; never held while waiting
	proc     *nginxProc // the master started last; nil before and after Run
	readyErr error      // why proc does not count as serving; nil: it serves
	wantSum  string     // checksum of the file installed last
}

// nginxProc is one nginx master started by Run.
type nginxProc struct {
	pid    int
	exited chan struct{} // closed once the master and its group are gone

	// written before exited is closed
	state *os.ProcessState
	emerg string // nginx's last [emerg] line before it exited
}

// exitError says how p ended.
func (p *nginxProc) exitError() error {
	why := "exited"
	if p.state != nil {
		why = p.state.String()
	}
	if p.emerg != "" {
		return fmt.Errorf("nginx master (pid %d) %s: %s", p.pid, why, p.emerg)
	}
	return fmt.Errorf("nginx master (pid %d) %s", p.pid, why)
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
	if cfg.ReassertInterval == 0 {
		cfg.ReassertInterval = 10 * time.Second
	}
	cfg.Render = cfg.Render.withDefaults()
	if err := checkRenderConfig(cfg.Render); err != nil {
		return nil, err
	}
	fake, err := fakeCertificatePEM()
	if err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, serving: make(chan struct{}), stderr: &lastEmerg{w: cfg.Stderr}, fake: fake,
		readyErr: errNotStarted,
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

var (
	errNotStarted = errors.New("nginx has not been started")
	errStopped    = errors.New("nginx was stopped")
)

// Ready is nil while the nginx that serves is the master Run started, its
// workers answered the checksum of the file installed last, and that master
// still runs; otherwise it says why not (not started yet, starting, exited
// and restarting, e.g. bind() failing, a reload not confirmed). A file nginx
// -t refused does not count: the previous one keeps serving and the
// Ingress gets the error. Issue 20: /readyz answers from it.
func (c *Controller) Ready() error {
	c.readyMu.Lock()
	defer c.readyMu.Unlock()
	if c.proc == nil {
		return c.readyErr
	}
	select {
	case <-c.proc.exited:
		return fmt.Errorf("%w; restarting", c.proc.exitError())
	default:
	}
	return c.readyErr
}

// setReady records whether p serves (err nil) or why not; a report about a
// master that is no longer the current one is dropped.
func (c *Controller) setReady(p *nginxProc, err error) {
	c.readyMu.Lock()
	defer c.readyMu.Unlock()
	if c.proc == p {
		c.readyErr = err
	}
}

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
	if err := c.syncBackends(cfg.Backends, true, nil); err != nil {
		return fmt.Errorf("sync backends: %w", err)
	}
	cfg = c.withFakeCertificate(cfg)
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

// UpdateBackends is Update for a Configuration whose backends alone
// changed since the last Update: they go to the balancer; nginx.conf, which
// does not depend on them, is neither rendered nor reloaded.
func (c *Controller) UpdateBackends(cfg *model.Configuration) error {
	return c.UpdateBackendsChanged(cfg, nil)
}

// UpdateBackendsChanged is UpdateBackends for a Configuration whose
// backends differ from the last one's only at the indices in changed
// (controlplane.Change.Backends): a balancer that can apply those alone
// (balancer.Registry.ApplyChanged) does. Nil changed is UpdateBackends.
func (c *Controller) UpdateBackendsChanged(cfg *model.Configuration, changed []int) error {
	if err := c.syncBackends(cfg.Backends, true, changed); err != nil {
		return fmt.Errorf("sync backends: %w", err)
	}
	return nil
}

// changedApplier is a BackendSyncer that can apply a payload changed at
// some indices alone (balancer.Registry, API).
type changedApplier interface {
	ApplyChanged(backends []*model.Backend, changed []int) error
}

// syncBackends hands backends to the balancer. With remember, they become
// the payload reassert syncs again (changed, when not nil, says where they
// differ from the last payload); without, remembered ones are synced.
func (c *Controller) syncBackends(backends []*model.Backend, remember bool, changed []int) error {
	if c.cfg.Backends == nil {
		return nil
	}
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	if remember {
		c.backends, c.haveBackends = backends, true
	}
	if !c.haveBackends {
		return nil
	}
	if ca, ok := c.cfg.Backends.(changedApplier); ok && remember && changed != nil {
		return ca.ApplyChanged(c.backends, changed)
	}
	return c.cfg.Backends.Apply(c.backends)
}

// reassert syncs the last Configuration's backends again: a foreign POST
// /configuration/backends does not outlive ReassertInterval.
func (c *Controller) reassert() {
	if err := c.syncBackends(nil, false, nil); err != nil {
		c.cfg.Logf("nginxcompat: re-assert backends: %v", err)
	}
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
	c.readyMu.Lock()
	c.wantSum = r.Checksum
	c.readyMu.Unlock()
	if c.master == nil {
		// Run starts nginx on this file, which nginx -t accepted.
		c.lastOK.Set(1)
		c.lastOKTime.SetToCurrentTime()
		return nil
	}
	p := c.cur
	master := p.pid
	oldWorkers := workerPIDs(master)
	if err := c.master.Process.Signal(syscall.SIGHUP); err != nil {
		err = fmt.Errorf("signal nginx: %w", err)
		c.setReady(p, err)
		return err
	}
	if err := c.waitChecksum(ctx, r.Checksum, p); err != nil {
		c.setReady(p, fmt.Errorf("reload not confirmed: %w", err))
		return err
	}
	c.setReady(p, nil)
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

// waitChecksum polls the status server until a worker of p answers sum:
// the new generation of the master this Controller started is serving. It
// gives up when p exits.
func (c *Controller) waitChecksum(ctx context.Context, sum string, p *nginxProc) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReloadTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		last = c.probeChecksum(ctx, sum, p.pid)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for nginx to serve checksum %s: %w (last: %v)", sum, ctx.Err(), last)
		case <-p.exited:
			return p.exitError()
		case <-tick.C:
		}
	}
}

var checksumClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// probeChecksum asks the status server once: nil if a worker of master
// answers sum. Issue 20: a worker left by a previous master answers on the
// same port the checksum of the same file; it is not ours.
func (c *Controller) probeChecksum(ctx context.Context, sum string, master int) error {
	url := "http://" + c.cfg.Render.StatusListen + "/config-checksum"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := checksumClient.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 128))
	_ = resp.Body.Close()
	if string(b) != sum {
		return fmt.Errorf("status server answers checksum %.16s", b)
	}
	worker, err := strconv.Atoi(resp.Header.Get("X-Worker-Pid"))
	if err != nil {
		return fmt.Errorf("status server answers without X-Worker-Pid: %w", err)
	}
	if ppid := parentPID(worker); ppid != master {
		return fmt.Errorf("checksum answered by nginx worker %d of pid %d, not of our master %d", worker, ppid, master)
	}
	return nil
}

// Serving is closed once nginx, started by Run, first answers the checksum
// of the file it was started on: from then on it serves the configuration
// (readiness).
func (c *Controller) Serving() <-chan struct{} { return c.serving }

// Run starts the nginx master (foreground, own process group, ended by the
// kernel if this process dies) on the file installed by the first successful
// Update, after ending what a previous master of the same pid file left
// running; restarts it whenever it dies; syncs the last backends again every
// ReassertInterval; and on ctx's end sends SIGQUIT (graceful: nginx stops
// accepting and drains for worker-shutdown-timeout) and waits for the group
// to exit. Call Update once before Run.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running == nil {
		c.mu.Unlock()
		return errors.New("nginxcompat: Run before a successful Update")
	}
	c.mu.Unlock()
	var reassert <-chan time.Time
	if c.cfg.ReassertInterval > 0 {
		t := time.NewTicker(c.cfg.ReassertInterval)
		defer t.Stop()
		reassert = t.C
	}
	backoff := 50 * time.Millisecond
	for {
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		killed, err := killStale(kctx, c.cfg.Render.PIDFile, c.cfg.Nginx, c.cfg.ConfPath)
		cancel()
		if err != nil {
			c.cfg.Logf("nginxcompat: processes of a previous nginx: %v", err)
		} else if len(killed) > 0 {
			c.cfg.Logf("nginxcompat: killed %d processes a previous nginx master left running (pids %v)", len(killed), killed)
		}
		started := time.Now()
		p, err := c.start()
		if err != nil {
			return err
		}
		// The first generation counts as loaded once it answers.
		c.mu.Lock()
		sum := c.checksum
		c.mu.Unlock()
		if err := c.waitChecksum(ctx, sum, p); err != nil {
			if ctx.Err() == nil {
				c.cfg.Logf("nginxcompat: nginx did not come up: %v", err)
			}
			c.setReady(p, fmt.Errorf("nginx master (pid %d) does not serve: %w", p.pid, err))
		} else {
			c.setReady(p, nil)
			c.servingOnce.Do(func() { close(c.serving) })
		}
	running:
		for {
			select {
			case <-ctx.Done():
				c.stop()
				return nil
			case <-p.exited:
				break running
			case <-reassert:
				c.reassert()
				c.recheck(ctx, p)
			}
		}
		c.cfg.Logf("nginxcompat: %v; restarting", p.exitError())
		if time.Since(started) > 10*time.Second {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			c.stop()
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// recheck probes a master that does not count as serving (its first
// generation or a reload was not confirmed in time) once more.
func (c *Controller) recheck(ctx context.Context, p *nginxProc) {
	c.readyMu.Lock()
	ok, sum := c.readyErr == nil, c.wantSum
	c.readyMu.Unlock()
	if ok {
		return
	}
	if c.probeChecksum(ctx, sum, p.pid) == nil {
		c.setReady(p, nil)
		// A first generation slower than ReloadTimeout (a 90 MB
		// nginx.conf of 50,000 servers loads in ~45 s) serves now.
		c.servingOnce.Do(func() { close(c.serving) })
	}
}

func (c *Controller) start() (*nginxProc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd := exec.Command(c.cfg.Nginx, "-e", "stderr", "-g", "daemon off; master_process on;",
		"-p", filepath.Dir(c.cfg.ConfPath), "-c", c.cfg.ConfPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = c.cfg.Stderr
	cmd.Stderr = c.stderr
	c.stderr.reset()
	// SIGTERM when this process dies, however it dies: the master ends
	// its workers before it exits (orphans.go).
	if err := startTiedToProcess(cmd, syscall.SIGTERM); err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	p := &nginxProc{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		// Process.Wait, not cmd.Wait: the workers hold the output pipe,
		// so cmd.Wait would not return before they are gone.
		st, _ := cmd.Process.Wait()
		// Workers outlive a killed master and keep the listening
		// sockets: end the whole group before a new master binds.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		_ = cmd.Wait() // release the output copiers
		p.state, p.emerg = st, c.stderr.last()
		close(p.exited)
	}()
	c.master, c.cur = cmd, p
	c.readyMu.Lock()
	c.proc = p
	c.readyErr = fmt.Errorf("nginx master (pid %d) started, not serving yet", p.pid)
	c.readyMu.Unlock()
	return p, nil
}

// stop sends SIGQUIT and waits for the master (which waits for its
// draining workers).
func (c *Controller) stop() {
	c.mu.Lock()
	m, p := c.master, c.cur
	c.master, c.cur = nil, nil
	c.mu.Unlock()
	c.readyMu.Lock()
	c.proc, c.readyErr = nil, errStopped
	c.readyMu.Unlock()
	if m == nil {
		return
	}
	_ = m.Process.Signal(syscall.SIGQUIT)
	<-p.exited
}

// lastEmerg passes nginx's stderr on and remembers its last [emerg] line
// (a bind() that failed), for Ready.
type lastEmerg struct {
	w io.Writer // immutable

	mu         sync.Mutex // guards the fields below
	partial    []byte
	prev, line string // the last two distinct [emerg] messages
}

func (e *lastEmerg) Write(p []byte) (int, error) {
	e.mu.Lock()
	e.partial = append(e.partial, p...)
	rest := e.partial
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		if j := bytes.Index(rest[:i], []byte("[emerg]")); j >= 0 {
			// "… [emerg] 12#12: bind() to … failed (98: …)" and then
			// "still could not bind()": the last two say why.
			if l := string(bytes.TrimSpace(rest[j+len("[emerg]") : i])); l != e.line {
				e.prev, e.line = e.line, l
			}
		}
		rest = rest[i+1:]
	}
	if len(rest) > 4096 {
		rest = nil // a line that long is not nginx's
	}
	e.partial = e.partial[:copy(e.partial, rest)]
	e.mu.Unlock()
	return e.w.Write(p)
}

func (e *lastEmerg) reset() {
	e.mu.Lock()
	e.partial, e.prev, e.line = nil, "", ""
	e.mu.Unlock()
}

func (e *lastEmerg) last() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.prev == "" {
		return e.line
	}
	return e.prev + "; " + e.line
}
