package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestWebhookFlags: --validating-webhook takes host:port; the certificate
// and key are required when the controller starts (each flag alone must
// parse, as TestIngressNginxFlagsAccepted checks), and a webhook needs an
// API server.
func TestWebhookFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		parseErr string // empty: parses
		startErr string // empty: not started
	}{
		{name: "chart's address", args: []string{"--validating-webhook=:8443"},
			startErr: "--validating-webhook needs --validating-webhook-certificate and --validating-webhook-key"},
		{name: "no port", args: []string{"--validating-webhook=8443"}, parseErr: `--validating-webhook: "8443" is not host:port or :port`},
		{name: "manifests", args: []string{"--validating-webhook=127.0.0.1:0", "--validating-webhook-certificate=c", "--validating-webhook-key=k",
			"--manifests=" + t.TempDir()},
			startErr: "--validating-webhook needs an API server, not --manifests"},
		{name: "missing files", args: []string{"--validating-webhook=127.0.0.1:0", "--validating-webhook-certificate=/nonexistent/cert",
			"--validating-webhook-key=/nonexistent/key"},
			startErr: "--validating-webhook-certificate/--validating-webhook-key: admission: webhook certificate: stat /nonexistent/cert: no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := parseControllerFlags(tc.args, io.Discard)
			if tc.parseErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.parseErr) {
					t.Fatalf("parse: %v; want %q", err, tc.parseErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if tc.startErr == "" {
				return
			}
			if opts.Manifests == "" {
				// No cluster to reach: serveWebhook's own checks run
				// before anything else of it.
				if err := serveWebhook(context.Background(), opts, nil, nil, nil); err == nil || err.Error() != tc.startErr {
					t.Errorf("serveWebhook: %v; want %q", err, tc.startErr)
				}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			if err := serveController(ctx, opts, nil); err == nil || err.Error() != tc.startErr {
				t.Errorf("serveController: %v; want %q", err, tc.startErr)
			}
		})
	}
}
