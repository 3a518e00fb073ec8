package crossplane

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// MirrorWant is what the mirror recorder must have got for a request
// (Want.Mirror): every copy carrying the request's X-Request-ID must be
// this one, and at least one must come; None: none may come.
type MirrorWant struct {
	None    bool
	Method  string
	URI     string
	Host    string
	BodyLen int
	// Sent are request fields the copy must have got; "" means absent.
	Sent map[string]string
}

// mirrorCopy is one request the recorder got.
type mirrorCopy struct {
	Method, URI, Host string
	BodyLen           int
	Sent              map[string]string
}

// mirrorRecorder is a mirror target on its own loopback address
// (127.0.0.30): it answers 200 and keeps what it got by X-Request-ID.
type mirrorRecorder struct {
	addr string
	mu   sync.Mutex
	got  map[string][]mirrorCopy // guarded by mu
}

// mirrorSent are the fields the recorder keeps.
var mirrorSent = []string{"X-Trace", "Te", "X-Forwarded-For", "X-Real-Ip"}

func startMirrorRecorder(t *testing.T) *mirrorRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.30:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &mirrorRecorder{addr: ln.Addr().String(), got: map[string][]mirrorCopy{}}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		c := mirrorCopy{Method: r.Method, URI: r.RequestURI, Host: r.Host, BodyLen: int(n), Sent: map[string]string{}}
		for _, f := range mirrorSent {
			c.Sent[f] = r.Header.Get(f)
		}
		m.mu.Lock()
		id := r.Header.Get("X-Request-ID")
		m.got[id] = append(m.got[id], c)
		m.mu.Unlock()
		_, _ = io.WriteString(w, "mirror answer, dropped by the data plane")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return m
}

// check waits for the copies of r (up to 5 s; a second for None) and
// compares them with r.Want.Mirror.
func (m *mirrorRecorder) check(r Request) error {
	w := r.Want.Mirror
	id := r.Header["X-Request-ID"]
	if id == "" {
		return fmt.Errorf("a row checking the mirror must send an X-Request-ID")
	}
	wait := 5 * time.Second
	if w.None {
		wait = time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		m.mu.Lock()
		got := append([]mirrorCopy(nil), m.got[id]...)
		m.mu.Unlock()
		switch {
		case w.None && len(got) > 0:
			return fmt.Errorf("the mirror got %+v; want nothing", got[0])
		case len(got) > 0:
			for _, c := range got {
				if err := w.mismatch(c); err != nil {
					return err
				}
			}
			return nil
		case time.Now().After(deadline) && w.None:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("the mirror got nothing after %s", wait)
		}
		time.Sleep(20 * time.Millisecond) // the copy is sent after the answer, or beside it
	}
}

func (w *MirrorWant) mismatch(c mirrorCopy) error {
	if c.Method != w.Method || c.URI != w.URI || c.Host != w.Host || c.BodyLen != w.BodyLen {
		return fmt.Errorf("the mirror got %s %s Host %q with %d body bytes; want %s %s Host %q with %d", c.Method, c.URI, c.Host, c.BodyLen,
			w.Method, w.URI, w.Host, w.BodyLen)
	}
	for _, k := range sortedKeys(w.Sent) {
		if c.Sent[k] != w.Sent[k] {
			return fmt.Errorf("the mirror got %s: %q; want %q", k, c.Sent[k], w.Sent[k])
		}
	}
	return nil
}

// mirrorIngress is an Ingress of host on Service svc (echo backend a) with
// the mirror annotations anns.
func mirrorIngress(name, host, anns string) string {
	return `{{service "a" "` + name + `" "demo"}}---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ` + name + `
  namespace: demo
  annotations:
` + anns + `
spec:
  ingressClassName: switchyard
  rules:
  - host: ` + host + `
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: ` + name + `, port: {number: 80}}}}
`
}

func withID(id string, h map[string]string) map[string]string {
	out := map[string]string{"X-Request-ID": id}
	for k, v := range h {
		out[k] = v
	}
	return out
}

var _ = register(
	Row{
		Name: "mirror-request-uri",
		// As ingress-nginx documents it: https://test.env.com$request_uri,
		// here on the recorder. The copy has the client's method, target,
		// fields and body; Host the target's host without its port; not
		// the fields nginx sets for the upstream only (X-Forwarded-For,
		// X-Real-IP), nor TE.
		Manifests: mirrorIngress("mirror-uri", "mirror-uri.test", `    nginx.ingress.kubernetes.io/mirror-target: "http://{{mirror}}$request_uri"`),
		Requests: []Request{
			{Name: "get", Host: "mirror-uri.test", Path: "/m/x%20y?q=1&r=2",
				Header: withID("mirror-uri-get", map[string]string{"X-Trace": "t1", "TE": "trailers"}),
				Want: Want{Status: 200, Backend: "a", URI: "/m/x%20y?q=1&r=2",
					Mirror: &MirrorWant{Method: "GET", URI: "/m/x%20y?q=1&r=2", Host: "127.0.0.30",
						Sent: map[string]string{"X-Trace": "t1", "Te": "", "X-Forwarded-For": "", "X-Real-Ip": ""}}}},
			{Name: "post", Method: "POST", Host: "mirror-uri.test", Path: "/m/p", Body: "hello mirror",
				Header: withID("mirror-uri-post", nil),
				Want: Want{Status: 200, Backend: "a", URI: "/m/p", BodyLen: 12,
					Mirror: &MirrorWant{Method: "POST", URI: "/m/p", Host: "127.0.0.30", BodyLen: 12}}},
		},
	},
	Row{
		Name: "mirror-host-literal-path",
		// A target without variables: nginx's proxy_pass appends the
		// client's query; mirror-host sets Host; mirror-request-body off
		// (a request without a body: nginx would send a body's length
		// without the body, docs/compatibility.md).
		Manifests: mirrorIngress("mirror-lit", "mirror-lit.test", `    nginx.ingress.kubernetes.io/mirror-target: "http://{{mirror}}/copy"
    nginx.ingress.kubernetes.io/mirror-host: "shadow.example"
    nginx.ingress.kubernetes.io/mirror-request-body: "off"`),
		Requests: []Request{
			{Name: "query", Host: "mirror-lit.test", Path: "/a/b?y=1", Header: withID("mirror-lit-query", nil),
				Want: Want{Status: 200, Backend: "a", URI: "/a/b?y=1",
					Mirror: &MirrorWant{Method: "GET", URI: "/copy?y=1", Host: "shadow.example"}}},
			{Name: "no query", Method: "DELETE", Host: "mirror-lit.test", Path: "/a", Header: withID("mirror-lit-noquery", nil),
				Want: Want{Status: 200, Backend: "a", URI: "/a",
					Mirror: &MirrorWant{Method: "DELETE", URI: "/copy", Host: "shadow.example"}}},
		},
	},
	Row{
		Name: "mirror-variables",
		// $uri is the mirror subrequest's own URI, /_mirror-<Ingress UID>
		// (the manifests loader's UID), as is a target without a path;
		// $args, $host (lower case, no port) and $scheme the client's.
		Manifests: mirrorIngress("mirror-vars", "mirror-vars.test", `    nginx.ingress.kubernetes.io/mirror-target: "http://{{mirror}}/v$uri?$args&h=$host&s=$scheme"`) +
			mirrorIngress("mirror-nopath", "mirror-nopath.test", `    nginx.ingress.kubernetes.io/mirror-target: "http://{{mirror}}"`),
		Requests: []Request{
			{Name: "vars", Host: "Mirror-Vars.test:80", Path: "/x?q=1", Header: withID("mirror-vars", nil),
				Want: Want{Status: 200, Backend: "a",
					Mirror: &MirrorWant{Method: "GET", URI: "/v/_mirror-manifest-ingresses-demo-mirror-vars?q=1&h=mirror-vars.test&s=http", Host: "127.0.0.30"}}},
			{Name: "no path", Host: "mirror-nopath.test", Path: "/x?q=2", Header: withID("mirror-nopath", nil),
				Want: Want{Status: 200, Backend: "a",
					Mirror: &MirrorWant{Method: "GET", URI: "/_mirror-manifest-ingresses-demo-mirror-nopath?q=2", Host: "127.0.0.30"}}},
		},
	},
	Row{
		Name: "mirror-not-sent",
		// No copy for a request refused before upstream (nginx's access
		// phase comes before the mirror's), nor from an invalid target
		// (not http(s): an Event, the Ingress served without mirror);
		// a target where nothing listens leaves the answer alone.
		Manifests: mirrorIngress("mirror-deny", "mirror-deny.test", `    nginx.ingress.kubernetes.io/mirror-target: "http://{{mirror}}$request_uri"
    nginx.ingress.kubernetes.io/whitelist-source-range: "10.0.0.0/8"`) +
			mirrorIngress("mirror-bad", "mirror-bad.test", `    nginx.ingress.kubernetes.io/mirror-target: "ftp://{{mirror}}$request_uri"`) +
			mirrorIngress("mirror-dead", "mirror-dead.test", `    nginx.ingress.kubernetes.io/mirror-target: "http://127.0.0.31:9$request_uri"`),
		Requests: []Request{
			{Name: "refused", Host: "mirror-deny.test", Path: "/r", Header: withID("mirror-deny", nil),
				Want: Want{Status: 403, Mirror: &MirrorWant{None: true}}},
			{Name: "invalid target", Host: "mirror-bad.test", Path: "/r", Header: withID("mirror-bad", nil),
				Want: Want{Status: 200, Backend: "a", Mirror: &MirrorWant{None: true}}},
			{Name: "dead target", Host: "mirror-dead.test", Path: "/r?z=1", Header: withID("mirror-dead", nil),
				Want: Want{Status: 200, Backend: "a", URI: "/r?z=1"}},
		},
	},
)
