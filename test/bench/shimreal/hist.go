package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// hist is a latency histogram in buckets 1 % wide: bucket b holds the
// latencies in [histBase^b, histBase^(b+1)) µs, and how many requests took
// them. A round's histogram is what wrk.lua's done hook wrote: wrk's
// latency at the middle of each slice of its requests (0.5 % slices up to
// the 98th percentile, 0.01 % above) with the slice's size, so a pooled
// quantile above the 98th is within a slice (0.01 % of a round's requests)
// and a bucket of the true one.
// Pooling the rounds' histograms gives the p99 of all the requests of a
// cell instead of a median of per-round p99s: at 8 connections a round's
// p99 rests on its slowest ~1000 requests, and per-round ratios spread
// from 0.4x to 3x in an A/A run (docs/benchmarks.md).
type hist map[int]float64

const histBase = 1.01

func histBucket(us float64) int {
	if us < 1 {
		return 0
	}
	return int(math.Floor(math.Log(us) / math.Log(histBase)))
}

// histValue is a bucket's midpoint in µs (its value within 0.5 %).
func histValue(b int) float64 { return math.Pow(histBase, float64(b)+0.5) }

// readWrkHist reads wrk.lua's "µs count" lines into a hist.
func readWrkHist(r io.Reader) (hist, error) {
	h := hist{}
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
		h[histBucket(us)] += n
	}
	return h, sc.Err()
}

func readWrkHistFile(path string) (hist, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readWrkHist(f)
}

func (h hist) add(o hist) {
	for b, n := range o {
		h[b] += n
	}
}

func (h hist) count() float64 {
	var n float64
	for _, c := range h {
		n += c
	}
	return n
}

// quantile is the latency in ms at quantile q (0..1] of the requests: the
// midpoint of the bucket holding the ceil(q·n)-th smallest; 0 when empty.
func (h hist) quantile(q float64) float64 {
	n := h.count()
	if n == 0 {
		return 0
	}
	rank := q * n
	buckets := make([]int, 0, len(h))
	for b := range h {
		buckets = append(buckets, b)
	}
	slices.Sort(buckets)
	var seen float64
	for _, b := range buckets {
		seen += h[b]
		if seen >= rank {
			return histValue(b) / 1000
		}
	}
	return histValue(buckets[len(buckets)-1]) / 1000
}

// String is the compact form printed in the raw output ("bucket:count"
// pairs, ascending), which parseHist reads back.
func (h hist) String() string {
	buckets := make([]int, 0, len(h))
	for b := range h {
		buckets = append(buckets, b)
	}
	slices.Sort(buckets)
	var sb strings.Builder
	for i, b := range buckets {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%d:%s", b, strconv.FormatFloat(h[b], 'g', 6, 64))
	}
	return sb.String()
}

func parseHist(fields []string) (hist, error) {
	h := hist{}
	for _, f := range fields {
		bs, cs, ok := strings.Cut(f, ":")
		b, err1 := strconv.Atoi(bs)
		c, err2 := strconv.ParseFloat(cs, 64)
		if !ok || err1 != nil || err2 != nil || c < 0 || math.IsInf(c, 0) || math.IsNaN(c) {
			return nil, fmt.Errorf("bad histogram bucket %q", f)
		}
		h[b] += c
	}
	return h, nil
}
