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

import (
	"flag"
	"fmt"
	"io"
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

func turnsMain(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("turns", flag.ContinueOnError)
	var fronts frontFlags
	fs.Var(&fronts, "front", "NAME=HOST:PORT@PID: a proxy, and the process whose CPU (with its children's) is its own; repeat, two or more")
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
	hz := 100.0 // USER_HZ, which /proc/PID/stat counts in on Linux
	pooled := make([]turns.Hist, len(fronts))
	for r := 1; r <= *rounds; r++ {
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
	}
	for i, f := range fronts {
		h := pooled[i]
		fmt.Fprintf(out, "# %s %s pooled over %.0f requests: p50 %.0f us, p90 %.0f, p99 %.0f, p99.9 %.0f\n", *label, f.name, h.Count(),
			h.Quantile(0.5)*1000, h.Quantile(0.9)*1000, h.Quantile(0.99)*1000, h.Quantile(0.999)*1000)
	}
	return nil
}
