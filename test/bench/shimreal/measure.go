package main

import (
	"bytes"
	"fmt"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/benchutil"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/turns"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// sample is one wrk run against one front: p50/p99 in ms; nginxCPU is what
// the front nginx (all its processes) used per request in µs; sidecarCPU
// what `switchyard balancer` used during the run in seconds (shim only),
// sidecarUS the same per request in µs; frames the pick-socket frames the
// sidecar decoded during the run, by type, per 1000 requests (shim only;
// "pick" counts the requests that waited for Go); steal the time the host
// took from this machine's CPUs during the run, in ms per second (summed
// over CPUs; -1 unknown): 8-connection tails move with it.
type sample struct {
	rps, p50, p99, nginxCPU, sidecarCPU, sidecarUS, steal float64
	frames                                                map[string]float64
	// hist is the run's latency histogram (wrk.lua's done hook), pooled
	// over the rounds of a cell for its p99 (nil in tables made with
	// -table from raw output without "pooled" lines).
	hist turns.Hist
}

// wrkArgs are the wrk command line for case c at conns connections.
func (f *front) wrkArgs(c benchCase, conns int, d time.Duration, script string, latency bool) []string {
	args := []string{"-t2", fmt.Sprintf("-c%d", conns), fmt.Sprintf("-d%s", d)}
	if latency {
		args = append(args, "--latency")
	}
	header := ""
	if c.header != "" {
		header = c.header + ":" + strings.Join(c.values, ",")
	}
	return append(args, "-s", script, "http://"+f.listen+"/", c.path, strconv.Itoa(c.nkeys), f.cookies[c.name], header)
}

// measure warms the front up for warmup (connections, keepalive pools,
// the shim's backend info and leases) and runs wrk once for d; wrk is the
// command that runs wrk (wrkCommand).
func measure(f *front, side *sidecar, c benchCase, conns int, wrk []string, warmup, d time.Duration, script string) (sample, error) {
	if _, err := runWrk(wrk, f.wrkArgs(c, conns, warmup, script, false), ""); err != nil {
		return sample{}, fmt.Errorf("warm-up: %w", err)
	}
	frontPids, sidePids := []int{-f.cmd.Process.Pid}, []int{side.pid}
	var frames0 map[string]float64
	if f.shim {
		frames0 = side.frames()
	}
	cpu0, side0, steal0 := benchutil.CPUTicks(frontPids), benchutil.CPUTicks(sidePids), benchutil.StealTicks()
	histFile := filepath.Join(f.dir, "wrk-hist.txt")
	s, err := runWrk(wrk, f.wrkArgs(c, conns, d, script, true), histFile)
	cpu1, side1, steal1 := benchutil.CPUTicks(frontPids), benchutil.CPUTicks(sidePids), benchutil.StealTicks()
	if err != nil {
		return sample{}, err
	}
	s.steal = -1
	if steal0 >= 0 && steal1 >= 0 {
		s.steal = float64(steal1-steal0) * 10 / d.Seconds()
	}
	if s.hist, err = readWrkHistFile(histFile); err != nil {
		return sample{}, fmt.Errorf("wrk's latency histogram: %w", err)
	}
	_ = os.Remove(histFile)
	s.account(f, side, cpu1-cpu0, side1-side0, frames0, s.rps*d.Seconds())
	return s, nil
}

// account fills s's CPU and frame columns from what was read around its
// run: frontTicks the front's CPU ticks, and for the shim sideTicks the
// sidecar's and frames0 its frame counts before; reqs is the run's
// requests.
func (s *sample) account(f *front, side *sidecar, frontTicks, sideTicks int64, frames0 map[string]float64, reqs float64) {
	// USER_HZ is 100 on Linux: a tick is 10 ms.
	s.nginxCPU = float64(frontTicks) * 1e4 / reqs
	if !f.shim {
		return
	}
	s.sidecarCPU = float64(sideTicks) / 100
	s.sidecarUS = float64(sideTicks) * 1e4 / reqs
	if frames1 := side.frames(); frames0 != nil && frames1 != nil {
		s.frames = map[string]float64{}
		for typ, n := range frames1 {
			s.frames[typ] = (n - frames0[typ]) * 1000 / reqs
		}
	}
}

// wrkCell measures one cell with wrk: per round, a run on each front in
// turn (measure).
func wrkCell(o options, fronts map[string]*front, side *sidecar, bc benchCase, conns int, script string, emit func(round int, v string, s sample)) error {
	for r := range o.rounds {
		for _, v := range variants {
			s, err := measure(fronts[v], side, bc, conns, wrkCommand(o.isolate, o.pace), o.warmup, o.duration, script)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", v, r+1, err)
			}
			emit(r, v, s)
		}
	}
	return nil
}

// wrkCommand is how wrk is run: under SCHED_FIFO when the load
// generator is isolated from the fronts (-isolate, benchutil.Realtime);
// with pace, each connection waits that long after each answer (-pace,
// wrk.lua's delay()).
func wrkCommand(isolate bool, pace time.Duration) []string {
	cmd := []string{"wrk"}
	if pace > 0 {
		cmd = append([]string{"env", "SHIMREAL_PACE_MS=" + strconv.FormatInt(pace.Milliseconds(), 10)}, cmd...)
	}
	if isolate {
		cmd = append([]string{"chrt", "-f", strconv.Itoa(isolatePrio)}, cmd...)
	}
	return cmd
}

// isolatePrio is the SCHED_FIFO priority of wrk and the backends under
// -isolate.
const isolatePrio = 10

// runWrk runs wrk; with histFile set, wrk.lua writes the run's latency
// histogram there.
func runWrk(wrk, args []string, histFile string) (sample, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(wrk[0], append(wrk[1:len(wrk):len(wrk)], args...)...)
	cmd.Env = append(os.Environ(), "SHIMREAL_HIST="+histFile)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return sample{}, fmt.Errorf("%s %s: %w\n%s%s", strings.Join(wrk, " "), strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return parseWrk(string(out))
}

// parseWrk reads wrk --latency output (benchutil.ParseWrk).
func parseWrk(out string) (sample, error) {
	w, err := benchutil.ParseWrk(out)
	return sample{rps: w.RPS, p50: w.P50, p99: w.P99}, err
}
