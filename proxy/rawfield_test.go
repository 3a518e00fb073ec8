package proxy

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// peekSentNames are the names peekSent and rawMayHold are used with, and
// others fasthttp keeps with the other fields.
var peekSentNames = []string{"Upgrade", "Authorization", "X-Request-ID", "Referer", "X-Forwarded-For"}

// checkPeekSent parses head with fasthttp and fails unless peekSent
// answers as Peek for every name of peekSentNames.
func checkPeekSent(t *testing.T, head string) {
	t.Helper()
	var h fasthttp.RequestHeader
	if err := h.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
		return // fasthttp refuses it: the proxy never sees it
	}
	for _, name := range peekSentNames {
		if got, want := peekSent(&h, name), h.Peek(name); !bytes.Equal(got, want) {
			t.Errorf("%q: peekSent(%s) = %q; Peek = %q", head, name, got, want)
		}
	}
}

// peekSent answers as fasthttp's Peek: a field in any case, with blanks
// before the colon, among fields whose names start alike, folded lines,
// the last line.
func TestPeekSent(t *testing.T) {
	for _, head := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
		"GET / HTTP/1.1\r\nhost: a\r\nupgrade: h2c\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUPGRADE:x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade-Insecure-Requests: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-Upgrade: 1\r\nAuthorizations: 2\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Basic YTpi\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-Foo: a\r\n Upgrade: folded\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade : spaced\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\nReferer: http://r/\nX-Request-Id: 1\n\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade:\r\nUpgrade: second\r\n\r\n",
	} {
		checkPeekSent(t, head)
	}
	// Which heads the scan spares the lookup.
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{"Host: a\r\nUser-Agent: wrk\r\n\r\n", false},
		{"Host: a\r\nupgrade: x\r\n\r\n", true},
		{"Host: a\r\nUpgrade-Insecure-Requests: 1\r\n\r\n", false},
		{"Host: a\r\n Upgrade: folded\r\n\r\n", false},
		{"Upgrade\t: x\r\n", true},
		{"", true}, // no raw head: looked up
	} {
		if got := rawMayHold([]byte(tc.raw), "Upgrade"); got != tc.want {
			t.Errorf("rawMayHold(%q, Upgrade) = %v; want %v", tc.raw, got, tc.want)
		}
	}
}

// FuzzPeekSent: for any head fasthttp takes, peekSent answers as Peek.
func FuzzPeekSent(f *testing.F) {
	f.Add("Host: a\r\nUpgrade: websocket\r\n")
	f.Add("Host: a\r\nauthorization: Basic x\r\nX-Request-Id: 7\r\n")
	f.Add("Host: a\r\nX-Foo: 1\r\n Upgrade: folded\r\n")
	f.Fuzz(func(t *testing.T, fields string) {
		checkPeekSent(t, "GET / HTTP/1.1\r\n"+fields+"\r\n\r\n")
	})
}

// dropsResponseField answers as isHopField || nginxHides for every name
// either lists, in three cases, with and without keepTrailer, and for
// names of the same lengths that neither lists.
func TestDropsResponseField(t *testing.T) {
	var names []string
	for _, n := range append(hopHeaders[:], nginxHidden[:]...) {
		names = append(names, n, strings.ToLower(n), strings.ToUpper(n), n[:len(n)-1]+"x", "x"+n[1:])
	}
	names = append(names, "", "Content-Type", "Set-Cookie", "X-Accel-Other", "Dates")
	for _, n := range names {
		for _, keep := range []bool{false, true} {
			want := isHopField([]byte(n), keep) || nginxHides(n)
			if got := dropsResponseField([]byte(n), keep); got != want {
				t.Errorf("dropsResponseField(%q, %v) = %v; want %v", n, keep, got, want)
			}
		}
	}
}
