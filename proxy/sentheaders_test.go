package proxy

import (
	"bufio"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// sentHeadersByParse is sentHeaders through fasthttp's own parser: the
// headers it keeps, by its canonical names.
func sentHeadersByParse(h *fasthttp.RequestHeader) uint16 {
	var mask uint16
	names := append(hopHeaders[:], "X-Forwarded-For", "X-Request-Id")
	for key := range h.All() {
		for i, n := range names {
			if strings.EqualFold(string(key), n) {
				mask |= 1 << i
			}
		}
	}
	return mask
}

func TestSentHeaders(t *testing.T) {
	for _, tt := range []struct {
		name, head string
		want       uint16
	}{
		{"none", "GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n", 0},
		{"connection", "GET / HTTP/1.1\r\nHost: a\r\nconnection: keep-alive\r\n\r\n", 1 << hopConnection},
		{"te and trailer", "GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\nTrailer: X\r\n\r\n", 1<<hopTe | 1<<6},
		{"proxy auth, keep-alive, upgrade", "GET / HTTP/1.1\r\nHost: a\r\nProxy-Authorization: x\r\nKEEP-ALIVE: 1\r\nUpgrade: ws\r\n\r\n", 1<<4 | 1<<2 | 1<<8},
		{"forwarded and request id", "GET / HTTP/1.1\r\nHost: a\r\nx-forwarded-for: 1.2.3.4\r\nX-REQUEST-ID: abc\r\n\r\n", 1<<sentXForwardedFor | 1<<sentXRequestID},
		{"bare newlines", "GET / HTTP/1.1\nHost: a\nTransfer-Encoding: chunked\n\n", 1 << 7},
		{"not a prefix match", "GET / HTTP/1.1\r\nHost: a\r\nConnectionX: 1\r\nX-Te: 1\r\n\r\n", 0},
	} {
		if got := sentHeaders([]byte(tt.head)); got != tt.want {
			t.Errorf("%s: sentHeaders = %b; want %b", tt.name, got, tt.want)
		}
	}
}

func TestSentHeadersAllocs(t *testing.T) {
	raw := []byte("Host: a\r\nConnection: keep-alive\r\nX-Forwarded-For: 1.2.3.4\r\nUser-Agent: x\r\n\r\n")
	if n := testing.AllocsPerRun(100, func() { _ = sentHeaders(raw) }); n != 0 {
		t.Errorf("sentHeaders: %v allocs; want 0", n)
	}
}

// FuzzSentHeaders: on any head fasthttp accepts, every header it keeps
// that forwardHeaders looks at is in sentHeaders' mask (a miss would let
// a hop-by-hop header through), read from RawHeaders as forwardHeaders
// reads it.
func FuzzSentHeaders(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nTe: trailers\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nProxy-Connection: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nx-request-id: 1\r\nX-Forwarded-For : 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade:\r\nKeep-Alive:\t5\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, head string) {
		var h fasthttp.RequestHeader
		if err := h.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
			return
		}
		got := sentHeaders(h.RawHeaders())
		want := sentHeadersByParse(&h)
		if h.ConnectionClose() {
			// fasthttp answers "Connection: close" from a flag also set by
			// an HTTP/1.0 request line, which sends no header.
			want &^= 1 << hopConnection
		}
		if missed := want &^ got; missed != 0 {
			t.Fatalf("sentHeaders(%q) = %b misses %b", h.RawHeaders(), got, missed)
		}
	})
}

// forwardHeaders with the scan removes the same hop-by-hop headers as
// looking each one up (netHeader has no raw head, so it does the latter).
func TestForwardHeadersScanMatchesLookups(t *testing.T) {
	head := "GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Hop, keep-alive\r\nX-Hop: 1\r\nProxy-Authorization: s\r\nTe: trailers, deflate\r\nKeep-Alive: 5\r\nX-Forwarded-For: 203.0.113.9\r\nX-Request-ID: rid\r\n\r\n"
	var fh fasthttp.RequestHeader
	if err := fh.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
		t.Fatal(err)
	}
	nh := http.Header{}
	for k, v := range fh.All() {
		nh.Add(string(k), string(v))
	}
	f := &clientFacts{host: []byte("a")}
	loc := &model.Location{LocationSettings: &model.LocationSettings{}}
	var id requestID
	forwardHeaders(&fh, f, loc, nil, &id)
	forwardHeaders(netHeader(nh), f, loc, nil, &id)
	for _, name := range []string{"Connection", "X-Hop", "Proxy-Authorization", "Keep-Alive", "Te", "X-Forwarded-For", "X-Request-Id"} {
		if got, want := string(fh.Peek(name)), nh.Get(name); got != want {
			t.Errorf("%s: fasthttp view %q, net/http view %q", name, got, want)
		}
	}
	if got := string(fh.Peek("Te")); got != "trailers" {
		t.Errorf("Te = %q; want trailers kept", got)
	}
	if got := string(fh.Peek("X-Request-ID")); got != "rid" {
		t.Errorf("X-Request-ID = %q; want the client's kept", got)
	}
}

// A request without X-Request-ID gets 32 hex digits, new each time.
func TestForwardHeadersRequestID(t *testing.T) {
	ids := map[string]bool{}
	for range 100 {
		var h fasthttp.RequestHeader
		if err := h.Read(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))); err != nil {
			t.Fatal(err)
		}
		forwardHeaders(&h, &clientFacts{host: []byte("a")}, &model.Location{LocationSettings: &model.LocationSettings{}}, nil, new(requestID))
		id := string(h.Peek("X-Request-ID"))
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("X-Request-ID %q; want 32 lower-case hex digits", id)
		}
		ids[id] = true
	}
	if len(ids) != 100 {
		t.Errorf("%d distinct IDs in 100 requests", len(ids))
	}
}

// The names set through SetCanonical are fasthttp's canonical forms, so a
// field the client sent in any case is replaced, not duplicated.
func TestForwardHeadersReplaceClientFields(t *testing.T) {
	for _, k := range [][]byte{hdrXForwardedFor, hdrXRealIP, hdrXForwardedProto, hdrXForwardedScheme, hdrXScheme, hdrXForwardedHost, hdrXForwardedPort, hdrXRequestID} {
		var h fasthttp.RequestHeader
		h.Set(strings.ToLower(string(k)), "v")
		for key := range h.All() {
			if string(key) != string(k) {
				t.Errorf("fasthttp stores %q as %q; the hdr name must be its canonical form", k, key)
			}
		}
	}
	head := "GET / HTTP/1.1\r\nHost: a\r\nx-real-ip: 192.0.2.1\r\nX-FORWARDED-PROTO: spoof\r\nx-scheme: spoof\r\nX-Forwarded-Host: evil\r\nx-forwarded-port: 1\r\n\r\n"
	var h fasthttp.RequestHeader
	if err := h.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
		t.Fatal(err)
	}
	forwardHeaders(&h, &clientFacts{host: []byte("a"), remote: netip.MustParseAddr("127.0.0.9"), localPort: 80}, &model.Location{LocationSettings: &model.LocationSettings{}}, nil, new(requestID))
	for name, want := range map[string]string{"X-Real-IP": "127.0.0.9", "X-Forwarded-Proto": "http", "X-Scheme": "http", "X-Forwarded-Host": "a", "X-Forwarded-Port": "80", "X-Forwarded-For": "127.0.0.9"} {
		var n int
		var got string
		for k, v := range h.All() {
			if strings.EqualFold(string(k), name) {
				n++
				got = string(v)
			}
		}
		if n != 1 || got != want {
			t.Errorf("%s: %d fields, last %q; want one, %q", name, n, got, want)
		}
	}
}
