package chaos

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// The load every setup runs: a few keep-alive clients at a bounded rate.
const (
	loadClients = 8
	loadRate    = 400 // requests per second, all clients together
	loadTimeout = 2 * time.Second
)

// Windows: a fault's window lasts at least minWindow after the kill (or
// the restart), and ends once the load has been clean for quietPeriod; a
// fault that has not settled within settleTimeout fails the test.
const (
	minWindow     = time.Second
	quietPeriod   = 500 * time.Millisecond
	settleTimeout = 15 * time.Second
)

// result is what one fault cost.
type result struct {
	Setup, Fault string
	// Sent is the requests in the window (in flight at the kill or
	// started after it, until the window closed), Failed those that got a
	// transport error or a non-2xx status, InFlight the failed ones sent
	// before the kill, Stale the failed ones that went out on a kept-alive
	// connection and got no byte back (a client that replays idempotent
	// requests, as Go's net/http and browsers do, would have sent them
	// again).
	// NewConn is the failed ones on a connection dialled after the killed
	// process was gone. Exposed is every request in flight at the kill,
	// failed or not.
	Sent, Exposed, Failed, InFlight, Stale, NewConn int
	// Down is from the kill to the restart (controller, sidecar); zero
	// when nothing was restarted.
	Down time.Duration
	// LastFailure is from the kill to the end of the last failed request;
	// zero when none failed.
	LastFailure time.Duration
	// Served is from the restart (or the kill when nothing was restarted)
	// to the first 2xx of a request sent after it.
	Served time.Duration
	// Slowest is the longest a 2xx in the window took.
	Slowest time.Duration
	// Errors counts the failures by kind.
	Errors map[string]int
}

var (
	reportMu sync.Mutex
	report   []result // guarded by reportMu
)

// rig is one setup under load.
type rig struct {
	t     *testing.T
	setup string
	load  *load
}

// startRig starts the load cfg (Clients, Rate and Timeout zero: the
// defaults above), stops it at the end of the test, and checks that a
// clean second precedes the first fault.
func startRig(t *testing.T, setup string, cfg loadConfig) *rig {
	t.Helper()
	if cfg.Clients == 0 {
		cfg.Clients, cfg.Rate, cfg.Timeout = loadClients, loadRate, loadTimeout
	}
	l := startLoad(cfg)
	t.Cleanup(l.stop)
	r := &rig{t: t, setup: setup, load: l}
	start := time.Now()
	if _, err := r.settle(start, start); err != nil {
		t.Fatalf("%s before any fault: %v", setup, err)
	}
	if bad := failures(l.snapshot(start)); len(bad) > 0 {
		t.Fatalf("%s before any fault: %d failed requests, first %+v", setup, len(bad), bad[0])
	}
	return r
}

// fault runs kill (it returns once the process is gone), then restart
// when not nil (it returns once the replacement was started), and waits
// until the load has settled. It records and returns the window's tally.
func (r *rig) fault(name string, kill, restart func()) result {
	r.t.Helper()
	at := time.Now()
	kill()
	gone := time.Now()
	from := at
	res := result{Setup: r.setup, Fault: name}
	if restart != nil {
		restart()
		from = time.Now()
		res.Down = from.Sub(at)
	}
	end, err := r.settle(at, from)
	if err != nil {
		r.t.Errorf("%s, %s: %v", r.setup, name, err)
		end = time.Now()
	}
	res.Errors = map[string]int{}
	firstOK := time.Time{}
	for _, s := range r.load.snapshot(at) {
		if !s.start.Before(end) {
			continue
		}
		res.Sent++
		if s.start.Before(at) {
			res.Exposed++
		}
		if s.failed() {
			res.Failed++
			if s.stale {
				res.Stale++
			}
			if s.start.Before(at) {
				res.InFlight++
			}
			if (s.connAt.IsZero() && !s.start.Before(gone)) || !s.connAt.Before(gone) {
				res.NewConn++
			}
			res.Errors[kind(s)]++
			res.LastFailure = max(res.LastFailure, s.done.Sub(at))
			continue
		}
		res.Slowest = max(res.Slowest, s.done.Sub(s.start))
		if !s.start.Before(from) && (firstOK.IsZero() || s.done.Before(firstOK)) {
			firstOK = s.done
		}
	}
	if !firstOK.IsZero() {
		res.Served = firstOK.Sub(from)
	}
	r.t.Logf("%s, %s: %d requests (%d in flight at the kill), %d failed (%d in flight at the kill, %d stale keep-alive, %d on new connections), last failure at +%v, down %v, first 2xx %v after, slowest 2xx %v, errors %v",
		r.setup, name, res.Sent, res.Exposed, res.Failed, res.InFlight, res.Stale, res.NewConn, res.LastFailure.Round(time.Millisecond), res.Down.Round(time.Millisecond),
		res.Served.Round(time.Millisecond), res.Slowest.Round(time.Millisecond), res.Errors)
	reportMu.Lock()
	report = append(report, res)
	reportMu.Unlock()
	return res
}

// settle waits until, minWindow after from, the load has been clean for
// quietPeriod with answers from every client, and returns when that was.
func (r *rig) settle(at, from time.Time) (time.Time, error) {
	var end time.Time
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	err := harness.Poll(ctx, "the load to run clean", func(context.Context) (bool, error) {
		now := time.Now()
		if now.Sub(from) < minWindow {
			return false, nil
		}
		quietFrom := now.Add(-quietPeriod)
		clients := map[int]bool{}
		for _, s := range r.load.snapshot(at) {
			if s.failed() && !s.done.Before(quietFrom) {
				return false, fmt.Errorf("a request failed at +%v: %s", s.done.Sub(at).Round(time.Millisecond), describe(s))
			}
			if !s.failed() && !s.start.Before(quietFrom) {
				clients[s.client] = true
			}
		}
		if len(clients) < r.load.cfg.Clients {
			return false, fmt.Errorf("only %d of %d clients were answered in the last %v", len(clients), r.load.cfg.Clients, quietPeriod)
		}
		end = now
		return true, nil
	})
	return end, err
}

// failures returns the failed samples.
func failures(ss []sample) []sample {
	var out []sample
	for _, s := range ss {
		if s.failed() {
			out = append(out, s)
		}
	}
	return out
}

// kind names a failure for the tally: the status, or the error's kind.
func kind(s sample) string {
	if s.err == "" {
		return fmt.Sprintf("status %d", s.status)
	}
	return s.kind
}

func describe(s sample) string {
	if s.err != "" {
		return s.err
	}
	return fmt.Sprintf("status %d %.80q", s.status, s.body)
}

// writeReport logs the table of every fault run and writes it to
// $SWITCHYARD_CHAOS_REPORT when set.
func writeReport(t *testing.T) {
	reportMu.Lock()
	rows := append([]result(nil), report...)
	reportMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "| setup | fault | requests in window | in flight at the kill | failed | failed in flight at the kill | stale keep-alive | on new connections | last failure after kill | down | first 2xx after restart (or kill) | slowest 2xx | failures by kind |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		var kinds []string
		for k, n := range r.Errors {
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
		sort.Strings(kinds)
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s |\n", r.Setup, r.Fault, r.Sent, r.Exposed, r.Failed, r.InFlight, r.Stale, r.NewConn,
			ms(r.LastFailure), ms(r.Down), ms(r.Served), ms(r.Slowest), strings.Join(kinds, "; "))
	}
	t.Logf("failed requests per fault (%d clients, %d requests/s, backends answer after %v):\n%s", loadClients, loadRate, backendDelay, b.String())
	if path := os.Getenv("SWITCHYARD_CHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil { //nolint:gosec // a report for people to read
			t.Errorf("write the report: %v", err)
		}
	}
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}
