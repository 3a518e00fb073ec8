package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DefaultStopGrace is how long Stop waits after SIGTERM before SIGKILL.
const DefaultStopGrace = 5 * time.Second

// Cmd describes a process to start.
type Cmd struct {
	// Name labels the process in messages and names its log file
	// (Name.log); zero means the base name of Path.
	Name string
	// Path is the executable; required.
	Path string
	// Args are the arguments after the program name.
	Args []string
	// Env is added to the test's own environment; nil adds nothing.
	Env []string
	// Dir is the working directory; zero means LogDir.
	Dir string
	// LogDir receives Name.log with stdout and stderr; StartProcess sets it
	// to t.TempDir() when zero, Launch requires it.
	LogDir string
	// StopGrace is the SIGTERM-to-SIGKILL delay; zero means
	// DefaultStopGrace.
	StopGrace time.Duration
}

// Process is a started command running in its own process group.
type Process struct {
	// immutable
	name, log string
	grace     time.Duration
	cmd       *exec.Cmd
	exited    chan struct{} // closed when Wait returned

	// guarded by mu
	mu      sync.Mutex
	waitErr error
	stopped bool
}

// live is every Process started and not yet exited, for the stray check.
var live sync.Map // *Process -> struct{}

// Launch starts c without a test: the caller must Stop it (TestMain uses
// this for one cluster per test binary).
func Launch(c Cmd) (*Process, error) {
	if c.Path == "" || c.LogDir == "" {
		return nil, errors.New("harness: Launch needs Cmd.Path and Cmd.LogDir")
	}
	if c.Name == "" {
		c.Name = filepath.Base(c.Path)
	}
	if c.StopGrace <= 0 {
		c.StopGrace = DefaultStopGrace
	}
	logPath := filepath.Join(c.LogDir, c.Name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create log of %s: %w", c.Name, err)
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Dir = c.Dir
	if cmd.Dir == "" {
		cmd.Dir = c.LogDir
	}
	// Own process group (Stop signals the whole group); SIGKILL if the test
	// binary dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", c.Name, err)
	}
	p := &Process{name: c.Name, log: logPath, grace: c.StopGrace, cmd: cmd, exited: make(chan struct{})}
	live.Store(p, struct{}{})
	go p.wait(logf)
	return p, nil
}

// wait reaps the process and records how it ended.
func (p *Process) wait(logf *os.File) {
	err := p.cmd.Wait()
	logf.Close()
	p.mu.Lock()
	p.waitErr = err
	p.mu.Unlock()
	live.Delete(p)
	close(p.exited)
}

// StartProcess starts c for the test and stops it at t.Cleanup. If the test
// failed, the cleanup logs the tail of the process's output.
func StartProcess(t testing.TB, c Cmd) *Process {
	t.Helper()
	if c.LogDir == "" {
		c.LogDir = t.TempDir()
	}
	p, err := Launch(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop %s: %v", p.name, err)
		}
		if t.Failed() {
			t.Logf("last output of %s (%s):\n%s", p.name, p.log, p.Tail(4096))
		}
	})
	return p
}

// Name returns the process's label.
func (p *Process) Name() string { return p.name }

// Pid returns the process ID (also its process group ID).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath returns the file holding its stdout and stderr.
func (p *Process) LogPath() string { return p.log }

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Tail returns up to the last n bytes of its output.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", p.log, err)
	}
	return string(b[max(0, len(b)-n):])
}

// Stop sends SIGTERM to the process group, SIGKILL after the grace period,
// and waits for the process to exit. It returns an error only when the
// process had already died on its own with a failure, which a test should
// hear about; stopping is idempotent.
func (p *Process) Stop() error {
	p.mu.Lock()
	already := p.stopped
	p.stopped = true
	p.mu.Unlock()
	select {
	case <-p.exited:
		if already {
			return nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.waitErr != nil {
			return fmt.Errorf("%s exited before it was stopped: %w", p.name, p.waitErr)
		}
		return nil
	default:
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	timer := time.NewTimer(p.grace)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.exited
	}
	// Anything left in the group (a child that ignored SIGTERM) goes too;
	// wait until the kernel has finished it off.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	deadline := time.Now().Add(p.grace + DefaultStopGrace)
	for len(procs(pgid)) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: process group %d still has %v after SIGKILL", p.name, pgid, procs(pgid))
		}
		time.Sleep(10 * time.Millisecond) // the kernel offers no wait for a group member that is not our child
	}
	return nil
}

// procs lists the live (non-zombie) processes as "pid comm", all of them
// when pgid is 0, else those of process group pgid.
func procs(pgid int) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []string{fmt.Sprintf("(read /proc: %v)", err)}
	}
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// comm is in parentheses and may hold spaces; then state, ppid, pgrp.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if pgid != 0 {
			if g, _ := strconv.Atoi(f[2]); g != pgid {
				continue
			}
		}
		out = append(out, fmt.Sprintf("pid %d %s", pid, s[strings.IndexByte(s, '(')+1:i]))
	}
	return out
}

// strayProcesses lists processes still running after the tests: those
// started here and not stopped, and inside the namespace any process but
// the test binary itself (the namespace's /proc shows only its own).
func strayProcesses() []string {
	var out []string
	live.Range(func(k, _ any) bool {
		p := k.(*Process)
		out = append(out, fmt.Sprintf("%s (pid %d, log %s)", p.name, p.Pid(), p.log))
		return true
	})
	if !InNetNS() {
		return out
	}
	self := fmt.Sprintf("pid %d ", os.Getpid())
	for _, p := range procs(0) {
		if !strings.HasPrefix(p, self) {
			out = append(out, p)
		}
	}
	return out
}
