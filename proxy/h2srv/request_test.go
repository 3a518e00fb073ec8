package h2srv

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2" //nolint:staticcheck // SA1019: the reference framer
)

const defaultTestTimeout = 10 * time.Second

// parseOriginPath gives what url.ParseRequestURI gives, whenever it
// accepts a path: every byte in a path and in a query, and cases around
// the query's '?'.
func TestParseOriginPath(t *testing.T) {
	paths := []string{"/", "/a/b", "//x", "///x", "/a?", "/a?b?", "/a??", "/a?b=c&d=e", "/%41", "/a b", "/a?b c",
		"/a#b", "/a?#", "*", "a", "", "/a;b=c", "/~user/x.y-z_", "/a:b@c", "/a?\x7f", "/é"}
	for b := range 256 {
		paths = append(paths, "/a"+string(rune(b))+"b", "/a?"+string([]byte{byte(b)}), "/a"+string([]byte{byte(b)}))
	}
	for _, path := range paths {
		if err := sameAsParseRequestURI(path); err != nil {
			t.Error(err)
		}
	}
	var u url.URL
	if !parseOriginPath("/items/42?page=2", &u) || u.Path != "/items/42" || u.RawQuery != "page=2" {
		t.Errorf("parseOriginPath(/items/42?page=2) = %+v; want the fast path", u)
	}
}

// FuzzParseOriginPath: whatever parseOriginPath accepts, url.ParseRequestURI
// parses to the same URL.
func FuzzParseOriginPath(f *testing.F) {
	for _, s := range []string{"/", "/a/b?c=d", "/%20", "/a?", "//x", "/a;b,c$d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		if err := sameAsParseRequestURI(path); err != nil {
			t.Fatal(err)
		}
	})
}

// sameAsParseRequestURI is an error when parseOriginPath takes path and
// url.ParseRequestURI refuses it or parses it to another URL.
func sameAsParseRequestURI(path string) error {
	var got url.URL
	if !parseOriginPath(path, &got) {
		return nil
	}
	want, err := url.ParseRequestURI(path)
	if err != nil {
		return fmt.Errorf("parseOriginPath(%q) accepted; url.ParseRequestURI: %w", path, err)
	}
	if diff := cmp.Diff(want, &got); diff != "" {
		return fmt.Errorf("parseOriginPath(%q) mismatch (-ParseRequestURI +got):\n%s", path, diff)
	}
	return nil
}

// The request header's values share one array: repeated fields, more
// fields than the stream holds, and a handler's Add leave each key its
// own values.
func TestRequestHeaderValues(t *testing.T) {
	got := make(chan http.Header, 1)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Add("A", "added")
		r.Header["B"] = append(r.Header["B"], "appended")
		got <- r.Header.Clone()
	})}
	addr, _ := serveH2(t, s)
	for _, tc := range []struct {
		name   string
		fields []string
		want   http.Header
	}{{
		name:   "few",
		fields: []string{"a", "1", "b", "2", "a", "3", "c", "4"},
		want:   http.Header{"A": {"1", "3", "added"}, "B": {"2", "appended"}, "C": {"4"}},
	}, {
		name: "past the stream's array",
		fields: []string{"a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f", "6", "g", "7", "h", "8", "i", "9",
			"j", "10", "b", "11"},
		want: http.Header{"A": {"1", "added"}, "B": {"2", "11", "appended"}, "C": {"3"}, "D": {"4"}, "E": {"5"},
			"F": {"6"}, "G": {"7"}, "H": {"8"}, "I": {"9"}, "J": {"10"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newRawClient(t, addr)
			rc.headers(1, true, append(append([]string(nil), get...), tc.fields...)...)
			select {
			case h := <-got:
				if diff := cmp.Diff(tc.want, h); diff != "" {
					t.Errorf("header mismatch (-want +got):\n%s", diff)
				}
			case <-time.After(defaultTestTimeout):
				t.Fatal("handler not called")
			}
		})
	}
}

// A request's context carries the connection's values, and it and the
// contexts derived from it end when the client resets the stream.
func TestRequestContextEndsWithStream(t *testing.T) {
	type result struct {
		local           bool
		err, childErr   error
		cause           error
		afterFuncCalled bool
	}
	started := make(chan struct{})
	results := make(chan result, 1)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		called := make(chan struct{})
		context.AfterFunc(ctx, func() { close(called) })
		close(started)
		var res result
		res.local = ctx.Value(http.LocalAddrContextKey) != nil
		select {
		case <-child.Done():
		case <-time.After(defaultTestTimeout):
		}
		select {
		case <-called:
			res.afterFuncCalled = true
		case <-time.After(defaultTestTimeout):
		}
		res.err, res.childErr, res.cause = ctx.Err(), child.Err(), context.Cause(child)
		results <- res
	})}
	addr, _ := serveH2(t, s)
	rc := newRawClient(t, addr)
	rc.headers(1, true, get...)
	select {
	case <-started:
	case <-time.After(defaultTestTimeout):
		t.Fatal("handler not called")
	}
	if err := rc.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	res := <-results
	if !res.local || !errors.Is(res.err, context.Canceled) || !errors.Is(res.childErr, context.Canceled) ||
		!errors.Is(res.cause, context.Canceled) || !res.afterFuncCalled {
		t.Errorf("got %+v; want the local address, Canceled everywhere and the AfterFunc called", res)
	}
}

// Contexts derived from a stream's are cancelled through its AfterFunc
// (no goroutine of the context package watches it), unregister when
// cancelled first, and one derived after the end is done at once.
func TestStreamContextAfterFunc(t *testing.T) {
	x := &streamContext{conn: context.Background()}
	registered := func() int {
		x.mu.Lock()
		defer x.mu.Unlock()
		return len(x.afters)
	}
	early, cancelEarly := context.WithCancel(x)
	child, cancel := context.WithCancel(x)
	defer cancel()
	if n := registered(); n != 2 {
		t.Fatalf("after two WithCancel: %d AfterFuncs registered; want 2", n)
	}
	cancelEarly()
	if n := registered(); n != 1 || early.Err() == nil {
		t.Fatalf("after a child's cancel: %d AfterFuncs registered, child's Err %v; want 1 and Canceled", n, early.Err())
	}
	done := x.Done()
	x.cancel()
	x.cancel() // twice: nothing more
	for name, ch := range map[string]<-chan struct{}{"Done": done, "child": child.Done(), "Done after the end": x.Done()} {
		select {
		case <-ch:
		default:
			t.Errorf("%s not closed after cancel", name)
		}
	}
	ran := make(chan struct{})
	if stop := x.AfterFunc(func() { close(ran) }); stop() {
		t.Error("AfterFunc after the end: stop reports it stopped the function")
	}
	select {
	case <-ran:
	case <-time.After(defaultTestTimeout):
		t.Error("AfterFunc after the end: the function did not run")
	}
	late, cancelLate := context.WithCancel(x)
	defer cancelLate()
	select {
	case <-late.Done():
	case <-time.After(defaultTestTimeout):
		t.Error("a context derived after the end is not done")
	}
	if !errors.Is(x.Err(), context.Canceled) || !errors.Is(child.Err(), context.Canceled) || !strings.Contains(x.String(), "streamContext") {
		t.Errorf("Err %v, child's %v; want Canceled", x.Err(), child.Err())
	}
}
