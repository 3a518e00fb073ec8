package model

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLogFormat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []LogSegment
		err  string
	}{
		{in: `$remote_addr "$request" ${status}x`, want: []LogSegment{{Var: LogRemoteAddr}, {Literal: ` "`}, {Var: LogRequest},
			{Literal: `" `}, {Var: LogStatus}, {Literal: "x"}}},
		{in: `$HTTP_X_Request_ID|$sent_http_content_type`, want: []LogSegment{{Var: LogHTTP, Header: "x_request_id"}, {Literal: "|"},
			{Var: LogSentHTTP, Header: "content_type"}}},
		// nginx's quoted-string escapes are taken out first; an unknown
		// one stays.
		{in: `a\tb\"c\\d\x$status`, want: []LogSegment{{Literal: "a\tb\"c\\d\\x"}, {Var: LogStatus}}},
		{in: `$status-$`, err: "starts no variable name"},
		{in: `${status`, err: "closing brace of ${status is missing"},
		{in: `$upstream_cache_status`, err: "unknown variable $upstream_cache_status"},
		{in: `$http_`, err: "unknown variable $http_"},
		{in: "\x00", err: "not printable ASCII"},
		{in: "", err: "empty"},
		{in: strings.Repeat("x", maxLogFormat+1), err: "longer than"},
	} {
		got, err := ParseLogFormat(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseLogFormat(%q) = %v, %v; want an error saying %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseLogFormat(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseLogFormat(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
	if got := LogFormatText(DefaultLogFormat); got != DefaultLogFormatText {
		t.Errorf("the default format written back: %q; want %q", got, DefaultLogFormatText)
	}
}

// FuzzParseLogFormat: a format that parses is valid segments, reads back
// the same from its text (quoted as nginx.conf holds it) and from JSON.
func FuzzParseLogFormat(f *testing.F) {
	f.Add(DefaultLogFormatText)
	f.Fuzz(func(t *testing.T, s string) {
		segs, err := ParseLogFormat(s)
		if err != nil {
			return
		}
		if !ValidLogFormatSegments(segs) {
			t.Fatalf("ParseLogFormat(%q) = %#v, not valid segments", s, segs)
		}
		text := LogFormatText(segs)
		again, err := ParseLogFormat(strings.ReplaceAll(text, `\`, `\\`))
		if err != nil && len(text) <= maxLogFormat/2 {
			t.Fatalf("the text %q of %q does not parse: %v", text, s, err)
		}
		if err == nil && !cmp.Equal(segs, again) {
			t.Fatalf("%q read back from %q:\n%s", s, text, cmp.Diff(segs, again))
		}
		b, err := json.Marshal(LogFormat{Segments: segs})
		if err != nil {
			t.Fatal(err)
		}
		var back LogFormat
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(segs, back.Segments) {
			t.Fatalf("JSON %s read back:\n%s", b, cmp.Diff(segs, back.Segments))
		}
	})
}
