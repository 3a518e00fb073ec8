package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// upstreamHeads builds the upstream request for a raw client request both
// ways: fasthttp's view edited by forwardHeaders and written by
// Request.Write (the slow path), and appendUpstreamHead (ok false when it
// declines). Both are parsed back with net/http.
func upstreamHeads(t *testing.T, raw string, f *clientFacts, loc *model.Location) (slow, fast *http.Request, ok bool) {
	t.Helper()
	if loc.LocationSettings == nil {
		c := *loc
		c.LocationSettings = loc.Settings() // as newTable gives routes
		loc = &c
	}
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		return nil, nil, false // fasthttp refuses it before the handler
	}
	body := append([]byte(nil), req.Body()...)
	var id requestID
	head, ok := appendUpstreamHead(nil, &req.Header, req.URI().RequestURI(), f, loc, len(body), &id, nil, new([]byte))
	if ok {
		var err error
		if fast, err = http.ReadRequest(bufio.NewReader(bytes.NewReader(append(head, body...)))); err != nil {
			t.Fatalf("appendUpstreamHead wrote a head net/http refuses (%v):\n%s", err, head)
		}
	}
	forwardHeaders(&req.Header, f, loc, nil, &id)
	if loc.UpstreamVhost != "" {
		req.Header.SetHost(loc.UpstreamVhost)
	}
	req.UseHostHeader = true
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	if err := req.Write(w); err != nil {
		return nil, nil, false
	}
	_ = w.Flush()
	slow, err := http.ReadRequest(bufio.NewReader(&b))
	if err != nil {
		return nil, nil, false
	}
	return slow, fast, ok
}

// sameUpstreamRequest compares what the upstream sees both ways: method,
// target, Host and every field, but X-Request-Id's value when the proxy
// made it, the Content-Type fasthttp makes up for a body sent without one,
// and the Connection: close it sends for an HTTP/1.0 client (nginx sends
// neither).
func sameUpstreamRequest(t *testing.T, raw string, slow, fast *http.Request) {
	t.Helper()
	if slow.Method != fast.Method || slow.RequestURI != fast.RequestURI || slow.Host != fast.Host || slow.ContentLength != fast.ContentLength {
		t.Fatalf("%q:\nslow %s %s host %q cl %d\nfast %s %s host %q cl %d", raw, slow.Method, slow.RequestURI, slow.Host, slow.ContentLength, fast.Method, fast.RequestURI, fast.Host, fast.ContentLength)
	}
	if len(slow.Header.Get("X-Request-Id")) != len(fast.Header.Get("X-Request-Id")) {
		t.Fatalf("%q: X-Request-Id %q and %q", raw, slow.Header.Get("X-Request-Id"), fast.Header.Get("X-Request-Id"))
	}
	slow.Header.Del("X-Request-Id")
	fast.Header.Del("X-Request-Id")
	if _, sent := fast.Header["Content-Type"]; !sent {
		slow.Header.Del("Content-Type")
	}
	if _, sent := fast.Header["Connection"]; !sent && slow.Header.Get("Connection") == "close" {
		slow.Header.Del("Connection")
	}
	for _, h := range []http.Header{slow.Header, fast.Header} {
		for k, v := range h {
			h[k] = slices.Clone(v)
			slices.Sort(h[k])
		}
	}
	keys := func(h http.Header) []string {
		return slices.Sorted(func(yield func(string) bool) {
			for k := range h {
				if !yield(k) {
					return
				}
			}
		})
	}
	if !slices.Equal(keys(slow.Header), keys(fast.Header)) {
		t.Fatalf("%q: fields differ:\nslow %v\nfast %v", raw, slow.Header, fast.Header)
	}
	for k := range slow.Header {
		if !slices.Equal(slow.Header[k], fast.Header[k]) {
			t.Fatalf("%q: %s: slow %q, fast %q", raw, k, slow.Header[k], fast.Header[k])
		}
	}
}

var headFacts = clientFacts{remote: netip.MustParseAddr("203.0.113.7"), host: []byte("shop.example.com:8443"), localPort: 8443, tls: true}

// TestUpstreamHead: the head written from the client's raw head carries
// what the edited fasthttp view did, for the fields ingress-nginx's
// location sets, replaces and drops.
func TestUpstreamHead(t *testing.T) {
	vhost := model.Location{LocationSettings: &model.LocationSettings{UpstreamVhost: "internal.svc", XForwardedPrefix: "/shop"}}
	for _, tc := range []struct {
		name string
		raw  string
		loc  model.Location
	}{
		{"plain GET", "GET /a?b=1 HTTP/1.1\r\nHost: shop.example.com\r\nUser-Agent: x/1\r\nAccept: */*\r\n\r\n", model.Location{}},
		{"forwarded fields replaced", "GET / HTTP/1.1\r\nHost: h\r\nx-forwarded-for: 10.0.0.1\r\nX-Real-IP: 6.6.6.6\r\nX-Forwarded-Proto: gopher\r\nX-Scheme: x\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Port: 1\r\nX-Request-ID: rid-1\r\n\r\n", model.Location{}},
		{"hop fields dropped, Te trailers kept", "GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\nTe: trailers, deflate\r\nProxy-Authorization: s\r\nUpgrade-Insecure-Requests: 1\r\n\r\n", model.Location{}},
		{"POST with body", "POST /f HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}", model.Location{}},
		{"POST without content type", "POST /f HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc", model.Location{}},
		{"empty POST", "POST /f HTTP/1.1\r\nHost: h\r\n\r\n", model.Location{}},
		{"cookies and repeated fields", "GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1\r\nCookie: b=2\r\nAccept: a\r\nAccept: b\r\n\r\n", model.Location{}},
		{"upstream-vhost and prefix", "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-Prefix: /old\r\n\r\n", vhost},
		{"empty request id", "GET / HTTP/1.1\r\nHost: h\r\nX-Request-ID:\r\n\r\n", model.Location{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slow, fast, ok := upstreamHeads(t, tc.raw, &headFacts, &tc.loc)
			if !ok {
				t.Fatalf("appendUpstreamHead declined %q", tc.raw)
			}
			sameUpstreamRequest(t, tc.raw, slow, fast)
		})
	}
	// Declined: a folded line, a Connection naming a field.
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n 2\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nConnection: X-Secret\r\nX-Secret: s\r\n\r\n",
	} {
		var req fasthttp.Request
		if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			continue
		}
		var id requestID
		if _, ok := appendUpstreamHead(nil, &req.Header, []byte("/"), &headFacts, &model.Location{LocationSettings: &model.LocationSettings{}}, 0, &id, nil, new([]byte)); ok {
			t.Errorf("appendUpstreamHead took %q; want it declined", raw)
		}
	}
}

// FuzzUpstreamHead: for any request fasthttp accepts, the head written
// from the raw bytes is one net/http parses and carries the same request
// as the edited fasthttp view (duplicated forwarded fields aside: the
// view replaces only the first).
func FuzzUpstreamHead(f *testing.F) {
	f.Add("GET /a HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n")
	f.Add("POST /p?q HTTP/1.1\r\nHost: h:80\r\nContent-Length: 2\r\nX-Forwarded-For: 1.2.3.4\r\n\r\nhi")
	f.Add("GET / HTTP/1.0\r\nHost: h\r\nConnection: close\r\nTe: trailers\r\n\r\n")
	f.Add("HEAD / HTTP/1.1\r\nhost: H\r\nx-real-ip: 1\r\nX-REQUEST-ID: a\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		for _, name := range []string{"x-forwarded-for", "x-real-ip", "x-forwarded-proto", "x-forwarded-scheme", "x-scheme", "x-forwarded-host", "x-forwarded-port", "x-request-id", "te", "x-forwarded-prefix"} {
			if strings.Count(strings.ToLower(raw), "\n"+name+":") > 1 {
				return
			}
		}
		slow, fast, ok := upstreamHeads(t, raw, &headFacts, &model.Location{})
		if !ok {
			return
		}
		sameUpstreamRequest(t, raw, slow, fast)
	})
}

// TestKindOf: kindOf's switch knows every name hopHeaders and
// forwardedFields know, in any case, and passes other fields.
func TestKindOf(t *testing.T) {
	want := map[string]fieldKind{"Connection": fieldConnection, "Te": fieldTe, "X-Forwarded-For": fieldForwarded,
		"X-Request-Id": fieldRequestID, "Host": fieldDrop, "Content-Length": fieldDrop, "User-Agent": fieldPass, "X-Forwarded": fieldPass}
	for _, h := range hopHeaders {
		if _, ok := want[h]; !ok {
			want[h] = fieldDrop
		}
	}
	forwardedFields(&headFacts, &model.Location{LocationSettings: &model.LocationSettings{XForwardedPrefix: "/p"}}, nil, nil, func(name, _ []byte) {
		if _, ok := want[string(name)]; !ok {
			want[string(name)] = fieldReplaced
		}
	})
	for name, k := range want {
		for _, n := range []string{name, strings.ToLower(name), strings.ToUpper(name)} {
			if got := kindOf([]byte(n)); got != k {
				t.Errorf("kindOf(%q) = %d; want %d", n, got, k)
			}
		}
	}
}
