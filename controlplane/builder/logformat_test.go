package builder

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// TestAccessLogFormat: log-format-upstream is parsed once into segments,
// the escape keys choose the escaping (none over json, as ingress-nginx's
// template), and an unknown variable is reported naming it and the key,
// the default format kept.
func TestAccessLogFormat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    map[string]string
		want    model.LogFormat
		bad     []string
		badText string
	}{
		{name: "none", data: map[string]string{}},
		{name: "custom", data: map[string]string{"log-format-upstream": `{"id": "$req_id", "ua": "${http_user_agent}"}`, "log-format-escape-json": "true"},
			want: model.LogFormat{Escape: model.EscapeJSON, Segments: []model.LogSegment{
				{Literal: `{"id": "`}, {Var: model.LogReqID}, {Literal: `", "ua": "`}, {Var: model.LogHTTP, Header: "user_agent"}, {Literal: `"}`}}}},
		{name: "none wins over json", data: map[string]string{"log-format-escape-json": "true", "log-format-escape-none": "true"},
			want: model.LogFormat{Escape: model.EscapeNone}},
		{name: "unknown variable", data: map[string]string{"log-format-upstream": "$status $upstream_cache_status", "log-format-escape-json": "true"},
			want: model.LogFormat{Escape: model.EscapeJSON}, bad: []string{"log-format-upstream"}, badText: "unknown variable $upstream_cache_status"},
		{name: "dollar without a name", data: map[string]string{"log-format-upstream": "$status $"},
			bad: []string{"log-format-upstream"}, badText: "starts no variable name"},
		{name: "escape not a boolean", data: map[string]string{"log-format-escape-json": "yes"},
			bad: []string{"log-format-escape-json"}, badText: `"yes" is not true or false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bad []string
			var msgs string
			got := accessLogFormat(tc.data, func(key, msg string) { bad = append(bad, key); msgs += msg })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("format (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.bad, bad); diff != "" {
				t.Errorf("reported keys (-want +got):\n%s", diff)
			}
			if !strings.Contains(msgs, tc.badText) {
				t.Errorf("messages %q; want them to say %q", msgs, tc.badText)
			}
		})
	}
}
