package crossplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// Row is one scenario: manifests and the requests that must be answered.
type Row struct {
	Name      string
	Manifests string
	Requests  []Request
	// Planes limits the row to these data planes ("go", "nginx"); empty
	// means both. PlaneNote says why the other cannot serve it.
	Planes    []string
	PlaneNote string
	// KnownDrift names the planes ("go", "nginx") that do not give the
	// expected answer yet, each with a one-line reason: their mismatches
	// are logged, not failed. README.md lists every entry.
	KnownDrift map[string]string
	// ConfigMap are controller ConfigMap keys added to controllerConfigMap
	// for this row alone (values are templates, as Manifests): the row
	// then runs on a controller of its own per plane.
	ConfigMap map[string]string
}

// Request is one request of a row and the answer it must get.
type Request struct {
	Name   string
	Method string // GET when empty
	Host   string
	Path   string
	Header map[string]string
	// Body is sent with its length as Content-Length; none when empty.
	// Chunked sends it with Transfer-Encoding: chunked instead.
	Body    string
	Chunked bool
	// From is the client's source address, 127.0.0.1 when empty (other
	// loopback addresses reach the data plane too).
	From string
	// HTTPS sends the request over TLS with Host as SNI; ClientCert names
	// the client certificate sent ("alice" or "bob" from the suite's CA,
	// "stranger" from another), none when empty.
	HTTPS      bool
	ClientCert string
	// HTTP2 sends the request over HTTPS (as HTTPS does) with HTTP/2 (ALPN
	// h2 only); the answer must come over HTTP/2.
	HTTP2 bool
	// ProxyHeader is written on the connection before anything else: a
	// PROXY protocol header (rows_listeners_test.go), or bytes that are
	// not one.
	ProxyHeader string
	// Digest, when set, first gets a digest challenge with the request
	// unauthenticated, then sends it answered with these credentials
	// (rows_digest_test.go); the last answer is checked.
	Digest *DigestLogin
	// Background sends the request on its own and goes on with the row's
	// next requests once a backend has begun to answer it (it must carry
	// an X-Request-ID and ask for X-Answer-Drip-Ms, so that it stays in
	// progress); its answer is checked at the row's end. Abandon closes
	// its connection as soon as the answer's head has come instead.
	Background, Abandon bool
	// Retry sends the request again, for up to this long, until it gets
	// Want.Status (a count released just after the client had its answer).
	Retry time.Duration
	Want  Want
}

// Want is the expected answer.
type Want struct {
	Status int
	// Header are response fields that must have these values; "" means
	// the field must be absent.
	Header map[string]string
	// Backend is the echo backend that must have answered; "" means none
	// did.
	Backend string
	// URI is the request URI the backend got; empty: not checked.
	URI string
	// Host is the Host field the backend got; empty: not checked.
	Host string
	// Sent are request fields the backend must have got; "" means absent.
	Sent map[string]string
	// BodyLen, when set, is how many body bytes the backend must have
	// read.
	BodyLen int64
	// Logged, when set, says whether the request's access log line must be
	// there (the request carries an X-Request-ID naming it).
	Logged logCheck
	// Mirror, when set, is what the mirror recorder ({{mirror}}) must get
	// for the request, which carries an X-Request-ID naming it
	// (rows_mirror_test.go).
	Mirror *MirrorWant
	// LogLine, when set with Logged, is a regular expression the whole
	// access log line of the request (the line holding its X-Request-ID)
	// must match.
	LogLine string
	// TookAtLeast and TookAtMost, when set, bound the time from sending
	// the request to having read its answer whole.
	TookAtLeast, TookAtMost time.Duration
	// Proto is the protocol of the request line the backend got
	// ("HTTP/1.1"); empty: not checked.
	Proto string
	// Closed: the connection must be closed without an answer (Status is
	// then 0).
	Closed bool
}

// logCheck is what a row expects of the access log.
type logCheck int

const (
	// logged: the request's line is written.
	logged logCheck = iota + 1
	// notLogged: it is not, within a second.
	notLogged
)

var (
	rowsMu sync.Mutex
	rows   []Row
)

// register adds rows to the table (use it as `var _ = register(...)`).
func register(r ...Row) bool {
	rowsMu.Lock()
	defer rowsMu.Unlock()
	rows = append(rows, r...)
	return true
}

// echo is what a backend says of the request it got.
type echo struct {
	Backend string              `json:"backend"`
	Method  string              `json:"method"`
	URI     string              `json:"uri"`
	Host    string              `json:"host"`
	Header  map[string][]string `json:"header"`
	// BodyLen is how many body bytes it read.
	BodyLen int64 `json:"bodyLen"`
	// Pad makes the answer X-Answer-Pad-Bytes longer.
	Pad string `json:"pad,omitempty"`
	// Proto is the request line's protocol.
	Proto string `json:"proto"`
}

// arrivals are the Background requests' X-Request-IDs, each with a channel
// the backend closes when it has begun its answer.
var arrivals sync.Map

// arrived tells a Background request's sender that its answer began.
func arrived(id string) {
	if c, ok := arrivals.LoadAndDelete(id); ok {
		close(c.(chan struct{}))
	}
}

// backendSpecs are the echo backends rows may name, each on its own
// loopback address, answering Status with an echo of the request.
var backendSpecs = []struct {
	Name, IP string
	Status   int
}{
	{"a", "127.0.0.2", http.StatusOK},
	{"b", "127.0.0.3", http.StatusOK},
	{"c", "127.0.0.4", http.StatusOK},
	// down answers 503, for custom-http-errors rows.
	{"down", "127.0.0.20", http.StatusServiceUnavailable},
}

var (
	binary string
	// suiteCA signs alice's and bob's client certificates.
	suiteCA *harness.CA
	// revokingCA signs carol's and dave's; its revocation list (crlSecret)
	// lists carol's, revokedPEM.
	revokingCA  *harness.CA
	revokedPEM  []byte
	clientCerts map[string]tls.Certificate
	// upstreamCA signs the HTTPS backends' certificates (tlsBackendSpecs)
	// and the client certificate upstreamClientSecret holds; upstreamDeep
	// is an intermediate of it.
	upstreamCA, upstreamDeep *harness.CA
)

// tlsBackendSpecs are echo backends over TLS, for proxy-ssl-* rows: each
// certificate names only backend.internal; "tlsdeep"'s chains to
// upstreamCA through an intermediate. They ask for a client certificate
// of upstreamCA (optional) and echo, as request fields, the SNI they got
// (X-Tls-Sni) and the client certificate's CN (X-Tls-Client-Cn).
var tlsBackendSpecs = []struct {
	Name, IP string
	Deep     bool
}{
	{"tls", "127.0.0.21", false},
	{"tlsdeep", "127.0.0.22", true},
}

// TestMain runs the tests inside harness's network namespace, which also
// fails the binary if a controller or nginx outlives them.
func TestMain(m *testing.M) { harness.Main(suiteM{m}) }

// suiteM builds the binary inside the namespace (the outer process only
// re-executes the test binary), once for the whole table.
type suiteM struct{ m *testing.M }

func (s suiteM) Run() int {
	dir, err := os.MkdirTemp("", "switchyard-crossplane")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binary = filepath.Join(dir, "switchyard")
	build := exec.Command("go", "build", "-o", binary, "./cmd/switchyard")
	build.Dir = "../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build switchyard:", err)
		return 1
	}
	return s.m.Run()
}

// env is what a plane's run of the table shares: backends, the auth
// service, the controller.
type env struct {
	backends map[string]string // name -> host:port
	auth     *harness.AuthServer
	ca       *harness.CA
	certs    map[string]tls.Certificate
	http     string
	https    string
	// log is the controller's output, where both planes write the access
	// log.
	log string
	// mirror records what mirror targets get (rows_mirror_test.go).
	mirror *mirrorRecorder
}

func startBackends(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, b := range backendSpecs {
		ln, err := net.Listen("tcp", net.JoinHostPort(b.IP, "0"))
		if err != nil {
			t.Fatal(err)
		}
		name, status := b.Name, b.Status
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := io.Copy(io.Discard, r.Body)
			if big, err := strconv.Atoi(r.Header.Get("X-Answer-Header-Bytes")); err == nil && big > 0 && big < 1<<20 {
				// A response head of about that many bytes, for
				// proxy-buffer-size rows.
				w.Header().Set("X-Big", strings.Repeat("b", big))
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			ec := echo{Backend: name, Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header, BodyLen: n, Proto: r.Proto}
			if pad, err := strconv.Atoi(r.Header.Get("X-Answer-Pad-Bytes")); err == nil && pad > 0 && pad <= 4<<20 {
				ec.Pad = strings.Repeat("p", pad) // a long answer, for limit-rate rows
			}
			_ = json.NewEncoder(w).Encode(ec)
			if ms, err := strconv.Atoi(r.Header.Get("X-Answer-Drip-Ms")); err == nil && ms > 0 && ms <= 10_000 {
				// The answer stays in progress for that long: a blank
				// every 20 ms (still valid JSON), for limit-connections rows.
				w.(http.Flusher).Flush()
				arrived(r.Header.Get("X-Request-ID"))
				for end := time.Now().Add(time.Duration(ms) * time.Millisecond); time.Now().Before(end) && r.Context().Err() == nil; {
					time.Sleep(20 * time.Millisecond)
					_, _ = io.WriteString(w, " ")
					w.(http.Flusher).Flush()
				}
			}
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		out[name] = ln.Addr().String()
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(upstreamCA.PEM)
	for _, b := range tlsBackendSpecs {
		ca := upstreamCA
		if b.Deep {
			ca = upstreamDeep
		}
		c, k := ca.ServerCert(t, "backend.internal")
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tls.Listen("tcp", net.JoinHostPort(b.IP, "0"), &tls.Config{Certificates: []tls.Certificate{pair},
			ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: clientCAs, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		name := b.Name
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := io.Copy(io.Discard, r.Body)
				r.Header.Set("X-Tls-Sni", r.TLS.ServerName)
				if len(r.TLS.PeerCertificates) > 0 {
					r.Header.Set("X-Tls-Client-Cn", r.TLS.PeerCertificates[0].Subject.CommonName)
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(echo{Backend: name, Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header, BodyLen: n})
			})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		out[name] = ln.Addr().String()
	}
	return out
}

// manifests renders every row into dir, one file per row.
func (e *env) manifests(t *testing.T, dir string, rows []Row, extra map[string]string) {
	t.Helper()
	funcs := template.FuncMap{
		"backend": func(n string) string { h, _, _ := net.SplitHostPort(e.backends[n]); return h },
		"port":    func(n string) string { _, p, _ := net.SplitHostPort(e.backends[n]); return p },
		"authURL": func() string { return e.auth.URL() + "/oauth2/auth" },
		// mirror is the mirror recorder's host:port.
		"mirror": func() string { return e.mirror.addr },
		// tlsSecret is a kubernetes.io/tls Secret for host in demo.
		"tlsSecret": func(name, host string) string {
			c, k := harness.SelfSignedPEM(t, host)
			return fmt.Sprintf("---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: demo}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: %s\n  tls.key: %s\n",
				name, base64.StdEncoding.EncodeToString(c), base64.StdEncoding.EncodeToString(k))
		},
		// caSecret holds the suite's client CA as ca.crt, in demo.
		"caSecret": func(name string) string {
			return fmt.Sprintf("---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: demo}\ndata:\n  ca.crt: %s\n",
				name, base64.StdEncoding.EncodeToString(e.ca.PEM))
		},
		// upstreamCASecret holds upstreamCA as ca.crt, in demo;
		// strangerCASecret another CA's certificate; upstreamClientSecret
		// upstreamCA with a client certificate (CN=switchyard) it issued.
		"upstreamCASecret": func(name string) string {
			return fmt.Sprintf("---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: demo}\ndata:\n  ca.crt: %s\n",
				name, base64.StdEncoding.EncodeToString(upstreamCA.PEM))
		},
		"strangerCASecret": func(name string) string {
			return fmt.Sprintf("---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: demo}\ndata:\n  ca.crt: %s\n",
				name, base64.StdEncoding.EncodeToString(revokingCA.PEM))
		},
		"upstreamClientSecret": func(name string) string {
			c, k := upstreamCA.ClientCert(t, "switchyard")
			return fmt.Sprintf("---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: demo}\ndata:\n  ca.crt: %s\n  tls.crt: %s\n  tls.key: %s\n",
				name, base64.StdEncoding.EncodeToString(upstreamCA.PEM), base64.StdEncoding.EncodeToString(c), base64.StdEncoding.EncodeToString(k))
		},
		// crlSecret holds revokingCA as ca.crt and its revocation list,
		// which lists carol's certificate, as ca.crl, in demo.
		"crlSecret": func(name string) string {
			return fmt.Sprintf("---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: demo}\ndata:\n  ca.crt: %s\n  ca.crl: %s\n",
				name, base64.StdEncoding.EncodeToString(revokingCA.PEM), base64.StdEncoding.EncodeToString(revokingCA.CRL(t, revokedPEM)))
		},
		// slice is a second EndpointSlice of svc with one address on
		// backend n's port, as --manifests accepts it unvalidated.
		"slice": func(n, svc, ns, addr string) string {
			_, p, _ := net.SplitHostPort(e.backends[n])
			return fmt.Sprintf("---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %[1]s-2\n  namespace: %[2]s\n"+
				"  labels: {kubernetes.io/service-name: %[1]s}\naddressType: IPv4\nports:\n- {name: http, port: %[4]s, protocol: TCP}\n"+
				"endpoints:\n- addresses: [%[3]q]\n  conditions: {ready: true}\n", svc, ns, addr, p)
		},
		"service": func(n, svc, ns string) (string, error) {
			h, p, _ := net.SplitHostPort(e.backends[n])
			port, err := strconv.Atoi(p)
			if err != nil {
				return "", fmt.Errorf("backend %s: port %q: %w", n, p, err)
			}
			return "---\n" + harness.ServiceYAML(ns, svc, port, h), nil
		},
	}
	if err := os.WriteFile(filepath.Join(dir, "00-class.yaml"), []byte(harness.IngressClassYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	cm := controllerConfigMap
	for _, k := range sortedKeys(extra) {
		tpl, err := template.New(k).Funcs(funcs).Parse(extra[k])
		if err != nil {
			t.Fatalf("ConfigMap %s: %v", k, err)
		}
		var b bytes.Buffer
		if err := tpl.Execute(&b, nil); err != nil {
			t.Fatalf("ConfigMap %s: %v", k, err)
		}
		cm += "  " + k + ": " + strconv.Quote(b.String()) + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "00-configmap.yaml"), []byte(cm), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		tpl, err := template.New(r.Name).Funcs(funcs).Parse(r.Manifests)
		if err != nil {
			t.Fatalf("row %s: %v", r.Name, err)
		}
		var b bytes.Buffer
		if err := tpl.Execute(&b, nil); err != nil {
			t.Fatalf("row %s: %v", r.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("row-%03d.yaml", i)), b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// controllerConfigMap is the controller ConfigMap (--configmap) of both
// planes. enable-real-ip reads the client's address from X-Forwarded-For
// behind the one trusted proxy, the loopback source TrustedProxy; a
// request from any other source keeps its connection's address, so rows
// that do not send from TrustedProxy are not affected.
const controllerConfigMap = `apiVersion: v1
kind: ConfigMap
metadata: {name: switchyard-controller, namespace: demo}
data:
  enable-real-ip: "true"
  proxy-real-ip-cidr: "` + TrustedProxy + `/32"
`

// authEcho are the request fields the authentication service repeats as
// X-Echo-<name> on a passing answer (harness.AuthServer.SetEcho).
var authEcho = []string{"X-Tenant", "X-Empty"}

// TrustedProxy is the Request.From of a proxy the data planes trust to
// name the client in X-Forwarded-For (controllerConfigMap).
const TrustedProxy = "127.0.0.50"

// startController runs the binary on plane with the manifests of rows and
// the ConfigMap keys extra added to controllerConfigMap.
func (e *env) startController(t *testing.T, plane string, rows []Row, extra map[string]string) *harness.Process {
	t.Helper()
	dir := t.TempDir()
	e.manifests(t, dir, rows, extra)
	httpPort, httpsPort := harness.FreePort(t, "127.0.0.1"), harness.FreePort(t, "127.0.0.1")
	status := harness.FreePort(t, "127.0.0.1")
	args := []string{"controller", "--manifests", dir, "--http-port", strconv.Itoa(httpPort), "--https-port", strconv.Itoa(httpsPort),
		"--status-port", strconv.Itoa(status), "--listen-address", "127.0.0.1", "--configmap", "demo/switchyard-controller"}
	switch plane {
	case "nginx":
		args = append(args, harness.NginxPlaneArgs(t, "../../lua")...)
	case goWorkersPlane:
		args = append(args, "--go-workers", "2")
	}
	p := harness.StartProcess(t, harness.Cmd{Name: "switchyard-" + plane, Path: binary, Args: args})
	e.log = p.LogPath()
	e.http = net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))
	e.https = net.JoinHostPort("127.0.0.1", strconv.Itoa(httpsPort))
	harness.WaitFor(t, readyTimeout, "switchyard /readyz", p, harness.HTTPReady("http://127.0.0.1:"+strconv.Itoa(status)+"/readyz", 200, nil, nil))
	// nginx may serve before its reload with every row has finished: wait
	// until each row's first request no longer gets the catch-all's 404.
	// The probe comes from an address no row uses, so that it takes no
	// share of a per-client limit the row then checks: nginx frees a
	// limit_conn slot just after the answer's last byte, and another
	// worker could still count the probe when the row's first request
	// comes (a 429 for a request that wanted 200, seen once in CI).
	deadline := time.Now().Add(readyTimeout)
	for _, r := range rows {
		if !onPlane(r, plane) || len(r.Requests) == 0 || r.Requests[0].Want.Status == http.StatusNotFound {
			continue
		}
		first := r.Requests[0]
		first.From = probeFrom
		harness.WaitFor(t, time.Until(deadline), "row "+r.Name+" served", p, func(ctx context.Context) (bool, error) {
			code, _, ec, err := e.do(ctx, first)
			if err != nil {
				return false, err
			}
			if code == http.StatusNotFound && ec == nil {
				return false, fmt.Errorf("%s%s: the default backend's 404", first.Host, first.Path)
			}
			return true, nil
		})
	}
	return p
}

// probeFrom is the client address of the readiness probes.
const probeFrom = "127.0.0.254"

// readyTimeout bounds the wait for a controller to serve every row.
const readyTimeout = 30 * time.Second

// do sends one request and returns the status, the response header and
// the backend's account (nil when no echo backend answered).
func (e *env) do(ctx context.Context, r Request) (int, http.Header, *echo, error) {
	if r.Digest != nil {
		return e.doDigest(ctx, r)
	}
	from := r.From
	if from == "" {
		from = "127.0.0.1"
	}
	addr, scheme := e.http, "http"
	if r.HTTPS || r.HTTP2 {
		addr, scheme = e.https, "https"
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err == nil && r.ProxyHeader != "" {
			if _, err = c.Write([]byte(r.ProxyHeader)); err != nil {
				_ = c.Close()
			}
		}
		return c, err
	}, TLSClientConfig: &tls.Config{ServerName: r.Host, InsecureSkipVerify: true}} //nolint:gosec // the data plane's test certificates
	if r.ClientCert != "" {
		c := e.certs[r.ClientCert]
		tr.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	if r.HTTP2 {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetHTTP2(true)
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if r.Body != "" {
		body = strings.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+r.Host+r.Path, body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("build the request: %w", err)
	}
	if r.Chunked {
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	if r.HTTP2 && resp.ProtoMajor != 2 {
		return 0, nil, nil, fmt.Errorf("answered over %s; the request asked for HTTP/2", resp.Proto)
	}
	if r.Abandon {
		return resp.StatusCode, resp.Header, nil, nil // closes the connection unread
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read the answer: %w", err)
	}
	var ec echo
	if json.Unmarshal(b, &ec) != nil || ec.Backend == "" {
		return resp.StatusCode, resp.Header, nil, nil
	}
	return resp.StatusCode, resp.Header, &ec, nil
}

// ask sends req (again while Retry allows, until it gets Want.Status) and
// returns its answer and how long the last try took.
func (e *env) ask(ctx context.Context, req Request) (answer, time.Duration) {
	deadline := time.Now().Add(req.Retry)
	for {
		start := time.Now()
		code, h, ec, err := e.do(ctx, req)
		took := time.Since(start)
		if code == req.Want.Status || time.Now().After(deadline) {
			return answerOf(req, code, h, ec, err), took
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inBackground sends req on its own and returns once a backend has begun
// answering it (or after 5 s, failing t); wait gives its answer.
func (e *env) inBackground(t *testing.T, req Request) (wait func() (answer, time.Duration)) {
	t.Helper()
	id := req.Header["X-Request-ID"]
	began := make(chan struct{})
	arrivals.Store(id, began)
	type result struct {
		a    answer
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		a, took := e.ask(context.Background(), req)
		done <- result{a, took}
	}()
	select {
	case <-began:
	case <-time.After(5 * time.Second):
		arrivals.Delete(id)
		t.Errorf("background request %s: no backend began to answer it in 5 s", id)
	}
	return func() (answer, time.Duration) {
		r := <-done
		return r.a, r.took
	}
}

// tookMismatch says how took is outside w's bounds.
func tookMismatch(took time.Duration, w Want) []string {
	if (w.TookAtLeast != 0 && took < w.TookAtLeast) || (w.TookAtMost != 0 && took > w.TookAtMost) {
		return []string{fmt.Sprintf("took %v; want %v to %v", took.Round(time.Millisecond), w.TookAtLeast, w.TookAtMost)}
	}
	return nil
}

// answer is what a request got, for comparing the planes.
type answer struct {
	Err     string
	Status  int
	Header  map[string]string
	Backend string
	URI     string
	Host    string
	Sent    map[string]string
	BodyLen int64
	Proto   string
	Closed  bool
}

// answerOf is the answer in comparable form: only the fields r checks.
func answerOf(r Request, code int, h http.Header, ec *echo, err error) answer {
	a := answer{Status: code, Header: map[string]string{}, Sent: map[string]string{}}
	switch {
	case r.Want.Closed && err != nil && code == 0:
		// Closed without an answer: how the client saw it (EOF, reset,
		// a TLS alert missing) differs, and is not compared.
		a.Closed = true
	case err != nil:
		a.Err = err.Error()
	}
	for k := range r.Want.Header {
		v := reDigestNonce.ReplaceAllString(h.Get(k), `nonce="<nonce>"`)
		v = reDigestRspauth.ReplaceAllString(v, `rspauth="<rspauth>"`)
		if k == "Location" {
			v = reLocationPort.ReplaceAllString(v, "$1:<port>")
		}
		a.Header[k] = v
	}
	if ec != nil {
		a.Backend = ec.Backend
		if r.Want.URI != "" {
			a.URI = ec.URI
		}
		if r.Want.Host != "" {
			a.Host = ec.Host
		}
		if r.Want.BodyLen != 0 {
			a.BodyLen = ec.BodyLen
		}
		if r.Want.Proto != "" {
			a.Proto = ec.Proto
		}
		for k := range r.Want.Sent {
			a.Sent[k] = http.Header(ec.Header).Get(k)
		}
	}
	return a
}

// mismatches lists how a differs from what w expects, as "got X; want Y".
func mismatches(a answer, w Want) []string {
	var out []string
	if a.Err != "" {
		out = append(out, "request failed: "+a.Err)
	}
	if a.Closed != w.Closed {
		out = append(out, fmt.Sprintf("connection closed without an answer: %v; want %v", a.Closed, w.Closed))
	}
	if w.Proto != "" && a.Proto != w.Proto {
		out = append(out, fmt.Sprintf("backend got protocol %q; want %q", a.Proto, w.Proto))
	}
	if a.Status != w.Status {
		out = append(out, fmt.Sprintf("status %d; want %d", a.Status, w.Status))
	}
	for _, k := range sortedKeys(w.Header) {
		if a.Header[k] != w.Header[k] {
			out = append(out, fmt.Sprintf("response %s: %q; want %q", k, a.Header[k], w.Header[k]))
		}
	}
	if a.Backend != w.Backend {
		out = append(out, fmt.Sprintf("backend %q; want %q", a.Backend, w.Backend))
	}
	if w.URI != "" && a.URI != w.URI {
		out = append(out, fmt.Sprintf("backend got URI %q; want %q", a.URI, w.URI))
	}
	if w.BodyLen != 0 && a.BodyLen != w.BodyLen {
		out = append(out, fmt.Sprintf("backend read %d body bytes; want %d", a.BodyLen, w.BodyLen))
	}
	if w.Host != "" && a.Host != w.Host {
		out = append(out, fmt.Sprintf("backend got Host %q; want %q", a.Host, w.Host))
	}
	for _, k := range sortedKeys(w.Sent) {
		if a.Sent[k] != w.Sent[k] {
			out = append(out, fmt.Sprintf("backend got %s: %q; want %q", k, a.Sent[k], w.Sent[k]))
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func onPlane(r Row, plane string) bool {
	if len(r.Planes) == 0 {
		return true
	}
	for _, p := range r.Planes {
		if p == planeKind(plane) {
			return true
		}
	}
	return false
}

// goWorkersPlane is the Go data plane served by two worker processes
// (--go-workers=2): a row's Planes and KnownDrift name it "go", and it must
// answer every request exactly as the Go plane in one process does.
const goWorkersPlane = "go-workers"

// planeKind is the data plane a plane of the suite runs: "go" or "nginx".
func planeKind(plane string) string {
	if plane == goWorkersPlane {
		return "go"
	}
	return plane
}

// TestBehaviour runs the table on both data planes (and the Go plane in
// worker processes) and compares them.
func TestBehaviour(t *testing.T) {
	suiteCA = harness.NewCA(t, "Suite CA")
	stranger := harness.NewCA(t, "Stranger CA")
	revokingCA = harness.NewRevokingCA(t, "Revoking CA")
	upstreamCA = harness.NewCA(t, "Upstream CA")
	upstreamDeep = upstreamCA.Intermediate(t, "Upstream Intermediate CA")
	clientCerts = map[string]tls.Certificate{}
	for name, ca := range map[string]*harness.CA{"alice": suiteCA, "bob": suiteCA, "stranger": stranger, "carol": revokingCA, "dave": revokingCA} {
		cn := name
		if name == "stranger" {
			cn = "alice"
		}
		c, k := ca.ClientCert(t, cn)
		if name == "carol" {
			revokedPEM = c
		}
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		clientCerts[name] = pair
	}
	planes := []string{"go", goWorkersPlane, "nginx"}
	results := map[string]map[string]answer{} // plane -> row/request -> answer
	drift := map[string]string{}              // row/request -> the row's known drifts
	for _, plane := range planes {
		results[plane] = map[string]answer{}
		t.Run(plane, func(t *testing.T) {
			e := &env{backends: startBackends(t), auth: harness.StartAuthServer(t, "127.0.0.1", []string{"alice"}, []string{"mallory"}),
				ca: suiteCA, certs: clientCerts, mirror: startMirrorRecorder(t)}
			e.auth.SetEcho(authEcho...)
			// Rows with a ConfigMap of their own run last, each on its own
			// controller, after the shared one stopped (nginx's built-in
			// default backend has a fixed port).
			var shared, own []Row
			for _, r := range rows {
				if r.ConfigMap == nil {
					shared = append(shared, r)
				} else {
					own = append(own, r)
				}
			}
			sharedProc := e.startController(t, plane, shared, nil)
			ctx := context.Background()
			for i, r := range append(shared, own...) {
				if i == len(shared) {
					if err := sharedProc.Stop(); err != nil {
						t.Error(err)
					}
				}
				if !onPlane(r, plane) {
					continue
				}
				t.Run(r.Name, func(t *testing.T) {
					e := e
					if r.ConfigMap != nil {
						// A controller of the row's own, with its ConfigMap.
						own := *e
						own.startController(t, plane, []Row{r}, r.ConfigMap)
						e = &own
					}
					reason, known := r.KnownDrift[planeKind(plane)]
					drifted := false
					if known {
						defer func() {
							if !drifted {
								t.Logf("KNOWN DRIFT FIXED? every answer is as expected: remove KnownDrift[%q]", plane)
							}
						}()
					}
					// check records and checks one answer.
					check := func(t *testing.T, key string, req Request, a answer, took time.Duration) {
						if req.Want.TookAtLeast+req.Want.TookAtMost > 0 {
							t.Logf("took %v", took.Round(time.Millisecond))
						}
						results[plane][key] = a
						if req.Want.Logged != 0 {
							if err := e.checkLogged(req); err != nil {
								t.Error(err)
								a.Err += " log: " + err.Error()
								results[plane][key] = a
							}
						}
						if req.Want.Mirror != nil {
							if err := e.mirror.check(req); err != nil {
								a.Err += " mirror: " + err.Error()
								results[plane][key] = a
							}
						}
						for _, m := range append(mismatches(a, req.Want), tookMismatch(took, req.Want)...) {
							if known {
								drifted = true
								t.Logf("KNOWN DRIFT (%s): %s", reason, m)
							} else {
								t.Error(m)
							}
						}
					}
					var background []func()
					for i, req := range r.Requests {
						name := req.Name
						if name == "" {
							name = strconv.Itoa(i)
						}
						key := r.Name + "/" + name
						if len(r.KnownDrift) > 0 {
							drift[key] = fmt.Sprint(r.KnownDrift)
						}
						if req.Background {
							wait := e.inBackground(t, req)
							background = append(background, func() {
								t.Run(name, func(t *testing.T) {
									a, took := wait()
									check(t, key, req, a, took)
								})
							})
							continue
						}
						t.Run(name, func(t *testing.T) {
							a, took := e.ask(ctx, req)
							check(t, key, req, a, took)
						})
					}
					for _, f := range background {
						f()
					}
				})
			}
		})
	}
	// The planes must agree on everything either was checked for.
	var keys []string
	for k := range results["go"] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n, ok := results["nginx"][k]
		if !ok {
			continue
		}
		g := results["go"][k]
		if fmt.Sprint(g) == fmt.Sprint(n) {
			continue
		}
		if d, ok := drift[k]; ok {
			t.Logf("%s: the planes differ (known drift %s):\n   go: %+v\nnginx: %+v", k, d, g, n)
		} else {
			t.Errorf("%s: the planes differ:\n   go: %+v\nnginx: %+v", k, g, n)
		}
	}
	if len(keys) == 0 {
		t.Error("no row ran")
	}
	// Worker processes change nothing a client sees.
	for _, k := range keys {
		w, ok := results[goWorkersPlane][k]
		if !ok {
			t.Errorf("%s: not run on %s", k, goWorkersPlane)
			continue
		}
		if g := results["go"][k]; fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("%s: %s differs from go:\n        go: %+v\ngo-workers: %+v", k, goWorkersPlane, g, w)
		}
	}
}

// checkLogged waits for the request's access log line (its X-Request-ID in
// the controller's output) to be written, or, for notLogged, for a second
// in which it is not.
func (e *env) checkLogged(r Request) error {
	id := r.Header["X-Request-ID"]
	if id == "" {
		return fmt.Errorf("a row checking the access log must send an X-Request-ID")
	}
	wait := 5 * time.Second
	if r.Want.Logged == notLogged {
		wait = time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		b, err := os.ReadFile(e.log)
		if err != nil {
			return err
		}
		has := bytes.Contains(b, []byte(id))
		switch {
		case has && r.Want.Logged == notLogged:
			return fmt.Errorf("request %s is in the access log", id)
		case has && r.Want.LogLine != "":
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, id) {
					if !regexp.MustCompile(r.Want.LogLine).MatchString(line) {
						return fmt.Errorf("request %s is logged as %q; want it to match %s", id, line, r.Want.LogLine)
					}
					break
				}
			}
			return nil
		case has:
			return nil
		case time.Now().After(deadline) && r.Want.Logged == logged:
			return fmt.Errorf("request %s is not in the access log after %s", id, wait)
		case time.Now().After(deadline):
			return nil
		}
		time.Sleep(50 * time.Millisecond) // the Go plane writes its log in batches
	}
}
