package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// netnsEnv marks the re-executed test binary: "1" inside a namespace made by
// Main, "0" when Main ran the tests outside one.
const netnsEnv = "SWITCHYARD_NETNS"

// TestNetAddrs is how many TEST-NET-1 addresses Main puts on lo:
// TestIP(1) .. TestIP(TestNetAddrs).
const TestNetAddrs = 40

// TestIP returns 192.0.2.n, one of the TEST-NET-1 addresses (RFC 5737) on lo
// inside the namespace. It panics for n outside 1..TestNetAddrs.
func TestIP(n int) string {
	if n < 1 || n > TestNetAddrs {
		panic(fmt.Sprintf("BUG: harness.TestIP(%d): only 1..%d are on lo", n, TestNetAddrs))
	}
	return fmt.Sprintf("192.0.2.%d", n)
}

// InNetNS reports whether this test binary runs inside the namespace Main
// made.
func InNetNS() bool { return os.Getenv(netnsEnv) == "1" }

// RequireNetNS stops a test that needs the TEST-NET-1 addresses when the
// binary is not inside the namespace: a failure under CI=true, a loud skip
// elsewhere.
func RequireNetNS(t testing.TB) {
	t.Helper()
	if InNetNS() {
		return
	}
	msg := "not inside the test network namespace: call harness.Main from TestMain (unshare --net needs root or user namespaces)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPING: " + msg)
}

// M is what Main runs: a *testing.M, or a wrapper that adds set-up and
// tear-down inside the namespace (test/k8s does).
type M interface{ Run() int }

// Main runs the package's tests inside a private network namespace with the
// TEST-NET-1 addresses on lo, then checks that no child process outlived
// them, and exits. Call it from TestMain; it never returns.
func Main(m M) {
	os.Exit(RunInNetNS(m))
}

// RunInNetNS is Main without the os.Exit: it returns the exit code. In the
// outer process it re-executes the binary in the namespace and returns that
// run's code; inside, it sets up lo and runs m.
func RunInNetNS(m M) int {
	switch os.Getenv(netnsEnv) {
	case "1":
		if err := setupLoopback(); err != nil {
			fmt.Fprintf(os.Stderr, "harness: set up lo in the test network namespace: %v\n", err)
			return 1
		}
		return runChecked(m)
	case "0":
		return runChecked(m)
	}
	code, err := reexecInNetNS()
	if err == nil {
		return code
	}
	if os.Getenv("CI") != "" {
		fmt.Fprintf(os.Stderr, "harness: FAIL: cannot create the test network namespace under CI: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "\n!!! harness: cannot create a network namespace (%v);\n!!! running WITHOUT it: tests needing TEST-NET-1 addresses skip.\n\n", err)
	_ = os.Setenv(netnsEnv, "0")
	return runChecked(m)
}

// errNoNetNS says the namespace itself could not be made (as opposed to the
// tests failing inside it).
var errNoNetNS = errors.New("harness: unshare failed")

// reexecInNetNS probes unshare, then runs this binary again under it with
// the same arguments. The test binary becomes PID 1 of a new PID namespace
// (so its children die with it) in a new network namespace.
func reexecInNetNS() (int, error) {
	args := []string{"--net", "--pid", "--fork", "--mount-proc"}
	if os.Geteuid() != 0 {
		args = append([]string{"--user", "--map-root-user"}, args...)
	}
	if out, err := exec.Command("unshare", append(args, "true")...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%w: unshare %s true: %v: %s", errNoNetNS, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("find the test binary: %w", err)
	}
	cmd := exec.Command("unshare", append(append(args, "--kill-child", exe), os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	// If go test kills this outer process, the namespace goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("run the tests under unshare: %w", err)
	}
	return 0, nil
}

// setupLoopback brings lo up and adds the TEST-NET-1 addresses, in one `ip
// -batch` call.
func setupLoopback() error {
	var b strings.Builder
	b.WriteString("link set lo up\n")
	for n := 1; n <= TestNetAddrs; n++ {
		fmt.Fprintf(&b, "addr add %s/32 dev lo\n", TestIP(n))
	}
	cmd := exec.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -batch: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// runChecked runs the tests, then fails the binary if a process started
// through this package is still running.
func runChecked(m M) int {
	code := m.Run()
	if stray := strayProcesses(); len(stray) > 0 {
		fmt.Fprintf(os.Stderr, "harness: FAIL: processes still running after the tests: %s\n", strings.Join(stray, "; "))
		if code == 0 {
			code = 1
		}
	}
	return code
}
