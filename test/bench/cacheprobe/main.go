// Command cacheprobe measures how long a cache line takes to go from one
// CPU to another and back: two threads, pinned to two CPUs, pass a counter
// back and forth through one atomic word for a while and print the mean
// round trip in ns. On this project's two-vCPU machines it reads about 60
// ns in most spells and about 330 ns in others (the vCPUs then sit on
// core complexes that share no cache), and every proxy's cost per request
// rises with it; test/bench/product-unpinned.sh runs it around each round
// (docs/benchmarks/product.md, "Two CPUs far apart").
//
//	cacheprobe [-d 30ms] [-a 0] [-b 1]
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// line is the word the threads pass, alone on its cache line.
var line struct {
	_ [64]byte
	v atomic.Uint64
	_ [56]byte
}

func main() {
	d := flag.Duration("d", 30*time.Millisecond, "how long to measure")
	a := flag.Int("a", 0, "the first CPU")
	b := flag.Int("b", 1, "the second CPU")
	flag.Parse()
	if err := pin(*a); err != nil {
		fmt.Fprintln(os.Stderr, "cacheprobe:", err)
		os.Exit(1)
	}
	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() {
		if err := pin(*b); err != nil {
			errc <- err
			stop.Store(true)
			line.v.Store(^uint64(0))
			return
		}
		close(errc)
		// Answers every odd value with the next even one.
		for want := uint64(1); !stop.Load(); want += 2 {
			for line.v.Load() != want {
				if stop.Load() {
					return
				}
			}
			line.v.Store(want + 1)
		}
	}()
	if err, ok := <-errc; ok {
		fmt.Fprintln(os.Stderr, "cacheprobe:", err)
		os.Exit(1)
	}
	var trips uint64
	start := time.Now()
	for time.Since(start) < *d {
		for range 200 {
			v := 2*trips + 1
			line.v.Store(v)
			for line.v.Load() != v+1 {
			}
			trips++
		}
	}
	took := time.Since(start)
	stop.Store(true)
	fmt.Printf("%.0f\n", float64(took.Nanoseconds())/float64(trips))
}

// pin locks the calling goroutine to its thread and the thread to cpu.
func pin(cpu int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	return nil
}
