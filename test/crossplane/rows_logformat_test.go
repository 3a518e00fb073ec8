package crossplane

// The access log's format: log-format-upstream with
// log-format-escape-json, the whole line checked on both planes; and a
// format naming a variable neither plane knows, reported and replaced by
// the default format.
var _ = register(Row{
	Name: "log-format-upstream escape-json",
	ConfigMap: map[string]string{
		"log-format-upstream": `{"id": "$req_id", "status": $status, "request": "$request", "method": "$request_method", ` +
			`"uri": "$uri", "args": "$args", "host": "$host", "ns": "$namespace", "ingress": "$ingress_name", ` +
			`"service": "$service_name", "port": "$service_port", "upstream": "$proxy_upstream_name", ` +
			`"ua": "$http_user_agent", "absent": "$http_x_absent", "user": "$remote_user", "time": $request_time}`,
		"log-format-escape-json": "true",
	},
	Manifests: `{{service "a" "lfmt" "demo"}}` + ingress("lfmt", "lfmt.test", "lfmt", root),
	Requests: []Request{
		{Name: "a JSON line", Host: "lfmt.test", Path: "/x%22y?a=1",
			Header: map[string]string{"X-Request-ID": "lfmt-json-1", "User-Agent": `ua "quoted" \back café`},
			Want: Want{Status: 200, Backend: "a", Logged: logged,
				LogLine: `^\{"id": "lfmt-json-1", "status": 200, "request": "GET /x%22y\?a=1 HTTP/1\.1", "method": "GET", ` +
					`"uri": "/x\\"y", "args": "a=1", "host": "lfmt\.test", "ns": "demo", "ingress": "lfmt", ` +
					`"service": "lfmt", "port": "http", "upstream": "demo-lfmt-http", ` +
					`"ua": "ua \\"quoted\\" \\\\back café", "absent": "", "user": "", "time": \d+\.\d{3}\}$`}},
	},
}, Row{
	Name:      "log-format-upstream with an unknown variable",
	ConfigMap: map[string]string{"log-format-upstream": `$status $upstream_cache_status`},
	Manifests: `{{service "a" "lfmtbad" "demo"}}` + ingress("lfmtbad", "lfmtbad.test", "lfmtbad", root),
	Requests: []Request{
		// The default format (upstreaminfo) is kept.
		{Name: "the default format", Host: "lfmtbad.test", Path: "/q?b=2",
			Header: map[string]string{"X-Request-ID": "lfmt-bad-1", "User-Agent": `ua "q"`},
			Want: Want{Status: 200, Backend: "a", Logged: logged,
				LogLine: `^\S+ - - \[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "GET /q\?b=2 HTTP/1\.1" 200 \d+ "-" "ua \\x22q\\x22" ` +
					`\d+ \d+\.\d{3} \[demo-lfmtbad-http\] \[\] \S+ \d+ \d+\.\d{3} 200 lfmt-bad-1$`}},
	},
})
