package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// rawBackend is an upstream on loopback written byte by byte: answer is
// called with each request head read on a connection (n counts the
// requests of that connection from 1) and returns the bytes to send back
// and whether to close the connection after them. It counts connections.
type rawBackend struct {
	addr     string
	conns    atomic.Int32
	requests atomic.Int32
}

func newRawBackend(t *testing.T, answer func(n int, head string) (reply string, closeAfter bool)) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBackend{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					b.requests.Add(1)
					var head bytes.Buffer
					_ = req.Header.Write(&head)
					reply, closeAfter := answer(n, req.Method+" "+req.URL.RequestURI()+"\n"+head.String())
					if _, err := io.WriteString(c, reply); err != nil || closeAfter {
						return
					}
				}
			}()
		}
	}()
	return b
}

func okReply(body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

func oneBackendConfig(addr string) *model.Configuration {
	return &model.Configuration{
		Backends: []*model.Backend{{Name: "b", Endpoints: endpoints(addr)}},
		Servers:  []model.Server{{Hostname: "t.example", Locations: []model.Location{loc("/", model.PathTypePrefix, "b")}}},
	}
}

func do(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(""))
	req.Host = "t.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}

// TestUpstreamKeepAliveReuse: sequential requests share one upstream
// connection, whether the body was read whole (small) or streamed (larger
// than the buffer, or chunked).
func TestUpstreamKeepAliveReuse(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	b := newRawBackend(t, func(n int, head string) (string, bool) {
		switch {
		case strings.HasPrefix(head, "GET /big"):
			return okReply(big), false
		case strings.HasPrefix(head, "GET /chunked"):
			return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", false
		case strings.HasPrefix(head, "HEAD"):
			return "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n", false
		}
		return okReply("small"), false
	})
	base, _ := start(t, oneBackendConfig(b.addr))
	for i := range 3 {
		for _, c := range []struct{ method, path, want string }{
			{"GET", "/small", "small"}, {"GET", "/big", big}, {"GET", "/chunked", "hello world"}, {"HEAD", "/h", ""},
		} {
			status, body := do(t, c.method, base+c.path)
			if status != 200 || body != c.want {
				t.Fatalf("round %d %s %s: %d, %d bytes; want 200 and %d bytes", i, c.method, c.path, status, len(body), len(c.want))
			}
		}
	}
	if n := b.conns.Load(); n != 1 {
		t.Errorf("upstream connections: %d; want 1 (kept alive)", n)
	}
}

// TestUpstreamClosedKeepAlive: a kept-alive connection that the upstream
// closed after its answer is replaced by a new one for an idempotent
// request (the client sees 200, and the balancer no failed attempt: the
// peer did nothing wrong), and not for a POST, which nginx does not send
// twice (502).
func TestUpstreamClosedKeepAlive(t *testing.T) {
	// Every connection answers once and then closes without saying so: the
	// proxy's pooled connection is dead when the next request takes it.
	b := newRawBackend(t, func(n int, head string) (string, bool) { return okReply("once"), true })
	base, rec := startRecorded(t, oneBackendConfig(b.addr))
	if s, body := do(t, "GET", base+"/"); s != 200 || body != "once" {
		t.Fatalf("first GET: %d %q", s, body)
	}
	time.Sleep(50 * time.Millisecond) // let the close reach the proxy's socket
	if s, body := do(t, "GET", base+"/"); s != 200 || body != "once" {
		t.Fatalf("GET on a closed kept-alive connection: %d %q; want 200 from a new connection", s, body)
	}
	if n := b.conns.Load(); n != 2 {
		t.Errorf("upstream connections after two GETs: %d; want 2", n)
	}
	rec.mu.Lock()
	if len(rec.dones) != 2 || rec.dones[0].Failed || rec.dones[1].Failed {
		t.Errorf("balancer feedback %+v; want two attempts, none failed", rec.dones)
	}
	rec.mu.Unlock()
	time.Sleep(50 * time.Millisecond)
	if s, _ := do(t, "POST", base+"/"); s != http.StatusBadGateway {
		t.Errorf("POST on a closed kept-alive connection: %d; want 502 (not replayed)", s)
	}
}

// TestUpstreamBrokenBodies: a malformed chunked body or a body shorter than
// its Content-Length reaches the client as a broken response, and the
// connection is not reused.
func TestUpstreamBrokenBodies(t *testing.T) {
	b := newRawBackend(t, func(n int, head string) (string, bool) {
		switch {
		case strings.HasPrefix(head, "GET /badchunk"):
			return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", false
		case strings.HasPrefix(head, "GET /short"):
			return "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("y", 70000), true
		}
		return okReply("fine"), false
	})
	base, _ := start(t, oneBackendConfig(b.addr))
	for _, path := range []string{"/badchunk", "/short"} {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Host = "t.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // broken before the head: also not a complete answer
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("%s: the client read a complete body; want a broken response", path)
		}
	}
	before := b.conns.Load()
	if s, body := do(t, "GET", base+"/ok"); s != 200 || body != "fine" {
		t.Fatalf("after broken bodies: %d %q", s, body)
	}
	if after := b.conns.Load(); after != before+1 {
		t.Errorf("upstream connections %d -> %d: a connection with a broken body was reused", before, after)
	}
}

// doneRecorder is a Picker that remembers every Done.
type doneRecorder struct {
	*balancer.Registry
	mu    sync.Mutex
	dones []balancer.DoneInfo
}

func (r *doneRecorder) Done(p *balancer.Pick, info balancer.DoneInfo) {
	r.mu.Lock()
	r.dones = append(r.dones, info)
	r.mu.Unlock()
	r.Registry.Done(p, info)
}

// startRecorded is start with a doneRecorder as the Picker.
func startRecorded(t *testing.T, cfg *model.Configuration) (string, *doneRecorder) {
	t.Helper()
	reg := balancer.NewRegistry(balancer.Config{})
	if err := reg.Apply(cfg.Backends); err != nil {
		t.Fatal(err)
	}
	rec := &doneRecorder{Registry: reg}
	p, err := New(Config{Picker: rec})
	if err != nil {
		t.Fatal(err)
	}
	p.Update(cfg)
	return "http://" + serve(t, p.Serve), rec
}

// TestUpstreamConnectTime: the balancer hears the connect time of a new
// connection and 0 for a kept-alive one ($upstream_connect_time).
func TestUpstreamConnectTime(t *testing.T) {
	b := newRawBackend(t, func(int, string) (string, bool) { return okReply("x"), false })
	base, rec := startRecorded(t, oneBackendConfig(b.addr))
	for range 3 {
		if s, _ := do(t, "GET", base+"/"); s != 200 {
			t.Fatalf("status %d", s)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var connects []time.Duration
	for _, d := range rec.dones {
		connects = append(connects, d.ConnectTime)
	}
	if len(connects) != 3 || connects[0] <= 0 || connects[1] != 0 || connects[2] != 0 {
		t.Errorf("connect times %v; want one > 0, then 0, 0", connects)
	}
}

// TestUpstreamIdlePools: the janitor's sweep closes idle connections, and
// forgets a pool only when nothing of it is open.
func TestUpstreamIdlePools(t *testing.T) {
	b := newRawBackend(t, func(int, string) (string, bool) { return okReply("x"), false })
	cfg := oneBackendConfig(b.addr)
	p, _ := newProxy(t, cfg, Config{})
	base := "http://" + serve(t, p.Serve)
	if s, _ := do(t, "GET", base+"/"); s != 200 {
		t.Fatalf("status %d", s)
	}
	pools := *p.pools.Load()
	if len(pools) != 1 {
		t.Fatalf("%d pools; want 1", len(pools))
	}
	var pp *peerPool
	for _, v := range pools {
		pp = v
	}
	if idle := pp.idleCount(); idle != 1 {
		t.Fatalf("%d idle connections; want 1", idle)
	}
	p.closeIdlePools(false) // nothing idle for 60 s yet
	if len(*p.pools.Load()) != 1 || pp.idleCount() != 1 {
		t.Fatalf("a fresh idle connection was closed")
	}
	p.closeIdlePools(true)
	if pp.idleCount() != 0 {
		t.Fatalf("closeIdlePools(true) left idle connections")
	}
	for i := range pp.stripes {
		st := &pp.stripes[i]
		st.mu.Lock()
		st.lastUsed = monoNow() - 2*upstreamIdleTime
		st.mu.Unlock()
	}
	p.closeIdlePools(false)
	if n := len(*p.pools.Load()); n != 0 {
		t.Errorf("%d pools after the sweep; want the unused one forgotten", n)
	}
	if s, _ := do(t, "GET", base+"/"); s != 200 {
		t.Fatalf("after forgetting the pool: status %d", s)
	}
}

// chunkedBody decodes in as a chunked body through upBody.
func chunkedBody(in []byte) ([]byte, error) {
	pp := newPeerPool("", false, nil, nil)
	c := &upConn{br: bufio.NewReaderSize(bytes.NewReader(in), 16), pool: pp}
	var hdr fasthttp.ResponseHeader
	return io.ReadAll(&upBody{c: c, header: &hdr, chunked: true})
}

func TestReadChunked(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		ok             bool
	}{
		{"simple", "5\r\nhello\r\n0\r\n\r\n", "hello", true},
		{"extension", "5;a=b\r\nhello\r\n6 ; x\r\n world\r\n0\r\n\r\n", "hello world", true},
		{"upper hex", "A\r\n0123456789\r\n0\r\n\r\n", "0123456789", true},
		{"trailer", "3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", "abc", true},
		{"bad digit", "g\r\nx\r\n0\r\n\r\n", "", false},
		{"no size", "\r\nx\r\n0\r\n\r\n", "", false},
		{"bare LF", "5\nhello\r\n0\r\n\r\n", "", false},
		{"missing CRLF after data", "5\r\nhelloXX0\r\n\r\n", "hello", false},
		{"too big", "fffffffffffffffff\r\n", "", false},
		{"truncated", "5\r\nhel", "hel", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := chunkedBody([]byte(c.in))
			if (err == nil) != c.ok || string(got) != c.want {
				t.Errorf("got %q, %v; want %q, ok=%v", got, err, c.want, c.ok)
			}
		})
	}
}

// FuzzReadChunked: any upstream bytes decode without panic, and whatever
// decodes completely agrees with net/http's chunked reader.
func FuzzReadChunked(f *testing.F) {
	for _, s := range []string{"5\r\nhello\r\n0\r\n\r\n", "5;a=b\r\nhello\r\n0\r\nX: y\r\n\r\n", "zz\r\n", "0\r\n\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := chunkedBody(in)
		if err != nil {
			return
		}
		want, werr := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(in)))
		if werr == nil && !bytes.Equal(got, want) {
			t.Errorf("decoded %q; net/http decodes %q", got, want)
		}
	})
}

// TestNextUpstreamPolicy: proxy-next-upstream, -tries and -timeout decide
// which attempts go to the next peer, as nginx's proxy_next_upstream.
func TestNextUpstreamPolicy(t *testing.T) {
	bad := newRawBackend(t, func(int, string) (string, bool) {
		return "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\n\r\nbad", false
	})
	slow := newRawBackend(t, func(int, string) (string, bool) {
		time.Sleep(1100 * time.Millisecond)
		return "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 4\r\n\r\nslow", false
	})
	good := newRawBackend(t, func(int, string) (string, bool) { return okReply("good"), false })
	dead := deadAddr(t)
	for _, c := range []struct {
		name    string
		peers   []string
		next    []string
		tries   int
		timeout int
		method  string
		// want: the statuses (and bodies) the client may see; all must be seen
		// over the requests when more than one.
		want map[string]bool
	}{
		{"default: a 502 is an answer", []string{bad.addr, good.addr}, nil, 3, 0, "GET", map[string]bool{"502 bad": true, "200 good": true}},
		{"http_502 passes it on", []string{bad.addr, good.addr}, []string{"error", "timeout", "http_502"}, 3, 0, "GET", map[string]bool{"200 good": true}},
		{"tries exhausted: the last 502 is the answer", []string{bad.addr}, []string{"http_502"}, 2, 0, "GET", map[string]bool{"502 bad": true}},
		{"POST is not sent twice", []string{bad.addr, good.addr}, []string{"error", "http_502"}, 3, 0, "POST", map[string]bool{"502 bad": true, "200 good": true}},
		{"non_idempotent: POST is", []string{bad.addr, good.addr}, []string{"error", "http_502", "non_idempotent"}, 3, 0, "POST", map[string]bool{"200 good": true}},
		{"default: a dial error is passed on", []string{dead, good.addr}, nil, 3, 0, "GET", map[string]bool{"200 good": true}},
		{"off: not even a dial error", []string{dead, good.addr}, []string{"off"}, 3, 0, "GET", map[string]bool{"502 ": true, "200 good": true}},
		{"timeout: none left after a slow answer", []string{slow.addr}, []string{"http_502"}, 3, 1, "GET", map[string]bool{"502 slow": true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := loc("/", model.PathTypePrefix, "b")
			l.Proxy.NextUpstream, l.Proxy.NextUpstreamTries, l.Proxy.NextUpstreamTimeoutSeconds = c.next, c.tries, c.timeout
			cfg := &model.Configuration{
				Backends: []*model.Backend{{Name: "b", Endpoints: endpoints(c.peers...)}},
				Servers:  []model.Server{{Hostname: "t.example", Locations: []model.Location{l}}},
			}
			base, _ := start(t, cfg)
			badBefore, slowBefore := bad.requests.Load(), slow.requests.Load()
			seen := map[string]bool{}
			n := 6
			if c.timeout > 0 {
				n = 1
			}
			for range n {
				s, body := do(t, c.method, base+"/")
				got := fmt.Sprintf("%d %s", s, body)
				if s == 502 && body != "bad" && body != "slow" {
					got = "502 " // the proxy's own 502
				}
				if !c.want[got] {
					t.Fatalf("%s got %q; want one of %v", c.method, got, c.want)
				}
				seen[got] = true
			}
			if len(seen) != len(c.want) {
				t.Errorf("saw %v; want every one of %v", seen, c.want)
			}
			switch c.name {
			case "tries exhausted: the last 502 is the answer":
				if got := bad.requests.Load() - badBefore; got != int32(2*n) {
					t.Errorf("bad backend saw %d requests for %d client requests; want 2 each (tries 2)", got, n)
				}
			case "timeout: none left after a slow answer":
				if got := slow.requests.Load() - slowBefore; got != 1 {
					t.Errorf("slow backend saw %d requests; want 1 (next-upstream-timeout passed)", got)
				}
			}
		})
	}
}

// TestUpstreamKeepAliveReuseHTTP2: an HTTP/2 client's requests to an
// HTTP/1.1 upstream reuse one upstream connection too, the streamed body
// returning it when the front end releases the response.
func TestUpstreamKeepAliveReuseHTTP2(t *testing.T) {
	big := strings.Repeat("z", 300<<10)
	b := newRawBackend(t, func(int, string) (string, bool) { return okReply(big), false })
	cfg := oneBackendConfig(b.addr)
	p, _ := newProxy(t, cfg, Config{})
	addr := serve(t, p.ServeTLS)
	tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: "t.example", InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	for i := range 3 {
		req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
		req.Host = "t.example"
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.ProtoMajor != 2 || len(body) != len(big) {
			t.Fatalf("request %d: proto %d, %d bytes, %v; want HTTP/2 and %d bytes", i, resp.ProtoMajor, len(body), err, len(big))
		}
	}
	if n := b.conns.Load(); n != 1 {
		t.Errorf("upstream connections: %d; want 1", n)
	}
}

// TestUpBodyClosedOnce: fasthttp closes a response body stream by calling
// Close and then CloseWithError when it has both; upBody must be put back
// in its pool once, or two requests get the same body and one reads the
// other's upstream connection (seen as 502s under load when every body
// was streamed).
func TestUpBodyClosedOnce(t *testing.T) {
	var body any = new(upBody)
	if _, ok := body.(io.Closer); ok {
		t.Fatal("upBody has a Close beside CloseWithError: fasthttp would close it twice")
	}
	pp := newPeerPool("", false, nil, nil)
	c := &upConn{br: bufio.NewReaderSize(bytes.NewReader([]byte("hello")), 16), pool: pp, tc: timeoutConn{Conn: nopConn{}}}
	pp.stripes[0].active = 1
	b := upBodyPool.Get().(*upBody)
	*b = upBody{c: c, left: 5, keep: true}
	var resp fasthttp.Response
	resp.SetBodyStream(b, 5)
	if got := string(resp.Body()); got != "hello" { // reads and closes the stream
		t.Fatalf("body %q", got)
	}
	x, y := upBodyPool.Get().(*upBody), upBodyPool.Get().(*upBody)
	if x == y {
		t.Fatal("the pool gave the same upBody twice: it was put back twice")
	}
	if pp.idleCount() != 1 || pp.activeCount() != 0 {
		t.Errorf("pool: %d idle, %d active; want the connection back once", pp.idleCount(), pp.activeCount())
	}
}

// idleCount is how many connections pp holds idle, in all its stripes.
func (pp *peerPool) idleCount() int {
	n := 0
	for i := range pp.stripes {
		st := &pp.stripes[i]
		st.mu.Lock()
		n += len(st.idle)
		st.mu.Unlock()
	}
	return n
}

// activeCount is how many connections of pp are out of it.
func (pp *peerPool) activeCount() int {
	n := 0
	for i := range pp.stripes {
		st := &pp.stripes[i]
		st.mu.Lock()
		n += st.active
		st.mu.Unlock()
	}
	return n
}

// nopConn is a net.Conn that does nothing.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }

// TestPeerPoolStripes: a connection idle in any stripe is reused before a
// new one is dialled, whichever P the request runs on; one given back goes
// to the stripe of the P that gives it.
func TestPeerPoolStripes(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(maxStripes))
	pp := newPeerPool("192.0.2.1:9", false, nil, nil) // never dialled
	if len(pp.stripes) != maxStripes {
		t.Fatalf("%d stripes; want %d", len(pp.stripes), maxStripes)
	}
	now := monoNow()
	for j := range pp.stripes {
		want := &upConn{tc: timeoutConn{Conn: nopConn{}}, pool: pp, idleSince: now}
		pp.stripes[j].idle = append(pp.stripes[j].idle, want)
		c, connect, reused, err := pp.get(timeouts{connect: time.Millisecond}, now)
		if err != nil || c != want || !reused || connect != 0 {
			t.Fatalf("idle in stripe %d: got %p reused %v connect %v err %v; want it reused", j, c, reused, connect, err)
		}
		c.put()
		if pp.idleCount() != 1 || pp.activeCount() != 0 {
			t.Fatalf("after put: %d idle, %d active; want 1 and 0", pp.idleCount(), pp.activeCount())
		}
		pp.closeIdle(now, true)
	}
}
