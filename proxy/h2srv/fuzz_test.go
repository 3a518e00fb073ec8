package h2srv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// FuzzReadHeaders: readHeaders reads and decodes header blocks as the
// Framer's ReadMetaHeaders does: from the same bytes, the same fields
// (and truncation, flags, priority) or the same error, frame after frame.
func FuzzReadHeaders(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	// Header blocks: split over CONTINUATIONs, padded with a priority,
	// over the budget, a name in upper case, a pseudo-field after a field.
	var out, hb bytes.Buffer
	fr, enc := http2.NewFramer(&out, nil), hpack.NewEncoder(&hb)
	block := func(fields ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	b := block(append(get[:8:8], "x-a", strings.Repeat("a", 100), "trailer", "x-t, x-u")...)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:10]})
	_ = fr.WriteContinuation(1, false, b[10:20])
	_ = fr.WriteContinuation(1, true, b[20:])
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(get...), EndStream: true, EndHeaders: true,
		PadLength: 3, Priority: http2.PriorityParam{StreamDep: 1, Weight: 7}})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: block(append(get[:8:8], "x-big", strings.Repeat("b", 1500))...), EndHeaders: true})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: block(append(get[:8:8], "X-Upper", "1")...), EndHeaders: true})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 9, BlockFragment: block("x-a", "1", ":method", "GET"), EndHeaders: true})
	f.Add(bytes.Clone(out.Bytes()))
	f.Fuzz(func(t *testing.T, in []byte) {
		ref := http2.NewFramer(nil, bytes.NewReader(in))
		ref.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		ref.MaxHeaderListSize = 1 << 10
		ref.SetMaxReadFrameSize(maxReadFrame)
		client, server := net.Pipe()
		defer client.Close()
		defer server.Close()
		c := newConn(&Server{MaxHeaderBytes: 1 << 10}, context.Background(), server)
		c.br.r = bytes.NewReader(in)
		for range 1000 {
			want, wantErr := ref.ReadFrame()
			got, hb, gotErr := c.readFrame()
			if w, g := errorClass(wantErr), errorClass(gotErr); w != g {
				t.Fatalf("input %x: error %q; want %q", in, g, w)
			}
			if wantErr != nil {
				var se http2.StreamError
				if errors.As(wantErr, &se) {
					continue
				}
				return
			}
			mh, ok := want.(*http2.MetaHeadersFrame)
			if !ok {
				if hb != nil || got.Header() != want.Header() {
					t.Fatalf("input %x: got %v, header block %v; want %v", in, got, hb, want)
				}
				continue
			}
			if hb == nil {
				t.Fatalf("input %x: got %v; want a header block", in, got)
			}
			fields := hb.fields
			if len(fields) == 0 {
				fields = nil
			}
			gotBlock := []any{hb.streamID, hb.endStream, hb.hasPriority, hb.streamDep, hb.truncated, fields, len(hb.pseudoFields())}
			wantBlock := []any{mh.StreamID, mh.StreamEnded(), mh.HasPriority(), mh.Priority.StreamDep, mh.Truncated, mh.Fields, len(mh.PseudoFields())}
			if diff := cmp.Diff(wantBlock, gotBlock); diff != "" {
				t.Fatalf("input %x: header block mismatch (-ReadMetaHeaders +readHeaders):\n%s", in, diff)
			}
		}
	})
}

// errorClass is what serve makes of a read error.
func errorClass(err error) string {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, http2.ErrFrameTooLarge):
		return "frame too large"
	case errors.As(err, &se):
		return fmt.Sprintf("stream error %d %v", se.StreamID, se.Code)
	case errors.As(err, &ce):
		return fmt.Sprintf("connection error %v", http2.ErrCode(ce))
	}
	return "other: " + err.Error()
}
