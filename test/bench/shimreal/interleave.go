package main

// The interleaved load (-interleave SLICE): instead of one wrk run per front
// and round, one load process opens -connections keep-alive connections to
// one front for a SLICE, then to the other, alternating real and
// shim in the order ABBA..., so both fronts are measured across the same
// seconds of the host's life. A round of -duration is that many seconds of
// load on each front; its p99 is over the requests of its slices. On this
// 2-vCPU VM the host's stalls, not the fronts, set the 8-connection p99 of
// a 3 s wrk round, and an A/A of ten wrk rounds missed 1.1x in 5 of 22
// cells (docs/benchmarks.md, run 32); slices of a few hundred milliseconds
// spread each stall over both fronts instead of charging it to one.
//
// The load runs in a child process of this binary (-load-worker) so that,
// like wrk, it can run under SCHED_FIFO without the fronts it starts
// inheriting that. The driver writes one JSON loadSpec line on its
// standard input; the worker connects, warms each front up for the spec's
// warm-up and answers "ready"; then for each line "round" it runs one round
// and answers one JSON roundResult line. It exits when its input closes.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/benchutil"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// loadSpec is what one cell's load worker runs.
type loadSpec struct {
	// Fronts are the two fronts' addresses (host:port) and the requests
	// each is sent, in wrk.lua's order (loadRequests).
	Fronts [2]loadTarget
	Conns  int           // connections per front
	Slice  time.Duration // how long each front runs before the other takes over
	Round  time.Duration // load per front and round, a whole number of slices
	Warmup time.Duration // per front, before the first round
}

type loadTarget struct {
	Addr     string
	Requests [][]byte
}

// roundResult is one round's load, per front.
type roundResult struct {
	Fronts [2]frontRound
}

type frontRound struct {
	Requests int
	// Active is the time the front had the load: from each slice's start to
	// its last answer.
	Active time.Duration
	// Hist is the requests' latencies (hist's buckets, µs).
	Hist map[int]float64
	// Errors counts answers that were not 200 and connection failures; a
	// round with any is an error for the driver.
	Errors    int
	FirstErr  string `json:",omitempty"`
	SliceP99s []float64
}

// loadRequests are the requests wrk.lua would send to f for case c, in its
// order: per request URI (the prefix, or prefix + "k" + i for i < nkeys)
// one without a cookie or header, one with the affinity cookie when the case
// has one, and one per header value.
func loadRequests(host string, c benchCase, cookie string) [][]byte {
	paths := []string{c.path}
	if c.nkeys > 0 {
		paths = paths[:0]
		for i := range c.nkeys {
			paths = append(paths, c.path+"k"+strconv.Itoa(i))
		}
	}
	format := func(p, extra string) []byte {
		return []byte("GET " + p + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra + "\r\n")
	}
	var reqs [][]byte
	for _, p := range paths {
		reqs = append(reqs, format(p, ""))
		if cookie != "" {
			reqs = append(reqs, format(p, "Cookie: "+cookie+"\r\n"))
		}
		for _, v := range c.values {
			reqs = append(reqs, format(p, c.header+": "+v+"\r\n"))
		}
	}
	return reqs
}

// loadConn is one keep-alive connection of the load and what it measured
// in the current slice.
type loadConn struct {
	addr   string
	reqs   [][]byte
	next   int
	conn   net.Conn
	br     *bufio.Reader
	counts []uint32 // requests per hist bucket, this slice
	n      int
	errs   int
	err    error
}

// histBuckets bounds the buckets a connection counts in: 1.01^2000 µs is
// over 400 s, far beyond any timeout here.
const histBuckets = 2000

func newLoadConn(t loadTarget, offset int) *loadConn {
	return &loadConn{addr: t.Addr, reqs: t.Requests, next: offset % len(t.Requests), counts: make([]uint32, histBuckets)}
}

// one sends the next request and reads its answer, counting its latency
// (from the write to the answer's last byte; a reconnect after the front
// closed the connection is not part of it, as in wrk).
func (c *loadConn) one() error {
	if c.conn == nil {
		conn, err := net.Dial("tcp", c.addr)
		if err != nil {
			return err
		}
		c.conn = conn
		if c.br == nil {
			c.br = bufio.NewReaderSize(conn, 64<<10)
		} else {
			c.br.Reset(conn)
		}
	}
	req := c.reqs[c.next]
	c.next++
	if c.next == len(c.reqs) {
		c.next = 0
	}
	start := time.Now()
	if _, err := c.conn.Write(req); err != nil {
		return c.fail(err)
	}
	status, closing, err := readAnswer(c.br)
	if err != nil {
		return c.fail(err)
	}
	b := histBucket(float64(time.Since(start).Nanoseconds()) / 1000)
	c.counts[min(b, histBuckets-1)]++
	c.n++
	if status != 200 {
		c.errs++
		if c.err == nil {
			c.err = fmt.Errorf("%s answered %d", c.addr, status)
		}
	}
	if closing {
		_ = c.conn.Close()
		c.conn = nil
	}
	return nil
}

func (c *loadConn) fail(err error) error {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
	return fmt.Errorf("%s: %w", c.addr, err)
}

// readAnswer reads one HTTP/1.1 answer with a Content-Length body (the
// fronts relay the backends' `return 200` answers, and nginx's own error
// pages have one too) and reports its status and whether the front closes
// the connection after it.
func readAnswer(br *bufio.Reader) (status int, closing bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, false, fmt.Errorf("status line: %w", err)
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	length := -1
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, false, fmt.Errorf("header: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("bad header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, false, fmt.Errorf("an answer with Transfer-Encoding %q (the load reads Content-Length bodies only)", value)
		}
	}
	if length < 0 {
		return 0, false, errors.New("an answer without Content-Length")
	}
	if _, err := br.Discard(length); err != nil {
		return 0, false, fmt.Errorf("body: %w", err)
	}
	return status, closing, nil
}

// loadFront is one front's connections.
type loadFront struct {
	conns []*loadConn
}

// slice runs the load on f for d: every connection asks again as soon as
// it has its answer, until d has passed; the slice ends with its last
// answer. It adds what it measured to r.
func (f *loadFront) slice(d time.Duration, r *frontRound) error {
	start := time.Now()
	deadline := start.Add(d)
	errs := make([]error, len(f.conns))
	var wg sync.WaitGroup
	for i, c := range f.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := c.one(); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	r.Active += time.Since(start)
	sl := hist{}
	for _, c := range f.conns {
		// Each slice connects anew: with two workers and reuseport the
		// kernel splits a slice's connections over the workers by their
		// ports, and connections kept for a whole cell kept one split for
		// it, 6 to 2 as likely as 4 to 4. Identical fronts then read p99
		// ratios of 0.74-1.27x, steady from round to round (the A/A in
		// docs/benchmarks.md, run 33).
		if c.conn != nil {
			_ = c.conn.Close()
			c.conn = nil
		}
		for b, n := range c.counts {
			if n != 0 {
				sl[b] += float64(n)
				c.counts[b] = 0
			}
		}
		r.Requests += c.n
		r.Errors += c.errs
		if c.err != nil && r.FirstErr == "" {
			r.FirstErr = c.err.Error()
		}
		c.n, c.errs, c.err = 0, 0, nil
	}
	if r.Hist == nil {
		r.Hist = map[int]float64{}
	}
	hist(r.Hist).add(sl)
	r.SliceP99s = append(r.SliceP99s, sl.quantile(0.99))
	return errors.Join(errs...)
}

// loadRun is a worker's state: both fronts' connections.
type loadRun struct {
	spec   loadSpec
	fronts [2]*loadFront
}

func newLoadRun(spec loadSpec) (*loadRun, error) {
	if spec.Conns < 1 || spec.Slice <= 0 || spec.Round < spec.Slice {
		return nil, fmt.Errorf("bad load spec: %d connections, slices of %s, rounds of %s", spec.Conns, spec.Slice, spec.Round)
	}
	l := &loadRun{spec: spec}
	for i, t := range spec.Fronts {
		if len(t.Requests) == 0 {
			return nil, fmt.Errorf("bad load spec: no requests for %s", t.Addr)
		}
		f := &loadFront{}
		for c := range spec.Conns {
			// wrk's threads each walk the list from its start; spread the
			// connections over it instead, so a slice's first requests are
			// not all the same one.
			f.conns = append(f.conns, newLoadConn(t, c*len(t.Requests)/spec.Conns))
		}
		l.fronts[i] = f
	}
	return l, nil
}

// warm runs each front alone for the spec's warm-up, measuring nothing.
func (l *loadRun) warm() error {
	for _, f := range l.fronts {
		var r frontRound
		if err := f.slice(l.spec.Warmup, &r); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	return nil
}

// round runs the fronts in turn, a slice each, in the order ABBA...: each
// front gets Round/Slice slices, and neither always goes first.
func (l *loadRun) round() (roundResult, error) {
	var res roundResult
	n := max(1, int(l.spec.Round/l.spec.Slice))
	for s := range 2 * n {
		i := s % 2
		if (s/2)%2 == 1 {
			i = 1 - i
		}
		if err := l.fronts[i].slice(l.spec.Slice, &res.Fronts[i]); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (l *loadRun) close() {
	for _, f := range l.fronts {
		for _, c := range f.conns {
			if c.conn != nil {
				_ = c.conn.Close()
			}
		}
	}
}

// serveLoad is the worker's side of the protocol above, on in and out.
func serveLoad(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 64<<20)
	if !sc.Scan() {
		return fmt.Errorf("no load spec: %w", sc.Err())
	}
	var spec loadSpec
	if err := json.Unmarshal(sc.Bytes(), &spec); err != nil {
		return fmt.Errorf("load spec: %w", err)
	}
	l, err := newLoadRun(spec)
	if err != nil {
		return err
	}
	defer l.close()
	if err := l.warm(); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	for sc.Scan() {
		if sc.Text() != "round" {
			return fmt.Errorf("unknown command %q", sc.Text())
		}
		res, err := l.round()
		if err != nil {
			return err
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return sc.Err()
}

// loadWorker is the driver's handle on a running worker.
type loadWorker struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr bytes.Buffer
}

// startLoadWorker starts this binary as a load worker (under prefix, e.g.
// chrt), sends it spec and waits until it has warmed up.
func startLoadWorker(prefix []string, spec loadSpec) (*loadWorker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	argv := append(append([]string{}, prefix...), self, "-load-worker")
	w := &loadWorker{cmd: exec.Command(argv[0], argv[1:]...)}
	// One P: with two, the runtime's spinning thread looks for work on the
	// second CPU, and under SCHED_FIFO that takes it from the fronts.
	w.cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	w.cmd.Stderr = &w.stderr
	if w.in, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w.out = bufio.NewScanner(stdout)
	w.out.Buffer(nil, 64<<20)
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("load worker: %w", err)
	}
	b, err := json.Marshal(spec)
	if err == nil {
		_, err = w.in.Write(append(b, '\n'))
	}
	if err == nil && (!w.out.Scan() || w.out.Text() != "ready") {
		err = errors.New("did not get ready")
	}
	if err != nil {
		return nil, w.fail(err)
	}
	return w, nil
}

// round runs one round and returns what the worker measured.
func (w *loadWorker) round() (roundResult, error) {
	var res roundResult
	if _, err := io.WriteString(w.in, "round\n"); err != nil {
		return res, w.fail(err)
	}
	if !w.out.Scan() {
		return res, w.fail(errors.New("no round result"))
	}
	if err := json.Unmarshal(w.out.Bytes(), &res); err != nil {
		return res, w.fail(err)
	}
	for _, f := range res.Fronts {
		if f.Errors > 0 || f.Requests == 0 {
			return res, fmt.Errorf("load worker: %d of %d answers failed (%s)", f.Errors, f.Requests, f.FirstErr)
		}
	}
	return res, nil
}

func (w *loadWorker) fail(err error) error {
	w.stop()
	return fmt.Errorf("load worker: %w\n%s", err, w.stderr.Bytes())
}

func (w *loadWorker) stop() {
	_ = w.in.Close()
	_ = w.cmd.Wait()
}

// sample is the front's part of a round as a wrk sample: rps over its
// active time, p50 and p99 of its requests.
func (r frontRound) sample() sample {
	h := hist(r.Hist)
	s := sample{hist: h, p50: h.quantile(0.5), p99: h.quantile(0.99)}
	if r.Active > 0 {
		s.rps = float64(r.Requests) / r.Active.Seconds()
	}
	return s
}

// interleavedCell measures one cell with the interleaved load: a worker for
// the cell, then rounds, each giving a sample per variant. The CPU, frames
// and steal columns are taken around each round as measure takes them
// around a wrk run: each front's CPU per its own requests (the front that
// waits uses none), the sidecar's per the shim's requests, the host's steal
// over the round.
func interleavedCell(o options, fronts map[string]*front, side *sidecar, bc benchCase, conns int, emit func(round int, v string, s sample)) error {
	spec := loadSpec{Conns: conns, Slice: o.interleave, Round: o.duration, Warmup: o.warmup}
	for i, v := range variants {
		f := fronts[v]
		spec.Fronts[i] = loadTarget{Addr: f.listen, Requests: loadRequests(f.listen, bc, f.cookies[bc.name])}
	}
	var prefix []string
	if o.isolate {
		prefix = []string{"chrt", "-f", strconv.Itoa(isolatePrio)}
	}
	w, err := startLoadWorker(prefix, spec)
	if err != nil {
		return err
	}
	defer w.stop()
	for r := range o.rounds {
		var cpu0 [2]int64
		for i, v := range variants {
			cpu0[i] = benchutil.CPUTicks([]int{-fronts[v].cmd.Process.Pid})
		}
		shim := fronts[variantShim]
		var frames0 map[string]float64
		if shim.shim {
			frames0 = side.frames()
		}
		side0, steal0, t0 := benchutil.CPUTicks([]int{side.pid}), benchutil.StealTicks(), time.Now()
		res, err := w.round()
		elapsed := time.Since(t0)
		side1, steal1 := benchutil.CPUTicks([]int{side.pid}), benchutil.StealTicks()
		if err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
		for i, v := range variants {
			f := fronts[v]
			s := res.Fronts[i].sample()
			s.account(f, side, benchutil.CPUTicks([]int{-f.cmd.Process.Pid})-cpu0[i], side1-side0, frames0, float64(res.Fronts[i].Requests))
			s.steal = -1
			if steal0 >= 0 && steal1 >= 0 {
				s.steal = float64(steal1-steal0) * 10 / elapsed.Seconds()
			}
			emit(r, v, s)
		}
	}
	return nil
}
