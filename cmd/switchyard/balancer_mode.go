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
	"syscall"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/balancer/picksock"
	"github.com/switchyard-proxy/switchyard/nginxcompat"
	"k8s.io/klog/v2"
)

// runBalancer is the drop-in mode beside an existing ingress-nginx: it serves
// the ingress-nginx /configuration API (which ingress-nginx's controller
// POSTs backends to, through nginx) and the pick socket the Lua shim asks,
// both on unix sockets, and nothing else.
func runBalancer(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("switchyard balancer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configSocket := fs.String("configuration-socket", "/var/run/switchyard/configuration.sock", "unix socket serving the ingress-nginx /configuration API")
	pickSocket := fs.String("pick-socket", "/var/run/switchyard/pick.sock", "unix socket the Lua shim asks for peers")
	gid := fs.Int("socket-gid", -1, "group that owns both sockets (nginx workers' group); -1 keeps the process's")
	v := fs.Int("v", 0, "log verbosity")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "switchyard balancer: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	klogFlags(*v)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveBalancer(ctx, *configSocket, *pickSocket, *gid, nil); err != nil {
		fmt.Fprintf(stderr, "switchyard balancer: %v\n", err)
		return 1
	}
	return 0
}

// serveBalancer serves until ctx ends; ready, if set, is closed once both
// sockets accept connections.
func serveBalancer(ctx context.Context, configSocket, pickSocket string, gid int, ready chan<- struct{}) error {
	reg := balancer.NewRegistry(balancer.Config{})
	api, err := nginxcompat.NewConfigurationAPI(nginxcompat.APIConfig{Backends: reg, OnError: func(path string, status int, err error) {
		klog.InfoS("configuration request refused", "path", path, "status", status, "error", err)
	}})
	if err != nil {
		return err
	}
	apiLn, err := nginxcompat.ListenUnix(configSocket, 0o660, gid)
	if err != nil {
		return fmt.Errorf("configuration socket: %w", err)
	}
	picks := picksock.NewServer(picksock.Config{Picker: reg, GID: gid, Chown: gid >= 0})
	pickLn, err := picks.Listen(pickSocket)
	if err != nil {
		apiLn.Close()
		return fmt.Errorf("pick socket: %w", err)
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() {
		if err := srv.Serve(apiLn); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	go func() {
		if err := picks.Serve(pickLn); err != nil && !errors.Is(err, net.ErrClosed) {
			errc <- err
		}
	}()
	klog.InfoS("switchyard balancer started", "configuration", configSocket, "pick", pickSocket)
	if ready != nil {
		close(ready)
	}
	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	_ = picks.Close()
	// The pick socket was bound under a temporary name and renamed into
	// place, so closing the listener does not unlink it.
	if err := os.Remove(pickSocket); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "remove pick socket")
	}
	return first
}
