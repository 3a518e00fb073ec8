package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProfiler: --profiling serves /debug/pprof on the profiler port, as
// ingress-nginx does; --profiling=false serves nothing there; an address
// beyond loopback is refused.
func TestProfiler(t *testing.T) {
	opts, err := parseControllerFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !opts.Profiling || profilerAddr(opts) != "127.0.0.1:10245" || opts.NginxStatusPort == opts.ProfilerPort {
		t.Fatalf("defaults: profiling %v at %q, nginx status port %d; want on at 127.0.0.1:10245, apart from nginx's",
			opts.Profiling, profilerAddr(opts), opts.NginxStatusPort)
	}
	if off, _ := parseControllerFlags([]string{"--profiling=false"}, io.Discard); profilerAddr(off) != "" {
		t.Errorf("--profiling=false: profiler at %q", profilerAddr(off))
	}

	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { serveProfiler(ctx, addr); close(done) }()
	var body string
	for i := 0; i < 100 && body == ""; i++ {
		resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/debug/pprof/cmdline: %d", resp.StatusCode)
		}
		body = string(b)
	}
	if body == "" {
		t.Fatal("the profiler never answered")
	}
	cancel()
	<-done
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
		t.Error("the profiler still listens after its context ended")
	}

	// Beyond loopback: not served, and serveProfiler returns at once.
	returned := make(chan struct{})
	go func() { serveProfiler(context.Background(), "0.0.0.0:"+strconv.Itoa(freePort(t))); close(returned) }()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("a profiler on 0.0.0.0 was started")
	}
	if !strings.Contains(controllerFlagTable["profiler-address"].Note, "loopback") {
		t.Error("the migration guide does not say the profiler address must be loopback")
	}
}
