package turns

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Hist is a latency histogram in buckets 1 % wide: bucket b holds the
// latencies in [HistBase^b, HistBase^(b+1)) µs, and how many requests took
// them (a float, so that a histogram read from wrk's percentiles can weigh
// a bucket by a share of the requests). Pooling rounds' histograms gives
// the p99 of all the requests of a cell instead of a median of per-round
// p99s: at 8 connections a round's p99 rests on its slowest ~1000 requests
// (docs/benchmarks.md).
type Hist map[int]float64

// HistBase is the ratio of one bucket's bounds.
const HistBase = 1.01

// Bucket is the bucket of a latency of us µs.
func Bucket(us float64) int {
	if us < 1 {
		return 0
	}
	return int(math.Floor(math.Log(us) / math.Log(HistBase)))
}

// BucketValue is a bucket's midpoint in µs (its value within 0.5 %).
func BucketValue(b int) float64 { return math.Pow(HistBase, float64(b)+0.5) }

// Add adds o's requests to h.
func (h Hist) Add(o Hist) {
	for b, n := range o {
		h[b] += n
	}
}

// Count is how many requests h holds.
func (h Hist) Count() float64 {
	var n float64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile is the latency in ms at quantile q (0..1] of the requests: the
// midpoint of the bucket holding the ceil(q·n)-th smallest; 0 when empty.
func (h Hist) Quantile(q float64) float64 {
	n := h.Count()
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
			return BucketValue(b) / 1000
		}
	}
	return BucketValue(buckets[len(buckets)-1]) / 1000
}

// String is the compact form drivers print in their raw output
// ("bucket:count" pairs, ascending), which ParseHist reads back.
func (h Hist) String() string {
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

// ParseHist reads the fields of String's form back.
func ParseHist(fields []string) (Hist, error) {
	h := Hist{}
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
