package proxy

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// metrics are the request metrics, with ingress-nginx's names, labels and
// buckets. Label values come from the configuration (server name, Ingress
// path, backend names) or small fixed sets (status code, method), never
// from raw request data, so cardinality is bounded by the configuration.
//
// A request adds to atomic counters of its series only (no lock, no
// allocation, no Prometheus observer): the counter and histograms are
// folded into Prometheus metrics when /metrics is scraped (Collect). The
// deprecated upstream latency summary is a sliding window of log-linear
// counts (latencyWindow) whose quantiles are read at scrape time: a
// Prometheus summary inserted every sample into five quantile streams,
// 3.7 % of the product's CPU under load.
//
// A request finds its series without hashing its label values: its route
// keeps the entries its requests used last (route.series, by status and
// method), checked by comparing keys; the copy-on-write map behind them
// (cache) is read on a miss, the lock taken only for a series never seen.
type metrics struct {
	perHost bool
	stripes int // of every counter (stripes.go)

	// all holds every series ever made, for Collect: series outlive the
	// configuration that made them, as Prometheus vectors' children do;
	// latency likewise, by upstreamLatencyLabels.
	mu      sync.Mutex
	all     map[labelValues]*series      // guarded by mu
	latency map[[4]string]*latencyWindow // guarded by mu

	// cache resolves a request's series without a lock: copy on write,
	// emptied by reset (its keys are a configuration's locations) and
	// when full.
	cache atomic.Pointer[map[seriesKey]*seriesEntry]
}

// seriesEntry is a series with its key, as route.series holds it.
type seriesEntry struct {
	key seriesKey
	s   *series
}

// routeSeries are the entries a route's requests used last, by
// seriesSlot; a request whose key differs from its slot's looks its
// series up in metrics.cache and takes the slot.
type routeSeries [8]atomic.Pointer[seriesEntry]

// seriesSlot spreads a route's usual label sets (a few statuses and
// methods, canary or not) over its slots.
func seriesSlot(k *seriesKey) int {
	return int(uint(k.status)*3+uint(len(k.method))+uint(len(k.canary))) % len(routeSeries{})
}

// The request metrics' names and labels, as ingress-nginx exports them.
var (
	requestLabels = []string{"host", "status", "method", "path", "namespace", "ingress", "service", "canary"}

	descRequests = prometheus.NewDesc("nginx_ingress_controller_requests",
		"The total number of client requests.", requestLabels, nil)
	descDuration = prometheus.NewDesc("nginx_ingress_controller_request_duration_seconds",
		"The request processing time in seconds.", requestLabels, nil)
	descRespSize = prometheus.NewDesc("nginx_ingress_controller_response_size",
		"The response length (including headers) in bytes.", requestLabels, nil)
	descReqSize = prometheus.NewDesc("nginx_ingress_controller_request_size",
		"The request length (including headers) in bytes.", requestLabels, nil)
	descUpstream = prometheus.NewDesc("nginx_ingress_controller_response_duration_seconds",
		"The time spent receiving the response from the upstream servers, in seconds.", requestLabels, nil)
	descConnect = prometheus.NewDesc("nginx_ingress_controller_connect_duration_seconds",
		"The time spent establishing a connection with the upstream server, in seconds.", requestLabels, nil)
	descHeader = prometheus.NewDesc("nginx_ingress_controller_header_duration_seconds",
		"The time spent receiving the first header from the upstream server, in seconds.", requestLabels, nil)
	// As ingress-nginx: observed with $upstream_connect_time (here: of the
	// last attempt), by Ingress, with the quantiles of its defObjectives.
	descLatency = prometheus.NewDesc("nginx_ingress_controller_ingress_upstream_latency_seconds",
		"DEPRECATED Upstream service latency per Ingress", upstreamLatencyLabels, nil)

	// durationBuckets are Prometheus' default buckets (ingress-nginx's
	// for the time histograms) in nanoseconds; sizeBuckets are
	// ingress-nginx's for the size histograms, 64 bytes times powers of 4.
	durationBuckets = scaledBuckets(prometheus.DefBuckets, 1e9)
	sizeBuckets     = scaledBuckets(prometheus.ExponentialBuckets(64, 4, 10), 1)
)

// upstreamLatencyLabels are those of ingress-nginx's
// ingress_upstream_latency_seconds.
var upstreamLatencyLabels = []string{"ingress", "namespace", "service", "canary"}

// maxSeries bounds the series cache; past it the cache starts over.
const maxSeries = 10000

func newMetrics(reg prometheus.Registerer, perHost bool) (*metrics, error) {
	m := &metrics{
		perHost: perHost,
		stripes: stripeCount(),
		all:     map[labelValues]*series{},
		latency: map[[4]string]*latencyWindow{},
	}
	for _, c := range []prometheus.Collector{m} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("proxy: register metrics: %w", err)
		}
	}
	m.reset()
	return m, nil
}

// seriesKey names a label set: the location (path, namespace, ingress,
// service come from it), the server name, status, method and canary; and
// whether the request went upstream (only then do the upstream series
// exist).
type seriesKey struct {
	loc                  *model.Location
	host, method, canary string
	status               int
	proxied              bool
}

// labelValues are a series' label values, in requestLabels' order.
type labelValues [8]string

// series are the metrics of one label set. The request count is the
// duration histogram's.
type series struct {
	labels                      labelValues
	duration, respSize, reqSize histogram
	// upstream is set (once, under metrics.mu) by the first request that
	// went upstream: requests answered by the proxy itself have no
	// upstream series, as in ingress-nginx.
	upstream atomic.Pointer[upstreamSeries]
}

// upstreamSeries are the upstream timings of one label set.
type upstreamSeries struct {
	response, connect, header histogram
	latency                   *latencyWindow
}

// histogram is a fixed-bucket histogram of integer values (nanoseconds or
// bytes), updated with atomics only, in stripes (stripes.go): stripe s
// holds its bucket counts, +Inf last, and then its sum (two's complement)
// in cells[s*stride:].
type histogram struct {
	bounds []int64 // upper bounds, inclusive, ascending
	stride int     // cells per stripe: the buckets, +Inf and the sum, in whole cache lines
	cells  []atomic.Uint64
}

func newHistogram(bounds []int64, stripes int) histogram {
	stride := (len(bounds) + 2 + lineWords - 1) / lineWords * lineWords
	return histogram{bounds: bounds, stride: stride, cells: make([]atomic.Uint64, stripes*stride)}
}

// observe adds one value to stripe s.
func (h *histogram) observe(s int, v int64) {
	c := h.cells[s*h.stride : s*h.stride+len(h.bounds)+2]
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	c[i].Add(1)
	c[len(h.bounds)+1].Add(uint64(v))
}

// cell is cell i of every stripe, summed: bucket i's count, or with
// i == len(bounds)+1 the sum.
func (h *histogram) cell(i int) uint64 {
	var n uint64
	for s := 0; s < len(h.cells); s += h.stride {
		n += h.cells[s+i].Load()
	}
	return n
}

// metric is h as a Prometheus histogram, with values divided by scale.
// The count is the buckets' total, so it never disagrees with them.
func (h *histogram) metric(desc *prometheus.Desc, scale float64, lv []string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.bounds))
	var n uint64
	for i, b := range h.bounds {
		n += h.cell(i)
		buckets[float64(b)/scale] = n
	}
	n += h.cell(len(h.bounds))
	return prometheus.MustNewConstHistogram(desc, n, float64(int64(h.cell(len(h.bounds)+1)))/scale, buckets, lv...)
}

// scaledBuckets are bucket bounds times scale, as integers.
func scaledBuckets(bounds []float64, scale float64) []int64 {
	out := make([]int64, len(bounds))
	for i, b := range bounds {
		out[i] = int64(b*scale + 0.5)
	}
	return out
}

// Describe is part of prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descDuration, descRespSize, descReqSize, descUpstream, descConnect, descHeader, descLatency} {
		ch <- d
	}
}

// Collect is part of prometheus.Collector: every series' counters as they
// are now.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	all := make([]*series, 0, len(m.all))
	for _, s := range m.all {
		all = append(all, s)
	}
	windows := make([]*latencyWindow, 0, len(m.latency))
	for _, w := range m.latency {
		windows = append(windows, w)
	}
	m.mu.Unlock()
	now := monoNow()
	for _, w := range windows {
		ch <- w.metric(now)
	}
	for _, s := range all {
		lv := s.labels[:]
		ch <- s.duration.metric(descDuration, 1e9, lv)
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(histogramCount(&s.duration)), lv...)
		ch <- s.respSize.metric(descRespSize, 1, lv)
		ch <- s.reqSize.metric(descReqSize, 1, lv)
		if u := s.upstream.Load(); u != nil {
			ch <- u.response.metric(descUpstream, 1e9, lv)
			ch <- u.connect.metric(descConnect, 1e9, lv)
			ch <- u.header.metric(descHeader, 1e9, lv)
		}
	}
}

// histogramCount is how many values h holds.
func histogramCount(h *histogram) uint64 {
	var n uint64
	for i := range len(h.bounds) + 1 {
		n += h.cell(i)
	}
	return n
}

// reset empties the series cache (the series stay).
func (m *metrics) reset() {
	empty := map[seriesKey]*seriesEntry{}
	m.cache.Store(&empty)
}

// methodLabel is the label value of a request method; methods other than
// these count as OTHER.
func methodLabel(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "HEAD":
		return "HEAD"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "PATCH":
		return "PATCH"
	case "OPTIONS":
		return "OPTIONS"
	case "CONNECT":
		return "CONNECT"
	case "TRACE":
		return "TRACE"
	}
	return "OTHER"
}

// observe counts one finished request: took is its duration, now the
// monoNow time it finished (the upstream latency window's clock).
func (m *metrics) observe(x *exchange, o *outcome, took, now time.Duration) {
	k := seriesKey{loc: o.loc, method: methodLabel(x.method), canary: o.canary, status: x.status, proxied: o.upstream > 0}
	if m.perHost && o.loc != nil {
		k.host = o.server
	}
	var s *series
	var slot *atomic.Pointer[seriesEntry]
	if o.rt != nil {
		slot = &o.rt.series[seriesSlot(&k)]
		if e := slot.Load(); e != nil && e.key == k {
			s = e.s
		}
	}
	if s == nil {
		e := (*m.cache.Load())[k]
		if e == nil {
			e = m.add(k)
		}
		if slot != nil {
			slot.Store(e)
		}
		s = e.s
	}
	st := stripeOf(m.stripes)
	s.duration.observe(st, int64(took))
	s.respSize.observe(st, int64(x.respHeader+x.bodySent))
	s.reqSize.observe(st, int64(x.reqLength))
	if k.proxied {
		u := s.upstream.Load()
		u.response.observe(st, int64(o.upstream))
		u.header.observe(st, int64(o.header))
		u.connect.observe(st, int64(o.connect))
		u.latency.observe(st, o.connect, now)
	}
}

// latencyWindow finds or makes the upstream latency of a label set; m.mu
// is held.
func (m *metrics) latencyWindow(lv [4]string) *latencyWindow {
	w := m.latency[lv]
	if w == nil {
		w = newLatencyWindow(lv, m.stripes)
		m.latency[lv] = w
	}
	return w
}

// add finds or makes the series of k and caches it.
func (m *metrics) add(k seriesKey) *seriesEntry {
	var path, ns, ing, svc string
	if k.loc != nil {
		path, ns, ing, svc = k.loc.Path, k.loc.Ingress.Namespace, k.loc.Ingress.Name, k.loc.Service
	}
	lv := labelValues{k.host, strconv.Itoa(k.status), k.method, path, ns, ing, svc, k.canary}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.all[lv]
	if s == nil {
		s = &series{labels: lv, duration: newHistogram(durationBuckets, m.stripes),
			respSize: newHistogram(sizeBuckets, m.stripes), reqSize: newHistogram(sizeBuckets, m.stripes)}
		m.all[lv] = s
	}
	if k.proxied && s.upstream.Load() == nil {
		s.upstream.Store(&upstreamSeries{response: newHistogram(durationBuckets, m.stripes), connect: newHistogram(durationBuckets, m.stripes),
			header: newHistogram(durationBuckets, m.stripes), latency: m.latencyWindow([4]string{ing, ns, svc, k.canary})})
	}
	old := *m.cache.Load()
	if e := old[k]; e != nil {
		// Another request added it meanwhile.
		return e
	}
	next := make(map[seriesKey]*seriesEntry, len(old)+1)
	if len(old) < maxSeries {
		for kk, v := range old {
			next[kk] = v
		}
	}
	e := &seriesEntry{key: k, s: s}
	next[k] = e
	m.cache.Store(&next)
	return e
}

// bodyLen is a body's size without reading a stream (Body would buffer it
// whole): the declared Content-Length, zero when chunked.
func bodyLen(stream bool, contentLength int, body func() []byte) int {
	if stream {
		return max(contentLength, 0)
	}
	return len(body())
}

// latencyWindow is ingress_upstream_latency_seconds of one label set, as a
// Prometheus summary with its default MaxAge (10 minutes in 5 steps): the
// count and sum of every observation, and quantiles over the last 8 to 10
// minutes, read from counts in log-linear buckets (16 per power of two, so
// a quantile is within 3 % of a value observed) instead of a quantile
// stream per age bucket.
//
// Count, sum and the observations of no connect time (a kept-alive
// upstream connection: most requests) are striped atomic counters
// (stripes.go); only other values take the lock, and a slot's turn to a
// new epoch.
type latencyWindow struct {
	labels [4]string
	count  stripedCounter
	sum    stripedCounter // nanoseconds
	mu     sync.Mutex
	slots  [latencySlots]latencySlot
}

func newLatencyWindow(lv [4]string, stripes int) *latencyWindow {
	w := &latencyWindow{labels: lv, count: newStripedCounter(stripes), sum: newStripedCounter(stripes)}
	for i := range w.slots {
		w.slots[i].zero = newStripedCounter(stripes)
	}
	return w
}

// latencySlot holds the counts of one latencySlotWidth of time.
type latencySlot struct {
	// epoch is monoNow / latencySlotWidth + 1, 0 before first use;
	// written under latencyWindow.mu.
	epoch atomic.Int64
	// zero counts the observations of bucket 0 (no connect time).
	zero   stripedCounter
	counts map[uint16]uint64 // other buckets; guarded by latencyWindow.mu
}

const (
	latencySlots     = 5
	latencySlotWidth = 2 * time.Minute
)

// latencyQuantiles are ingress-nginx's defObjectives' quantiles.
var latencyQuantiles = []float64{0.5, 0.9, 0.99}

// observe adds d, observed at now, to stripe st.
func (w *latencyWindow) observe(st int, d, now time.Duration) {
	e := int64(now/latencySlotWidth) + 1
	k := latencyBucket(d)
	w.count.add(st, 1)
	w.sum.add(st, uint64(max(d, 0)))
	sl := &w.slots[e%latencySlots]
	if sl.epoch.Load() != e {
		w.turn(sl, e)
	}
	if k == 0 {
		sl.zero.add(st, 1)
		return
	}
	w.mu.Lock()
	if sl.counts == nil {
		sl.counts = map[uint16]uint64{}
	}
	sl.counts[k]++
	w.mu.Unlock()
}

// turn empties sl for epoch e, unless another observation did.
func (w *latencyWindow) turn(sl *latencySlot, e int64) {
	w.mu.Lock()
	if sl.epoch.Load() != e {
		sl.zero.reset()
		clear(sl.counts)
		sl.epoch.Store(e)
	}
	w.mu.Unlock()
}

// metric is the window as a Prometheus summary at now. With no
// observation in the window the quantiles are NaN, as a summary's are.
func (w *latencyWindow) metric(now time.Duration) prometheus.Metric {
	e := int64(now/latencySlotWidth) + 1
	merged := map[uint16]uint64{}
	var total uint64
	count, sum := w.count.load(), time.Duration(w.sum.load())
	w.mu.Lock()
	for i := range w.slots {
		sl := &w.slots[i]
		if ep := sl.epoch.Load(); ep == 0 || ep <= e-latencySlots {
			continue
		}
		if n := sl.zero.load(); n > 0 {
			merged[0] += n
			total += n
		}
		for k, n := range sl.counts {
			merged[k] += n
			total += n
		}
	}
	w.mu.Unlock()
	keys := make([]uint16, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	q := make(map[float64]float64, len(latencyQuantiles))
	for _, p := range latencyQuantiles {
		q[p] = math.NaN()
		if total == 0 {
			continue
		}
		rank := uint64(math.Ceil(p * float64(total)))
		var seen uint64
		for _, k := range keys {
			seen += merged[k]
			if seen >= rank {
				q[p] = latencyValue(k).Seconds()
				break
			}
		}
	}
	return prometheus.MustNewConstSummary(descLatency, count, sum.Seconds(), q, w.labels[:]...)
}

// latencyBucket is d's bucket: 0 for none, the value itself below 16 ns,
// else 16 buckets per power of two.
func latencyBucket(d time.Duration) uint16 {
	if d <= 0 {
		return 0
	}
	v := uint64(d)
	if v < 16 {
		return uint16(v)
	}
	e := bits.Len64(v) - 1 // 4..62
	sub := (v >> (e - 4)) & 15
	return uint16(16 + (e-4)*16 + int(sub))
}

// latencyValue is the middle of bucket k.
func latencyValue(k uint16) time.Duration {
	if k < 16 {
		return time.Duration(k)
	}
	e := (int(k)-16)/16 + 4
	sub := uint64(k-16) % 16
	lo := (16 + sub) << (e - 4)
	return time.Duration(lo + (uint64(1)<<(e-4))/2)
}
