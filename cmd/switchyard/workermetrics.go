package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protodelim"
	"k8s.io/klog/v2"
)

// The Go workers' request metrics reach /metrics through the controller:
// on each scrape it asks every worker for its families and sums them, so a
// scrape shows the same series, with the same labels, as one process
// serving everything would (and as ingress-nginx's controller shows for
// all its nginx workers). Counters, gauges and histogram buckets add up;
// a summary's count and sum add up and each quantile is the mean of the
// workers' weighted by their counts, an estimate (the only summary is
// ingress-nginx's deprecated ingress_upstream_latency_seconds).

// scrapeTimeout bounds the wait for one worker's metrics; a worker that
// does not answer in time is left out of that scrape, with a log line.
const scrapeTimeout = 2 * time.Second

// Describe is part of prometheus.Collector: nothing, the families depend
// on what the workers send (an unchecked collector).
func (g *goWorkers) Describe(chan<- *prometheus.Desc) {}

// Collect is part of prometheus.Collector: the workers' families, summed.
// A worker that ended still counts what it counted: its last scrape's
// counters and histograms stay in the sum (carried), so a replaced worker
// does not read as a counter reset, which would make rate() count the
// other workers' totals again; what it counted after its last scrape is
// lost.
func (g *goWorkers) Collect(ch chan<- prometheus.Metric) {
	var m metricsMerge
	for _, p := range g.procs {
		b, pid, err := g.scrape(p)
		g.carryMu.Lock()
		if err == nil && p.lastPID != 0 && pid != p.lastPID {
			g.carried = append(g.carried, p.lastScrape)
			if len(g.carried) > maxCarried {
				g.carried = g.carried[1:] // a reset, once in maxCarried restarts
			}
		}
		last := p.lastScrape
		if err == nil {
			p.lastScrape, p.lastPID = b, pid
		}
		g.carryMu.Unlock()
		if err != nil {
			klog.ErrorS(err, "scrape go worker", "worker", p.index)
			if last != nil {
				_ = m.addCounters(last) // until its successor answers
			}
			continue
		}
		if err := m.add(b); err != nil {
			klog.ErrorS(err, "read go worker metrics", "worker", p.index)
		}
	}
	g.carryMu.Lock()
	carried := g.carried
	g.carryMu.Unlock()
	for _, b := range carried {
		_ = m.addCounters(b)
	}
	m.emit(ch)
}

// maxCarried bounds the scrapes of ended workers kept in the sums.
const maxCarried = 256

// scrape asks p for its metrics and waits for the answer; pid is the
// process that answered.
func (g *goWorkers) scrape(p *workerProc) (b []byte, pid int64, err error) {
	p.scrapeMu.Lock()
	defer p.scrapeMu.Unlock()
	id := g.scrapes.Add(1)
	g.mu.Lock()
	live := p.conn != nil
	pid = p.pid.Load()
	g.sendLocked(p, appendFrame(nil, frameScrape, binary.BigEndian.AppendUint64(nil, id)))
	g.mu.Unlock()
	if !live {
		return nil, 0, errors.New("not running")
	}
	timeout := time.NewTimer(scrapeTimeout)
	defer timeout.Stop()
	for {
		select {
		case b := <-p.metrics:
			if binary.BigEndian.Uint64(b) == id {
				return b[8:], pid, nil
			}
			// An answer to a scrape that timed out: skip it.
		case <-timeout.C:
			return nil, 0, fmt.Errorf("no answer in %v", scrapeTimeout)
		}
	}
}

// metricsMerge sums metric families from several processes.
type metricsMerge struct {
	families []*mergedFamily
}

type mergedFamily struct {
	name, help string
	typ        dto.MetricType
	series     map[string]*mergedSeries
	order      []string // series keys in first-seen order
}

type mergedSeries struct {
	names, values []string
	value         float64 // counter, gauge, untyped
	count         uint64  // histogram, summary
	sum           float64
	buckets       map[float64]uint64
	quantiles     map[float64]float64 // sum of value × count, then divided
	qcount        uint64              // the counts the quantiles are weighted by
}

// add reads one process's families (length-delimited protobuf).
func (m *metricsMerge) add(b []byte) error { return m.read(b, false) }

// addCounters is add for an ended process: its counters, histograms and
// summaries' counts and sums, not its gauges or quantiles.
func (m *metricsMerge) addCounters(b []byte) error { return m.read(b, true) }

func (m *metricsMerge) read(b []byte, countersOnly bool) error {
	// protodelim directly, bounded: expfmt's decoder takes any length a
	// message claims and allocates it.
	r := bytes.NewReader(b)
	opts := protodelim.UnmarshalOptions{MaxSize: int64(len(b))}
	for {
		var mf dto.MetricFamily
		if err := opts.UnmarshalFrom(r, &mf); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		m.addFamily(&mf, countersOnly)
	}
}

func (m *metricsMerge) addFamily(mf *dto.MetricFamily, countersOnly bool) {
	if countersOnly && (mf.GetType() == dto.MetricType_GAUGE || mf.GetType() == dto.MetricType_UNTYPED) {
		return
	}
	var f *mergedFamily
	for _, x := range m.families {
		if x.name == mf.GetName() {
			f = x
			break
		}
	}
	if f == nil {
		f = &mergedFamily{name: mf.GetName(), help: mf.GetHelp(), typ: mf.GetType(), series: map[string]*mergedSeries{}}
		m.families = append(m.families, f)
	}
	if f.typ != mf.GetType() {
		return // a family must keep its type; the first process's wins
	}
	for _, met := range mf.GetMetric() {
		var key strings.Builder
		names := make([]string, 0, len(met.GetLabel()))
		values := make([]string, 0, len(met.GetLabel()))
		for _, lp := range met.GetLabel() {
			names = append(names, lp.GetName())
			values = append(values, lp.GetValue())
			key.WriteString(lp.GetName())
			key.WriteByte(0xff)
			key.WriteString(lp.GetValue())
			key.WriteByte(0xfe)
		}
		s := f.series[key.String()]
		if s == nil {
			s = &mergedSeries{names: names, values: values}
			f.series[key.String()] = s
			f.order = append(f.order, key.String())
		}
		switch f.typ {
		case dto.MetricType_COUNTER:
			s.value += met.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			s.value += met.GetGauge().GetValue()
		case dto.MetricType_UNTYPED:
			s.value += met.GetUntyped().GetValue()
		case dto.MetricType_HISTOGRAM:
			h := met.GetHistogram()
			s.count += h.GetSampleCount()
			s.sum += h.GetSampleSum()
			if s.buckets == nil {
				s.buckets = map[float64]uint64{}
			}
			for _, b := range h.GetBucket() {
				s.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		case dto.MetricType_SUMMARY:
			sm := met.GetSummary()
			s.count += sm.GetSampleCount()
			s.sum += sm.GetSampleSum()
			if s.quantiles == nil {
				s.quantiles = map[float64]float64{}
			}
			if !countersOnly {
				s.qcount += sm.GetSampleCount()
				for _, q := range sm.GetQuantile() {
					s.quantiles[q.GetQuantile()] += q.GetValue() * float64(sm.GetSampleCount())
				}
			}
		}
	}
}

// emit sends the sums.
func (m *metricsMerge) emit(ch chan<- prometheus.Metric) {
	for _, f := range m.families {
		descs := map[string]*prometheus.Desc{}
		for _, k := range f.order {
			s := f.series[k]
			dk := strings.Join(s.names, "\xff")
			desc := descs[dk]
			if desc == nil {
				desc = prometheus.NewDesc(f.name, f.help, slices.Clone(s.names), nil)
				descs[dk] = desc
			}
			var met prometheus.Metric
			var err error
			switch f.typ {
			case dto.MetricType_COUNTER:
				met, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, s.value, s.values...)
			case dto.MetricType_GAUGE:
				met, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, s.value, s.values...)
			case dto.MetricType_UNTYPED:
				met, err = prometheus.NewConstMetric(desc, prometheus.UntypedValue, s.value, s.values...)
			case dto.MetricType_HISTOGRAM:
				met, err = prometheus.NewConstHistogram(desc, s.count, s.sum, s.buckets, s.values...)
			case dto.MetricType_SUMMARY:
				q := make(map[float64]float64, len(s.quantiles))
				for k, v := range s.quantiles {
					if s.qcount > 0 {
						q[k] = v / float64(s.qcount)
					}
				}
				met, err = prometheus.NewConstSummary(desc, s.count, s.sum, q, s.values...)
			default:
				continue
			}
			if err != nil {
				klog.ErrorS(err, "sum go worker metrics", "family", f.name)
				continue
			}
			ch <- met
		}
	}
}
