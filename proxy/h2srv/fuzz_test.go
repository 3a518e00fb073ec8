package h2srv

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2" //nolint:staticcheck // SA1019: frames for the seeds
	"golang.org/x/net/http2/hpack"
)

// fuzzSeeds are client byte streams after the preface: a GET, a POST
// with a body and trailers, and control frames.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	frames := func(write func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer)) {
		var out, hb bytes.Buffer
		fr := http2.NewFramer(&out, nil)
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 16})
		write(fr, hpack.NewEncoder(&hb), &hb)
		seeds = append(seeds, out.Bytes())
	}
	head := func(enc *hpack.Encoder, hb *bytes.Buffer, fields ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return hb.Bytes()
	}
	frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head(enc, hb, get...), EndStream: true, EndHeaders: true})
	})
	frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, BlockFragment: head(enc, hb,
			":method", "POST", ":scheme", "https", ":authority", "a.test", ":path", "/echo", "content-length", "5", "trailer", "x-t")})
		_ = fr.WriteData(1, false, []byte("hel"))
		_ = fr.WriteDataPadded(1, false, []byte("lo"), []byte{0, 0})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head(enc, hb, "x-t", "1"), EndStream: true, EndHeaders: true})
	})
	frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteWindowUpdate(0, 1000)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: head(enc, hb, get...), EndHeaders: false})
		_ = fr.WriteContinuation(3, true, nil)
		_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
		_ = fr.WritePriority(5, http2.PriorityParam{StreamDep: 5})
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	})
	return seeds
}

// FuzzServeConn: whatever a client sends after the preface, the server
// neither panics nor hangs: the connection ends within a bound once the
// client has closed its side.
func FuzzServeConn(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	s := &Server{MaxHeaderBytes: 8 << 10, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(http.TrailerPrefix+"X-Done", "1")
		_, _ = io.Copy(w, r.Body)
	})}
	f.Fuzz(func(t *testing.T, in []byte) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			s.ServeConn(context.Background(), server)
			close(done)
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = io.WriteString(client, http2.ClientPreface)
		_, _ = client.Write(in)
		_ = client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("ServeConn still running 5 s after the client closed, input %x", in)
		}
	})
}
