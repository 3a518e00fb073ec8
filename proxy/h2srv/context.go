package h2srv

import (
	"context"
	"sync"
	"time"
)

// streamContext is a request's context (Request.Context): the
// connection's values, and done once the stream closes (closeStream),
// which every stream does, at the latest when the connection ends
// (close). It lives in its stream, where context.WithCancel on the
// connection's context would cost two allocations a request (its
// cancelCtx and the CancelFunc) and a turn of the connection context's
// lock to register the child and another to remove it.
//
// Contexts derived from it are cancelled through its AfterFunc method,
// the one the context package looks for on a parent it does not know,
// rather than by a goroutine watching Done.
type streamContext struct {
	// conn is the connection's context, for Value and Deadline; its end
	// ends the connection's streams through close, not directly.
	conn context.Context

	mu     sync.Mutex
	done   chan struct{} // made by the first Done; closed by cancel
	err    error         // context.Canceled once cancelled
	afters map[*afterFunc]struct{}
}

// afterFunc is one function AfterFunc registered, by its address.
type afterFunc struct{ f func() }

var _ context.Context = (*streamContext)(nil)

// closedDone is Done's channel once the context ended before anyone
// asked for it.
var closedDone = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

func (x *streamContext) Deadline() (time.Time, bool) { return x.conn.Deadline() }

func (x *streamContext) Done() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done == nil {
		if x.err != nil {
			return closedDone
		}
		x.done = make(chan struct{})
	}
	return x.done
}

func (x *streamContext) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

func (x *streamContext) Value(key any) any { return x.conn.Value(key) }

func (x *streamContext) String() string { return "h2srv.streamContext" }

// AfterFunc arranges for f to run once the context is done, and returns
// a function that unregisters f, reporting whether it did so before f
// ran. This is the method context.WithCancel, context.AfterFunc (and all
// derived contexts) use to hear of the end of a parent of a type of
// their own. f runs on cancel's goroutine, as a cancelCtx cancels its
// children; on a context already done, on a goroutine of its own (the
// caller may hold a lock f takes).
func (x *streamContext) AfterFunc(f func()) (stop func() bool) {
	x.mu.Lock()
	if x.err != nil {
		x.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a := &afterFunc{f: f}
	if x.afters == nil {
		x.afters = make(map[*afterFunc]struct{})
	}
	x.afters[a] = struct{}{}
	x.mu.Unlock()
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		_, registered := x.afters[a]
		delete(x.afters, a)
		return registered
	}
}

// cancel ends the context with context.Canceled and runs the functions
// registered with AfterFunc, once.
func (x *streamContext) cancel() {
	x.mu.Lock()
	if x.err != nil {
		x.mu.Unlock()
		return
	}
	x.err = context.Canceled
	if x.done != nil {
		close(x.done)
	}
	afters := x.afters
	x.afters = nil
	x.mu.Unlock()
	for a := range afters {
		a.f()
	}
}
