package nginxcompat

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// The API on a unix socket created 0660, reached over plain HTTP/1.1 as the
// Lua forwarder does.
func TestListenUnixServesAPI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api.sock")
	l, err := ListenUnix(path, 0o660, -1)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & os.ModePerm; got != 0o660 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v; want a 0660 socket", fi.Mode())
	}
	api, err := NewConfigurationAPI(APIConfig{Backends: balancer.NewRegistry(balancer.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	resp, err := c.Get("http://nginx/is-dynamic-lb-initialized")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Errorf("got %d %q; want 500 before any backends", resp.StatusCode, b)
	}
	_ = srv.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket left after close: %v", err)
	}
}
