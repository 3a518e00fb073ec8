package main

// product turns: the HTTP/1.1 cells of test/bench/product.sh with the
// interleaved load (package turns) in wrk's place. The three proxies take
// the load in turns of -slice, in passes forward and back, so the host's
// stalls fall on all three instead of on the one whose wrk run they hit.
// Per round and proxy it prints the row product.sh collects from wrk:
//
//	LABEL ROUND NAME rps p99_us cpu_us_per_req cpu_pct bad -
//
// where the CPU is that of the proxy's process and its children (nginx's
// workers) over the round, per request the proxy answered in it; a proxy
// waiting for its turn uses next to none. cpu_pct is over the time the
// proxy had the load. After the rounds a comment line per proxy gives the
// p50, p90, p99 and p99.9 of all its requests (the rounds' histograms
// pooled).
//
// -shared NAME=PID names a process every proxy's load goes through (the
// backends): its CPU is read before and after each turn
// (benchutil.RunNanos), so the time it spent during a proxy's turns is
// charged to that proxy. Per round and proxy a comment line gives it per
// request, with the load process's own:
//
//	# shared LABEL ROUND NAME load_us_per_req NAME_us_per_req... idle_pct
//
// where idle_pct is the machine's idle time (/proc/stat) during that
// proxy's turns, in % of all its CPUs.

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-proxy/switchyard/test/bench/internal/benchutil"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/turns"
)

// frontFlag is one -front NAME=HOST:PORT@PID.
type frontFlag struct {
	name, addr string
	pid        int
}

type frontFlags []frontFlag

func (f *frontFlags) String() string { return fmt.Sprint(*f) }

func (f *frontFlags) Set(v string) error {
	name, rest, ok1 := strings.Cut(v, "=")
	addr, pidS, ok2 := strings.Cut(rest, "@")
	pid, err := strconv.Atoi(pidS)
	if !ok1 || !ok2 || name == "" || addr == "" || err != nil || pid <= 0 {
		return fmt.Errorf("want NAME=HOST:PORT@PID, got %q", v)
	}
	*f = append(*f, frontFlag{name: name, addr: addr, pid: pid})
	return nil
}

// sharedFlags are the -shared NAME=PID.
type sharedFlags []frontFlag

func (f *sharedFlags) String() string { return fmt.Sprint(*f) }

func (f *sharedFlags) Set(v string) error {
	name, pidS, ok := strings.Cut(v, "=")
	pid, err := strconv.Atoi(pidS)
	if !ok || name == "" || err != nil || pid <= 0 {
		return fmt.Errorf("want NAME=PID, got %q", v)
	}
	*f = append(*f, frontFlag{name: name, pid: pid})
	return nil
}

func (f sharedFlags) names() string {
	var names string
	for _, s := range f {
		names += " " + s.name
	}
	return names
}

func (f sharedFlags) pids() []int {
	var pids []int
	for _, s := range f {
		pids = append(pids, s.pid)
	}
	return pids
}

func turnsMain(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("turns", flag.ContinueOnError)
	var fronts frontFlags
	fs.Var(&fronts, "front", "NAME=HOST:PORT@PID: a proxy, and the process whose CPU (with its children's) is its own; repeat, two or more")
	var shared sharedFlags
	fs.Var(&shared, "shared", "NAME=PID: a process all proxies' load goes through (the backends), its CPU charged to the proxy whose turn it is; repeatable")
	label := fs.String("label", "h1", "the cell's label, the rows' first field")
	host := fs.String("host", "bench.local", "the requests' Host")
	conns := fs.Int("conns", 8, "connections per proxy")
	slice := fs.Duration("slice", 250*time.Millisecond, "one proxy's turn")
	round := fs.Duration("round", 5*time.Second, "load per proxy and round")
	rounds := fs.Int("rounds", 5, "rounds")
	warmup := fs.Duration("warmup", time.Second, "per proxy, before the first round")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(fronts) < 2 || *rounds < 1 {
		return fmt.Errorf("need two or more -front and one or more rounds")
	}
	spec := turns.Spec{Conns: *conns, Slice: *slice, Round: *round, Warmup: *warmup}
	req := []byte("GET / HTTP/1.1\r\nHost: " + *host + "\r\n\r\n")
	for _, f := range fronts {
		spec.Fronts = append(spec.Fronts, turns.Target{Addr: f.addr, Requests: [][]byte{req}})
	}
	l, err := turns.NewRun(spec)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.Warm(); err != nil {
		return err
	}
	// The shared processes' CPU (and the load's own, first) per front.
	sharedPids := append([]int{os.Getpid()}, shared.pids()...)
	spent := make([][]int64, len(fronts))
	at := make([]int64, len(sharedPids))
	// The machine's idle time during each front's turns, in ticks.
	idle := make([]int64, len(fronts))
	var idleAt int64
	l.Turn = func(front int, start bool) {
		for j, pid := range sharedPids {
			n := benchutil.RunNanos(pid)
			if !start {
				spent[front][j] += n - at[j]
			}
			at[j] = n
		}
		n := benchutil.IdleTicks()
		if !start {
			idle[front] += n - idleAt
		}
		idleAt = n
	}
	hz := 100.0 // USER_HZ, which /proc/PID/stat counts in on Linux
	pooled := make([]turns.Hist, len(fronts))
	cpus := float64(benchutil.CPUs())
	fmt.Fprintf(out, "# shared %s columns: load%s (us of CPU per request), idle (%% of the machine's %.0f CPUs)\n", *label, shared.names(), cpus)
	for r := 1; r <= *rounds; r++ {
		for i := range spent {
			spent[i] = make([]int64, len(sharedPids))
		}
		clear(idle)
		cpu0 := make([]int64, len(fronts))
		for i, f := range fronts {
			cpu0[i] = benchutil.CPUTicksTree(f.pid)
		}
		res, err := l.Round()
		if err == nil {
			err = res.Check()
		}
		if err != nil {
			return fmt.Errorf("%s round %d: %w", *label, r, err)
		}
		for i, f := range fronts {
			fr := res.Fronts[i]
			cpu := float64(benchutil.CPUTicksTree(f.pid)-cpu0[i]) / hz
			if pooled[i] == nil {
				pooled[i] = turns.Hist{}
			}
			pooled[i].Add(fr.Hist)
			fmt.Fprintf(out, "%s %d %s %.0f %.0f %.1f %.0f %d -\n", *label, r, f.name, fr.RPS(), fr.Hist.Quantile(0.99)*1000,
				cpu*1e6/float64(fr.Requests), 100*cpu/fr.Active.Seconds(), fr.Errors)
		}
		for i, f := range fronts {
			line := fmt.Sprintf("# shared %s %d %s", *label, r, f.name)
			for j := range sharedPids {
				line += fmt.Sprintf(" %.1f", float64(spent[i][j])/1e3/float64(res.Fronts[i].Requests))
			}
			line += fmt.Sprintf(" %.1f", 100*float64(idle[i])/hz/(cpus*res.Fronts[i].Active.Seconds()))
			fmt.Fprintln(out, line)
		}
	}
	for i, f := range fronts {
		h := pooled[i]
		fmt.Fprintf(out, "# %s %s pooled over %.0f requests: p50 %.0f us, p90 %.0f, p99 %.0f, p99.9 %.0f\n", *label, f.name, h.Count(),
			h.Quantile(0.5)*1000, h.Quantile(0.9)*1000, h.Quantile(0.99)*1000, h.Quantile(0.999)*1000)
	}
	return nil
}
