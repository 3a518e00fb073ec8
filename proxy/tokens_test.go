package proxy

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// tokenListHasSplit is the obvious implementation tokenListHas must agree
// with: split on commas, drop parameters, trim, compare ignoring case.
func tokenListHasSplit(v []byte, tok string) bool {
	for _, t := range strings.Split(string(v), ",") {
		if i := strings.IndexByte(t, ';'); i >= 0 {
			t = t[:i]
		}
		if strings.EqualFold(strings.TrimSpace(t), tok) {
			return true
		}
	}
	return false
}

// FuzzTokenListHas: the allocation-free token scanner agrees with the
// split-based one on any header value, and upgradeProtocol never panics on
// any Connection/Upgrade pair.
func FuzzTokenListHas(f *testing.F) {
	for _, s := range []string{"trailers", "deflate, trailers;q=0.5", " Upgrade ,keep-alive", ",,", "upgrade;", "TRAILERS", ""} {
		f.Add(s, "trailers")
		f.Add(s, "upgrade")
	}
	f.Fuzz(func(t *testing.T, v, tok string) {
		if tok == "" || strings.ContainsAny(tok, ",;") || strings.TrimSpace(tok) != tok {
			return // tokens are never written with separators or padding
		}
		if got, want := tokenListHas([]byte(v), tok), tokenListHasSplit([]byte(v), tok); got != want {
			t.Fatalf("tokenListHas(%q, %q) = %t; want %t", v, tok, got, want)
		}
		var h fasthttp.RequestHeader
		h.Set("Connection", v)
		h.Set("Upgrade", tok)
		_ = upgradeProtocol(&h)
	})
}

func TestTokenListHasAllocs(t *testing.T) {
	v := []byte("deflate, gzip;q=0.5, Trailers")
	if n := testing.AllocsPerRun(100, func() { _ = tokenListHas(v, "trailers") }); n != 0 {
		t.Errorf("tokenListHas: got %v allocs; want 0", n)
	}
}
