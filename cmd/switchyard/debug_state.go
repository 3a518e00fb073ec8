package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// The status-port paths the debug subcommands read.
const (
	debugBackendsPath = "/debug/backends"
	debugConfigPath   = "/debug/config"
)

// defaultStatusAddress is where `switchyard debug backends|config` looks for
// a controller: the default --status-address and --status-port.
const defaultStatusAddress = "127.0.0.1:10254"

// debugTimeout bounds one request of a debug subcommand.
const debugTimeout = 10 * time.Second

// backendLister is the balancer's read-only view (*balancer.Registry).
type backendLister interface {
	Backends() []balancer.BackendStatus
}

// configSource yields the Configuration being served, nil before the first
// sync (*controlplane.Controller).
type configSource interface {
	Current() *model.Configuration
}

// registerDebugHandlers adds /debug/backends and /debug/config to the status
// mux.
//
// GET /debug/backends answers every balancer as a JSON array of
// balancer.BackendStatus; with ?name=NAME it answers that one backend, or 404.
// GET /debug/config answers the current model.Configuration with each
// certificate's PEM (which holds the private key) replaced by a note of its
// length, or 503 before the first sync.
func registerDebugHandlers(mux *http.ServeMux, cfg configSource, backends backendLister) {
	mux.HandleFunc(debugBackendsPath, func(w http.ResponseWriter, r *http.Request) {
		if !debugMethodOK(w, r) {
			return
		}
		all := backends.Backends()
		if !r.URL.Query().Has("name") {
			writeDebugJSON(w, all)
			return
		}
		name := r.URL.Query().Get("name")
		for _, b := range all {
			if b.Name == name {
				writeDebugJSON(w, b)
				return
			}
		}
		writeDebugError(w, http.StatusNotFound, fmt.Sprintf("no backend named %q", name))
	})
	mux.HandleFunc(debugConfigPath, func(w http.ResponseWriter, r *http.Request) {
		if !debugMethodOK(w, r) {
			return
		}
		c := cfg.Current()
		if c == nil {
			writeDebugError(w, http.StatusServiceUnavailable, "no configuration yet: waiting for the first sync")
			return
		}
		writeDebugJSON(w, redactConfig(c))
	})
}

// redactConfig returns a shallow copy of c whose certificates carry no key
// material. c itself is shared with the data planes and is never modified.
func redactConfig(c *model.Configuration) *model.Configuration {
	if len(c.Certificates) == 0 {
		return c
	}
	out := *c
	out.Certificates = maps.Clone(c.Certificates)
	for uid, cert := range out.Certificates {
		if cert.PEM != "" {
			cert.PEM = fmt.Sprintf("<redacted: %d bytes>", len(cert.PEM))
			out.Certificates[uid] = cert
		}
	}
	return &out
}

func debugMethodOK(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeDebugError(w, http.StatusMethodNotAllowed, "only GET and HEAD")
	return false
}

// debugError is the JSON body of a failed debug request.
type debugError struct {
	Error string `json:"error"`
}

func writeDebugError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(debugError{Error: msg})
}

func writeDebugJSON(w http.ResponseWriter, v any) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false) // paths and the redaction note keep < > &
	if err := enc.Encode(v); err != nil {
		writeDebugError(w, http.StatusInternalServerError, "encode: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body.Bytes())
}

// runDebugBackends is `switchyard debug backends`: it prints the balancers of
// a running controller, one of them with --name, or their names with --names
// (ingress-nginx's `dbg backends all`, `dbg backends get NAME` and
// `dbg backends list`).
func runDebugBackends(args []string, stdout, stderr io.Writer) int {
	const cmd = "switchyard debug backends"
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("status-address", defaultStatusAddress, "HOST:PORT of the controller's status port")
	name := fs.String("name", "", "print only the backend with this name ($proxy_upstream_name)")
	names := fs.Bool("names", false, "print only the backend names, one a line (ingress-nginx: dbg backends list)")
	nameSet := false
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fs.Visit(func(f *flag.Flag) { nameSet = nameSet || f.Name == "name" })
	if code, ok := checkDebugArgs(cmd, fs, *addr, stderr); !ok {
		return code
	}
	if nameSet && *name == "" {
		fmt.Fprintf(stderr, "%s: -name: empty backend name\n", cmd)
		return 2
	}
	if nameSet && *names {
		fmt.Fprintf(stderr, "%s: -name and -names exclude each other\n", cmd)
		return 2
	}
	path := debugBackendsPath
	if nameSet {
		path += "?" + url.Values{"name": {*name}}.Encode()
	}
	if !*names {
		return fetchDebug(cmd, *addr, path, stdout, stderr)
	}
	var all bytes.Buffer
	if code := fetchDebug(cmd, *addr, path, &all, stderr); code != 0 {
		return code
	}
	var list []balancer.BackendStatus
	if err := json.Unmarshal(all.Bytes(), &list); err != nil {
		fmt.Fprintf(stderr, "%s: %s answered no list of backends: %v\n", cmd, *addr, err)
		return 1
	}
	for _, b := range list {
		fmt.Fprintln(stdout, b.Name)
	}
	return 0
}

// runDebugConfig is `switchyard debug config`: it prints the Configuration a
// running controller serves (ingress-nginx's `dbg conf`), certificates
// without their keys.
func runDebugConfig(args []string, stdout, stderr io.Writer) int {
	const cmd = "switchyard debug config"
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("status-address", defaultStatusAddress, "HOST:PORT of the controller's status port")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if code, ok := checkDebugArgs(cmd, fs, *addr, stderr); !ok {
		return code
	}
	return fetchDebug(cmd, *addr, debugConfigPath, stdout, stderr)
}

// checkDebugArgs rejects positional arguments and a malformed
// --status-address, with exit code 2.
func checkDebugArgs(cmd string, fs *flag.FlagSet, addr string, stderr io.Writer) (int, bool) {
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2, false
	}
	if err := validateHostPort(addr); err != nil {
		fmt.Fprintf(stderr, "%s: -status-address: %v\n", cmd, err)
		return 2, false
	}
	return 0, true
}

func validateHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q is not 1-65535", addr, port)
	}
	return nil
}

// fetchDebug GETs path from the status port at addr and prints the JSON
// answer indented. Any failure prints one clear line and returns 1.
func fetchDebug(cmd, addr, path string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), debugTimeout)
	defer cancel()
	u := "http://" + addr + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "%s: cannot reach a controller's status port at %s (is it running? see --status-address): %v\n", cmd, addr, errors.Unwrap(err))
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		fmt.Fprintf(stderr, "%s: reading %s: %v\n", cmd, u, err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		msg := string(bytes.TrimSpace(body))
		var e debugError
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		if resp.StatusCode == http.StatusNotFound && e.Error == "" {
			msg = "the status port at " + addr + " has no " + path + " (not a Switchyard controller, or an older version)"
		}
		fmt.Fprintf(stderr, "%s: %s: %s\n", cmd, resp.Status, msg)
		return 1
	}
	var out bytes.Buffer
	if err := json.Indent(&out, bytes.TrimSpace(body), "", "  "); err != nil {
		fmt.Fprintf(stderr, "%s: %s answered something that is not JSON: %v\n", cmd, u, err)
		return 1
	}
	out.WriteByte('\n')
	if _, err := stdout.Write(out.Bytes()); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return 1
	}
	return 0
}
