package picksock

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// FuzzDecodeRequest: any bytes either fail to decode or decode to a frame
// whose fields all lie inside the input; a decoded pick, lease, counts or
// requests frame re-encodes to the same bytes, and a requests frame's
// connect times are consistent (no more samples than connect times, no
// more connect times than requests, samples within their sum), and so are
// a counts frame's (no more failures than attempts, timings of the
// successful ones only).
func FuzzDecodeRequest(f *testing.F) {
	f.Add(AppendPick(nil, 1, "default-web-80", "request_uri", "/a", "https", "on"))
	f.Add(AppendDone(nil, "b", "127.0.0.2:80", 1, 2, 3, 502, true))
	f.Add(AppendNeedVars(nil, 3, "b"))
	f.Add(AppendNeedVars(nil, 3, HelloRoutes))
	f.Add(AppendRoute(nil, 11, "default-web-80", "http_x_canary", "yes", "request_uri", "/a"))
	f.Add(AppendLease(nil, 4, "b", 64))
	f.Add(AppendCounts(nil, "b", "127.0.0.2:80", 9, 1))
	f.Add(AppendTimedCounts(nil, "b", "127.0.0.2:80", 9, 1, 1<<33+8, 1<<30))
	f.Add(AppendRequests(nil, "h\t200\tGET\t/\tns\ting\tsvc\t", 3, 1<<33+5, []uint32{1, 2, 0}))
	f.Add(AppendRequestsConnect(nil, "h\t200\tGET\t/\tns\ting\tsvc\t", 3, 1<<33+5, []uint32{1, 2, 0}, ConnectTimes{3, 6, []uint32{1, 2, 3}}))
	f.Add(AppendRequestsConnect(nil, "\t502\tGET\t/\tns\ting\tsvc\tcanary", 9, 9, []uint32{9}, ConnectTimes{5, 1 << 33, []uint32{7, 1 << 31}}))
	f.Add(AppendSubscribe(nil))
	f.Add(AppendTable(nil, 5, "b", 10900))
	f.Add(AppendPremade(nil, 6, "b", 256))
	f.Add([]byte{0, 0, 0, 6, 1, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var q Request
		if err := DecodeRequest(b, &q); err != nil {
			return
		}
		switch q.Type {
		case TypeLease:
			if re := AppendLease(nil, q.ID, string(q.Backend), q.Count); !bytes.Equal(re, b) {
				t.Fatalf("lease re-encode differs:\n%x\n%x", re, b)
			}
		case TypeTable:
			if re := AppendTable(nil, q.ID, string(q.Backend), q.Offset); !bytes.Equal(re, b) {
				t.Fatalf("table re-encode differs:\n%x\n%x", re, b)
			}
		case TypePremade:
			if re := AppendPremade(nil, q.ID, string(q.Backend), q.Count); !bytes.Equal(re, b) {
				t.Fatalf("premade re-encode differs:\n%x\n%x", re, b)
			}
		case TypeRequests:
			if q.NSamples > int(q.ConnCount) || q.ConnCount > q.Requests {
				t.Fatalf("accepted %d samples of %d connect times of %d requests", q.NSamples, q.ConnCount, q.Requests)
			}
			var sum uint64
			for _, s := range q.Samples[:q.NSamples] {
				sum += uint64(s)
			}
			if sum > q.ConnSumUS {
				t.Fatalf("accepted samples adding up to %d µs of connect times adding up to %d", sum, q.ConnSumUS)
			}
			// Either form may carry zero connect times: the length tells.
			re := AppendRequests(nil, string(q.Labels), q.Requests, q.SumUS, q.Buckets[:q.NBuckets])
			if len(re) != len(b) {
				re = AppendRequestsConnect(nil, string(q.Labels), q.Requests, q.SumUS, q.Buckets[:q.NBuckets],
					ConnectTimes{q.ConnCount, q.ConnSumUS, q.Samples[:q.NSamples]})
			}
			copy(re[6:10], b[6:10])
			if len(q.Backend) == 0 && !bytes.Equal(re, b) {
				t.Fatalf("requests re-encode differs:\n%x\n%x", re, b)
			}
		case TypeCounts:
			if q.FailedN > q.Completed || q.Timed && (uint64(q.RTTMaxUS) > q.RTTSumUS || q.RTTSumUS > uint64(q.Completed-q.FailedN)*uint64(q.RTTMaxUS)) {
				t.Fatalf("accepted counts %+v", q)
			}
			re := AppendCounts(nil, string(q.Backend), string(q.Peer), q.Completed, q.FailedN)
			if q.Timed {
				re = AppendTimedCounts(nil, string(q.Backend), string(q.Peer), q.Completed, q.FailedN, q.RTTSumUS, q.RTTMaxUS)
			}
			copy(re[6:10], b[6:10]) // feedback frames carry no id; any is accepted
			if !bytes.Equal(re, b) {
				t.Fatalf("counts re-encode differs:\n%x\n%x", re, b)
			}
		}
		if q.Type == TypePick || q.Type == TypeRoute {
			vars := make([]string, 0, 2*q.NVars)
			for i := 0; i < q.NVars; i++ {
				vars = append(vars, string(q.Vars[i].Name), string(q.Vars[i].Value))
			}
			re := AppendPick(nil, q.ID, string(q.Backend), vars...)
			if q.Type == TypeRoute {
				re = AppendRoute(nil, q.ID, string(q.Backend), vars...)
			}
			if !bytes.Equal(re, b) {
				t.Fatalf("re-encode differs:\n%x\n%x", re, b)
			}
		}
	})
}

// FuzzDecodeVarsReply: any bytes either fail to decode as a backend-info
// reply or decode to an info that survives the wire unchanged (the server's
// own flags aside); a route section is checked as the shim checks it.
func FuzzDecodeVarsReply(f *testing.F) {
	f.Add(AppendInfoReply(nil, 1, BackendInfo{Gen: 7, Leasable: true, Vars: []string{"request_uri"}, Peers: []string{"10.0.0.1:80"}}))
	f.Add(AppendInfoReply(nil, 2, BackendInfo{Gen: 8, HashTable: true, Premade: true, Vars: []string{"http_cookie", "http_x_canary"},
		Peers: []string{"10.0.0.1:80", "10.0.0.2:80"}, Route: &balancer.Route{Alternative: "canary", PrimaryCookie: "route",
			PrimaryKey: balancer.BackendKey("main"), AltCookie: "route", AltKey: balancer.BackendKey("canary"), Header: balancer.HeaderValue,
			HeaderVar: "http_x_canary", HeaderValueText: "yes", CookieVar: "cookie_canary", Weight: 30, Total: 100,
			PrimaryOwn: balancer.OwnSticky, AltOwn: balancer.OwnSticky}}))
	f.Add(AppendInfoReply(nil, 3, BackendInfo{Gen: 9, Premade: true, Peers: []string{"10.0.0.1:80"},
		Route: &balancer.Route{Header: balancer.HeaderPattern, HeaderVar: "http_x", Weight: 0, Total: 100, PrimaryOwn: balancer.OwnLease}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, info, err := DecodeVarsReply(b)
		if err != nil {
			return
		}
		if rt := info.Route; rt != nil {
			if rt.Total <= 0 || rt.Weight < 0 || rt.PrimaryOwn == 0 || rt.PrimaryOwn > balancer.OwnPicks || (rt.AltOwn == 0) != (rt.Alternative == "") {
				t.Fatalf("accepted route %+v", rt)
			}
		}
		_, again, err := DecodeVarsReply(AppendInfoReply(nil, 1, info))
		info.ConnectSamples, info.Tables, info.TimedCounts = true, true, true
		if err != nil || !reflect.DeepEqual(again, info) {
			t.Fatalf("info %+v after the wire: %+v %v", info, again, err)
		}
	})
}
