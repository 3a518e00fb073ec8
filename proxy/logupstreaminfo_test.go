package proxy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// upstreamInfoCase is one request as the access log sees it.
type upstreamInfoCase struct {
	remote                         string // "" for none
	auth, method, uri, proto       string
	referer, userAgent, id         string
	backend, canary, peer          string // backend "" for no location
	status, bodySent, reqLength    int
	upstreamLength, upstreamStatus int
	took, upstream                 time.Duration
	noRawHead                      bool
}

// lines returns c's line from appendUpstreamInfo and from the segments of
// the default format.
func (c upstreamInfoCase) lines(t testing.TB) (fast, generic []byte) {
	var ctx fasthttp.RequestCtx
	head := "GET / HTTP/1.1\r\nHost: a\r\n"
	if c.auth != "" {
		head += "Authorization: " + c.auth + "\r\n"
	}
	if !c.noRawHead {
		if err := ctx.Request.Header.Read(bufio.NewReader(strings.NewReader(head + "\r\n"))); err != nil {
			t.Skip("fasthttp refuses the head") // the proxy never logs it
		}
	} else if c.auth != "" {
		ctx.Request.Header.Set("Authorization", c.auth)
	}
	x := exchange{method: []byte(c.method), requestURI: []byte(c.uri), proto: []byte(c.proto),
		referer: []byte(c.referer), userAgent: []byte(c.userAgent), requestID: []byte(c.id),
		status: c.status, bodySent: c.bodySent, reqLength: c.reqLength}
	if c.remote != "" {
		x.remote = netip.MustParseAddr(c.remote)
	}
	o := outcome{canary: c.canary, peer: c.peer, upstreamLength: c.upstreamLength, upstreamStatus: c.upstreamStatus, upstream: c.upstream}
	if c.backend != "" {
		o.loc = &model.Location{Backend: c.backend}
	}
	r := logReq{h1: &ctx, end: time.Date(2026, 11, 26, 17, 4, 5, 0, time.UTC)}
	if !defaultLogFormat.upstreamInfo {
		t.Fatal("the default format is not written by appendUpstreamInfo")
	}
	return appendUpstreamInfo(nil, &x, &o, &r, c.took), defaultLogFormat.appendSegments(nil, &x, &o, &r, c.took)
}

// The default format's own writer and the segments' give the same bytes:
// values absent or empty, escaped bytes, a Basic user, IPv6, no upstream
// answer, a canary.
func TestUpstreamInfoLine(t *testing.T) {
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("al\"ice:pw"))
	for name, c := range map[string]upstreamInfoCase{
		"proxied": {remote: "10.0.0.7", method: "GET", uri: "/item?q=1", proto: "HTTP/1.1", userAgent: "wrk", id: "0123456789abcdef0123456789abcdef",
			backend: "bench-app-80", peer: "127.0.0.2:18381", status: 200, bodySent: 23, reqLength: 120, upstreamLength: 23, upstreamStatus: 200,
			took: 1234567 * time.Nanosecond, upstream: 999 * time.Microsecond},
		"answered by the proxy": {remote: "2001:db8::1", method: "POST", uri: "/x", proto: "HTTP/1.0", status: 404, reqLength: 60},
		"no address, no answer": {method: "GET", uri: "/", proto: "HTTP/1.1", backend: "b", peer: "127.0.0.3:80", status: 502},
		"hostile": {remote: "::ffff:1.2.3.4", auth: basic, method: "G\"ET", uri: "/p\"q\\r\x01\x7f\xc3\xa9long-enough-for-words", proto: "HTTP/1.1",
			referer: "http://r/\"x\"", userAgent: "ua \x00\x1f\x20\x7e\x7f\x80\xff end", id: "id\"", backend: "ns-svc-80\"", canary: "c\"anary",
			peer: "[::1]:80", status: 200, upstreamStatus: 201, upstreamLength: -1, took: 3 * time.Second},
		"user, no raw head": {auth: basic, method: "GET", uri: "/", proto: "HTTP/1.1", status: 200, noRawHead: true},
		"not basic":         {auth: "Bearer zzz", method: "GET", uri: "/", proto: "HTTP/1.1", status: 401},
	} {
		fast, generic := c.lines(t)
		if !bytes.Equal(fast, generic) {
			t.Errorf("%s:\n appendUpstreamInfo %q\n segments           %q", name, fast, generic)
		}
	}
}

// FuzzUpstreamInfoLine: for any values, the default format's own writer
// writes the segments' bytes.
func FuzzUpstreamInfoLine(f *testing.F) {
	f.Add("GET", "/item?q=1", "wrk", "http://r/", "rid", "be", "", "127.0.0.2:80", "Basic YTpi", 200, 201)
	f.Add("G\"T", "/\x00\x7f\xff\\", "ua\x1f\x80", "", "", "", "can", "", "", 404, 0)
	f.Fuzz(func(t *testing.T, method, uri, ua, referer, id, backend, canary, peer, auth string, status, ustatus int) {
		c := upstreamInfoCase{remote: "10.1.2.3", method: method, uri: uri, proto: "HTTP/1.1", userAgent: ua, referer: referer,
			id: id, backend: backend, canary: canary, peer: peer, auth: auth, status: status, upstreamStatus: ustatus,
			bodySent: len(uri), reqLength: len(ua), took: time.Duration(len(id)) * time.Millisecond}
		fast, generic := c.lines(t)
		if !bytes.Equal(fast, generic) {
			t.Errorf("appendUpstreamInfo %q\nsegments           %q", fast, generic)
		}
	})
}

// escapesIn misses no byte any mode escapes, in any position of a word.
func TestEscapesIn(t *testing.T) {
	for c := range 256 {
		for pos := range 8 {
			w := uint64(0x6161616161616161) // "aaaaaaaa"
			w = w&^(0xff<<(8*pos)) | uint64(c)<<(8*pos)
			for _, mode := range []uint8{escDefault, escJSON} {
				if logEscapes[c]&mode != 0 && !escapesIn(w, mode == escJSON) {
					t.Errorf("byte %#x at %d: escapesIn false (json %v)", c, pos, mode == escJSON)
				}
			}
			if logEscapes[c] == 0 && escapesIn(w, false) {
				t.Errorf("byte %#x at %d: escapesIn true for a word that needs no escaping", c, pos)
			}
		}
	}
}
