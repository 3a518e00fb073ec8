package builder

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// nginxSettings reads the ConfigMap keys only the nginx data plane carries
// out (configmapkeys.go marks them NginxPlaneOnly) into typed values. An
// invalid value is reported through bad and the default is kept.
func nginxSettings(data map[string]string, bad func(key, msg string)) model.NginxSettings {
	var n model.NginxSettings
	get := func(key string) (string, bool) {
		v, ok := data[key]
		return strings.TrimSpace(v), ok
	}
	duration := func(key string) (time.Duration, bool) {
		v, ok := get(key)
		if !ok {
			return 0, false
		}
		d, err := nginxDuration(v)
		if err != nil {
			bad(key, fmt.Sprintf("%q is not an nginx duration such as 240s", v))
			return 0, false
		}
		return d, true
	}
	integer := func(key string, lo int) (int, bool) {
		v, ok := get(key)
		if !ok {
			return 0, false
		}
		x, err := strconv.Atoi(v)
		if err != nil || x < lo || x > 1<<30 {
			bad(key, fmt.Sprintf("%q is not an integer of at least %d", v, lo))
			return 0, false
		}
		return x, true
	}
	boolean := func(key string, dst *bool) {
		if v, ok := get(key); ok {
			x, err := strconv.ParseBool(v)
			if err != nil {
				bad(key, fmt.Sprintf("%q is not true or false", v))
				return
			}
			*dst = x
		}
	}
	if d, ok := duration("worker-shutdown-timeout"); ok && d > 0 {
		n.WorkerShutdownTimeout = d
	} else if ok {
		bad("worker-shutdown-timeout", "0 would stop workers at once; want a positive duration")
	}
	boolean("server-tokens", &n.ServerTokens)
	boolean("enable-access-log-for-default-backend", &n.AccessLogDefaultBackend)
	if v, ok := get("ssl-protocols"); ok {
		if ps, err := sslProtocols(v); err != nil {
			bad("ssl-protocols", fmt.Sprintf("%q: %v", v, err))
		} else {
			n.SSLProtocols = ps
		}
	}
	if v, ok := get("ssl-ciphers"); ok {
		if model.ValidCipherList(v) {
			n.SSLCiphers = v
		} else {
			bad("ssl-ciphers", fmt.Sprintf("%q is not an OpenSSL cipher list", v))
		}
	}
	ka := &n.UpstreamKeepalive
	if x, ok := integer("upstream-keepalive-connections", 0); ok {
		ka.Connections = &x
	}
	if d, ok := duration("upstream-keepalive-time"); ok && d > 0 {
		ka.Time = d
	} else if ok {
		bad("upstream-keepalive-time", "want a positive duration")
	}
	if d, ok := duration("upstream-keepalive-timeout"); ok {
		ka.Timeout = &d
	}
	if x, ok := integer("upstream-keepalive-requests", 1); ok {
		ka.Requests = x
	}
	return n
}

// nginxDuration parses an nginx time of one number and an optional unit
// (ms, s, m, h, d; none means seconds), as nginx reads keepalive_timeout
// and worker_shutdown_timeout.
func nginxDuration(s string) (time.Duration, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 9 {
		return 0, fmt.Errorf("%q: want 1 to 9 digits and a unit", s)
	}
	x, _ := strconv.ParseInt(s[:i], 10, 64) // at most 9 digits
	unit := map[string]time.Duration{"": time.Second, "ms": time.Millisecond, "s": time.Second,
		"m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	u, ok := unit[s[i:]]
	if !ok {
		return 0, fmt.Errorf("%q: unit %q is not ms, s, m, h or d", s, s[i:])
	}
	return time.Duration(x) * u, nil
}

// sslProtocols reads ssl-protocols: TLS versions nginx knows, separated by
// spaces, each once.
func sslProtocols(v string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, p := range strings.Fields(v) {
		switch p {
		case "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3":
		default:
			return nil, fmt.Errorf("%q is not TLSv1, TLSv1.1, TLSv1.2 or TLSv1.3", p)
		}
		if seen[p] {
			return nil, fmt.Errorf("%s is named twice", p)
		}
		seen[p] = true
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no protocol")
	}
	return out, nil
}
