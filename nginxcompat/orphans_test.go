package nginxcompat

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// faultSetup is a directory, loopback addresses and a Configuration with
// one host served by a real backend through the Lua stand-in.
type faultSetup struct {
	nginx, dir string
	rc         RenderConfig
	httpAddr   string
	be         string
}

func newFaultSetup(t *testing.T) *faultSetup {
	t.Helper()
	nginx := requireNginx(t)
	if os.Geteuid() != 0 && os.Getenv("CI") == "" {
		t.Skip("SKIPPED LOUDLY: needs root for nginx's worker user switch")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &faultSetup{nginx: nginx, dir: dir, be: echoBackend(t, "127.0.0.3")}
	f.httpAddr = "127.0.0.2:" + freePort(t, "127.0.0.2")
	f.rc = testDirs(t, dir, "")
	f.rc.HTTPListen = []string{f.httpAddr}
	f.rc.HTTPSListen = []string{"127.0.0.2:" + freePort(t, "127.0.0.2")}
	f.rc.StatusListen = "127.0.0.1:" + freePort(t, "127.0.0.1")
	return f
}

// config serves host at path (a prefix) from the echo backend; nothing
// else answers but 404.
func (f *faultSetup) config(host, path string) *model.Configuration {
	cfg := &model.Configuration{Version: 1}
	for _, h := range []string{host} {
		cfg.Servers = append(cfg.Servers, model.Server{Hostname: h, Locations: []model.Location{{
			Path: path, PathType: model.PathTypePrefix, Backend: f.be,
			Ingress: model.ObjectRef{Kind: "Ingress", Namespace: "default", Name: h},
		}}})
	}
	return cfg
}

func (f *faultSetup) controller(t *testing.T) *Controller {
	t.Helper()
	c, err := NewController(ControllerConfig{Nginx: f.nginx, ConfPath: f.dir + "/nginx.conf", Render: f.rc,
		Logf: t.Logf, Stderr: tlog{t}, ReloadTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs c until the test ends.
func run(t *testing.T, c *Controller) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// groupMembers lists the live processes of process group pgid.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil && st.pgrp == pgid && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// waitReady polls c.Ready until want(err) holds or the deadline passes,
// and returns the last error.
func waitReady(t *testing.T, c *Controller, within time.Duration, what string, want func(error) bool) error {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := c.Ready()
		if want(err) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready() after %v: %v; want %s", within, err, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Issue 20: an nginx master killed with -9 leaves its workers holding the
// ports and serving the old file. The next Controller on the same pid file
// ends them (they are nginx, in the group the pid file names), binds the
// ports and serves its own configuration; it is Ready only then.
func TestRunKillsWorkersLeftByAKilledMaster(t *testing.T) {
	f := newFaultSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	// A master started as a controller without the parent-death signal
	// started it, on the old configuration.
	old := f.controller(t)
	if err := old.Update(ctx, f.config("old.example.com", "/old")); err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command(f.nginx, "-e", "stderr", "-g", "daemon off; master_process on;", "-p", f.dir, "-c", f.dir+"/nginx.conf")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	master := orphan.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-master, syscall.SIGKILL) })
	go func() { _ = orphan.Wait() }()
	cl := testClient()
	base := "http://" + f.httpAddr
	waitServing(t, cl, time.Now().Add(defaultTestTimeout), base+"/old/x", "old.example.com", "/old/x old.example.com")
	if got := readPIDFile(f.rc.PIDFile); got != master {
		t.Fatalf("pid file names %d; want the master %d", got, master)
	}
	if err := syscall.Kill(master, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for alive(master) {
		if time.Now().After(deadline) {
			t.Fatal("master alive 2 s after SIGKILL")
		}
		time.Sleep(5 * time.Millisecond)
	}
	workers := groupMembers(t, master)
	if len(workers) == 0 {
		t.Fatal("no worker outlived its master; the test would prove nothing")
	}
	if _, body, err := get(cl, base+"/old/y", "old.example.com"); err != nil || body != "/old/y old.example.com" {
		t.Fatalf("orphan workers do not serve: %q %v", body, err)
	}

	// The old file has no /new: only the new nginx answers it.
	if resp, _, err := get(cl, base+"/new/z", "new.example.com"); err != nil || resp.StatusCode == 200 {
		t.Fatalf("orphan workers on /new/z: %v %v; want no 200", resp, err)
	}
	c := f.controller(t)
	if err := c.Update(ctx, f.config("new.example.com", "/new")); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(); err == nil {
		t.Error("Ready() before Run: nil; want an error")
	}
	start := time.Now()
	run(t, c)
	waitServing(t, cl, time.Now().Add(5*time.Second), base+"/new/z", "new.example.com", "/new/z new.example.com")
	t.Logf("serving the new file %v after Run", time.Since(start))
	_ = waitReady(t, c, 5*time.Second, "nil", func(err error) bool { return err == nil })
	for _, w := range workers {
		if alive(w) {
			t.Errorf("orphan worker %d still alive", w)
		}
	}
}

// Issue 20: Ready says why while the master this Controller started does
// not serve: its port is held by another process (bind() fails, the master
// exits and is restarted), or it was killed; nil again once it serves.
func TestReadyFollowsTheMaster(t *testing.T) {
	f := newFaultSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	held, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	c := f.controller(t)
	if err := c.Update(ctx, f.config("a.example.com", "/")); err != nil {
		t.Fatal(err)
	}
	run(t, c)
	// nginx retries bind() for 2.5 s before it gives up.
	err = waitReady(t, c, 8*time.Second, "the bind() error", func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "Address already in use")
	})
	t.Logf("while the port is held: %v", err)
	if c.Ready() == nil {
		t.Error("Ready() nil while another process holds the HTTP port")
	}
	_ = held.Close()
	_ = waitReady(t, c, 10*time.Second, "nil once the port is free", func(err error) bool { return err == nil })
	cl := testClient()
	if _, body, err := get(cl, "http://"+f.httpAddr+"/r", "a.example.com"); err != nil || body != "/r a.example.com" {
		t.Errorf("Ready but not serving: %q %v", body, err)
	}

	c.mu.Lock()
	pid := c.master.Process.Pid
	c.mu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = waitReady(t, c, time.Second, "an error after kill -9 of the master", func(err error) bool { return err != nil })
	t.Logf("after kill -9 of the master: %v", err)
	_ = waitReady(t, c, 5*time.Second, "nil after the restart", func(err error) bool { return err == nil })
	if _, body, err := get(cl, "http://"+f.httpAddr+"/s", "a.example.com"); err != nil || body != "/s a.example.com" {
		t.Errorf("Ready after the restart but not serving: %q %v", body, err)
	}
}

// killStale touches only nginx: a pid file naming a live master of another
// configuration, or a process that is not nginx, kills nothing.
func TestKillStaleSparesOthers(t *testing.T) {
	f, other := newFaultSetup(t), newFaultSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	oc := other.controller(t)
	if err := oc.Update(ctx, other.config("other.example.com", "/")); err != nil {
		t.Fatal(err)
	}
	run(t, oc)
	waitServing(t, testClient(), time.Now().Add(5*time.Second), "http://"+other.httpAddr+"/o", "other.example.com", "/o other.example.com")
	otherMaster := readPIDFile(other.rc.PIDFile)
	sleeper := exec.Command("sleep", "30")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })

	for _, r := range []struct {
		name    string
		pid     int
		wantErr error
	}{
		{"master of another configuration", otherMaster, errForeignMaster},
		{"not nginx", sleeper.Process.Pid, nil},
	} {
		t.Run(r.name, func(t *testing.T) {
			if err := os.WriteFile(f.rc.PIDFile, []byte(strconv.Itoa(r.pid)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			killed, err := killStale(ctx, f.rc.PIDFile, f.nginx, f.dir+"/nginx.conf")
			if !errors.Is(err, r.wantErr) || len(killed) != 0 {
				t.Errorf("killStale: killed %v, %v; want none, %v", killed, err, r.wantErr)
			}
			if !alive(r.pid) {
				t.Errorf("pid %d was killed", r.pid)
			}
		})
	}
	if g := groupMembers(t, otherMaster); len(g) < 2 {
		t.Errorf("the other nginx's group: %v; want its master and workers", g)
	}
}
