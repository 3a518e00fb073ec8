// Package benchutil holds what the benchmark drivers under test/bench share:
// reading wrk's output, CPU time from /proc, the machine's load, the
// repository root and free ports. In: process ids, wrk output. Out: numbers.
package benchutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Wrk is what a wrk --latency run measured: requests per second and the
// 50th and 99th latency percentiles in milliseconds.
type Wrk struct {
	RPS, P50, P99 float64
}

var (
	reqSec = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	pct    = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
)

// ParseWrk reads wrk --latency output. A run that saw a non-2xx answer or a
// socket error, or served nothing, is an error: a benchmark of failures
// measures nothing.
func ParseWrk(out string) (Wrk, error) {
	var w Wrk
	m := reqSec.FindStringSubmatch(out)
	if m == nil {
		return w, fmt.Errorf("no Requests/sec in wrk output:\n%s", out)
	}
	w.RPS, _ = strconv.ParseFloat(m[1], 64)
	if w.RPS == 0 || strings.Contains(out, "Non-2xx") || strings.Contains(out, "Socket errors") {
		return w, fmt.Errorf("wrk saw errors:\n%s", out)
	}
	for _, m := range pct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[3] {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		if m[1] == "50" {
			w.P50 = v
		} else {
			w.P99 = v
		}
	}
	return w, nil
}

// CPUTicks sums utime+stime (all threads) of the given processes, in clock
// ticks (USER_HZ, 100 on Linux); a negative pid means every process of that
// process group.
func CPUTicks(pids []int) int64 { return sumTicks(among(pids)) }

// RunNanos is the time all of pid's threads have spent on a CPU, in
// nanoseconds (the first field of /proc/PID/task/*/schedstat): finer than
// the clock ticks of /proc/PID/stat, for readings a few hundred
// milliseconds apart. 0 when pid cannot be read.
func RunNanos(pid int) int64 {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, _ := os.ReadDir(dir)
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread has exited
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			total += n
		}
	}
	return total
}

// CPUTicksTree is CPUTicks of pid and its children (nginx's master and
// its workers).
func CPUTicksTree(pid int) int64 {
	return sumTicks(func(p int, f []string) bool {
		ppid, _ := strconv.Atoi(f[1])
		return p == pid || ppid == pid
	})
}

func sumTicks(match func(pid int, f []string) bool) int64 {
	var total int64
	eachProcess(match, func(_ int, f []string) {
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += ut + st
	})
	return total
}

// among matches the processes among pids, where a negative pid means every
// process of that process group.
func among(pids []int) func(pid int, f []string) bool {
	return func(pid int, f []string) bool {
		pgrp, _ := strconv.Atoi(f[2])
		for _, p := range pids {
			if p == pid || (p < 0 && pgrp == -p) {
				return true
			}
		}
		return false
	}
}

// eachProcess calls fn with the fields of /proc/PID/stat after the command
// name (f[0] is the state, f[1] the parent) of every process that match
// takes.
func eachProcess(match func(pid int, f []string) bool, fn func(pid int, f []string)) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the parenthesised command name.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		if match(pid, f) {
			fn(pid, f)
		}
	}
}

// Realtime puts every thread of the given processes (a negative pid: every
// process of that process group) under SCHED_FIFO at priority prio, with
// util-linux's chrt. A benchmark gives its load generator and its
// backends this so that, on a machine they share with the proxy under
// test, what the proxy's tail measures is the proxy (and what it brings,
// such as a sidecar), not the client waiting for a CPU: at 8 connections
// on 2 CPUs wrk's threads spent a quarter of their time runnable but not
// running (docs/benchmarks.md, run 27). Needs root.
func Realtime(prio int, pids []int) error {
	var errs []error
	n := 0
	eachProcess(among(pids), func(pid int, _ []string) {
		n++
		out, err := exec.Command("chrt", "-a", "-f", "-p", strconv.Itoa(prio), strconv.Itoa(pid)).CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("chrt -a -f -p %d %d: %w: %s", prio, pid, err, bytes.TrimSpace(out)))
		}
	})
	if n == 0 {
		errs = append(errs, fmt.Errorf("no process among %v", pids))
	}
	return errors.Join(errs...)
}

// StealTicks is the time the hypervisor ran something else while this
// machine's CPUs had work (the steal column of /proc/stat's cpu line, summed
// over CPUs), in clock ticks (USER_HZ, 100 on Linux); -1 where /proc/stat
// cannot be read. A difference of two readings is the host's share of a
// run's stalls: on a VM, a tail latency that moves with it is not the
// proxy's.
func StealTicks() int64 { return cpuTicks(7)[0] }

// IdleTicks is the time this machine's CPUs sat idle (the idle and iowait
// columns of /proc/stat's cpu line, summed over CPUs), in clock ticks
// (USER_HZ); -1 where /proc/stat cannot be read.
func IdleTicks() int64 {
	t := cpuTicks(3, 4)
	if t[0] < 0 || t[1] < 0 {
		return -1
	}
	return t[0] + t[1]
}

// CPUs is how many CPUs /proc/stat lists (cpu0, cpu1...): the machine's,
// not this process's affinity mask; 0 where it cannot be read.
func CPUs() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if len(line) > 3 && line[:3] == "cpu" && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return n
}

// cpuTicks are columns cols (0: user) of /proc/stat's cpu line, read
// once; -1 for each where it cannot be read.
func cpuTicks(cols ...int) []int64 {
	v := make([]int64, len(cols))
	for i := range v {
		v[i] = -1
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return v
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	// cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return v
	}
	for i, c := range cols {
		if n, err := strconv.ParseInt(f[1+c], 10, 64); err == nil {
			v[i] = n
		}
	}
	return v
}

// Loadavg returns the 1, 5 and 15 minute load averages as /proc shows them.
func Loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

// RepoRoot returns the module's directory.
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// FreePort returns a TCP port free on ip at the time of the call.
func FreePort(ip string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// BackendsConf is the nginx.conf of the benchmarks' upstream servers: one
// worker in dir, listening on every address in listens, answering every
// request 200 with body (nginx's `return` syntax: a quoted string, which may
// name variables).
func BackendsConf(dir string, listens []string, body string) string {
	var l strings.Builder
	for _, a := range listens {
		fmt.Fprintf(&l, "        listen %s;\n", a)
	}
	return fmt.Sprintf(`daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path %[1]s/cb;
    proxy_temp_path %[1]s/p;
    fastcgi_temp_path %[1]s/f;
    uwsgi_temp_path %[1]s/u;
    scgi_temp_path %[1]s/s;
    server {
%[2]s        location / { return 200 %[3]s; }
    }
}
`, dir, l.String(), body)
}

// StartNginx writes conf to dir/nginx.conf, checks it with nginx -t, and
// starts nginx (the binary at path) in the foreground in a process group of
// its own, its error log in dir.
func StartNginx(path, dir, conf string) (*exec.Cmd, error) {
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	errLog := filepath.Join(dir, "error.log")
	if out, err := exec.Command(path, "-t", "-q", "-p", dir, "-c", confPath, "-e", errLog).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(path, "-p", dir, "-c", confPath, "-e", errLog)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	return cmd, nil
}

// Stop ends a process group this program started: SIGTERM (nginx's fast
// shutdown), then SIGKILL after 5 s.
func Stop(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// WaitHTTP polls url for up to 10 s until it answers want (any status when
// want is 0).
func WaitHTTP(url string, want int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if want == 0 || resp.StatusCode == want {
				return nil
			}
			last = fmt.Errorf("%s: %s", url, resp.Status)
		} else {
			last = err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.Join(errors.New("not ready: "+url), last)
}
