package balancer

import (
	"errors"
	"math"
	"slices"
)

// Request is what a pick may read of one request: nginx variables by name,
// exactly as ngx.var would return them: "host", "server_name", "https" ("on"
// or ""), "location_path", "http_user_agent", "http_cookie", "http_<header>"
// (lower case, '-' written as '_'), "cookie_<name>", "remote_addr",
// "request_uri", "uri", regex captures "1".."9", and any other variable named
// in upstream-hash-by. ok is false when the variable is unset.
//
// Implementations must not allocate; the returned bytes are only read during
// the call.
type Request interface {
	Var(name string) (value []byte, ok bool)
}

// VarsFunc adapts a function to Request.
type VarsFunc func(name string) ([]byte, bool)

// Var calls f.
func (f VarsFunc) Var(name string) ([]byte, bool) { return f(name) }

var _ Request = VarsFunc(nil)

// Failure is ngx.balancer.get_last_failure() for the previous attempt.
type Failure uint8

// The failures nginx reports for a previous attempt.
const (
	// FailureNone: this is the first attempt.
	FailureNone Failure = iota
	// FailureFailed: the previous attempt failed (connect error, timeout).
	FailureFailed
	// FailureNext: the previous attempt's response matched proxy_next_upstream.
	FailureNext
)

// maxTracked is how many attempts of one request an Attempt remembers. nginx's
// proxy_next_upstream_tries defaults to 3; later attempts beyond this many are
// still served, only without exclusion of the oldest peers.
const maxTracked = 16

// Attempt is the per-request state carried between the attempts of one request
// (ngx.ctx in Lua): the backend and canary choice (fixed by the first pick), the
// peers tried so far (ewma's exclusion list, sticky's failed set) and the last
// failure. The zero value is ready. The caller sets LastFailure before each
// retry and calls Reset to reuse it for another request. An Attempt must not be
// used by two requests at once. Pick does not let it escape, so an Attempt can
// be a local variable of the request handler; only a hash key built from
// several variables allocates its buffer on an Attempt's first use (reuse the
// Attempt with Reset to avoid that).
type Attempt struct {
	// LastFailure is how the previous attempt ended; FailureNone on the first.
	LastFailure Failure

	chosen *backend // backend actually used; nil before the first pick
	tried  [maxTracked]int32
	ntried int
	// keyBuf is scratch space for building hash keys without allocating.
	keyBuf []byte
	// rrBase is the shared round-robin cursor value of this request's first
	// pick; retries continue from it instead of advancing the shared cursor.
	rrBase uint64
	// pick is the result of the last Pick that the snapshot does not hold.
	pick Pick
	// scores, while scoreOnce (ScoreOnce), holds the ewma and peak_ewma
	// costs read so far, for every pick until ScoreOnce(false); kept
	// allocated in between.
	scores    *scoreBatch
	scoreOnce bool
}

// scoreBatch is the peers' costs of backend b at the instant now, each read
// once (NaN until then).
type scoreBatch struct {
	b     *backend
	now   float64
	costs []float64
}

// reset makes sb hold no cost of b's peers yet, at instant now.
func (sb *scoreBatch) reset(b *backend, now float64) {
	sb.b, sb.now = b, now
	sb.costs = slices.Grow(sb.costs[:0], len(b.peers))[:len(b.peers)]
	for i := range sb.costs {
		sb.costs[i] = math.NaN()
	}
}

// ScoreOnce(true) makes every ewma or peak_ewma pick through a, until
// ScoreOnce(false), read each peer's cost once, at the instant of the first
// such pick, and use it for the picks that follow: for a batch of picks made
// ahead at one moment (the pick socket's premade frames, about a thousand
// of them in a millisecond), whose costs then differ from costs read per
// pick only by a millisecond of decay (10 s time constant) and, for
// peak_ewma, by no in-flight count (picks made ahead take none). A
// configuration change in between reads the new backend's costs afresh.
// Reset keeps the setting and the costs.
func (a *Attempt) ScoreOnce(on bool) {
	a.scoreOnce = on
	if !on {
		return
	}
	if a.scores == nil {
		a.scores = &scoreBatch{}
	}
	a.scores.b = nil
}

// Reset prepares a for a new request, keeping its scratch buffer.
func (a *Attempt) Reset() {
	a.LastFailure = FailureNone
	a.chosen = nil
	a.ntried = 0 // tried[] entries past ntried are never read
}

// Tries returns how many picks this Attempt has seen.
func (a *Attempt) Tries() int { return a.ntried }

func (a *Attempt) record(peer int) {
	if a.ntried < maxTracked {
		a.tried[a.ntried] = int32(peer)
	} else {
		a.tried[a.ntried%maxTracked] = int32(peer)
	}
	a.ntried++
}

func (a *Attempt) triedPeer(peer int) bool {
	n := min(a.ntried, maxTracked)
	for _, t := range a.tried[:n] {
		if int(t) == peer {
			return true
		}
	}
	return false
}

// Errors Pick returns.
var (
	// ErrUnknownBackend means no balancer exists for the name: never synced,
	// or synced with no endpoints. ingress-nginx answers 503.
	ErrUnknownBackend = errors.New("balancer: unknown backend or no endpoints")
	// ErrNoPeer means the balancer could not choose a peer (every candidate
	// already failed). nginx would use its placeholder peer and answer 502.
	ErrNoPeer = errors.New("balancer: no peer available")
)
