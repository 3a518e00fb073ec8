package proxy

import (
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// pacer holds a response body to limit-rate after limit-rate-after, as
// nginx's limit_rate does: after each write of n bytes past the first
// `after`, the next waits n/rate seconds, and no write takes more than a
// second's worth. It runs on the goroutine that writes the body, between
// reads: no goroutine or allocation of its own. The zero value paces
// nothing.
type pacer struct {
	rate  int64         // bytes a second; 0: no limit
	after int64         // bytes still to go before the limit applies
	due   time.Duration // monoNow before which the next write waits
}

// pacedRate is the limit-rate a location's upstream answers are paced
// at: none unless proxy-buffering is on, as nginx paces no upstream answer
// it does not buffer (ingress-nginx's default proxy-buffering "off", and
// gRPC): the cross-plane row "limit-rate and limit-rate-after" checks it
// on both planes; docs/compatibility.md.
func pacedRate(loc *model.Location) *model.ResponseRate {
	if loc.ResponseRate == nil || !loc.Proxy.Buffering || h2Upstream(loc.BackendProtocol) {
		return nil
	}
	return loc.ResponseRate
}

// paceSlack is how far behind its schedule a paced body may catch up.
const paceSlack = 20 * time.Millisecond

// newPacer is the pacer of a location's limit-rate (KiB, as ingress-nginx
// writes `limit_rate <n>k`); nil rr paces nothing.
func newPacer(rr *model.ResponseRate) pacer {
	if rr == nil || rr.KBPerSecond <= 0 {
		return pacer{}
	}
	return pacer{rate: int64(rr.KBPerSecond) << 10, after: int64(rr.AfterKB) << 10}
}

// next waits for the next write's turn and returns how many of n bytes it
// may take.
func (p *pacer) next(n int) int {
	if p.rate == 0 || n == 0 {
		return n
	}
	if p.after > 0 {
		return int(min(int64(n), p.after)) // not limited yet
	}
	if wait := p.due - monoNow(); wait > 0 {
		time.Sleep(wait)
	}
	return int(min(int64(n), p.rate))
}

// wrote accounts for n bytes written.
func (p *pacer) wrote(n int) {
	if p.rate == 0 || n <= 0 {
		return
	}
	k := int64(n)
	if p.after > 0 {
		u := min(k, p.after)
		p.after -= u
		k -= u
	}
	if k > 0 {
		// The turn after this one is k/rate later; a write that woke a
		// little late (the timer's slack, the scheduler) does not delay
		// every later one, but a pause longer than paceSlack (a slow
		// upstream) earns no burst.
		p.due = max(p.due, monoNow()-paceSlack) + time.Duration(k*int64(time.Second)/p.rate)
	}
}

// bodyEnd is what a response body streamed to an HTTP/1.1 client carries
// for its request until the last byte is written: the pacing of
// limit-rate and the count of limit-connections, released when fasthttp
// closes the body (after the last byte, or on any error).
type bodyEnd struct {
	pace pacer
	hold connHold
}

// bodyEnder is a response body stream that can carry a bodyEnd.
type bodyEnder interface {
	end() *bodyEnd
}

// handOver gives the request's pacing and count to the response body
// fasthttp is about to write, or, when the response has no body stream of
// ours, releases the count now (the answer is written from memory).
func handOver(body any, pace pacer, hold *connHold) {
	if b, ok := body.(bodyEnder); ok {
		e := b.end()
		e.pace, e.hold = pace, *hold
		*hold = connHold{}
		return
	}
	hold.release()
}
