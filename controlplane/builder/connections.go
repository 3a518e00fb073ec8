package builder

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// connections reads the ConfigMap keys of client connections and request
// heads into g, as ingress-nginx renders them into nginx.conf
// (docs/migrating-from-ingress-nginx.md, "Client connections"): keep-alive
// (keepalive_timeout, seconds; 0 disables keep-alive), keep-alive-requests
// (keepalive_requests; 0 also disables it), max-worker-connections
// (worker_connections), worker-processes ("auto" or a number),
// client-header-timeout (seconds), client-header-buffer-size (an nginx
// size: "1k"), large-client-header-buffers ("4 8k") and
// proxy-protocol-header-timeout (a Go duration). An invalid value
// is reported through bad and the default is kept.
func connections(data map[string]string, g *model.Global, bad func(key, msg string)) {
	count := func(key string, lo int) (int, bool) {
		v, ok := data[key]
		if !ok {
			return 0, false
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < lo {
			bad(key, fmt.Sprintf("%q is not an integer of at least %d", v, lo))
			return 0, false
		}
		return n, true
	}
	if n, ok := count("keep-alive", 0); ok {
		g.KeepAliveSeconds = n
		g.DisableKeepAlive = g.DisableKeepAlive || n == 0
	}
	if n, ok := count("keep-alive-requests", 0); ok {
		g.KeepAliveRequests = n
		g.DisableKeepAlive = g.DisableKeepAlive || n == 0
	}
	if n, ok := count("max-worker-connections", 0); ok {
		// 0: ingress-nginx derives it from max-worker-open-files; the Go
		// data plane takes the default.
		g.MaxWorkerConnections = n
	}
	if v, ok := data["worker-processes"]; ok && strings.TrimSpace(v) != "auto" {
		if n, ok := count("worker-processes", 1); ok && n <= 1024 {
			g.WorkerProcesses = n
		} else if ok {
			bad("worker-processes", fmt.Sprintf("%q is more than 1024 workers", v))
		}
	}
	if n, ok := count("client-header-timeout", 1); ok {
		g.ClientHeaderTimeoutSeconds = n
	}
	if v, ok := data["proxy-protocol-header-timeout"]; ok {
		// A Go duration, as ingress-nginx parses it ("5s", "500ms").
		if d, err := time.ParseDuration(strings.TrimSpace(v)); err != nil || d <= 0 || d > time.Hour {
			bad("proxy-protocol-header-timeout", fmt.Sprintf("%q is not a duration from 1ns to 1h (\"5s\")", v))
		} else {
			g.ProxyProtocolHeaderTimeout = d
		}
	}
	if v, ok := data["client-header-buffer-size"]; ok {
		if n, err := nginxSize(v); err != nil || n == 0 {
			bad("client-header-buffer-size", fmt.Sprintf("%q is not a size (\"1k\")", v))
		} else {
			g.ClientHeaderBufferSize = n
		}
	}
	if v, ok := data["large-client-header-buffers"]; ok {
		f := strings.Fields(v)
		num, err := strconv.Atoi(strings.Join(f[:min(len(f), 1)], ""))
		var size int
		if err == nil && len(f) == 2 {
			size, err = nginxSize(f[1])
		}
		if err != nil || len(f) != 2 || num < 1 || size < 1 {
			bad("large-client-header-buffers", fmt.Sprintf("%q is not a number and a size (\"4 8k\")", v))
		} else {
			g.LargeClientHeaderBuffers, g.LargeClientHeaderBufferSize = num, size
		}
	}
}

// nginxSize parses an nginx size: a number of bytes, or of kilobytes or
// megabytes with a k or m suffix (either case).
func nginxSize(v string) (int, error) {
	v = strings.TrimSpace(v)
	mult := 1
	switch {
	case strings.HasSuffix(v, "k"), strings.HasSuffix(v, "K"):
		mult, v = 1<<10, v[:len(v)-1]
	case strings.HasSuffix(v, "m"), strings.HasSuffix(v, "M"):
		mult, v = 1<<20, v[:len(v)-1]
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1<<30/mult {
		return 0, fmt.Errorf("size %q: not an nginx size", v)
	}
	return n * mult, nil
}
