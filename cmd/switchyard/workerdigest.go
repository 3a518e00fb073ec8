package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/switchyard-proxy/switchyard/controlplane/digestauth"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
	"github.com/switchyard-proxy/switchyard/nginxcompat"
)

// remoteDigest is auth-type: digest in a Go worker (--go-workers): the
// nonces and failure counts live in the controller, which answers on a
// unix socket (nginxcompat.DigestHandler, as for nginx's auth_request), so
// a nonce one worker issued is good on every worker and a client's failed
// answers count once, as in nginx's shared zone.
type remoteDigest struct {
	client *http.Client
}

// digestTimeout bounds one question to the controller.
const digestTimeout = 5 * time.Second

func newRemoteDigest(socket string) *remoteDigest {
	var d net.Dialer
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", socket) },
		MaxIdleConnsPerHost: 16,
	}
	return &remoteDigest{client: &http.Client{Transport: tr, Timeout: digestTimeout}}
}

// CheckDigest is proxy.DigestChecker. A controller that cannot be asked
// gets the request refused (503), never let through.
func (d *remoteDigest) CheckDigest(da *model.DigestAuth, r digestauth.Request) digestauth.Answer {
	req, err := http.NewRequest(http.MethodGet, "http://controller/digest/"+nginxcompat.DigestKey(da), nil)
	if err != nil {
		return digestauth.Answer{Status: http.StatusServiceUnavailable}
	}
	req.Header.Set("X-Original-Method", r.Method)
	req.Header.Set("X-Original-URI", r.URI)
	if r.Authorization != "" {
		req.Header.Set("Authorization", r.Authorization)
	}
	if r.Client.IsValid() {
		req.Header.Set("X-Real-IP", r.Client.String())
	}
	resp, err := d.client.Do(req)
	if err != nil {
		klog.ErrorS(err, "digest authentication: the controller did not answer; refused")
		return digestauth.Answer{Status: http.StatusServiceUnavailable}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return digestauth.Answer{AuthenticationInfo: resp.Header.Get("Authentication-Info")}
	case http.StatusUnauthorized, http.StatusServiceUnavailable:
		return digestauth.Answer{Status: resp.StatusCode, WWWAuthenticate: resp.Header.Get("WWW-Authenticate")}
	default:
		// Credentials the controller does not know (yet): refused.
		return digestauth.Answer{Status: http.StatusServiceUnavailable}
	}
}
