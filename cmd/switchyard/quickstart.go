package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// quickstartBackends are the two tiny local backends deploy/quickstart's
// EndpointSlices name.
var quickstartBackends = []struct{ name, addr string }{
	{"backend-1", "127.0.0.1:18081"},
	{"backend-2", "127.0.0.1:18082"},
}

// runQuickstart starts the two demo backends and the controller with the Go
// data plane on a directory of manifests, with no cluster, and prints the
// curl commands that show round robin, a canary header and a sticky cookie.
func runQuickstart(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("switchyard quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("manifests", "deploy/quickstart", "directory of manifests to serve")
	httpPort := fs.Int("http-port", 8080, "port for HTTP traffic")
	httpsPort := fs.Int("https-port", 8443, "port for HTTPS traffic")
	statusPort := fs.Int("status-port", 10254, "port of the status page and /metrics")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	for _, b := range quickstartBackends {
		srv, err := startEchoBackend(b.name, b.addr)
		if err != nil {
			fmt.Fprintf(stderr, "switchyard quickstart: %v\n", err)
			return 1
		}
		defer srv.Close()
	}
	opts, err := parseControllerFlags([]string{
		"--manifests", *dir, "--http-port", strconv.Itoa(*httpPort), "--https-port", strconv.Itoa(*httpsPort), "--status-port", strconv.Itoa(*statusPort),
		"--listen-address", "127.0.0.1",
	}, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "switchyard quickstart: %v\n", err)
		return 2
	}
	ready := make(chan listening, 1)
	go func() {
		select {
		case l := <-ready:
			printQuickstartHelp(stdout, l)
		case <-ctx.Done():
		}
	}()
	if err := serveController(ctx, opts, ready); err != nil {
		fmt.Fprintf(stderr, "switchyard quickstart: %v\n", err)
		return 1
	}
	return 0
}

func printQuickstartHelp(w io.Writer, l listening) {
	fmt.Fprintf(w, `
Switchyard is serving deploy/quickstart on http://%[1]s (status page: http://%[2]s/).

Round robin over the two backends (answers alternate):
  for i in 1 2 3 4; do curl -s -H 'Host: echo.localhost' http://%[1]s/; done

Canary by header (always the canary, backend-2):
  curl -s -H 'Host: echo.localhost' -H 'X-Canary: always' http://%[1]s/

Sticky cookie (the first answer sets INGRESSCOOKIE; with it, the same backend every time):
  curl -s -c /tmp/switchyard.jar -H 'Host: sticky.localhost' http://%[1]s/
  for i in 1 2 3; do curl -s -b /tmp/switchyard.jar -H 'Host: sticky.localhost' http://%[1]s/; done

Edit any file under deploy/quickstart/ and the change is served at once. Ctrl-C stops.
`, l.HTTP, l.Status)
}

// startEchoBackend serves a backend that answers with its name and the path.
func startEchoBackend(name, addr string) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("start %s on %s: %w", name, addr, err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "%s: %s %s\n", name, r.Method, r.URL.RequestURI())
	})}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		}
	}()
	return srv, nil
}
