package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// pickOutput is what `debug pick` prints.
type pickOutput struct {
	Backend   string  `json:"backend"`
	Peer      string  `json:"peer"`
	SetCookie string  `json:"setCookie"`
	EWMAScore float64 `json:"ewmaScore"`
}

// runDebugPick reads an ingress-nginx backends payload, performs one pick for
// a request with the given attributes and prints the outcome as JSON. A
// missing backend, or one without endpoints, prints {"status": 503}.
func runDebugPick(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("switchyard debug pick", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		file, name, host, locationPath, serverName, userAgent, lastFailure string
		https                                                              bool
		now                                                                float64
		seed                                                               uint64
		varsF, headers, cookies, tried                                     listFlag
	)
	fs.StringVar(&file, "backends", "", "file holding the JSON array POSTed to /configuration/backends (- for stdin)")
	fs.StringVar(&name, "backend", "", "backend name ($proxy_upstream_name)")
	fs.Var(&varsF, "var", "nginx variable NAME=VALUE (repeatable), e.g. request_uri=/foo")
	fs.Var(&headers, "header", "request header 'Name: value' (repeatable)")
	fs.Var(&cookies, "cookie", "request cookie name=value (repeatable)")
	fs.BoolVar(&https, "https", false, "the request came over HTTPS ($https = on)")
	fs.StringVar(&host, "host", "", "$host")
	fs.StringVar(&locationPath, "location-path", "/", "$location_path (the Ingress path)")
	fs.StringVar(&serverName, "server-name", "", "$server_name (defaults to --host)")
	fs.StringVar(&userAgent, "user-agent", "", "User-Agent header")
	fs.Float64Var(&now, "now", 0, "clock, Unix seconds (default: the real clock)")
	fs.Uint64Var(&seed, "seed", 0, "seed for the random choices (default: random)")
	fs.Var(&tried, "tried", "peer already tried by this request, ip:port (repeatable, in order)")
	fs.StringVar(&lastFailure, "last-failure", "", "how the previous attempt ended: failed or next")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "switchyard debug pick: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if file == "" || name == "" {
		return fail("--backends and --backend are required")
	}
	req := debugRequest{vars: map[string]string{"location_path": locationPath}}
	for _, kv := range varsF {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fail("--var %q: want NAME=VALUE", kv)
		}
		req.vars[k] = v
	}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return fail("--header %q: want 'Name: value'", h)
		}
		req.headers = append(req.headers, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	for _, c := range cookies {
		k, v, ok := strings.Cut(c, "=")
		if !ok || k == "" {
			return fail("--cookie %q: want name=value", c)
		}
		req.cookies = append(req.cookies, [2]string{k, v})
	}
	if host != "" {
		req.vars["host"] = host
		if serverName == "" {
			serverName = host
		}
	}
	if serverName != "" {
		req.vars["server_name"] = serverName
	}
	if https {
		req.vars["https"] = "on"
	}
	if userAgent != "" {
		req.headers = append(req.headers, [2]string{"User-Agent", userAgent})
	}

	var a balancer.Attempt
	switch lastFailure {
	case "":
	case "failed":
		a.LastFailure = balancer.FailureFailed
	case "next":
		a.LastFailure = balancer.FailureNext
	default:
		return fail("--last-failure %q: want failed or next", lastFailure)
	}
	var body []byte
	var err error
	if file == "-" {
		body, err = io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
	} else {
		body, err = os.ReadFile(file)
	}
	if err != nil {
		return fail("%v", err)
	}
	backends, err := balancer.DecodeBackends(body)
	if err != nil {
		return fail("%v", err)
	}

	cfg := balancer.Config{}
	if now != 0 {
		t := time.Unix(0, int64(now*1e9))
		cfg.Now = func() time.Time { return t }
	}
	if fs.Lookup("seed") != nil && isSet(fs, "seed") {
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(seed, seed))
		cfg.Rand = func() uint64 { mu.Lock(); defer mu.Unlock(); return rng.Uint64() }
	}
	reg := balancer.NewRegistry(cfg)
	if err := reg.Sync(backends); err != nil {
		fmt.Fprintf(stderr, "switchyard debug pick: warning: %v\n", err)
	}
	p, err := reg.PickAfter(name, req, &a, tried)
	enc := json.NewEncoder(stdout)
	switch {
	case errors.Is(err, balancer.ErrUnknownBackend):
		_ = enc.Encode(map[string]int{"status": 503})
		return 0
	case errors.Is(err, balancer.ErrNoPeer):
		_ = enc.Encode(map[string]any{"status": 502, "backend": p.Backend})
		return 0
	case err != nil:
		return fail("%v", err)
	}
	_ = enc.Encode(pickOutput{Backend: p.Backend, Peer: p.Peer, SetCookie: p.SetCookie, EWMAScore: p.EWMAScore})
	return 0
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// debugRequest answers nginx variables from flags: $http_<name> from headers
// (case-insensitive, '-' and '_' equal, repeated headers joined with ", "),
// $cookie_<name> from cookies (case-insensitive, first match), $http_cookie
// as the Cookie header nginx would see.
type debugRequest struct {
	vars    map[string]string
	headers [][2]string
	cookies [][2]string
}

func (d debugRequest) Var(name string) ([]byte, bool) {
	if v, ok := d.vars[name]; ok {
		return []byte(v), true
	}
	if h, ok := strings.CutPrefix(name, "http_"); ok {
		if h == "cookie" && len(d.cookies) > 0 {
			parts := make([]string, len(d.cookies))
			for i, c := range d.cookies {
				parts[i] = c[0] + "=" + c[1]
			}
			return []byte(strings.Join(parts, "; ")), true
		}
		var vals []string
		for _, kv := range d.headers {
			if strings.EqualFold(strings.ReplaceAll(kv[0], "-", "_"), h) {
				vals = append(vals, kv[1])
			}
		}
		if len(vals) > 0 {
			return []byte(strings.Join(vals, ", ")), true
		}
		return nil, false
	}
	if c, ok := strings.CutPrefix(name, "cookie_"); ok {
		for _, kv := range d.cookies {
			if strings.EqualFold(kv[0], c) {
				return []byte(kv[1]), true
			}
		}
	}
	return nil, false
}
