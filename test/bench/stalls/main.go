// Command stalls measures how much CPU time this machine takes away from a
// thread that never sleeps: one thread per CPU, pinned there, reads the
// clock in a loop and counts the gaps between two reads longer than
// -threshold. On an idle machine every such gap is time the CPU ran
// something else (the kernel, another task, or, in a VM, the host). It
// explains tail latencies that no proxy causes (docs/benchmarks.md, run 23:
// the p99 of 8-connection runs sits where these stalls land).
//
//	go run ./test/bench/stalls -duration 60s
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

type report struct {
	cpu   int
	gaps  []time.Duration
	total time.Duration
	err   error
}

func main() {
	d := flag.Duration("duration", 60*time.Second, "how long each CPU's thread spins")
	threshold := flag.Duration("threshold", 500*time.Microsecond, "the shortest gap counted")
	flag.Parse()
	n := runtime.NumCPU()
	reports := make([]report, n)
	var wg sync.WaitGroup
	for cpu := range n {
		wg.Go(func() {
			reports[cpu] = spin(cpu, *d, *threshold)
		})
	}
	wg.Wait()
	fmt.Printf("# stalls: %d CPUs, %s each, gaps over %s between two clock reads of a pinned spinning thread\n", n, *d, *threshold)
	fmt.Println("| CPU | gaps | per second | time lost | share | p50 gap | max gap | over 5 ms | over 20 ms |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	failed := false
	for _, r := range reports {
		if r.err != nil {
			fmt.Fprintf(os.Stderr, "stalls: CPU %d: %v\n", r.cpu, r.err)
			failed = true
			continue
		}
		p50, maxGap := time.Duration(0), time.Duration(0)
		if len(r.gaps) > 0 {
			slices.Sort(r.gaps)
			p50, maxGap = r.gaps[len(r.gaps)/2], r.gaps[len(r.gaps)-1]
		}
		over := func(t time.Duration) int {
			n := 0
			for _, g := range r.gaps {
				if g > t {
					n++
				}
			}
			return n
		}
		fmt.Printf("| %d | %d | %.1f | %.1f ms | %.2f %% | %.2f ms | %.2f ms | %d | %d |\n", r.cpu, len(r.gaps),
			float64(len(r.gaps))/d.Seconds(), ms(r.total), 100*r.total.Seconds()/d.Seconds(), ms(p50), ms(maxGap),
			over(5*time.Millisecond), over(20*time.Millisecond))
	}
	if failed {
		os.Exit(1)
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// spin runs on its own thread pinned to cpu for d and returns the gaps.
func spin(cpu int, d, threshold time.Duration) report {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := report{cpu: cpu}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		r.err = fmt.Errorf("pin: %w", err)
		return r
	}
	start := time.Now()
	last := start
	for {
		now := time.Now()
		if gap := now.Sub(last); gap > threshold {
			r.gaps = append(r.gaps, gap)
			r.total += gap
		}
		last = now
		if now.Sub(start) > d {
			return r
		}
	}
}
