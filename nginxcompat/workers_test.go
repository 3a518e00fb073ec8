package nginxcompat

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// startTitled starts sleep with argv[0] set to title, as nginx retitles its
// workers, and kills it when the test ends.
func startTitled(t *testing.T, title string) *exec.Cmd {
	t.Helper()
	path, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: path, Args: []string{title, "30"}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func TestWorkerPIDs(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Fatalf("no /proc: %v", err)
	}
	accepting := startTitled(t, "nginx: worker process")
	retiring := startTitled(t, "nginx: worker process is shutting down")
	other := startTitled(t, "nginx: cache manager process")
	self := os.Getpid()

	if got := parentPID(accepting.Process.Pid); got != self {
		t.Errorf("parentPID = %d; want %d", got, self)
	}
	pids := workerPIDs(self)
	if !slices.Contains(pids, accepting.Process.Pid) {
		t.Errorf("workerPIDs %v lacks the accepting worker %d", pids, accepting.Process.Pid)
	}
	for _, c := range []*exec.Cmd{retiring, other} {
		if slices.Contains(pids, c.Process.Pid) {
			t.Errorf("workerPIDs %v holds %q (%d)", pids, c.Args[0], c.Process.Pid)
		}
	}

	// waitRetired waits while the worker accepts and returns once it is gone.
	old := []int{accepting.Process.Pid, retiring.Process.Pid}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := waitRetired(ctx, self, old)
	cancel()
	if err == nil {
		t.Fatal("waitRetired returned while a worker still accepts")
	}
	_ = accepting.Process.Kill()
	_ = accepting.Wait()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := waitRetired(ctx, self, old); err != nil {
		t.Fatalf("waitRetired after the worker exited: %v", err)
	}
}
