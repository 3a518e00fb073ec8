package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// wholeBackend is a real upstream that records the requests it got whole
// (head and body to its end), and any Upgrade field it saw.
type wholeBackend struct {
	mu       sync.Mutex
	whole    []string
	upgrades []string
}

func (b *wholeBackend) start(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		b.mu.Lock()
		if err == nil {
			b.whole = append(b.whole, r.Method+" "+r.URL.Path)
		}
		if u := r.Header.Get("Upgrade"); u != "" {
			b.upgrades = append(b.upgrades, u)
		}
		b.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func (b *wholeBackend) got() (whole, upgrades []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.whole...), append([]string(nil), b.upgrades...)
}

// h2Raw opens an HTTP/2 connection to a TLS address and sends one
// request of the given fields (pseudo-fields first) and DATA frames, the
// last with END_STREAM. It returns how stream 1 ended: "RST_STREAM
// <code>", "GOAWAY <code>", or ":status <code>".
func h2Raw(t *testing.T, addr string, fields [][2]string, data ...string) string {
	t.Helper()
	tc := tls.Client(dialTest(t, addr), &tls.Config{ServerName: "s.test", InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // fake certificate
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(tc, bufio.NewReader(tc))
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range fields {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: len(data) == 0}); err != nil {
		t.Fatal(err)
	}
	for i, d := range data {
		if err := fr.WriteData(1, i == len(data)-1, []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "read: " + err.Error()
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			hf, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hf {
				if h.Name == ":status" {
					return ":status " + h.Value
				}
			}
		}
	}
}

// TestHTTP2Smuggling: HTTP/2 requests whose framing could be read two ways
// (RFC 9113 §8.2.2, §8.1.1) are refused, a stream error PROTOCOL_ERROR or
// 400, and nothing of them reaches the upstream whole: a content-length
// that the DATA frames do not match, and the connection-specific fields
// transfer-encoding, connection, keep-alive, upgrade.
func TestHTTP2Smuggling(t *testing.T) {
	var be wholeBackend
	p, _ := newProxy(t, oneHost("s.test", be.start(t)), Config{})
	addr := serve(t, p.ServeTLS)
	req := func(path string, extra ...[2]string) [][2]string {
		return append([][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "s.test"}, {":path", path}}, extra...)
	}
	big := strings.Repeat("x", 70000) // over BodyBufferBytes: streamed
	for _, tc := range []struct {
		name   string
		fields [][2]string
		data   []string
	}{
		{"content-length over the data", req("/cl-over", [2]string{"content-length", "10"}), []string{"abcde"}},
		{"content-length under the data", req("/cl-under", [2]string{"content-length", "3"}), []string{"abcdefghij"}},
		{"content-length over streamed data", req("/cl-over-streamed", [2]string{"content-length", strconv.Itoa(len(big) + 10)}), []string{big[:16000], big[16000:32000], big[32000:48000], big[48000:64000], big[64000:]}},
		{"transfer-encoding", req("/te", [2]string{"transfer-encoding", "chunked"}), []string{"3\r\nabc\r\n0\r\n\r\n"}},
		{"connection", req("/connection", [2]string{"connection", "keep-alive"}), []string{"abc"}},
		{"keep-alive", req("/keep-alive", [2]string{"keep-alive", "timeout=5"}), []string{"abc"}},
		{"upgrade", req("/upgrade", [2]string{"upgrade", "h2c"}), []string{"abc"}},
		{"te other than trailers", req("/te-gzip", [2]string{"te", "gzip"}), []string{"abc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := h2Raw(t, addr, tc.fields, tc.data...)
			if got != "RST_STREAM PROTOCOL_ERROR" && got != ":status 400" {
				t.Errorf("got %s; want RST_STREAM PROTOCOL_ERROR or :status 400", got)
			}
			path := tc.fields[3][1]
			whole, _ := be.got()
			for _, w := range whole {
				if strings.HasSuffix(w, " "+path) {
					t.Errorf("the upstream got %q whole; want nothing of it", w)
				}
			}
		})
	}
	// A well-framed request on the same proxy passes.
	if got := h2Raw(t, addr, req("/ok", [2]string{"content-length", "3"}), "abc"); got != ":status 200" {
		t.Errorf("well-framed request: got %s; want :status 200", got)
	}
}

// TestH2CUpgradeNotPassed: an HTTP/1.1 request asking to upgrade to h2c
// is not passed upstream as an upgrade (h2c smuggling: a backend that
// switched would take the HTTP/2 requests that follow, unrouted and
// unchecked). The request is served as HTTP/1.1 without its Upgrade, as
// RFC 9110 §7.8 lets a server ignore it, and what the client sends after
// as HTTP/2 never reaches the upstream.
func TestH2CUpgradeNotPassed(t *testing.T) {
	var be wholeBackend
	p, _ := newProxy(t, oneHost("s.test", be.start(t)), Config{})
	addr := serve(t, p.Serve)
	for _, up := range []string{"h2c", "websocket, h2c", "H2C"} {
		t.Run(up, func(t *testing.T) {
			raw := "GET /front HTTP/1.1\r\nHost: s.test\r\nUpgrade: " + up + "\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nConnection: Upgrade, HTTP2-Settings\r\n\r\n" +
				http2.ClientPreface + "GET /smuggled HTTP/1.1\r\nHost: s.test\r\n\r\n"
			resp, ok := rawExchange(t, addr, []byte(raw))
			if !ok {
				t.Fatalf("no answer: %q", resp)
			}
			if got := firstStatus(resp); got == "101" {
				t.Errorf("got 101; want the upgrade refused")
			}
			whole, upgrades := be.got()
			if len(upgrades) != 0 {
				t.Errorf("the upstream saw Upgrade %q; want none", upgrades)
			}
			for _, w := range whole {
				if strings.Contains(w, "smuggled") {
					t.Errorf("the upstream got %q", w)
				}
			}
		})
	}
}

// TestHTTP2KeepAliveRequests: an HTTP/2 connection ends (GOAWAY) after
// keep-alive-requests requests, and after each with keep-alive 0, as
// nginx's keepalive_requests ends HTTP/2 connections.
func TestHTTP2KeepAliveRequests(t *testing.T) {
	a := backend(t, "a")
	for _, tc := range []struct {
		name string
		g    model.Global
		// goawayAfter is the request after which the GOAWAY comes.
		goawayAfter int
	}{
		{"keep-alive-requests 3", model.Global{KeepAliveRequests: 3}, 3},
		{"keep-alive 0", model.Global{DisableKeepAlive: true}, 1},
		{"defaults", model.Global{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newProxy(t, connsHost("s.test", a, tc.g), Config{})
			addr := serve(t, p.ServeTLS)
			conn := tls.Client(dialTest(t, addr), &tls.Config{ServerName: "s.test", InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // fake certificate
			if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(conn, bufio.NewReader(conn))
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			goaway := 0
			for n := 1; n <= 4 && goaway == 0; n++ {
				hb.Reset()
				for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "s.test"}, {":path", "/"}} {
					_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
				}
				id := uint32(2*n - 1)
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true}); err != nil {
					t.Fatal(err)
				}
				for done := false; !done; {
					f, err := fr.ReadFrame()
					if err != nil {
						t.Fatalf("request %d: %v", n, err)
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() {
							_ = fr.WriteSettingsAck()
						}
					case *http2.GoAwayFrame:
						// The last stream it served names the request.
						goaway = int(f.LastStreamID+1) / 2
						done = true
					case *http2.HeadersFrame:
						done = f.StreamID == id && f.StreamEnded()
					case *http2.DataFrame:
						done = f.StreamID == id && f.StreamEnded()
					case *http2.RSTStreamFrame:
						t.Fatalf("request %d: stream reset %v", n, f.ErrCode)
					}
				}
			}
			if goaway != tc.goawayAfter {
				t.Errorf("GOAWAY with request %d; want with request %d (0: none in 4)", goaway, tc.goawayAfter)
			}
		})
	}
}
