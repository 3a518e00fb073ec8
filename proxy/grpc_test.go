package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// A gRPC backend written against the wire format (length-prefixed
// messages, grpc-status/grpc-message trailers, HTTP/2 only), served over
// h2c or TLS h2 by x/net/http2: the proxy is tested against real gRPC
// framing without a generated stub. Messages are plain strings.

// grpcFrame is one length-prefixed gRPC message (uncompressed).
func grpcFrame(msg string) []byte {
	b := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

// readGRPC reads one message; io.EOF at a message boundary ends the stream.
func readGRPC(r io.Reader) (string, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", err
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("read message: %w", err)
	}
	return string(b), nil
}

// grpcService is the test service:
//
//	/test.Echo/Unary         one message in, "echo:<msg>" out
//	/test.Echo/ServerStream  one message n in, "msg-1".."msg-n" out, each
//	                         sent only after the client acknowledged the
//	                         previous one on acks
//	/test.Echo/ClientStream  messages in until the end, their count and
//	                         concatenation out
//	/test.Echo/Bidi          each message answered at once with "re:<msg>"
//	/test.Echo/Fail          no message; grpc-status 13 "boom"
//	/test.Echo/Hang          no answer until the request ends
func grpcService(acks <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			http.Error(w, "gRPC needs HTTP/2", http.StatusUnsupportedMediaType)
			return
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		f := w.(http.Flusher)
		status, message := "0", ""
		switch r.URL.Path {
		case "/test.Echo/Unary":
			msg, err := readGRPC(r.Body)
			if err != nil {
				status, message = "3", err.Error()
				break
			}
			_, _ = w.Write(grpcFrame("echo:" + msg + " te=" + r.Header.Get("Te") + " xff=" + r.Header.Get("X-Forwarded-For")))
		case "/test.Echo/ServerStream":
			msg, _ := readGRPC(r.Body)
			var n int
			_, _ = fmt.Sscan(msg, &n)
			for i := 1; i <= n; i++ {
				_, _ = w.Write(grpcFrame(fmt.Sprintf("msg-%d", i)))
				f.Flush()
				select {
				case <-acks:
				case <-r.Context().Done():
					return
				}
			}
		case "/test.Echo/ClientStream":
			var got []string
			for {
				msg, err := readGRPC(r.Body)
				if err != nil {
					break
				}
				got = append(got, msg)
			}
			_, _ = w.Write(grpcFrame(fmt.Sprintf("%d:%s", len(got), strings.Join(got, ","))))
		case "/test.Echo/Bidi":
			f.Flush()
			for {
				msg, err := readGRPC(r.Body)
				if err != nil {
					break
				}
				_, _ = w.Write(grpcFrame("re:" + msg))
				f.Flush()
			}
		case "/test.Echo/Fail":
			status, message = "13", "boom"
		case "/test.Echo/Hang":
			<-r.Context().Done()
			return
		}
		w.Header().Set("Grpc-Status", status)
		w.Header().Set("Grpc-Message", message)
	}
}

// unencryptedHTTP2 is cleartext HTTP/2 with prior knowledge only.
func unencryptedHTTP2() *http.Protocols {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return p
}

// grpcBackend serves grpcService over h2c (cleartext HTTP/2 with prior
// knowledge) and returns its address.
func grpcBackend(t *testing.T, acks <-chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// net/http's own HTTP/2 (not the proxy's x/net copy): an independent
	// implementation on the other side.
	srv := &http.Server{Handler: grpcService(acks), Protocols: unencryptedHTTP2()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// grpcTLSBackend serves grpcService over TLS with ALPN h2 (GRPCS) and a
// self-signed certificate.
func grpcTLSBackend(t *testing.T) string {
	t.Helper()
	cert, err := selfSigned("grpc backend")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: grpcService(nil)} // net/http serves h2 on TLS
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// grpcCall starts a call through the proxy: the request body is a pipe
// the caller writes messages to; response waits for the response head.
func grpcCall(t *testing.T, ctx context.Context, c *http.Client, base, host, method string) (pw *io.PipeWriter, response func() *http.Response) {
	t.Helper()
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+method, pr)
	req.Host = host
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := c.Do(req)
		done <- result{resp, err}
	}()
	return pw, func() *http.Response {
		t.Helper()
		r := <-done
		if r.err != nil {
			t.Fatalf("%s: %v", method, r.err)
		}
		t.Cleanup(func() { _ = r.resp.Body.Close() })
		return r.resp
	}
}

// wantGRPCOK reads the rest of a call's response and checks it ended with
// HTTP 200 and grpc-status 0 in the trailers.
func wantGRPCOK(t *testing.T, resp *http.Response) {
	t.Helper()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if got := resp.Trailer.Get("Grpc-Status"); resp.StatusCode != 200 || got != "0" {
		t.Errorf("got %d grpc-status %q; want 200 and 0", resp.StatusCode, got)
	}
}

// TestGRPCThroughProxy: gRPC calls over HTTP/2 (TLS, ALPN h2) through the
// proxy to h2c (backend-protocol GRPC and H2C) and TLS (GRPCS) backends:
// unary, server streaming, client streaming and bidi, with trailers, and
// streamed both ways without buffering (each message waits for the
// previous answer).
func TestGRPCThroughProxy(t *testing.T) {
	acks := make(chan struct{})
	plain, secure := grpcBackend(t, acks), grpcTLSBackend(t)
	grpcLoc := loc("/", model.PathTypePrefix, "grpc")
	grpcLoc.BackendProtocol = model.ProtocolGRPC
	h2cLoc := loc("/", model.PathTypePrefix, "grpc")
	h2cLoc.BackendProtocol = model.ProtocolH2C
	grpcsLoc := loc("/", model.PathTypePrefix, "grpcs")
	grpcsLoc.BackendProtocol = model.ProtocolGRPCS
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "grpc", Endpoints: endpoints(plain)}, {Name: "grpcs", Endpoints: endpoints(secure)}},
		Servers: []model.Server{
			{Hostname: "grpc.test", Locations: []model.Location{grpcLoc}},
			{Hostname: "h2c.test", Locations: []model.Location{h2cLoc}},
			{Hostname: "grpcs.test", Locations: []model.Location{grpcsLoc}},
		},
	}
	base := h2Proxy(t, cfg, Config{})
	c := h2Client(t)

	for _, host := range []string{"grpc.test", "h2c.test", "grpcs.test"} {
		t.Run("unary/"+host, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			pw, response := grpcCall(t, ctx, c, base, host, "/test.Echo/Unary")
			_, _ = pw.Write(grpcFrame("hi"))
			_ = pw.Close()
			resp := response()
			msg, err := readGRPC(resp.Body)
			if want := "echo:hi te=trailers xff=127.0.0.1"; err != nil || msg != want {
				t.Fatalf("got %q, %v; want %q", msg, err, want)
			}
			wantGRPCOK(t, resp)
		})
	}
	t.Run("server streaming", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		pw, response := grpcCall(t, ctx, c, base, "grpc.test", "/test.Echo/ServerStream")
		_, _ = pw.Write(grpcFrame("3"))
		_ = pw.Close()
		resp := response()
		var got []string
		for range 3 {
			msg, err := readGRPC(resp.Body)
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			got = append(got, msg)
			acks <- struct{}{} // the backend sends the next one only now
		}
		wantGRPCOK(t, resp)
		if diff := cmp.Diff([]string{"msg-1", "msg-2", "msg-3"}, got); diff != "" {
			t.Errorf("messages (-want +got):\n%s", diff)
		}
	})
	t.Run("client streaming", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		pw, response := grpcCall(t, ctx, c, base, "grpc.test", "/test.Echo/ClientStream")
		for _, m := range []string{"a", "b", "c"} {
			_, _ = pw.Write(grpcFrame(m))
		}
		_ = pw.Close()
		resp := response()
		msg, err := readGRPC(resp.Body)
		if err != nil || msg != "3:a,b,c" {
			t.Fatalf("got %q, %v; want %q", msg, err, "3:a,b,c")
		}
		wantGRPCOK(t, resp)
	})
	t.Run("bidi", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		pw, response := grpcCall(t, ctx, c, base, "grpc.test", "/test.Echo/Bidi")
		resp := response() // the backend sends its headers before any message
		for _, m := range []string{"one", "two", "three"} {
			if _, err := pw.Write(grpcFrame(m)); err != nil {
				t.Fatal(err)
			}
			// The answer must come before the stream ends: nothing buffers.
			msg, err := readGRPC(resp.Body)
			if err != nil || msg != "re:"+m {
				t.Fatalf("got %q, %v; want %q", msg, err, "re:"+m)
			}
		}
		_ = pw.Close()
		wantGRPCOK(t, resp)
	})
	t.Run("error status", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		pw, response := grpcCall(t, ctx, c, base, "grpc.test", "/test.Echo/Fail")
		_ = pw.Close()
		resp := response()
		_, _ = io.ReadAll(resp.Body)
		status, message := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
		if status == "" { // a trailers-only answer arrives as headers
			status, message = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
		}
		if status != "13" || message != "boom" {
			t.Errorf("got grpc-status %q message %q; want 13 boom", status, message)
		}
	})
}

// TestGRPCUpstreamFailures: as nginx's grpc_pass, a peer that refuses the
// connection answers 502, one that does not answer within
// proxy-read-timeout 504; a dead peer is skipped for a live one.
func TestGRPCUpstreamFailures(t *testing.T) {
	live := grpcBackend(t, nil)
	dead := loc("/", model.PathTypePrefix, "dead")
	dead.BackendProtocol = model.ProtocolGRPC
	slow := loc("/", model.PathTypePrefix, "slow")
	slow.BackendProtocol = model.ProtocolGRPC
	slow.Proxy.ReadTimeoutSeconds = 1
	retry := loc("/", model.PathTypePrefix, "retry")
	retry.BackendProtocol = model.ProtocolGRPC
	cfg := &model.Configuration{
		Backends: []*model.Backend{
			{Name: "dead", Endpoints: endpoints(deadAddr(t))},
			{Name: "slow", Endpoints: endpoints(live)},
			{Name: "retry", Endpoints: endpoints(deadAddr(t), live), Algorithm: model.EWMA},
		},
		Servers: []model.Server{
			{Hostname: "dead.test", Locations: []model.Location{dead}},
			{Hostname: "slow.test", Locations: []model.Location{slow}},
			{Hostname: "retry.test", Locations: []model.Location{retry}},
		},
	}
	base := h2Proxy(t, cfg, Config{})
	c := h2Client(t)
	for _, tc := range []struct {
		name, host, method string
		status             int
	}{
		{"connection refused", "dead.test", "/test.Echo/Unary", 502},
		{"read timeout", "slow.test", "/test.Echo/Hang", 504},
		{"dead peer skipped", "retry.test", "/test.Echo/Unary", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			pw, response := grpcCall(t, ctx, c, base, tc.host, tc.method)
			_, _ = pw.Write(grpcFrame("x"))
			_ = pw.Close()
			resp := response()
			if _, err := io.ReadAll(resp.Body); err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("got %d; want %d", resp.StatusCode, tc.status)
			}
		})
	}
}

// TestH2CUpstreamFromHTTP1: an HTTP/1.1 client reaches an H2C backend
// through the plain port: the proxy speaks HTTP/2 upstream and relays the
// body (trailers cannot reach an HTTP/1.1 client).
func TestH2CUpstreamFromHTTP1(t *testing.T) {
	be := grpcBackend(t, nil)
	l := loc("/", model.PathTypePrefix, "h2c")
	l.BackendProtocol = model.ProtocolH2C
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "h2c", Endpoints: endpoints(be)}},
		Servers:  []model.Server{{Hostname: "h2c.test", Locations: []model.Location{l}}},
	}
	base, _ := start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for _, tc := range []struct {
		name string
		body io.Reader
	}{
		{"whole body", strings.NewReader(string(grpcFrame("hi")))},
		{"chunked body", io.NopCloser(strings.NewReader(string(grpcFrame("hi"))))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/test.Echo/Unary", tc.body)
			req.Host = "h2c.test"
			req.Header.Set("Content-Type", "application/grpc")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			msg, err := readGRPC(resp.Body)
			if want := "echo:hi te= xff=127.0.0.1"; resp.ProtoMajor != 1 || err != nil || msg != want {
				t.Errorf("got %s %q, %v; want HTTP/1.1 %q", resp.Proto, msg, err, want)
			}
		})
	}
}

// TestH2CPriorKnowledge: with Config.H2C the plain port serves gRPC over
// cleartext HTTP/2 (prior knowledge) and HTTP/1.1 side by side; without
// it the preface is taken for an HTTP/1.1 request (fasthttp answers it).
func TestH2CPriorKnowledge(t *testing.T) {
	be := grpcBackend(t, nil)
	l := loc("/", model.PathTypePrefix, "grpc")
	l.BackendProtocol = model.ProtocolGRPC
	cfg := &model.Configuration{
		Backends: []*model.Backend{{Name: "grpc", Endpoints: endpoints(be)}, {Name: "a", Endpoints: endpoints(backend(t, "a"))}},
		Servers: []model.Server{
			{Hostname: "grpc.test", Locations: []model.Location{l}},
			{Hostname: "web.test", Locations: []model.Location{loc("/", model.PathTypePrefix, "a")}},
		},
	}
	p, _ := newProxy(t, cfg, Config{H2C: true})
	base := "http://" + serve(t, p.Serve)
	tr := &http.Transport{Protocols: unencryptedHTTP2()}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	pw, response := grpcCall(t, ctx, &http.Client{Transport: tr}, base, "grpc.test", "/test.Echo/Unary")
	_, _ = pw.Write(grpcFrame("plain"))
	_ = pw.Close()
	resp := response()
	msg, err := readGRPC(resp.Body)
	if want := "echo:plain te=trailers xff=127.0.0.1"; resp.ProtoMajor != 2 || err != nil || msg != want {
		t.Fatalf("got %s %q, %v; want HTTP/2 %q", resp.Proto, msg, err, want)
	}
	wantGRPCOK(t, resp)

	r, body := get(t, base+"/", "web.test", nil)
	if r.ProtoMajor != 1 || !strings.HasPrefix(body, "a GET / ") || !strings.Contains(body, "proto=http ") {
		t.Errorf("HTTP/1.1 beside h2c: got %s %q", r.Proto, body)
	}

	plain, _ := newProxy(t, cfg, Config{})
	if resp, ok := rawExchange(t, serve(t, plain.Serve), []byte(http2.ClientPreface)); !ok || resp != "" && !strings.HasPrefix(resp, "HTTP/1.1 ") {
		t.Errorf("HTTP/2 preface without H2C: got %q; want an HTTP/1.1 answer or a close", resp)
	}
}
