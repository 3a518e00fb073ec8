package h2srv

import (
	"encoding/binary"
	"io"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2" //nolint:staticcheck // SA1019: see doc.go
	"golang.org/x/net/http2/hpack"
)

// headerBlock is a HEADERS frame and its CONTINUATIONs, decoded: the
// reading goroutine's one, reused for every block, where x/net/http2's
// Framer (ReadMetaHeaders) allocates a MetaHeadersFrame, its HeadersFrame,
// a closure and the growing Fields of each. Its fields' strings are the
// decoder's (new, or its table's) and outlive the block; the slice does
// not.
type headerBlock struct {
	streamID    uint32
	endStream   bool
	hasPriority bool
	streamDep   uint32
	// truncated: the list was over MaxHeaderBytes (RFC 9113 §6.5.2);
	// fields holds those decoded before.
	truncated bool
	fields    []hpack.HeaderField
	npseudo   int // fields' leading pseudo-fields (no other may follow a field: emitField)

	// decoding state
	headersRemain, trailersRemain uint32
	sawRegular                    bool
	invalid                       bool // a field's name or value is malformed (RFC 9113 §8.2.1)
}

// pseudoFields are the block's leading fields whose names start with ':'.
func (b *headerBlock) pseudoFields() []hpack.HeaderField { return b.fields[:b.npseudo] }

// regularFields are the fields after the pseudo-fields.
func (b *headerBlock) regularFields() []hpack.HeaderField { return b.fields[b.npseudo:] }

// maxKeptPayload is the largest header frame payload buffer a connection
// keeps for the next; a larger frame is read into one of its own.
const maxKeptPayload = 4 << 10

// readHeaders reads the rest of a HEADERS frame whose header fh is, and its
// CONTINUATIONs, and decodes the block as the Framer's ReadMetaHeaders
// does, with the same errors: a ConnectionError for a block past twice
// the header list budget or an HPACK error, a StreamError for a malformed
// field or pseudo-field (RFC 9113 §8.2.1, §8.3). CONTINUATION order is
// checked by the Framer's ReadFrameHeader (RFC 9113 §6.10).
func (c *conn) readHeaders(fh http2.FrameHeader) (*headerBlock, error) {
	p, err := c.readPayload(fh)
	if err != nil {
		return nil, err
	}
	if fh.StreamID == 0 {
		return nil, http2.ConnectionError(http2.ErrCodeProtocol) // RFC 9113 §6.2
	}
	var pad int
	if fh.Flags.Has(http2.FlagHeadersPadded) {
		if len(p) < 1 {
			return nil, io.ErrUnexpectedEOF
		}
		pad, p = int(p[0]), p[1:]
	}
	b := &c.hblock
	*b = headerBlock{
		streamID:  fh.StreamID,
		endStream: fh.Flags.Has(http2.FlagHeadersEndStream),
		fields:    b.fields[:0],
	}
	if fh.Flags.Has(http2.FlagHeadersPriority) {
		if len(p) < 5 {
			return nil, io.ErrUnexpectedEOF
		}
		b.hasPriority, b.streamDep = true, binary.BigEndian.Uint32(p)&(1<<31-1)
		p = p[5:]
	}
	if len(p) < pad {
		return nil, http2.StreamError{StreamID: fh.StreamID, Code: http2.ErrCodeProtocol}
	}
	p = p[:len(p)-pad]
	limit := c.srv.maxHeaderBytes()
	b.headersRemain, b.trailersRemain = limit, limit
	c.hdec.SetEmitEnabled(true)
	ended := fh.Flags.Has(http2.FlagHeadersEndHeaders)
	for {
		// A fragment far past what will be accepted is not decoded, nor
		// one after a malformed field: the connection ends.
		if int64(len(p)) > 2*(int64(b.headersRemain)+int64(b.trailersRemain)) || b.invalid {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := c.hdec.Write(p); err != nil {
			return nil, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if ended {
			break
		}
		// ReadFrameHeader lets through only a CONTINUATION of this stream.
		if fh, err = c.fr.ReadFrameHeader(); err != nil {
			return nil, err
		}
		if p, err = c.readPayload(fh); err != nil {
			return nil, err
		}
		ended = fh.Flags.Has(http2.FlagContinuationEndHeaders)
	}
	if err := c.hdec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if b.invalid || !validPseudos(b.pseudoFields()) {
		return nil, http2.StreamError{StreamID: b.streamID, Code: http2.ErrCodeProtocol}
	}
	return b, nil
}

// readPayload reads the payload of the frame whose header fh is into the
// connection's header buffer.
func (c *conn) readPayload(fh http2.FrameHeader) ([]byte, error) {
	n := int(fh.Length)
	var p []byte
	switch {
	case n <= cap(c.hpayload):
		p = c.hpayload[:n]
	case n <= maxKeptPayload:
		c.hpayload = make([]byte, max(n, 512))
		p = c.hpayload[:n]
	default:
		p = make([]byte, n)
	}
	if _, err := io.ReadFull(c.br, p); err != nil {
		return nil, err
	}
	return p, nil
}

// emitField takes one decoded field of c.hblock: it checks it and counts
// it against the header list budget (RFC 9113 §6.5.2), where a "trailer"
// field counts as the fields it declares, as x/net/http2 counts it.
func (c *conn) emitField(hf hpack.HeaderField) {
	b := &c.hblock
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		b.invalid = true
	}
	pseudo := strings.HasPrefix(hf.Name, ":")
	if pseudo {
		if b.sawRegular {
			b.invalid = true // RFC 9113 §8.3: pseudo-fields come first
		}
	} else {
		b.sawRegular = true
		if !validWireFieldName(hf.Name) {
			b.invalid = true
		}
	}
	if b.invalid {
		c.hdec.SetEmitEnabled(false)
		return
	}
	remain, size := &b.headersRemain, hf.Size()
	if hf.Name == "trailer" {
		n := uint32(strings.Count(hf.Value, ",") + 1)
		remain, size = &b.trailersRemain, uint32(len(hf.Value))-n+1+n*hpack.HeaderField{}.Size()
	}
	if size > *remain {
		c.hdec.SetEmitEnabled(false)
		b.truncated = true
		b.headersRemain, b.trailersRemain = 0, 0
		return
	}
	*remain -= size
	b.fields = append(b.fields, hf)
	if pseudo {
		b.npseudo++ // none came after a field, or the block is invalid
	}
}

// validWireFieldName reports whether v is a token in lower case (RFC 9113
// §8.2.1).
func validWireFieldName(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if ch := v[i]; !httpguts.IsTokenRune(rune(ch)) || ('A' <= ch && ch <= 'Z') {
			return false
		}
	}
	return true
}

// validPseudos reports whether the pseudo-fields are known, each at most
// once, and not a request's mixed with a response's (RFC 9113 §8.3).
func validPseudos(pf []hpack.HeaderField) bool {
	var request, response bool
	for i, hf := range pf {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			request = true
		case ":status":
			response = true
		default:
			return false
		}
		for _, prev := range pf[:i] {
			if hf.Name == prev.Name {
				return false
			}
		}
	}
	return !(request && response)
}
