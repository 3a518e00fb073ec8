package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// sample is one wrk run against one front: p50/p99 in ms; nginxCPU is what
// the front nginx (all its processes) used per request in µs; sidecarCPU
// what `switchyard balancer` used during the run in seconds (shim only),
// sidecarUS the same per request in µs.
type sample struct{ rps, p50, p99, nginxCPU, sidecarCPU, sidecarUS float64 }

// wrkArgs are the wrk command line for case c at conns connections.
func (f *front) wrkArgs(c benchCase, conns int, d time.Duration, script string, latency bool) []string {
	args := []string{"-t2", fmt.Sprintf("-c%d", conns), fmt.Sprintf("-d%s", d)}
	if latency {
		args = append(args, "--latency")
	}
	return append(args, "-s", script, "http://"+f.listen+"/", c.path, strconv.Itoa(c.nkeys), f.cookies[c.name])
}

// measure warms the front up for a second (connections, keepalive pools,
// the shim's backend info and leases) and runs wrk once.
func measure(f *front, side *sidecar, c benchCase, conns int, d time.Duration, script string) (sample, error) {
	if _, err := runWrk(f.wrkArgs(c, conns, time.Second, script, false)); err != nil {
		return sample{}, fmt.Errorf("warm-up: %w", err)
	}
	frontPids, sidePids := []int{-f.cmd.Process.Pid}, []int{side.pid}
	cpu0, side0 := cpuTicks(frontPids), cpuTicks(sidePids)
	s, err := runWrk(f.wrkArgs(c, conns, d, script, true))
	cpu1, side1 := cpuTicks(frontPids), cpuTicks(sidePids)
	if err != nil {
		return sample{}, err
	}
	reqs := s.rps * d.Seconds()
	// USER_HZ is 100 on Linux: a tick is 10 ms.
	s.nginxCPU = float64(cpu1-cpu0) * 1e4 / reqs
	if f.variant == variantShim {
		s.sidecarCPU = float64(side1-side0) / 100
		s.sidecarUS = float64(side1-side0) * 1e4 / reqs
	}
	return s, nil
}

var (
	reqSec = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	pct    = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
)

func runWrk(args []string) (sample, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("wrk", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return sample{}, fmt.Errorf("wrk %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return parseWrk(string(out))
}

// parseWrk reads rps and the 50th/99th latency percentiles; any non-2xx
// answer or socket error fails the run.
func parseWrk(out string) (sample, error) {
	var s sample
	m := reqSec.FindStringSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("no Requests/sec in wrk output:\n%s", out)
	}
	s.rps, _ = strconv.ParseFloat(m[1], 64)
	if s.rps == 0 || strings.Contains(out, "Non-2xx") || strings.Contains(out, "Socket errors") {
		return s, fmt.Errorf("wrk saw errors:\n%s", out)
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
			s.p50 = v
		} else {
			s.p99 = v
		}
	}
	return s, nil
}

// cpuTicks sums utime+stime of the given processes (all their threads); a
// negative pid means every process of that process group.
func cpuTicks(pids []int) int64 {
	var total int64
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
		pgrp, _ := strconv.Atoi(f[2])
		match := false
		for _, p := range pids {
			if p == pid || (p < 0 && pgrp == -p) {
				match = true
			}
		}
		if !match {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += ut + st
	}
	return total
}
