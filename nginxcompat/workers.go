package nginxcompat

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"
)

// After SIGHUP the new workers answer the new checksum while the old ones
// may still accept on the shared listening sockets until they act on their
// SIGQUIT: a request in that window gets the old configuration. nginx marks
// a retiring worker by retitling it "nginx: worker process is shutting
// down" (ngx_setproctitle) in the same step in which it closes its
// listeners, so the reload counts as done once every worker of the old
// generation is gone or carries that title.

// workerPIDs lists the PIDs of master's worker processes that still accept
// connections: children of master whose title says "worker process" and not
// "is shutting down". It reads /proc; where /proc is missing it returns nil.
func workerPIDs(master int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == master {
			continue
		}
		if acceptingWorkerOf(master, pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// parentPID reads the PPid of pid from /proc/<pid>/stat, or -1.
func parentPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses,
	// so parse after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return -1
	}
	return ppid
}

// acceptingWorkerOf reports whether pid is a worker of master that has not
// begun its graceful shutdown, by its parent and its process title.
func acceptingWorkerOf(master, pid int) bool {
	if parentPID(pid) != master {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("worker process")) && !bytes.Contains(b, []byte("shutting down"))
}

// waitRetired polls until none of old is still an accepting worker of
// master (each has exited or is shutting down), or ctx ends.
func waitRetired(ctx context.Context, master int, old []int) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		left := 0
		for _, pid := range old {
			if acceptingWorkerOf(master, pid) {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d old nginx workers still accepting: %w", left, ctx.Err())
		case <-tick.C:
		}
	}
}
