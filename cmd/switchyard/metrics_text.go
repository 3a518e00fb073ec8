package main

import (
	"compress/gzip"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"k8s.io/klog/v2"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// Issue 22: at 50k Ingresses one /metrics scrape through client_golang
// allocated ~115 MB (a dto.Metric, its label pairs and the registry's
// consistency checks per series) and took the controller's RSS from 980 MB
// to 1.1 GB. The families whose series scale with the cluster (per
// endpoint, per Ingress, per TLS host) are therefore written here straight
// in the text exposition format (version 0.0.4,
// https://prometheus.io/docs/instrumenting/exposition_formats/), from the
// state of the scrape, into a reused buffer; client_golang keeps the
// others. The handler serves both as one exposition, families in name
// order as promhttp writes them.

// textFamily is a family the handler writes itself.
type textFamily struct {
	name, help string
	// typ is "gauge" or "counter".
	typ string
	// labels are the variable label names; with the controller labels they
	// make the Desc that reserves the name in the registry.
	labels []string
	// write writes the family's series, in label order, from the
	// scrape's snapshot. It calls w.series for the first line only
	// through w.begin, so a family without series is left out, as the
	// registry leaves it out.
	write func(w *textWriter, s *textScrape)
}

// textScrape is what one scrape reads, taken at most once per scrape.
type textScrape struct {
	h *metricsHandler
	// balancer state, when taken
	backendsTaken bool
	backends      []balancer.BackendStatus
	// ingress state, when taken
	ingressTaken bool
	ingress      ingressSnapshot
}

// metricsHandler serves /metrics: the registry's families and the
// textFamilies, merged in name order. It offers the text format 0.0.4
// only (not protobuf: Prometheus asks for protobuf only for native
// histograms, and falls back to text), compressed with gzip when the
// client accepts it, and honours promhttp's name[] filter.
type metricsHandler struct {
	// immutable
	reg      prometheus.Gatherer
	families []textFamily // sorted by name
	// constLabels are the controller labels as they go between braces,
	// escaped and sorted: `controller_class="…",controller_namespace="…",controller_pod="…"`.
	constLabels string
	balancer    *balancerMetrics
	ingress     *ingressCollector
}

// reservingCollector describes the textFamilies to the registry and
// collects nothing: registering another collector of one of these names
// then fails, as it would have before the families left the registry.
type reservingCollector []*prometheus.Desc

func (r reservingCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range r {
		ch <- d
	}
}

func (reservingCollector) Collect(chan<- prometheus.Metric) {}

// reserve returns the collector reserving families' names with the
// constant labels labels.
func reserve(families []textFamily, labels prometheus.Labels) reservingCollector {
	out := make(reservingCollector, len(families))
	for i, f := range families {
		out[i] = prometheus.NewDesc(f.name, f.help, f.labels, labels)
	}
	return out
}

// escapedLabels returns labels as they go between braces in the text
// format, sorted by name.
func escapedLabels(labels prometheus.Labels) string {
	names := make([]string, 0, len(labels))
	for k := range labels {
		names = append(names, k)
	}
	slices.Sort(names)
	var b []byte
	for i, k := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendLabel(b, k, labels[k])
	}
	return string(b)
}

// textFormat is the Content-Type of what the handler writes.
var textFormat = expfmt.NewFormat(expfmt.TypeTextPlain)

func (h *metricsHandler) ServeHTTP(rsp http.ResponseWriter, req *http.Request) {
	mfs, err := h.reg.Gather()
	if err != nil {
		// promhttp's HTTPErrorOnError.
		klog.ErrorS(err, "gather metrics")
		http.Error(rsp, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	var filter map[string]bool
	if req.URL != nil {
		if names := req.URL.Query()["name[]"]; len(names) > 0 {
			filter = make(map[string]bool, len(names))
			for _, n := range names {
				filter[n] = true
			}
		}
	}
	format := expfmt.NegotiateAccept(req.Header, textFormat)
	hdr := rsp.Header()
	hdr.Add("Vary", "Accept")
	hdr.Add("Vary", "Accept-Encoding")
	hdr.Set("Content-Type", string(format))
	var out io.Writer = rsp
	if acceptsGzip(req.Header.Get("Accept-Encoding")) {
		hdr.Set("Content-Encoding", "gzip")
		gz := gzipPool.Get().(*gzip.Writer)
		gz.Reset(rsp)
		defer func() {
			_ = gz.Close()
			gzipPool.Put(gz)
		}()
		out = gz
	}
	w := textWriterPool.Get().(*textWriter)
	w.reset(out)
	defer func() {
		w.reset(nil)
		textWriterPool.Put(w)
	}()
	enc := expfmt.NewEncoder(w, format)
	s := &textScrape{h: h}
	i := 0
	for _, mf := range mfs {
		for ; i < len(h.families) && h.families[i].name < mf.GetName(); i++ {
			w.family(&h.families[i], s, filter)
		}
		if filter != nil && !filter[mf.GetName()] {
			continue
		}
		if err := enc.Encode(mf); err != nil {
			w.fail(err)
		}
	}
	for ; i < len(h.families); i++ {
		w.family(&h.families[i], s, filter)
	}
	w.flush()
	if w.err != nil {
		klog.V(2).InfoS("write metrics", "error", w.err)
	}
}

// acceptsGzip reports whether an Accept-Encoding header accepts gzip: it
// names gzip, or "*", with a non-zero quality (RFC 9110, 12.5.3).
func acceptsGzip(accept string) bool {
	ok := false
	for part := range strings.SplitSeq(accept, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "*" {
			continue
		}
		q := 1.0
		for p := range strings.SplitSeq(params, ";") {
			if v, found := strings.CutPrefix(strings.TrimSpace(p), "q="); found {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					q = f
				}
			}
		}
		if coding == "gzip" {
			return q > 0
		}
		ok = q > 0
	}
	return ok
}

var gzipPool = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

// textWriterPool holds textWriters with their buffers.
var textWriterPool = sync.Pool{New: func() any { return &textWriter{buf: make([]byte, 0, 2*textFlushAt)} }}

// textFlushAt is the buffered size past which the writer flushes.
const textFlushAt = 32 << 10

// textWriter buffers the exposition and writes it out in chunks. It is
// also the expfmt encoder's writer (the encoder writes to it directly
// when it has WriteString, WriteByte and WriteRune). The first write
// error stops the output.
type textWriter struct {
	out io.Writer
	buf []byte
	err error
	// fam is the family being written and whether its HELP and TYPE are
	// out.
	fam     *textFamily
	started bool
}

func (w *textWriter) reset(out io.Writer) {
	w.out, w.buf, w.err, w.fam, w.started = out, w.buf[:0], nil, nil, false
}

func (w *textWriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *textWriter) flush() {
	if len(w.buf) > 0 && w.err == nil {
		if _, err := w.out.Write(w.buf); err != nil {
			w.fail(err)
		}
	}
	w.buf = w.buf[:0]
}

func (w *textWriter) maybeFlush() {
	if len(w.buf) >= textFlushAt {
		w.flush()
	}
}

func (w *textWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	w.maybeFlush()
	return len(p), w.err
}

func (w *textWriter) WriteString(s string) (int, error) {
	w.buf = append(w.buf, s...)
	w.maybeFlush()
	return len(s), w.err
}

func (w *textWriter) WriteByte(c byte) error {
	w.buf = append(w.buf, c)
	return w.err
}

func (w *textWriter) WriteRune(r rune) (int, error) {
	n := len(w.buf)
	w.buf = utf8.AppendRune(w.buf, r)
	return len(w.buf) - n, w.err
}

// family writes f unless the filter leaves it out.
func (w *textWriter) family(f *textFamily, s *textScrape, filter map[string]bool) {
	if w.err != nil || (filter != nil && !filter[f.name]) {
		return
	}
	w.fam, w.started = f, false
	f.write(w, s)
	w.fam = nil
}

// begin starts a series line of the current family: it writes the
// family's HELP and TYPE before its first series, then the name, and
// returns the buffer to append the rest of the line to (appendSeries).
func (w *textWriter) begin() []byte {
	b := w.buf
	if !w.started {
		w.started = true
		b = append(b, "# HELP "...)
		b = append(b, w.fam.name...)
		b = append(b, ' ')
		b = appendEscaped(b, w.fam.help, false)
		b = append(b, "\n# TYPE "...)
		b = append(b, w.fam.name...)
		b = append(b, ' ')
		b = append(b, w.fam.typ...)
		b = append(b, '\n')
	}
	return append(b, w.fam.name...)
}

// end takes back the buffer begin returned, with a series line appended.
func (w *textWriter) end(b []byte) {
	w.buf = b
	w.maybeFlush()
}

// constFirst appends the controller labels and a comma, for a family
// whose other labels sort after them.
func (h *metricsHandler) constFirst(b []byte) []byte {
	if h.constLabels == "" {
		return b
	}
	b = append(b, h.constLabels...)
	return append(b, ',')
}

// constAfter appends a comma and the controller labels, after a label
// that sorts before them.
func (h *metricsHandler) constAfter(b []byte) []byte {
	if h.constLabels == "" {
		return b
	}
	b = append(b, ',')
	return append(b, h.constLabels...)
}

// appendLabel appends name="value", the value escaped.
func appendLabel(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, '=', '"')
	b = appendEscaped(b, value, true)
	return append(b, '"')
}

// appendEscaped appends s escaped as the text format wants it: backslash
// and newline always, the double quote in label values.
func appendEscaped(b []byte, s string, quote bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '"' && quote:
			b = append(b, '\\', '"')
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendValue appends " v\n": the value as expfmt writes it (the shortest
// 'g' form; NaN, +Inf and -Inf spelled so), and the line's end.
func appendValue(b []byte, v float64) []byte {
	b = append(b, ' ')
	switch {
	case v == 0:
		b = append(b, '0')
	case math.IsNaN(v):
		b = append(b, "NaN"...)
	case math.IsInf(v, 1):
		b = append(b, "+Inf"...)
	case math.IsInf(v, -1):
		b = append(b, "-Inf"...)
	default:
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
	}
	return append(b, '\n')
}
