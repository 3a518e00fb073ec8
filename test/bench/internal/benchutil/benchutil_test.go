package benchutil

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const wrkOut = `Running 5s test @ http://127.0.0.1:8080/
  2 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   312.00us  100.00us   2.00ms   90.00%
  Latency Distribution
     50%  290.00us
     75%  350.00us
     90%  420.00us
     99%    1.20ms
  120000 requests in 5.00s, 10.00MB read
Requests/sec:  24000.50
Transfer/sec:      2.00MB
`

func TestParseWrk(t *testing.T) {
	w, err := ParseWrk(wrkOut)
	if err != nil || w.RPS != 24000.50 || w.P50 != 0.29 || w.P99 != 1.2 {
		t.Fatalf("ParseWrk = %+v, %v", w, err)
	}
	if _, err := ParseWrk(wrkOut + "  Non-2xx or 3xx responses: 3\n"); err == nil {
		t.Fatal("a run with non-2xx answers parsed as a result")
	}
	if _, err := ParseWrk("nothing"); err == nil {
		t.Fatal("output without Requests/sec parsed as a result")
	}
}

func TestCPUTicksCountsThisProcess(t *testing.T) {
	x := 0
	for i := range 50_000_000 {
		x += i
	}
	if x == 0 || CPUTicks([]int{os.Getpid()}) <= 0 {
		t.Fatal("no CPU time for a process that just spent some")
	}
}

// CPUTicksTree counts a child's CPU with its parent's: a child that burns
// a third of a second while this process sleeps shows up in this process's
// tree and not in this process alone.
func TestCPUTicksTreeCountsChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done; sleep 10`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	self0 := CPUTicks([]int{os.Getpid()})
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // the busy loop is over
		t.Fatal(err)
	}
	child := CPUTicks([]int{cmd.Process.Pid})
	if child < 5 {
		t.Fatalf("the child spent %d ticks; want a busy loop's worth", child)
	}
	tree, self1 := CPUTicksTree(os.Getpid()), CPUTicks([]int{os.Getpid()})
	if tree < self0+child || tree-self1 < child-1 {
		t.Errorf("tree %d ticks, this process %d then %d, the child %d: the child is not counted", tree, self0, self1, child)
	}
}

// The machine's idle time grows while this test sleeps, and /proc/stat
// lists at least one CPU.
func TestIdleTicks(t *testing.T) {
	if CPUs() < 1 {
		t.Fatal("no cpuN line in /proc/stat")
	}
	a := IdleTicks()
	time.Sleep(100 * time.Millisecond)
	if b := IdleTicks(); a < 0 || b < a {
		t.Errorf("idle ticks %d then %d", a, b)
	}
}

// RunNanos counts a busy loop's time in nanoseconds, as the process's own
// CPU clock (getrusage) does: both are CPU time, so the comparison holds on
// a busy machine.
func TestRunNanos(t *testing.T) {
	before, ru0 := RunNanos(os.Getpid()), rusageNanos(t)
	x := 0
	for rusageNanos(t)-ru0 < int64(50*time.Millisecond) {
		x++
	}
	spent, ru := RunNanos(os.Getpid())-before, rusageNanos(t)-ru0
	if x == 0 || spent < ru/2 || spent > 2*ru {
		t.Errorf("a busy loop read %v of run time where getrusage read %v", time.Duration(spent), time.Duration(ru))
	}
	if RunNanos(-1) != 0 {
		t.Error("a pid that cannot exist read CPU time")
	}
}

func rusageNanos(t *testing.T) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func TestStealTicks(t *testing.T) {
	a := StealTicks()
	if a < 0 {
		t.Fatalf("StealTicks() = %d: /proc/stat unreadable or without a steal column", a)
	}
	if b := StealTicks(); b < a {
		t.Fatalf("steal went backwards: %d then %d", a, b)
	}
}

func TestRealtime(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestRealtime needs root (SCHED_FIFO), as the benchmarks that use Realtime do")
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	policy := func() string {
		out, err := exec.Command("chrt", "-p", strconv.Itoa(cmd.Process.Pid)).Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if p := policy(); !strings.Contains(p, "SCHED_OTHER") {
		t.Fatalf("before: %s", p)
	}
	if err := Realtime(3, []int{-cmd.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	if p := policy(); !strings.Contains(p, "SCHED_FIFO") || !strings.Contains(p, "priority: 3") {
		t.Fatalf("after Realtime: %s", p)
	}
	if err := Realtime(3, []int{-1 << 30}); err == nil {
		t.Fatal("Realtime of a process group with no process: no error")
	}
}
