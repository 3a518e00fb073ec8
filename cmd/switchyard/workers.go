package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/nginxcompat"

	"github.com/switchyard-proxy/switchyard/controlplane"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/proxy"
)

// goWorkers runs the Go HTTP data plane in worker processes
// (--go-workers), one Go processor each, as nginx runs worker processes:
// a process whose two CPUs share no cache pays for every cache line its
// processors share (docs/benchmarks/product.md, "Two CPUs far apart"),
// where processes that share nothing per request do not.
//
// The controller keeps the control plane, the status port, TCP and UDP
// services and the SSL passthrough router; each worker serves HTTP and
// HTTPS (worker.go). What is shared, and how:
//
//   - the ports: each worker has its own socket on each, in a SO_REUSEPORT
//     group the controller creates and keeps, so a worker that dies leaves
//     its connections queued for the one started in its place;
//
//   - the configuration: every snapshot the sinks get, sent to every
//     worker (workerproto.go);
//
//   - limit-rps, limit-rpm and limit-connections: zones in shared memory
//     (proxy.LimitZones), so a client is counted once whichever worker
//     serves it, as nginx's zones are;
//
//   - TLS session ticket keys: made here, rotated daily, sent to all;
//
//   - request metrics: summed over the workers on each scrape
//     (workermetrics.go);
//
//   - the access log: the controller's standard output, whole lines per
//     write.
//
//   - auth-type: digest: the nonces and failure counts stay here, and the
//     workers ask over a unix socket (workerdigest.go).
//
// What each worker keeps to itself, as each nginx worker does: balancer
// state (round-robin positions, EWMA scores), upstream keep-alive
// connections, the external authentication cache.
type goWorkers struct {
	procs []*workerProc
	// exe is the binary the workers run: this one.
	exe string
	// opts are the workers' flags but the index.
	opts workerOptions
	// limits is the limit zones' shared memory, given to every worker.
	limits *os.File
	// accessLog is the controller's standard output, or nil.
	accessLog io.Writer
	// digest answers the workers' auth-type: digest questions on a unix
	// socket in dir (0700), so nonces and failure counts are shared.
	digest    *nginxcompat.DigestHandler
	digestSrv *http.Server
	dir       string

	mu sync.Mutex // guards last, keys and each proc's live connection
	// last is the frame of the latest configuration; a worker started
	// later gets it first.
	last []byte
	// version numbers the configurations sent.
	version uint64
	sentAt  time.Time // of the latest
	keys    [][32]byte
	// shutdownTimeout is how long a stopping worker may drain: 240s,
	// ingress-nginx's worker-shutdown-timeout.
	shutdownTimeout time.Duration

	scrapes atomic.Uint64 // numbers scrapes
	// carryMu guards carried and each proc's lastScrape and lastPID.
	carryMu sync.Mutex
	// carried are the last scrapes of workers that ended (workermetrics.go).
	carried   [][]byte
	closeOnce sync.Once
	// serving is closed once every worker has applied a configuration.
	serving     chan struct{}
	servingOnce sync.Once
}

// workerProc is one worker and its sockets.
type workerProc struct {
	index        int
	http, https  *os.File // its listening sockets, kept across restarts
	conn         net.Conn // the live control socket; nil between processes; guarded by goWorkers.mu
	applied      atomic.Uint64
	pid          atomic.Int64 // of the running process
	alive        atomic.Bool
	metrics      chan []byte // scrape answers
	scrapeMu     sync.Mutex  // one scrape at a time
	lastScrape   []byte      // the last answer, from lastPID
	lastPID      int64
	writeTimeout time.Duration
}

// workersConfig configures newGoWorkers.
type workersConfig struct {
	// N is how many workers; at least 1.
	N int
	// HTTPAddr and HTTPSAddr are the ports' addresses; a zero port picks
	// one (the same for every worker).
	HTTPAddr, HTTPSAddr string
	// Opts are the workers' flags.
	Opts workerOptions
	// AccessLog receives the workers' access log; nil, none.
	AccessLog io.Writer
}

// newGoWorkers binds the workers' sockets (so a port in use fails the
// start) and makes the limit zones; Run starts the processes.
func newGoWorkers(cfg workersConfig) (*goWorkers, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("go workers: find this binary: %w", err)
	}
	g := &goWorkers{exe: exe, opts: cfg.Opts, accessLog: cfg.AccessLog, shutdownTimeout: 240 * time.Second,
		serving: make(chan struct{})}
	g.opts.accessLog = cfg.AccessLog != nil
	httpFiles, err := listenReusePort(cfg.HTTPAddr, cfg.N)
	if err != nil {
		return nil, fmt.Errorf("listen for HTTP: %w", err)
	}
	httpsFiles, err := listenReusePort(cfg.HTTPSAddr, cfg.N)
	if err != nil {
		closeFiles(httpFiles)
		return nil, fmt.Errorf("listen for HTTPS: %w", err)
	}
	g.limits, err = proxy.CreateLimitZones()
	if err != nil {
		closeFiles(httpFiles)
		closeFiles(httpsFiles)
		return nil, fmt.Errorf("go workers: limit zones: %w", err)
	}
	g.opts.limitZones = true
	if err := g.serveDigest(); err != nil {
		closeFiles(httpFiles)
		closeFiles(httpsFiles)
		_ = g.limits.Close()
		return nil, err
	}
	for i := range cfg.N {
		g.procs = append(g.procs, &workerProc{index: i, http: httpFiles[i], https: httpsFiles[i],
			metrics: make(chan []byte, 1), writeTimeout: 10 * time.Second})
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		g.close()
		return nil, fmt.Errorf("go workers: ticket key: %w", err)
	}
	g.keys = [][32]byte{key}
	return g, nil
}

// pids are the running workers' process IDs.
func (g *goWorkers) pids() []int {
	var out []int
	for _, p := range g.procs {
		if p.alive.Load() {
			out = append(out, int(p.pid.Load()))
		}
	}
	return out
}

// addrs are the bound HTTP and HTTPS addresses.
func (g *goWorkers) addrs() (string, string) {
	return fileAddr(g.procs[0].http), fileAddr(g.procs[0].https)
}

func fileAddr(f *os.File) string {
	sa, err := unix.Getsockname(int(f.Fd()))
	if err != nil {
		return ""
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	case *unix.SockaddrInet6:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	}
	return ""
}

// listenReusePort binds n sockets to addr in one SO_REUSEPORT group (a
// zero port: the one the kernel gives the first) and returns them as
// files. The kernel admits only sockets of this user to the group.
func listenReusePort(addr string, n int) ([]*os.File, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	var files []*os.File
	for range n {
		ln, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			closeFiles(files)
			return nil, err
		}
		addr = ln.Addr().String() // the same port for the others
		f, err := ln.(*net.TCPListener).File()
		ln.Close() // f holds the socket
		if err != nil {
			closeFiles(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// run starts the workers and restarts any that ends, until ctx ends; then
// it closes their control sockets (they drain and stop) and waits for them
// at most shutdownTimeout before killing them.
func (g *goWorkers) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range g.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.supervise(ctx, p)
		}()
	}
	rotate := time.NewTicker(24 * time.Hour)
	defer rotate.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-rotate.C:
			g.rotateKeys()
		case <-done:
			g.close()
			return
		}
	}
}

func (g *goWorkers) close() {
	g.closeOnce.Do(g.closeNow)
}

func (g *goWorkers) closeNow() {
	for _, p := range g.procs {
		_ = p.http.Close()
		_ = p.https.Close()
	}
	_ = g.limits.Close()
	_ = g.digestSrv.Close()
	_ = os.RemoveAll(g.dir)
}

// serveDigest starts the digest verifier the workers ask.
func (g *goWorkers) serveDigest() error {
	dir, err := os.MkdirTemp("", "switchyard-workers-")
	if err != nil {
		return fmt.Errorf("go workers: socket directory: %w", err)
	}
	g.dir = dir // 0700: only this user reaches the socket
	path := filepath.Join(dir, "digest.sock")
	ln, err := nginxcompat.ListenUnix(path, 0o600, -1)
	if err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("go workers: digest socket: %w", err)
	}
	g.digest = nginxcompat.NewDigestHandler(digestauth.NewVerifier(digestauth.VerifierConfig{}))
	g.digestSrv = &http.Server{Handler: g.digest, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := g.digestSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "go workers: digest socket")
		}
	}()
	g.opts.digestSocket = path
	return nil
}

// rotateKeys puts a new ticket key first and keeps the last week's (a
// ticket older than that resumes nothing, as crypto/tls's own rotation).
func (g *goWorkers) rotateKeys() {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		klog.ErrorS(err, "rotate TLS session ticket keys")
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keys = append([][32]byte{key}, g.keys[:min(len(g.keys), 7)]...)
	frame := encodeTicketKeys(g.keys)
	for _, p := range g.procs {
		g.sendLocked(p, frame)
	}
}

// supervise runs worker p, again after it ends (at most once a second),
// until ctx ends.
func (g *goWorkers) supervise(ctx context.Context, p *workerProc) {
	backoff := time.Second
	for {
		started := time.Now()
		err := g.runOnce(ctx, p)
		if ctx.Err() != nil {
			return
		}
		klog.ErrorS(err, "go worker ended; starting another", "worker", p.index)
		if time.Since(started) > time.Minute {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// runOnce starts worker p and waits for it to end.
func (g *goWorkers) runOnce(ctx context.Context, p *workerProc) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control")
	conn, err := net.FileConn(mine)
	_ = mine.Close()
	if err != nil {
		_ = theirs.Close()
		return fmt.Errorf("control socket: %w", err)
	}
	opts := g.opts
	opts.index = p.index
	cmd := exec.Command(g.exe, opts.args()...)
	// One Go processor: the worker is nginx's single-threaded worker.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.ExtraFiles = []*os.File{theirs, p.http, p.https, g.limits}
	cmd.Stderr = os.Stderr
	var copied chan struct{}
	var pipeW *os.File
	switch w := g.accessLog.(type) {
	case nil:
	case *os.File:
		cmd.Stdout = w // inherited: the workers write it directly
	default:
		// Not a file (a test's buffer): lines are copied whole.
		pr, pw, err := os.Pipe()
		if err != nil {
			conn.Close()
			_ = theirs.Close()
			return err
		}
		cmd.Stdout, pipeW = pw, pw
		copied = make(chan struct{})
		go func() {
			defer close(copied)
			copyLines(w, pr)
			_ = pr.Close()
		}()
	}
	err = cmd.Start()
	_ = theirs.Close()
	if pipeW != nil {
		_ = pipeW.Close() // the worker holds the write end
	}
	if err != nil {
		conn.Close()
		if copied != nil {
			<-copied
		}
		return fmt.Errorf("start: %w", err)
	}
	p.pid.Store(int64(cmd.Process.Pid))
	p.alive.Store(true)
	defer p.alive.Store(false)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	go g.readAnswers(p, conn)

	g.mu.Lock()
	p.conn = conn
	g.sendLocked(p, encodeTicketKeys(g.keys))
	if g.last != nil {
		g.sendLocked(p, g.last)
	}
	g.mu.Unlock()

	var err2 error
	select {
	case err2 = <-exited:
		err2 = fmt.Errorf("exited: %v", err2)
	case <-ctx.Done():
		// Stop: the worker drains when its control socket closes.
		g.mu.Lock()
		p.conn = nil
		shutdownTimeout := g.shutdownTimeout
		g.mu.Unlock()
		conn.Close()
		select {
		case err := <-exited:
			if err != nil {
				klog.ErrorS(err, "go worker stopped", "worker", p.index)
			}
		case <-time.After(shutdownTimeout):
			klog.InfoS("go worker still draining; killed", "worker", p.index, "after", shutdownTimeout)
			_ = cmd.Process.Kill()
			if err := <-exited; err != nil {
				klog.V(2).InfoS("go worker killed", "worker", p.index, "error", err)
			}
		}
	}
	g.mu.Lock()
	if p.conn == conn {
		p.conn = nil
	}
	g.mu.Unlock()
	conn.Close()
	if copied != nil {
		<-copied
	}
	return err2
}

// copyLines copies r to w a line per Write.
func copyLines(w io.Writer, r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && (err == nil || errors.Is(err, io.EOF)) {
			_, _ = w.Write(line)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			_, _ = w.Write(line)
			continue
		}
		if err != nil {
			return
		}
	}
}

// readAnswers reads what worker p sends until its socket closes.
func (g *goWorkers) readAnswers(p *workerProc, conn net.Conn) {
	r := bufio.NewReaderSize(conn, 64<<10)
	for {
		t, b, err := readFrame(r, nil)
		if err != nil {
			return
		}
		switch {
		case t == frameApplied && len(b) == 8:
			p.applied.Store(binary.BigEndian.Uint64(b))
			if g.ready() == nil {
				g.servingOnce.Do(func() { close(g.serving) })
			}
		case t == frameMetrics && len(b) >= 8:
			select {
			case p.metrics <- b:
			default: // nobody waits: a late answer
			}
		default:
			klog.ErrorS(nil, "go worker sent an unknown frame; restarting it", "worker", p.index, "type", string(t))
			conn.Close()
			return
		}
	}
}

// sendLocked writes frame to p's live control socket; a worker that does
// not take it in writeTimeout is stopped (and started again, which sends
// it the latest configuration). g.mu is held.
func (g *goWorkers) sendLocked(p *workerProc, frame []byte) {
	c := p.conn
	if c == nil {
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(p.writeTimeout))
	if _, err := c.Write(frame); err != nil {
		klog.ErrorS(err, "go worker did not take a frame; restarting it", "worker", p.index)
		p.conn = nil
		c.Close()
	}
}

// update sends a configuration to every worker; the ones started later get
// the latest.
func (g *goWorkers) update(cfg *model.Configuration, ch controlplane.Change) error {
	// The verifier knows the credentials before a worker can ask.
	g.digest.Update(cfg)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.version++
	frame, err := encodeWorkerConfig(&workerConfig{Version: g.version, Change: ch, Config: cfg})
	if err != nil {
		g.version--
		return err
	}
	// A worker started later gets this one first, and applies all of it
	// (a Configuration is whole; Change only says what differs from the
	// one before).
	g.last, g.sentAt = frame, time.Now()
	for _, p := range g.procs {
		g.sendLocked(p, frame)
	}
	return nil
}

// applyGrace is how long a worker may take to apply the latest
// configuration before readiness says so.
const applyGrace = 10 * time.Second

// ready reports an error unless every worker is running, has applied a
// configuration (once one was sent) and is not behind the latest by more
// than applyGrace.
func (g *goWorkers) ready() error {
	g.mu.Lock()
	v, sent := g.version, g.sentAt
	g.mu.Unlock()
	for _, p := range g.procs {
		if !p.alive.Load() {
			return fmt.Errorf("go worker %d is not running", p.index)
		}
		applied := p.applied.Load()
		if v > 0 && applied == 0 {
			return fmt.Errorf("go worker %d has not applied a configuration yet", p.index)
		}
		if applied < v && time.Since(sent) > applyGrace {
			return fmt.Errorf("go worker %d serves configuration %d; %d was sent %v ago", p.index, applied, v, time.Since(sent).Round(time.Second))
		}
	}
	return nil
}
