package nginxcompat

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// TestStreamSocket speaks spec §1.6 to ServeStream over real TCP: a payload
// replaces the stream backends, an empty line and bad JSON change nothing
// (bad JSON is answered "error: ..."), and an oversized payload is refused.
func TestStreamSocket(t *testing.T) {
	reg := balancer.NewRegistry(balancer.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	errs := make(chan error, 10)
	go func() {
		done <- ServeStream(ctx, ln, StreamConfig{Backends: reg, MaxLine: 4096, OnError: func(err error) { errs <- err }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	send := func(payload string) string {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		if _, err := c.Write([]byte(payload)); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		reply, _ := bufio.NewReader(c).ReadString('\n')
		return reply
	}
	good := `[{"name":"tcp-default-redis-6379","port":6379,"sslPassthrough":false,"endpoints":[{"address":"10.0.2.1","port":"6379"}],"sessionAffinityConfig":{"name":"","mode":"","cookieSessionAffinity":{"name":""}},"upstreamHashByConfig":{},"noServer":false,"trafficShapingPolicy":{"weight":0,"weightTotal":0,"header":"","headerValue":"","headerPattern":"","cookie":""}}]`
	if reply := send(good + "\r\n"); reply != "" {
		t.Fatalf("good payload answered %q", reply)
	}
	peers := func() []string { return reg.Peers("tcp-default-redis-6379") }
	if p := peers(); len(p) != 1 || p[0] != "10.0.2.1:6379" {
		t.Fatalf("after the payload: peers %v", p)
	}
	if reply := send("\r\n"); reply != "" {
		t.Errorf("empty line answered %q", reply)
	}
	if reply := send("[{not json\r\n"); !strings.HasPrefix(reply, "error: ") {
		t.Errorf("bad JSON answered %q; want error: ...", reply)
	}
	if reply := send("[" + strings.Repeat(" ", 5000) + "]\r\n"); !strings.HasPrefix(reply, "error: ") {
		t.Errorf("oversized payload answered %q", reply)
	}
	if p := peers(); len(p) != 1 {
		t.Errorf("refused payloads changed the backends: %v", p)
	}
	if len(errs) != 2 {
		t.Errorf("OnError told about %d refusals; want 2", len(errs))
	}
}

// FuzzStreamPayload: any bytes are either refused or applied; never a panic.
func FuzzStreamPayload(f *testing.F) {
	f.Add([]byte(`[{"name":"tcp-a-b-1","port":1,"endpoints":[{"address":"10.0.0.1","port":"1"}]}]` + "\r\n"))
	f.Add([]byte("\r\n"))
	f.Add([]byte("[{\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		reg := balancer.NewRegistry(balancer.Config{})
		_ = readStreamPayload(strings.NewReader(string(b)), 4096, func(line []byte) error { return applyStream(line, reg) })
	})
}
