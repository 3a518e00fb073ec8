package main

// The interleaved load (-interleave SLICE) runs the real front and the shim
// in turns of SLICE, in the order ABBA..., with new connections per turn
// (package turns). The load runs in a child process of this binary
// (-load-worker) so that, like wrk, it can run under SCHED_FIFO without the
// fronts it starts inheriting that.

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/switchyard-proxy/switchyard/test/bench/internal/benchutil"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/turns"
)

// loadRequests are the requests wrk.lua would send to f for case c, in its
// order: per request URI (the prefix, or prefix + "k" + i for i < nkeys)
// one without a cookie or header, one with the affinity cookie when the case
// has one, and one per header value.
func loadRequests(host string, c benchCase, cookie string) [][]byte {
	paths := []string{c.path}
	if c.nkeys > 0 {
		paths = paths[:0]
		for i := range c.nkeys {
			paths = append(paths, c.path+"k"+strconv.Itoa(i))
		}
	}
	format := func(p, extra string) []byte {
		return []byte("GET " + p + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra + "\r\n")
	}
	var reqs [][]byte
	for _, p := range paths {
		reqs = append(reqs, format(p, ""))
		if cookie != "" {
			reqs = append(reqs, format(p, "Cookie: "+cookie+"\r\n"))
		}
		for _, v := range c.values {
			reqs = append(reqs, format(p, c.header+": "+v+"\r\n"))
		}
	}
	return reqs
}

// startLoadWorker starts this binary as a load worker (under prefix, e.g.
// chrt), sends it spec and waits until it has warmed up.
func startLoadWorker(prefix []string, spec turns.Spec) (*turns.Worker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	argv := append(append([]string{}, prefix...), self, "-load-worker")
	cmd := exec.Command(argv[0], argv[1:]...)
	// One P: with two, the runtime's spinning thread looks for work on the
	// second CPU, and under SCHED_FIFO that takes it from the fronts.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	return turns.StartWorker(cmd, spec)
}

// sample is the front's part of a round as a wrk sample: rps over its
// active time, p50 and p99 of its requests.
func sampleOf(r turns.FrontRound) sample {
	h := r.Hist
	if h == nil {
		h = turns.Hist{}
	}
	return sample{hist: h, p50: h.Quantile(0.5), p99: h.Quantile(0.99), rps: r.RPS()}
}

// interleavedCell measures one cell with the interleaved load: a worker for
// the cell, then rounds, each giving a sample per variant. The CPU, frames
// and steal columns are taken around each round as measure takes them
// around a wrk run: each front's CPU per its own requests (the front that
// waits uses none), the sidecar's per the shim's requests, the host's steal
// over the round.
func interleavedCell(o options, fronts map[string]*front, side *sidecar, bc benchCase, conns int, emit func(round int, v string, s sample)) error {
	spec := turns.Spec{Conns: conns, Slice: o.interleave, Round: o.duration, Warmup: o.warmup}
	for _, v := range variants {
		f := fronts[v]
		spec.Fronts = append(spec.Fronts, turns.Target{Addr: f.listen, Requests: loadRequests(f.listen, bc, f.cookies[bc.name])})
	}
	var prefix []string
	if o.isolate {
		prefix = []string{"chrt", "-f", strconv.Itoa(isolatePrio)}
	}
	w, err := startLoadWorker(prefix, spec)
	if err != nil {
		return err
	}
	defer w.Stop()
	for r := range o.rounds {
		var cpu0 [2]int64
		for i, v := range variants {
			cpu0[i] = benchutil.CPUTicks([]int{-fronts[v].cmd.Process.Pid})
		}
		shim := fronts[variantShim]
		var frames0 map[string]float64
		if shim.shim {
			frames0 = side.frames()
		}
		side0, steal0, t0 := benchutil.CPUTicks([]int{side.pid}), benchutil.StealTicks(), time.Now()
		res, err := w.Round()
		elapsed := time.Since(t0)
		side1, steal1 := benchutil.CPUTicks([]int{side.pid}), benchutil.StealTicks()
		if err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
		for i, v := range variants {
			f := fronts[v]
			s := sampleOf(res.Fronts[i])
			s.account(f, side, benchutil.CPUTicks([]int{-f.cmd.Process.Pid})-cpu0[i], side1-side0, frames0, float64(res.Fronts[i].Requests))
			s.steal = -1
			if steal0 >= 0 && steal1 >= 0 {
				s.steal = float64(steal1-steal0) * 10 / elapsed.Seconds()
			}
			emit(r, v, s)
		}
	}
	return nil
}
