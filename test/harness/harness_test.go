package harness

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// TestStrayProcessFailsBinary re-runs this binary with a process leaked
	// on purpose inside the namespace.
	if os.Getenv("SWITCHYARD_HARNESS_LEAK") == "1" && InNetNS() {
		if _, err := Launch(Cmd{Name: "leaked", Path: "/bin/sleep", Args: []string{"300"}, LogDir: os.TempDir()}); err != nil {
			panic(err)
		}
	}
	Main(m)
}

const defaultTestTimeout = 10 * time.Second

// TestNetNS: inside the namespace every TEST-NET-1 address on lo accepts a
// listener, and no interface but lo exists.
func TestNetNS(t *testing.T) {
	RequireNetNS(t)
	for n := 1; n <= TestNetAddrs; n++ {
		ln, err := net.Listen("tcp", TestIP(n)+":0")
		if err != nil {
			t.Fatalf("listen on %s: %v", TestIP(n), err)
		}
		ln.Close()
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	if len(names) != 1 || names[0] != "lo" {
		t.Errorf("interfaces = %v; want only lo (a private namespace)", names)
	}
	if os.Getpid() != 1 {
		t.Errorf("pid = %d; want 1 (the test binary leads its own PID namespace)", os.Getpid())
	}
}

// TestStopKillsGroup: a process group whose members ignore SIGTERM is killed
// after the grace period, children included.
func TestStopKillsGroup(t *testing.T) {
	p := StartProcess(t, Cmd{Name: "stubborn", Path: "/bin/sh",
		Args:      []string{"-c", `trap "" TERM; sleep 300 & echo "child $!"; wait`},
		StopGrace: 200 * time.Millisecond})
	var child int
	WaitFor(t, defaultTestTimeout, "the child's pid in the log", p, func(context.Context) (bool, error) {
		f := strings.Fields(p.Tail(100))
		if len(f) == 2 && f[0] == "child" {
			child, _ = strconv.Atoi(f[1])
			return child > 0, nil
		}
		return false, nil
	})
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	if alive(child) {
		t.Errorf("child %d of the stopped group is still running", child)
	}
}

// alive reports whether pid runs (a zombie counts as dead).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestWaitEndsWhenProcessExits: waiting on a readiness signal of a process
// that died fails at once with its output, not at the deadline.
func TestWaitEndsWhenProcessExits(t *testing.T) {
	p := StartProcess(t, Cmd{Name: "dies", Path: "/bin/sh", Args: []string{"-c", "echo boom; exit 3"}})
	start := time.Now()
	err := WaitUntil(context.Background(), time.Minute, "never", p, func(context.Context) (bool, error) {
		return false, errors.New("not yet")
	})
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("WaitUntil = %v; want an error carrying the process output", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("WaitUntil took %v; want it to end when the process exited", d)
	}
	if err := p.Stop(); err == nil {
		t.Error("Stop of a process that failed on its own = nil; want its exit error")
	}
}

// TestFreePortAndTCPReady: a free port is bindable, and TCPReady turns true
// once something listens there.
func TestFreePortAndTCPReady(t *testing.T) {
	addr := FreeAddr(t, "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if ok, _ := TCPReady(addr)(ctx); ok {
		t.Fatalf("%s ready before anything listens", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the free address %s: %v", addr, err)
	}
	defer ln.Close()
	WaitFor(t, defaultTestTimeout, addr+" accepting", nil, TCPReady(addr))
}

// TestMainWithoutUnshare runs this test binary again where unshare cannot be
// found: under CI=true it must fail loudly, elsewhere run the tests outside a
// namespace after a loud message.
func TestMainWithoutUnshare(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		ci       bool
		wantCode int
		wantMsg  string
	}{
		{"ci", true, 1, "FAIL: cannot create the test network namespace under CI"},
		{"local", false, 0, "running WITHOUT it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = []string{"PATH=/nonexistent", "HOME=" + t.TempDir()}
			if tt.ci {
				cmd.Env = append(cmd.Env, "CI=true")
			}
			out, err := cmd.CombinedOutput()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode || !strings.Contains(string(out), tt.wantMsg) {
				t.Errorf("exit code %d, output:\n%s\nwant code %d and %q", code, out, tt.wantCode, tt.wantMsg)
			}
		})
	}
}

// TestStrayProcessFailsBinary: a test binary whose tests pass but leave a
// process running fails, naming the process (the goleak of processes).
func TestStrayProcessFailsBinary(t *testing.T) {
	RequireNetNS(t) // the re-run makes its own namespace, so the leak dies with it
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, netnsEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "SWITCHYARD_HARNESS_LEAK=1", "TMPDIR="+t.TempDir()) // TMPDIR last wins
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "processes still running after the tests: leaked") {
		t.Errorf("re-run: %v, output:\n%s\nwant exit code 1 naming the leaked process", err, out)
	}
}
