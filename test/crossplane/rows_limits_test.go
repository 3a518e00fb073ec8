package crossplane

import "time"

// hold asks the echo backend to keep its answer in progress for ms
// milliseconds, under the request ID id (a Background request).
func hold(id, ms string) map[string]string {
	return map[string]string{"X-Request-ID": id, "X-Answer-Drip-Ms": ms}
}

// padded asks the echo backend for an answer about n bytes long.
func padded(n string) map[string]string { return map[string]string{"X-Answer-Pad-Bytes": n} }

// limit-connections (nginx's limit_conn as ingress-nginx writes it): the
// requests in progress of one client address, in the Ingress's zone.
var _ = register(
	Row{
		Name: "limit-connections: requests in progress per client address",
		Manifests: `{{service "a" "limitconn" "demo"}}` +
			ingress("limitconn", "limitconn.test", "limitconn", []string{"/", "/api"},
				"limit-connections", "1", "limit-allowlist", "127.0.0.52"),
		Requests: []Request{
			{Name: "a request in progress", Host: "limitconn.test", Path: "/", From: "127.0.0.51", Background: true,
				Header: hold("limitconn-held", "1500"), Want: Want{Status: 200, Backend: "a"}},
			{Name: "a second from the same address", Host: "limitconn.test", Path: "/", From: "127.0.0.51", Want: Want{Status: 503}},
			{Name: "the Ingress's other path shares the zone", Host: "limitconn.test", Path: "/api/x", From: "127.0.0.51", Want: Want{Status: 503}},
			{Name: "another address", Host: "limitconn.test", Path: "/", From: "127.0.0.53", Want: Want{Status: 200, Backend: "a"}},
			{Name: "an allowlisted address in progress", Host: "limitconn.test", Path: "/", From: "127.0.0.52", Background: true,
				Header: hold("limitconn-allowed", "1500"), Want: Want{Status: 200, Backend: "a"}},
			{Name: "an allowlisted address is not counted", Host: "limitconn.test", Path: "/", From: "127.0.0.52", Want: Want{Status: 200, Backend: "a"}},
			{Name: "once the first answer has ended", Host: "limitconn.test", Path: "/", From: "127.0.0.51", Retry: 3 * time.Second,
				Want: Want{Status: 200, Backend: "a"}},
			{Name: "a client gone mid-answer", Host: "limitconn.test", Path: "/", From: "127.0.0.54", Background: true, Abandon: true,
				Header: hold("limitconn-gone", "4000"), Want: Want{Status: 200}},
			// The backend would go on for 4 s: within 1 s the address's
			// count must have ended with its client.
			{Name: "its count ends with it", Host: "limitconn.test", Path: "/", From: "127.0.0.54", Retry: time.Second,
				Want: Want{Status: 200, Backend: "a"}},
		},
	},
	// nginx applies limit_rate to buffered upstream answers only: with
	// ingress-nginx's default proxy-buffering "off" limit-rate does nothing
	// (its documentation says it needs proxy-buffering).
	Row{
		Name: "limit-rate and limit-rate-after (KiB a second per answer, with proxy-buffering)",
		Manifests: `{{service "a" "limitrate" "demo"}}` +
			ingress("limitrate", "limitrate.test", "limitrate", root, "limit-rate", "500", "proxy-buffering", "on") +
			ingress("limitrateafter", "limitrateafter.test", "limitrate", root, "limit-rate", "500", "limit-rate-after", "300",
				"proxy-buffering", "on") +
			ingress("limitrateunbuf", "limitrateunbuf.test", "limitrate", root, "limit-rate", "500") +
			ingress("limitratefree", "limitratefree.test", "limitrate", root),
		Requests: []Request{
			{Name: "not paced without proxy-buffering", Host: "limitrateunbuf.test", Path: "/", Header: padded("400000"),
				Want: Want{Status: 200, Backend: "a", TookAtMost: 450 * time.Millisecond}},
			// 400 000 bytes (390 KiB) at 500 KiB a second.
			{Name: "paced", Host: "limitrate.test", Path: "/", Header: padded("400000"),
				Want: Want{Status: 200, Backend: "a", TookAtLeast: 500 * time.Millisecond, TookAtMost: 1500 * time.Millisecond}},
			// The first 300 KiB unpaced: 90 KiB at 500 KiB a second (nginx
			// took 30-160 ms, the Go plane about 170 ms).
			{Name: "paced after 300 KiB", Host: "limitrateafter.test", Path: "/", Header: padded("400000"),
				Want: Want{Status: 200, Backend: "a", TookAtMost: 550 * time.Millisecond}},
			{Name: "not paced", Host: "limitratefree.test", Path: "/", Header: padded("400000"),
				Want: Want{Status: 200, Backend: "a", TookAtMost: 450 * time.Millisecond}},
		},
	},
	Row{
		Name: "the ConfigMap's limit-conn-status-code, limit-rate and limit-rate-after",
		ConfigMap: map[string]string{"limit-conn-status-code": "429", "limit-req-status-code": "430",
			"limit-rate": "500", "limit-rate-after": "100", "proxy-buffering": "on"},
		Manifests: `{{service "a" "limitcm" "demo"}}` +
			ingress("limitcm", "limitcm.test", "limitcm", root, "limit-connections", "1") +
			ingress("limitcmfree", "limitcmfree.test", "limitcm", root, "limit-rate", "0") +
			ingress("limitcmbad", "limitcmbad.test", "limitcm", root, "limit-rate", "fast") +
			ingress("limitorder", "limitorder.test", "limitcm", root, "limit-connections", "1", "limit-rps", "1",
				"limit-burst-multiplier", "0"),
		Requests: []Request{
			{Name: "a request in progress", Host: "limitcm.test", Path: "/", From: "127.0.0.55", Background: true,
				Header: hold("limitcm-held", "1000"), Want: Want{Status: 200, Backend: "a"}},
			{Name: "limit-conn-status-code", Host: "limitcm.test", Path: "/", From: "127.0.0.55", Want: Want{Status: 429}},
			// Both limits would refuse the next request: its status says
			// nginx runs limit_req before limit_conn.
			{Name: "limit-rps and limit-connections: one in progress", Host: "limitorder.test", Path: "/", From: "127.0.0.57",
				Background: true, Header: hold("limitorder-held", "1000"), Want: Want{Status: 200, Backend: "a"}},
			{Name: "limit_req answers first", Host: "limitorder.test", Path: "/", From: "127.0.0.57", Want: Want{Status: 430}},
			// 290 KiB past the first 100 at 500 KiB a second.
			{Name: "the ConfigMap's limit-rate", Host: "limitcm.test", Path: "/", From: "127.0.0.56", Header: padded("400000"),
				Want: Want{Status: 200, Backend: "a", TookAtLeast: 350 * time.Millisecond, TookAtMost: 1200 * time.Millisecond}},
			// limit-rate shapes bandwidth and grants no access: an invalid
			// value is reported and the default kept, as ingress-nginx does.
			{Name: "an invalid limit-rate: the ConfigMap's kept", Host: "limitcmbad.test", Path: "/", From: "127.0.0.58", Header: padded("400000"),
				Want: Want{Status: 200, Backend: "a", TookAtLeast: 350 * time.Millisecond, TookAtMost: 1200 * time.Millisecond}},
			{Name: "limit-rate 0 on the Ingress", Host: "limitcmfree.test", Path: "/", From: "127.0.0.56", Header: padded("400000"),
				Want: Want{Status: 200, Backend: "a", TookAtMost: 450 * time.Millisecond}},
		},
	},
)
