package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/test/bench/internal/turns"
)

// A wrk round's histogram is what wrk.lua's done hook wrote: wrk's latency
// at the middle of each slice of its requests (0.5 % slices up to the 98th
// percentile, 0.01 % above) with the slice's size, so a pooled quantile
// above the 98th is within a slice (0.01 % of a round's requests) and a
// bucket of the true one.

// readWrkHist reads wrk.lua's "µs count" lines into a histogram.
func readWrkHist(r io.Reader) (turns.Hist, error) {
	h := turns.Hist{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("bad histogram line %q", sc.Text())
		}
		us, err := strconv.ParseFloat(f[0], 64)
		if err != nil || us < 0 {
			return nil, fmt.Errorf("bad histogram line %q", sc.Text())
		}
		n, err := strconv.ParseFloat(f[1], 64)
		if err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) {
			return nil, fmt.Errorf("bad histogram line %q", sc.Text())
		}
		h[turns.Bucket(us)] += n
	}
	return h, sc.Err()
}

func readWrkHistFile(path string) (turns.Hist, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readWrkHist(f)
}
