package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-proxy/switchyard/controlplane"
	"github.com/switchyard-proxy/switchyard/controlplane/admission"
	"k8s.io/klog/v2"
)

// validateWebhook checks --validating-webhook's syntax (issue 21, item
// 3). The certificate and key are checked when the controller starts, as
// ingress-nginx does: each flag alone must parse (TestIngressNginxFlagsAccepted).
func (o *controllerOptions) validateWebhook() []error {
	if o.ValidatingWebhook == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(o.ValidatingWebhook); err != nil {
		return []error{fmt.Errorf("--validating-webhook: %q is not host:port or :port: %v", o.ValidatingWebhook, err)}
	}
	return nil
}

// serveWebhook binds the admission webhook's port at once (a port in use
// fails the start) and serves reviews once the controller's caches are
// synced: before that its store view would admit what it cannot see, so
// the API server meets a closed port and applies the failurePolicy.
func serveWebhook(ctx context.Context, opts controllerOptions, ctrl *controlplane.Controller, reg prometheus.Registerer, errc chan<- error) error {
	if opts.ValidatingWebhookCertificate == "" || opts.ValidatingWebhookKey == "" {
		return errors.New("--validating-webhook needs --validating-webhook-certificate and --validating-webhook-key")
	}
	if opts.Manifests != "" {
		return errors.New("--validating-webhook needs an API server, not --manifests")
	}
	certs, err := admission.NewCertReloader(opts.ValidatingWebhookCertificate, opts.ValidatingWebhookKey)
	if err != nil {
		return fmt.Errorf("--validating-webhook-certificate/--validating-webhook-key: %w", err)
	}
	if err := ctrl.EnableAdmission(); err != nil {
		return err
	}
	h, err := admission.NewHandler(admission.Config{Store: ctrl, Registerer: reg})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.ValidatingWebhook)
	if err != nil {
		return fmt.Errorf("listen for the admission webhook: %w", err)
	}
	srv := &http.Server{
		// Every path, as ingress-nginx's webhook: the chart's is
		// admission.Path.
		Handler:   h,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate},
		// The API server's own timeout for a webhook is at most 30 s.
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
	}
	go func() {
		select {
		case <-ctrl.Ready():
		case <-ctx.Done():
			ln.Close()
			return
		}
		klog.InfoS("admission webhook serving", "address", ln.Addr().String(), "path", admission.Path)
		go func() {
			<-ctx.Done()
			shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
			defer done()
			_ = srv.Shutdown(shutdown)
		}()
		if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("admission webhook: %w", err)
		}
	}()
	return nil
}
