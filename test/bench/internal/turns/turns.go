// Package turns is the interleaved load of the benchmark drivers: instead
// of one wrk run per front and round, one load process opens keep-alive
// HTTP/1.1 connections to one front for a slice of time, then to the next,
// so every front is measured across the same seconds of the host's life.
// On this project's 2-vCPU VM the host's stalls, not the fronts, set the
// 8-connection p99 of a 3 s wrk round: an A/A of ten wrk rounds missed
// 1.1x in 5 of 22 cells, and with turns of 250 ms every cell read within
// 5 % (docs/benchmarks.md, runs 32 and 35).
//
// In: a Spec (the fronts' addresses and the requests to send them, the
// connections per front, the slice and round lengths). Out: per round and
// front, the requests answered, the time the front had the load and a
// latency Hist. A driver can run the load in its own process (NewRun), or
// in a child over a line protocol (Serve, StartWorker) when the child must
// run under another scheduling class than the fronts the driver starts.
//
// The protocol: the driver writes one JSON Spec line on the worker's
// standard input; the worker connects, warms each front up for the spec's
// warm-up and answers "ready"; then for each line "round" it runs one round
// and answers one JSON Result line. It exits when its input closes.
package turns

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// Spec is what one cell's load runs.
type Spec struct {
	// Fronts are the fronts' addresses (host:port) and the requests each is
	// sent, in order, one after the other on every connection.
	Fronts []Target
	Conns  int           // connections per front
	Slice  time.Duration // how long each front runs before the next takes over
	Round  time.Duration // load per front and round, a whole number of slices
	Warmup time.Duration // per front, before the first round
}

// Target is one front and the requests it is sent.
type Target struct {
	Addr     string
	Requests [][]byte
}

// Result is one round's load, per front, in the Spec's order.
type Result struct {
	Fronts []FrontRound
}

// FrontRound is what one front's slices of a round measured.
type FrontRound struct {
	Requests int
	// Active is the time the front had the load: from each slice's start to
	// its last answer.
	Active time.Duration
	// Hist is the requests' latencies, from a request's write to its
	// answer's last byte.
	Hist Hist
	// Errors counts answers that were not 200 and connection failures; a
	// round with any is an error for the driver.
	Errors    int
	FirstErr  string `json:",omitempty"`
	SliceP99s []float64
}

// RPS is the front's requests per second over its active time.
func (r FrontRound) RPS() float64 {
	if r.Active <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Active.Seconds()
}

// conn is one keep-alive connection of the load and what it measured in
// the current slice.
type conn struct {
	addr   string
	reqs   [][]byte
	next   int
	conn   net.Conn
	br     *bufio.Reader
	counts []uint32 // requests per Hist bucket, this slice
	n      int
	errs   int
	err    error
}

// histBuckets bounds the buckets a connection counts in: 1.01^2000 µs is
// over 400 s, far beyond any timeout here.
const histBuckets = 2000

func newConn(t Target, offset int) *conn {
	return &conn{addr: t.Addr, reqs: t.Requests, next: offset % len(t.Requests), counts: make([]uint32, histBuckets)}
}

// one sends the next request and reads its answer, counting its latency
// (from the write to the answer's last byte; a reconnect after the front
// closed the connection is not part of it, as in wrk).
func (c *conn) one() error {
	if c.conn == nil {
		nc, err := net.Dial("tcp", c.addr)
		if err != nil {
			return err
		}
		c.conn = nc
		if c.br == nil {
			c.br = bufio.NewReaderSize(nc, 64<<10)
		} else {
			c.br.Reset(nc)
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
	status, closing, err := ReadAnswer(c.br)
	if err != nil {
		return c.fail(err)
	}
	b := Bucket(float64(time.Since(start).Nanoseconds()) / 1000)
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

func (c *conn) fail(err error) error {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
	return fmt.Errorf("%s: %w", c.addr, err)
}

// ReadAnswer reads one HTTP/1.1 answer with a Content-Length body (the
// fronts of the benchmarks relay `return 200` answers of fixed length, and
// nginx's own error pages have one too) and reports its status and whether
// the front closes the connection after it.
func ReadAnswer(br *bufio.Reader) (status int, closing bool, err error) {
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

// front is one front's connections.
type front struct {
	conns []*conn
}

// slice runs the load on f for d: every connection asks again as soon as
// it has its answer, until d has passed; the slice ends with its last
// answer. It adds what it measured to r.
func (f *front) slice(d time.Duration, r *FrontRound) error {
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
	sl := Hist{}
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
		r.Hist = Hist{}
	}
	r.Hist.Add(sl)
	r.SliceP99s = append(r.SliceP99s, sl.Quantile(0.99))
	return errors.Join(errs...)
}

// Run is a load's state: every front's connections.
type Run struct {
	// Turn, when set, is called before (start true) and after each turn of
	// a round with the front's index: a driver can take readings around the
	// turns, such as the CPU of a process all fronts share.
	Turn func(front int, start bool)

	spec   Spec
	fronts []*front
}

// NewRun checks spec and prepares its connections (it dials nothing yet).
func NewRun(spec Spec) (*Run, error) {
	if len(spec.Fronts) < 2 || spec.Conns < 1 || spec.Slice <= 0 || spec.Round < spec.Slice {
		return nil, fmt.Errorf("bad load spec: %d fronts, %d connections, slices of %s, rounds of %s", len(spec.Fronts), spec.Conns, spec.Slice, spec.Round)
	}
	l := &Run{spec: spec}
	for _, t := range spec.Fronts {
		if len(t.Requests) == 0 {
			return nil, fmt.Errorf("bad load spec: no requests for %s", t.Addr)
		}
		f := &front{}
		for c := range spec.Conns {
			// wrk's threads each walk the list from its start; spread the
			// connections over it instead, so a slice's first requests are
			// not all the same one.
			f.conns = append(f.conns, newConn(t, c*len(t.Requests)/spec.Conns))
		}
		l.fronts = append(l.fronts, f)
	}
	return l, nil
}

// Warm runs each front alone for the spec's warm-up, measuring nothing.
func (l *Run) Warm() error {
	for _, f := range l.fronts {
		var r FrontRound
		if err := f.slice(l.spec.Warmup, &r); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	return nil
}

// Order is the front of each slice of a round of n fronts with k slices
// each: passes over the fronts, forward then backward (ABBA... for two,
// ABCCBA... for three), so that each front follows each other front as
// often as it precedes it and none always goes first.
func Order(n, k int) []int {
	order := make([]int, 0, n*k)
	for pass := range k {
		for i := range n {
			if pass%2 == 1 {
				i = n - 1 - i
			}
			order = append(order, i)
		}
	}
	return order
}

// Round runs the fronts in turn, a slice each, in Order: each front gets
// Round/Slice slices.
func (l *Run) Round() (Result, error) {
	res := Result{Fronts: make([]FrontRound, len(l.fronts))}
	k := max(1, int(l.spec.Round/l.spec.Slice))
	for _, i := range Order(len(l.fronts), k) {
		if l.Turn != nil {
			l.Turn(i, true)
		}
		err := l.fronts[i].slice(l.spec.Slice, &res.Fronts[i])
		if l.Turn != nil {
			l.Turn(i, false)
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// Check is an error when any front of res failed an answer or served none.
func (res Result) Check() error {
	for _, f := range res.Fronts {
		if f.Errors > 0 || f.Requests == 0 {
			return fmt.Errorf("%d of %d answers failed (%s)", f.Errors, f.Requests, f.FirstErr)
		}
	}
	return nil
}

// Close closes the connections left open.
func (l *Run) Close() {
	for _, f := range l.fronts {
		for _, c := range f.conns {
			if c.conn != nil {
				_ = c.conn.Close()
			}
		}
	}
}

// Serve is the worker's side of the protocol in the package comment, on in
// and out.
func Serve(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 64<<20)
	if !sc.Scan() {
		return fmt.Errorf("no load spec: %w", sc.Err())
	}
	var spec Spec
	if err := json.Unmarshal(sc.Bytes(), &spec); err != nil {
		return fmt.Errorf("load spec: %w", err)
	}
	l, err := NewRun(spec)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.Warm(); err != nil {
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
		res, err := l.Round()
		if err != nil {
			return err
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return sc.Err()
}

// Worker is the driver's handle on a running worker.
type Worker struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr bytes.Buffer
}

// StartWorker starts cmd, a process that calls Serve on its standard input
// and output, sends it spec and waits until it has warmed up.
func StartWorker(cmd *exec.Cmd, spec Spec) (*Worker, error) {
	w := &Worker{cmd: cmd}
	w.cmd.Stderr = &w.stderr
	var err error
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

// Round runs one round and returns what the worker measured; a failed
// answer is an error.
func (w *Worker) Round() (Result, error) {
	var res Result
	if _, err := io.WriteString(w.in, "round\n"); err != nil {
		return res, w.fail(err)
	}
	if !w.out.Scan() {
		return res, w.fail(errors.New("no round result"))
	}
	if err := json.Unmarshal(w.out.Bytes(), &res); err != nil {
		return res, w.fail(err)
	}
	if err := res.Check(); err != nil {
		return res, fmt.Errorf("load worker: %w", err)
	}
	return res, nil
}

func (w *Worker) fail(err error) error {
	w.Stop()
	return fmt.Errorf("load worker: %w\n%s", err, w.stderr.Bytes())
}

// Stop closes the worker's input and waits for it to exit.
func (w *Worker) Stop() {
	_ = w.in.Close()
	_ = w.cmd.Wait()
}
