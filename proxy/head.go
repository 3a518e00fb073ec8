package proxy

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strconv"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/valyala/fasthttp"
)

// The upstream request head of an HTTP/1.1 request whose body is buffered,
// written straight from the client's raw head: its fields in the order and
// case the client sent them, less the hop-by-hop ones (RFC 9110 §7.6.1;
// "Te: trailers" kept) and those a Connection field names, less the ones
// ingress-nginx's location replaces, then the replacements (forwardHeaders'
// fields, the same values). The client's request is not edited, so a Pick
// reads the client's own fields, as nginx's $http_* variables do. Building
// the head costs one pass over the raw bytes; editing fasthttp's header
// and having it serialise itself cost several lookups per field.

// fieldKind is what appendUpstreamHead does with a client's field.
type fieldKind uint8

const (
	fieldPass       fieldKind = iota // passed as sent
	fieldDrop                        // never passed: hop-by-hop, framing, Host
	fieldReplaced                    // passed unless the proxy sets its own
	fieldForwarded                   // X-Forwarded-For: its first value is extended
	fieldRequestID                   // X-Request-ID: passed if not empty
	fieldTe                          // Te: only "trailers" survives
	fieldConnection                  // Connection: dropped, and what it names
)

// kindOf is the kind of a field name, in any case. It switches on the
// length rather than looping over hopHeaders and forwardedFields' names
// (this runs for every field of every request); TestKindOf holds it to
// both.
func kindOf(name []byte) fieldKind {
	is := func(s string) bool { return equalFoldASCII(name, s) }
	switch len(name) {
	case 2:
		if is("Te") {
			return fieldTe
		}
	case 4:
		if is("Host") {
			return fieldDrop
		}
	case 7:
		if is("Trailer") || is("Upgrade") {
			return fieldDrop
		}
	case 8:
		if is("X-Scheme") {
			return fieldReplaced
		}
	case 9:
		if is("X-Real-Ip") {
			return fieldReplaced
		}
	case 10:
		if is("Connection") {
			return fieldConnection
		}
		if is("Keep-Alive") {
			return fieldDrop
		}
	case 12:
		if is("X-Request-Id") {
			return fieldRequestID
		}
	case 14:
		if is("Content-Length") {
			return fieldDrop
		}
	case 15:
		if is("X-Forwarded-For") {
			return fieldForwarded
		}
	case 16:
		if is("Proxy-Connection") {
			return fieldDrop
		}
		if is("X-Forwarded-Host") || is("X-Forwarded-Port") {
			return fieldReplaced
		}
	case 17:
		if is("Transfer-Encoding") {
			return fieldDrop
		}
		if is("X-Forwarded-Proto") {
			return fieldReplaced
		}
	case 18:
		if is("Proxy-Authenticate") {
			return fieldDrop
		}
		if is("X-Forwarded-Scheme") || is("X-Forwarded-Prefix") {
			return fieldReplaced
		}
	case 19:
		if is("Proxy-Authorization") {
			return fieldDrop
		}
	}
	return fieldPass
}

// rawFields yields each field of a raw head (fasthttp's RawHeaders: the
// fields, without the request line) as name and value, the value trimmed.
// ok is false, and the caller takes the slow path, when a line is folded
// (obs-fold), has no colon, or has a blank in its name: fasthttp would have
// refused or rewritten it, and it is not passed on as sent.
func rawFields(raw []byte, yield func(name, value []byte)) (ok bool) {
	for len(raw) > 0 {
		var line []byte
		line, raw = cutByte(raw, '\n')
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			continue // the head's end
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found || len(name) == 0 || bytes.ContainsAny(name, " \t") {
			return false
		}
		yield(name, bytes.TrimSpace(value))
	}
	return true
}

// rawMayHold reports whether raw, a request's fields as fasthttp keeps
// them (RawHeaders), may hold a field named name, in any case: false only
// when no line starts with the name followed by a colon or a blank. Empty
// raw (no head kept) may hold anything.
//
// A lookup by name (fasthttp's Peek) copies and normalises the name, then
// compares it with every field's; this looks at the first bytes of each
// line only, so a field a request seldom has (Upgrade, Authorization)
// costs a tenth as much to find absent. Only for names fasthttp does not
// keep apart from the other fields (Host, Content-Type, Content-Length,
// User-Agent, Connection, Transfer-Encoding, Cookie, Trailer), whose Peek
// may answer from elsewhere than the field.
func rawMayHold(raw []byte, name string) bool {
	if len(raw) == 0 {
		return true
	}
	for len(raw) > len(name) {
		if equalFoldASCII(raw[:len(name)], name) {
			if c := raw[len(name)]; c == ':' || c == ' ' || c == '\t' {
				return true
			}
		}
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			break
		}
		raw = raw[i+1:]
	}
	return false
}

// peekSent is h.Peek(name) (see rawMayHold for the names it may look up),
// without the lookup when the client surely sent no such field.
func peekSent(h *fasthttp.RequestHeader, name string) []byte {
	if !rawMayHold(h.RawHeaders(), name) {
		return nil
	}
	return h.Peek(name)
}

// upstreamProtocol is the protocol of the request line sent upstream:
// HTTP/1.1, or HTTP/1.0 with proxy-http-version "1.0" (nginx's
// proxy_http_version). Nothing else changes with it: the fields sent are
// the same, and whether the connection is kept depends on the answer (an
// HTTP/1.0 one without keep-alive closes it, as in nginx).
func upstreamProtocol(loc *model.Location) string {
	if loc.Proxy.HTTP10 {
		return "HTTP/1.0"
	}
	return "HTTP/1.1"
}

// appendUpstreamHead appends to dst the head sent upstream for
// the client's request h (its target uri, after rewrite-target) and a
// buffered body of bodyLen bytes. When the client sent no X-Request-ID, id's
// is sent, made first (nginx's $request_id) when id holds none; scratch is forwardedFields'
// scratch space. It reports false, with dst unchanged, when the raw head is
// not passed field by field (extra fields, from authentication, replace the
// client's of their names; an empty value removes it): a line rawFields refuses, or a Connection field
// naming fields to drop (both rare; forwardHeaders then edits a copy of
// fasthttp's view instead).
func appendUpstreamHead(dst []byte, h *fasthttp.RequestHeader, uri []byte, f *clientFacts, loc *model.Location, bodyLen int, id *requestID, extra [][2]string, scratch *[]byte) ([]byte, bool) {
	raw := h.RawHeaders()
	if len(raw) == 0 {
		return dst, false
	}
	start := len(dst)
	dst = append(dst, h.Method()...)
	dst = append(dst, ' ')
	dst = append(dst, uri...)
	dst = append(dst, ' ')
	dst = append(dst, upstreamProtocol(loc)...)
	dst = append(dst, "\r\nHost: "...)
	if loc.UpstreamVhost != "" {
		dst = append(dst, loc.UpstreamVhost...)
	} else {
		dst = append(dst, h.Host()...)
	}
	dst = append(dst, "\r\n"...)
	var priorXFF []byte
	teTrailers, clientID, named := false, false, false
	ok := rawFields(raw, func(name, value []byte) {
		if len(extra) > 0 && namedIn(extra, name) {
			return // replaced by extra
		}
		switch kindOf(name) {
		case fieldPass:
		case fieldConnection:
			for len(value) > 0 {
				var tok []byte
				tok, value = cutByte(value, ',')
				if tok = bytes.TrimSpace(tok); len(tok) > 0 && !equalFoldASCII(tok, "close") && !equalFoldASCII(tok, "keep-alive") {
					named = true
				}
			}
			return
		case fieldForwarded:
			if priorXFF == nil {
				priorXFF = value
			}
			return
		case fieldRequestID:
			if len(value) == 0 {
				return
			}
			clientID = true
		case fieldTe:
			teTrailers = teTrailers || tokenListHas(value, "trailers")
			return
		case fieldReplaced:
			if !clientKeeps(name, f, loc) {
				return
			}
		default:
			return
		}
		dst = appendField(dst, name, value)
	})
	if !ok || named {
		return dst[:start], false
	}
	if bodyLen > 0 || !(h.IsGet() || h.IsHead()) {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, int64(bodyLen), 10)
		dst = append(dst, "\r\n"...)
	}
	if teTrailers {
		dst = append(dst, "Te: trailers\r\n"...)
	}
	*scratch = forwardedFields(f, loc, priorXFF, *scratch, func(name, value []byte) {
		dst = appendField(dst, name, value)
	})
	for _, kv := range extra {
		if kv[1] != "" {
			dst = append(append(append(append(dst, kv[0]...), ": "...), kv[1]...), "\r\n"...)
		}
	}
	if !clientID {
		if !id.set {
			id.make()
		}
		dst = appendField(dst, hdrXRequestID, id.bytes())
	}
	return append(dst, "\r\n"...), true
}

// namedIn reports whether name is one of fields' names, in any case.
func namedIn(fields [][2]string, name []byte) bool {
	for _, kv := range fields {
		if equalFoldASCII(name, kv[0]) {
			return true
		}
	}
	return false
}

// clientKeeps reports whether a field the proxy may replace is passed as
// the client sent it: X-Forwarded-Port when the local port is unknown,
// X-Forwarded-Prefix when the location sets none.
func clientKeeps(name []byte, f *clientFacts, loc *model.Location) bool {
	switch {
	case equalFoldASCII(name, "X-Forwarded-Port"):
		return f.localPort <= 0
	case equalFoldASCII(name, "X-Forwarded-Prefix"):
		return loc.XForwardedPrefix == ""
	}
	return false
}

// appendField appends "name: value\r\n".
func appendField(dst, name, value []byte) []byte {
	dst = append(dst, name...)
	dst = append(dst, ": "...)
	dst = append(dst, value...)
	return append(dst, "\r\n"...)
}

// requestID is a request ID the proxy made, as nginx's $request_id: 16
// random bytes in hex, for tracing, not secrecy (the runtime's ChaCha8
// source, no syscall).
type requestID struct {
	hex [32]byte
	set bool
}

func (id *requestID) make() {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], rand.Uint64())
	binary.BigEndian.PutUint64(b[8:], rand.Uint64())
	hex.Encode(id.hex[:], b[:])
	id.set = true
}

// bytes is the ID, nil if none was made.
func (id *requestID) bytes() []byte {
	if !id.set {
		return nil
	}
	return id.hex[:]
}
