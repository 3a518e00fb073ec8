package proxy

import (
	"encoding/base64"
	"regexp"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// TestHTTP2LogFormat: an HTTP/2 request is logged in a custom format as an
// HTTP/1.1 one is, from net/http's request and response: fields found in
// their canonical names, $scheme https, the path and query apart, the
// Basic user, and "-" for the connection counters it does not track.
func TestHTTP2LogFormat(t *testing.T) {
	cfg, a := shopConfig(t)
	segs, err := model.ParseLogFormat(`$scheme|$https|$server_protocol|$host|$uri|$args|$is_args|$http_x_tenant|$HTTP_X_ABSENT|` +
		`$sent_http_content_type|$remote_user|$connection|$connection_requests|$upstream_addr|$namespace|$service_name|$req_id`)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Global.AccessLogFormat = model.LogFormat{Segments: segs, Escape: model.EscapeDefault}
	var log lockedBuffer
	base := h2Proxy(t, cfg, Config{AccessLog: &log})
	c := h2Client(t)
	h2Do(t, c, "GET", base+"/shop/cart?id=1", "M.test:443", nil, map[string]string{"X-Tenant": `t "1"`, "X-Request-ID": "rid-h2",
		"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pw"))})
	lines := log.lines()
	re := regexp.MustCompile(`^https\|on\|HTTP/2\.0\|m\.test\|/shop/cart\|id=1\|\?\|t \\x221\\x22\|-\|[^|]+\|alice\|-\|-\|` +
		regexp.QuoteMeta(a) + `\|prod\|web\|rid-h2$`)
	if len(lines) != 1 || !re.MatchString(lines[0]) {
		t.Errorf("logged %q; want one line matching %s", lines, re)
	}
}
