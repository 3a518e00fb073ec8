package proxy

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// logCompareFormat reads every variable both planes write; those whose
// values differ by nature between two servers (clocks, durations, the
// process, the connection, the response head nginx writes itself) sit
// between << and >> and are masked.
const logCompareFormat = `$remote_addr|$remote_user|$request|$status|$body_bytes_sent|$http_referer|$http_user_agent|` +
	`[$proxy_upstream_name]|[$proxy_alternative_upstream_name]|$upstream_addr|$upstream_response_length|$upstream_status|` +
	`$req_id|$host|$request_method|$request_uri|$uri|$document_uri|$args|$query_string|$is_args|$scheme|$https|` +
	`$server_protocol|$server_name|$namespace|$ingress_name|$service_name|$service_port|$the_real_ip|` +
	`$proxy_add_x_forwarded_for|$http_x_hostile|$HTTP_X_REQUEST_ID|${http_x_absent}x|$sent_http_content_type|` +
	`$sent_http_x_absent|$hostname|$request_length|` +
	`<<$time_local>> <<$time_iso8601>> <<$msec>> <<$request_time>> <<$upstream_response_time>> ` +
	`<<$upstream_connect_time>> <<$upstream_header_time>> <<$bytes_sent>> <<$connection>> ` +
	`<<$connection_requests>> <<$pid>> "quoted \ text"`

// logMask masks the values between << and >>, and in the default format
// the time and the durations.
var logMask = regexp.MustCompile(`<<[^>]*>>|\[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\]|\b\d+\.\d{3}\b`)

// TestAccessLogAgainstNginx: the real nginx, configured as ingress-nginx
// writes a location (the $namespace, $proxy_upstream_name... it sets, the
// $req_id map) with the same log_format, and the proxy log the same
// requests to the same backend alike: the default format, and a custom
// one with every variable under each escape mode, for requests with
// hostile bytes (quotes, backslash, UTF-8, control bytes) in a field, the
// path and the query. Skipped without an nginx binary.
func TestAccessLogAgainstNginx(t *testing.T) {
	bin := nginxBinary(t)
	peer := fixedBackend(t, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=\"utf-8\"\r\nContent-Length: 5\r\n\r\nhello")
	// fasthttp refuses control bytes other than tab in a field (400, a
	// difference of the Go plane's own); they reach the log through the
	// decoded path ($uri) instead.
	hostile := "ua \"quoted\" \\back\\ caf\xc3\xa9 \ttab 'single' {}"
	var every strings.Builder
	for c := 1; c < 256; c++ {
		if c != '/' && c != '?' && c != '#' {
			fmt.Fprintf(&every, "%%%02X", c)
		}
	}
	user := base64.StdEncoding.EncodeToString([]byte("us\"er\\\xc3\xa9:pw"))
	requests := map[string]string{
		"plain": "GET / HTTP/1.1\r\nHost: log.test\r\nX-Request-ID: rid-plain\r\nConnection: close\r\n\r\n",
		"hostile": "GET /p%22q/%C3%A9/a?x=%22%5C&y=caf%C3%A9 HTTP/1.1\r\nHost: LOG.test:80\r\nX-Request-ID: rid-\"hostile\"\r\n" +
			"User-Agent: " + hostile + "\r\nX-Hostile: " + hostile + "\r\nReferer: http://ref.test/\"x\"\r\n" +
			"Authorization: Basic " + user + "\r\nX-Forwarded-For: 10.0.0.1, \"bad\"\r\nConnection: close\r\n\r\n",
		"every byte in the path": "GET /" + every.String() + " HTTP/1.1\r\nHost: log.test\r\nX-Request-ID: rid-4\r\nConnection: close\r\n\r\n",
		"no user name": "GET /?a HTTP/1.1\r\nHost: log.test\r\nX-Request-ID: rid-3\r\nAuthorization: Basic " +
			base64.StdEncoding.EncodeToString([]byte("nocolon")) + "\r\nConnection: close\r\n\r\n",
	}
	for _, tc := range []struct {
		name, format string
		escape       model.LogEscape
	}{
		{"default format", model.DefaultLogFormatText, model.EscapeDefault},
		{"custom format", logCompareFormat, model.EscapeDefault},
		{"custom format escape=json", logCompareFormat, model.EscapeJSON},
		{"custom format escape=none", logCompareFormat, model.EscapeNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			segs, err := model.ParseLogFormat(tc.format)
			if err != nil {
				t.Fatal(err)
			}
			escape := ""
			if tc.escape != model.EscapeDefault {
				escape = "escape=" + string(tc.escape) + " "
			}
			logPath := filepath.Join(t.TempDir(), "access.log")
			nginxAddr := startNginx(t, bin, `log_format t `+escape+`'`+strings.ReplaceAll(tc.format, `\`, `\\`)+`';
    map $http_x_request_id $req_id {
        default $http_x_request_id;
        '' $request_id;
    }
    map '' $the_real_ip {
        default $remote_addr;
    }`, `server_name log.test;
        access_log `+logPath+` t;
        location / {
            set $namespace "ns";
            set $ingress_name "ing";
            set $service_name "svc";
            set $service_port "80";
            set $proxy_upstream_name "ns-svc-80";
            set $proxy_alternative_upstream_name "";
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://`+peer+`;
        }`)
			l := loc("/", model.PathTypePrefix, "ns-svc-80")
			l.Ingress = model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "ing"}
			l.Service, l.ServicePort = "svc", "80"
			cfg := &model.Configuration{
				Backends: []*model.Backend{{Name: "ns-svc-80", Endpoints: endpoints(peer)}},
				Servers:  []model.Server{{Hostname: "log.test", Locations: []model.Location{l}}},
				Global:   model.Global{AccessLogFormat: model.LogFormat{Segments: segs, Escape: tc.escape}},
			}
			var goLog lockedBuffer
			p, _ := newProxy(t, cfg, Config{AccessLog: &goLog})
			goAddr := serve(t, p.Serve)
			for name, raw := range requests {
				before, goBefore := len(fileLines(t, logPath)), logLines(&goLog)
				// No half-close: nginx would take it for the client gone.
				if got, want := answerOf(t, goAddr, raw), answerOf(t, nginxAddr, raw); got != want {
					t.Fatalf("%s: answered %q; nginx %q", name, got, want)
				}
				waitFor(t, func() bool { return len(fileLines(t, logPath)) > before && logLines(&goLog) > goBefore })
				nl, gl := fileLines(t, logPath), goLog.lines()
				nginxLine, goLine := nl[len(nl)-1], gl[len(gl)-1]
				if logMask.ReplaceAllString(goLine, "T") != logMask.ReplaceAllString(nginxLine, "T") {
					t.Errorf("%s:\n Go:    %q\n nginx: %q", name, goLine, nginxLine)
				}
			}
		})
	}
}

// fixedBackend answers every request on a loopback port with resp, whatever
// bytes its fields hold, keeping the connection open.
func fixedBackend(t *testing.T, resp string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveRaw(c, resp)
		}
	}()
	return ln.Addr().String()
}

func serveRaw(c net.Conn, resp string) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		// Heads only (the requests have no body), read up to the blank
		// line without judging the fields.
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" {
				break
			}
		}
		if _, err := c.Write([]byte(resp)); err != nil {
			return
		}
	}
}
