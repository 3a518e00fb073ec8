package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"k8s.io/klog/v2"
)

// serveProfiler serves Go's /debug/pprof on addr until ctx ends, as
// ingress-nginx's --profiling does on its --profiler-port. The address
// must be loopback: profiles show request data and cost CPU, so they are
// never offered beyond the node. A profiler that cannot start is logged
// and left off; it never stops the data plane.
func serveProfiler(ctx context.Context, addr string) {
	ln, err := listenLoopback(addr)
	if err != nil {
		klog.ErrorS(err, "profiler not started (--profiling, --profiler-address, --profiler-port)", "address", addr)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	klog.InfoS("serving /debug/pprof", "address", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "profiler stopped", "address", addr)
	}
}

// profilerAddr is where --profiling serves, or "" when it is off.
func profilerAddr(o controllerOptions) string {
	if !o.Profiling {
		return ""
	}
	return net.JoinHostPort(o.ProfilerAddress.String(), strconv.Itoa(o.ProfilerPort))
}
