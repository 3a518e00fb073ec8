package crossplane

// The access log: enable-access-log and skip-access-log-urls, checked in
// the controller's output, where both planes write it.
var _ = register(Row{
	Name:      "enable-access-log and skip-access-log-urls",
	ConfigMap: map[string]string{"skip-access-log-urls": "/healthz, /ping?probe=1"},
	Manifests: `{{service "a" "alog" "demo"}}` +
		ingress("alog", "alog.test", "alog", root) +
		ingress("alogoff", "alogoff.test", "alog", root, "enable-access-log", "false"),
	Requests: []Request{
		{Name: "logged", Host: "alog.test", Path: "/x", Header: map[string]string{"X-Request-ID": "alog-logged-1"},
			Want: Want{Status: 200, Backend: "a", Logged: logged}},
		{Name: "enable-access-log false", Host: "alogoff.test", Path: "/x", Header: map[string]string{"X-Request-ID": "alog-off-1"},
			Want: Want{Status: 200, Backend: "a", Logged: notLogged}},
		{Name: "a skipped URL", Host: "alog.test", Path: "/healthz", Header: map[string]string{"X-Request-ID": "alog-skip-1"},
			Want: Want{Status: 200, Backend: "a", Logged: notLogged}},
		{Name: "a skipped URL with its query", Host: "alog.test", Path: "/ping?probe=1", Header: map[string]string{"X-Request-ID": "alog-skip-2"},
			Want: Want{Status: 200, Backend: "a", Logged: notLogged}},
		// The whole request URI must match, as nginx's map on $request_uri.
		{Name: "another query is logged", Host: "alog.test", Path: "/ping?probe=2", Header: map[string]string{"X-Request-ID": "alog-skip-3"},
			Want: Want{Status: 200, Backend: "a", Logged: logged}},
	},
})
