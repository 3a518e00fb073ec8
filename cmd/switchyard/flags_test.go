package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseControllerFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string // substring; "" means success
	}{
		{name: "defaults", args: nil},
		{name: "ingress-nginx names", args: []string{"--watch-namespace=apps", "--ingress-class=nginx", "--controller-class=k8s.io/ingress-nginx", "--configmap=ingress/cfg", "--publish-status-address=1.2.3.4,5.6.7.8", "--http-port=8080", "-v=2"}},
		{name: "values after a space", args: []string{"--http-port", "8080", "-v", "2", "--configmap", "ingress/cfg"}},
		{name: "boolean forms", args: []string{"--enable-ssl-passthrough", "--metrics-per-host=false", "--ingress-class-by-name=true"}},
		{name: "unknown flag", args: []string{"--no-such-flag"}, wantErr: "unknown flag: --no-such-flag; the ingress-nginx flags Switchyard knows are listed in " + migrationFlagsSection},
		{name: "single-dash long flag", args: []string{"-http-port=8080"}, wantErr: "-http-port=8080: a long flag takes two dashes, as in ingress-nginx: --http-port=8080"},
		{name: "boolean takes no separate value", args: []string{"--enable-ssl-passthrough", "false"}, wantErr: `unexpected argument "false"`},
		{name: "malformed int", args: []string{"--http-port=eighty"}, wantErr: "http-port"},
		{name: "port out of range", args: []string{"--https-port=70000"}, wantErr: "-https-port: 70000"},
		{name: "configmap not ns/name", args: []string{"--configmap=justname"}, wantErr: "-configmap"},
		{name: "bad data plane", args: []string{"--data-plane=envoy"}, wantErr: "-data-plane"},
		{name: "bad status address", args: []string{"--status-address=localhost"}, wantErr: "-status-address"},
		{name: "stray argument", args: []string{"extra"}, wantErr: `unexpected argument "extra"`},
		{name: "busy poll", args: []string{"--l4-busy-poll=0", "--l4-busy-poll=50us"}},
		{name: "busy poll negative", args: []string{"--l4-busy-poll=-1us"}, wantErr: "--l4-busy-poll: -1µs is not between 0 and 1ms"},
		{name: "busy poll too long", args: []string{"--l4-busy-poll=2ms"}, wantErr: "--l4-busy-poll: 2ms is not between 0 and 1ms"},
		{name: "idle spin", args: []string{"--go-idle-spin=0", "--go-idle-spin=1ms"}},
		{name: "idle spin negative", args: []string{"--go-idle-spin=-1us"}, wantErr: "--go-idle-spin: -1µs is not between 0 and 1ms"},
		{name: "idle spin too long", args: []string{"--go-idle-spin=1001us"}, wantErr: "--go-idle-spin: 1.001ms is not between 0 and 1ms"},
		{name: "http2 server", args: []string{"--http2-server=x/net"}},
		{name: "http2 server unknown", args: []string{"--http2-server=h2o"}, wantErr: `--http2-server: "h2o" is not switchyard or x/net`},
		{name: "manifests and kubeconfig", args: []string{"--manifests=d", "--kubeconfig=k"}, wantErr: "exclude"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, err := parseControllerFlags(tt.args, &stderr)
			msg := ""
			if err != nil {
				msg = err.Error() + stderr.String()
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("got error %v; want none", err)
			case tt.wantErr != "" && !strings.Contains(msg, tt.wantErr):
				t.Fatalf("got error %q; want one naming %q", msg, tt.wantErr)
			}
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"frobnicate"}, 2},
		{[]string{"controller", "--bogus"}, 2},
		{[]string{"--http-port=x"}, 2},
		{[]string{"debug"}, 2},
		{[]string{"debug", "nope"}, 2},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		if got := run(tt.args, &out, &errb); got != tt.want {
			t.Errorf("run(%q) = %d; want %d (stderr %q)", tt.args, got, tt.want, errb.String())
		}
	}
}

// TestElectionAndResyncFlags: --election-ttl and --sync-period reach the
// options the controller hands to controlplane (ingress-nginx's defaults:
// a 30 s Lease, no resync).
func TestElectionAndResyncFlags(t *testing.T) {
	opts, err := parseControllerFlags(nil, io.Discard)
	if err != nil || opts.ElectionTTL != 30*time.Second || opts.SyncPeriod != 0 {
		t.Fatalf("defaults: ttl %v, sync %v, %v", opts.ElectionTTL, opts.SyncPeriod, err)
	}
	opts, err = parseControllerFlags([]string{"--election-ttl=1m", "--sync-period", "10m"}, io.Discard)
	if err != nil || opts.ElectionTTL != time.Minute || opts.SyncPeriod != 10*time.Minute {
		t.Fatalf("given: ttl %v, sync %v, %v", opts.ElectionTTL, opts.SyncPeriod, err)
	}
}

// TestAPIServerFlags: --apiserver-host overrides the kubeconfig's server and
// --certificate-authority becomes the client's CA file, as in ingress-nginx.
func TestAPIServerFlags(t *testing.T) {
	opts, err := parseControllerFlags([]string{"--apiserver-host=https://10.0.0.1:6443", "--certificate-authority", "/etc/ca.crt"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := restConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://10.0.0.1:6443" || cfg.TLSClientConfig.CAFile != "/etc/ca.crt" {
		t.Errorf("host %q, CA file %q; want the flags'", cfg.Host, cfg.TLSClientConfig.CAFile)
	}
}

// TestShutdownGrace: --shutdown-grace-period keeps the serving context
// alive that long after the signal, and restores the signals' default
// handling when the grace starts.
func TestShutdownGrace(t *testing.T) {
	opts, err := parseControllerFlags([]string{"--shutdown-grace-period=1"}, io.Discard)
	if err != nil || opts.ShutdownGraceSeconds != 1 {
		t.Fatalf("--shutdown-grace-period=1: %d, %v", opts.ShutdownGraceSeconds, err)
	}
	signalled, signal := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	ctx := afterGrace(signalled, func() { close(stopped) }, 300*time.Millisecond)
	start := time.Now()
	signal()
	<-stopped
	select {
	case <-ctx.Done():
		t.Fatal("the serving context ended with the signal")
	case <-time.After(100 * time.Millisecond):
	}
	<-ctx.Done()
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("the serving context ended %v after the signal; want the 300ms grace", took)
	}
	if afterGrace(signalled, func() {}, 0) != signalled {
		t.Error("no grace: want the signal's own context")
	}
}
