package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// dateLineLen is the length of the Date line fasthttp's server writes in
// every response head (NoDefaultDate is false, see New): "Date: ", an
// RFC 1123 GMT date of 29 bytes, CRLF.
const dateLineLen = len("Date: ") + len("Mon, 02 Jan 2006 15:04:05 GMT") + 2

var keyDate = []byte(fasthttp.HeaderDate)

// headLen is len(h.Header()), the response head fasthttp writes for h
// when the handler returns: what nginx's $bytes_sent and the response
// size histogram count besides the body (issue 17). It sums the fields
// instead of serialising the head, which fasthttp does again to write
// it. Where the fields h.All visits are not the ones ResponseHeader's
// AppendBytes writes (no Content-Length, which may leave out a
// Content-Type; trailers, left out of the head) it serialises.
func headLen(h *fasthttp.ResponseHeader) int {
	if h.ContentLength() == 0 || hasTrailer(h) {
		return len(h.Header())
	}
	// Status line: "HTTP/1.1 200 OK\r\n"; a negative code goes out as 200.
	code := h.StatusCode()
	if code < 0 {
		code = fasthttp.StatusOK
	}
	textLen := len(h.StatusMessage())
	if textLen == 0 {
		textLen = len(fasthttp.StatusMessage(code))
	}
	n := len(h.Protocol()) + 1 + codeLen(code) + 1 + textLen + 2
	n += dateLineLen
	for k, v := range h.All() {
		// The server's Date replaces any set one.
		if bytes.Equal(k, keyDate) {
			continue
		}
		n += len(k) + 2 + len(v) + 2 // "Key: value\r\n"
	}
	return n + 2 // the empty line
}

// hasTrailer reports whether h announces trailers.
func hasTrailer(h *fasthttp.ResponseHeader) bool {
	for range h.Trailers() {
		return true
	}
	return false
}

// codeLen is the number of decimal digits of code, code >= 0.
func codeLen(code int) int {
	n := 1
	for code >= 10 {
		code /= 10
		n++
	}
	return n
}
