package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Kill sends SIGKILL to the process alone (not its group: children it
// started keep running, as after a real crash), waits until it has exited
// and marks it stopped, so that its t.Cleanup does not report the killed
// process as a failure. It is kill -9 for fault-injection tests.
func (p *Process) Kill() error {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("kill -9 %s: %w", p.name, err)
	}
	<-p.exited
	return nil
}

// ChildPIDs returns the live (non-zombie) processes whose parent is ppid,
// in /proc order.
func ChildPIDs(ppid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(pid); len(f) >= 2 && f[0] != "Z" {
			if pp, _ := strconv.Atoi(f[1]); pp == ppid {
				out = append(out, pid)
			}
		}
	}
	return out
}

// Alive reports whether pid is a live (non-zombie) process.
func Alive(pid int) bool {
	f := statFields(pid)
	return len(f) > 0 && f[0] != "Z"
}

// KillGroup sends SIGKILL to process group pgid and waits up to
// DefaultStopGrace until none of its members is alive: for processes a
// killed parent left behind in a group of their own (an nginx whose
// controller was killed).
func KillGroup(pgid int) error {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	deadline := time.Now().Add(DefaultStopGrace)
	for len(procs(pgid)) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("process group %d still has %v after SIGKILL", pgid, procs(pgid))
		}
		time.Sleep(10 * time.Millisecond) // the kernel offers no wait for a process that is not our child
	}
	return nil
}

// statFields returns the fields of /proc/pid/stat after comm: state, ppid,
// pgrp, ...; nil when pid does not exist.
func statFields(pid int) []string {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// PGID returns the process group of pid, 0 when pid does not exist.
func PGID(pid int) int {
	f := statFields(pid)
	if len(f) < 3 {
		return 0
	}
	g, _ := strconv.Atoi(f[2])
	return g
}

// Cmdline returns pid's command line with its arguments joined by spaces
// ("" when pid does not exist). nginx rewrites its own: "nginx: master
// process /usr/sbin/nginx -p ...", "nginx: worker process".
func Cmdline(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// PIDsMatching returns the live processes whose command line contains s.
func PIDsMatching(s string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !Alive(pid) {
			continue
		}
		if strings.Contains(Cmdline(pid), s) {
			out = append(out, pid)
		}
	}
	return out
}
