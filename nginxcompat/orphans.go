package nginxcompat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Issue 20: after kill -9 of the controller, its nginx master and workers
// kept the ports and served the old configuration, and the next controller's
// nginx failed bind() in a loop. Two measures, both needed:
//
//   - The master is started with a parent-death signal, so it dies with the
//     controller. The signal is SIGTERM, not SIGKILL: nginx workers do not
//     notice their master's death (they keep the listening sockets, as a kill
//     -9 of the master shows), while a master told SIGTERM ends its workers
//     (SIGTERM, then SIGKILL after a second) before it exits.
//   - Before it starts a master, the controller ends what is left of a
//     previous one: the process group named by the pid file, if its members
//     are nginx (a master killed some other way, a controller without the
//     parent-death signal, a master stuck in its shutdown).

// spawner starts processes from one OS thread that never exits. The kernel
// sends the parent-death signal when the thread that forked the child exits,
// not the process, and the Go runtime ends the threads of goroutines that
// exit locked; this thread lives until the process dies.
var spawner struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan<- error
}

// startTiedToProcess starts cmd from the spawner thread, with sig as its
// parent-death signal.
func startTiedToProcess(cmd *exec.Cmd, sig syscall.Signal) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnRequest)
		go spawnLoop(spawner.reqs)
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
	done := make(chan error, 1)
	spawner.reqs <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

// spawnLoop runs on its own locked thread for the life of the process.
func spawnLoop(reqs <-chan spawnRequest) {
	runtime.LockOSThread() // never unlocked: see spawner
	for r := range reqs {
		r.done <- r.cmd.Start()
	}
}

// procStat is what /proc/<pid>/stat says about a process.
type procStat struct {
	state byte
	ppid  int
	pgrp  int
}

// readProcStat parses /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and
	// parentheses, so parse after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return procStat{state: f[0][0], ppid: ppid, pgrp: pgrp}, nil
}

// alive reports whether pid exists and is not a zombie (a zombie has closed
// its sockets already).
func alive(pid int) bool {
	st, err := readProcStat(pid)
	return err == nil && st.state != 'Z' && st.state != 'X'
}

// isNginx reports whether pid runs the nginx binary: its title is one
// nginx sets ("nginx: master process …", "nginx: worker process", …) and its
// executable is nginx (the same file, or one of that name that was replaced
// on disk by an upgrade).
func isNginx(pid int, nginx string) bool {
	proc := "/proc/" + strconv.Itoa(pid)
	cmdline, err := os.ReadFile(proc + "/cmdline")
	if err != nil || !bytes.HasPrefix(cmdline, []byte("nginx: ")) {
		return false
	}
	if exe, err := os.Stat(proc + "/exe"); err == nil {
		if bin, err := os.Stat(nginx); err == nil && os.SameFile(exe, bin) {
			return true
		}
	}
	link, err := os.Readlink(proc + "/exe")
	if err != nil {
		return false
	}
	return filepath.Base(strings.TrimSuffix(link, " (deleted)")) == filepath.Base(nginx)
}

// readPIDFile returns the pid nginx wrote to path, or 0.
func readPIDFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0
	}
	return pid
}

// errForeignMaster is a pid file naming a live nginx master that serves
// another configuration: it is left alone.
var errForeignMaster = errors.New("nginxcompat: the pid file names an nginx master of another configuration")

// staleGroup lists the live nginx processes of the process group the pid
// file names (Setpgid made the old master's pid its group's id, and its
// workers stay in the group after the master died). A process group's id is
// not reused while the group has members, so live members of the group of a
// dead master are that master's. A live master must run confPath.
func staleGroup(pidFile, nginx, confPath string) ([]int, error) {
	pgid := readPIDFile(pidFile)
	if pgid == 0 {
		return nil, nil
	}
	if alive(pgid) {
		// The master's title ends with its arguments: "… -c <confPath>".
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pgid) + "/cmdline")
		ours := bytes.HasSuffix(bytes.TrimRight(cmdline, "\x00"), []byte(" -c "+confPath))
		if !isNginx(pgid, nginx) || !ours {
			// pid reused, or someone else's nginx.
			if isNginx(pgid, nginx) {
				return nil, fmt.Errorf("%w: pid %d", errForeignMaster, pgid)
			}
			return nil, nil
		}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.pgrp != pgid || st.state == 'Z' || st.state == 'X' {
			continue
		}
		if isNginx(pid, nginx) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// killStale ends the nginx processes left by a previous master of this
// configuration (staleGroup) with SIGKILL and waits until they are gone, so
// the master started next can bind the ports. It returns the pids it killed.
func killStale(ctx context.Context, pidFile, nginx, confPath string) ([]int, error) {
	pids, err := staleGroup(pidFile, nginx, confPath)
	if err != nil || len(pids) == 0 {
		return nil, err
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return pids, fmt.Errorf("kill stale nginx %d: %w", pid, err)
		}
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		left := 0
		for _, pid := range pids {
			if alive(pid) {
				left++
			}
		}
		if left == 0 {
			return pids, nil
		}
		select {
		case <-ctx.Done():
			return pids, fmt.Errorf("%d stale nginx processes still alive: %w", left, ctx.Err())
		case <-tick.C:
		}
	}
}
