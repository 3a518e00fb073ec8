package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"time"
)

// controllerOptions are the flags of `switchyard controller`. Names and
// meanings follow ingress-nginx's controller flags where one exists.
type controllerOptions struct {
	Kubeconfig               string
	Manifests                string
	WatchNamespace           string
	IngressClass             string
	ControllerClass          string
	ConfigMap                string
	TCPServicesConfigMap     string
	UDPServicesConfigMap     string
	PublishService           string
	PublishStatusAddress     string
	ElectionID               string
	DefaultBackendService    string
	DefaultSSLCertificate    string
	EnableSSLPassthrough     bool
	IngressClassByName       bool
	WatchIngressWithoutClass bool
	HTTPPort                 int
	HTTPSPort                int
	StatusPort               int
	StatusAddress            string
	MetricsPerHost           bool
	SyncRateLimit            float64
	DataPlane                string
	NginxBinary              string
	NginxDir                 string
	LuaDir                   string
	NginxStatusPort          int
	SSLPassthroughProxyPort  int
	PickTimeout              time.Duration
	ListenAddress            string
	Verbosity                int
	Version                  bool
}

// newControllerFlags binds opts to a FlagSet that reports errors instead of
// exiting, so run can map them to exit status 2.
func newControllerFlags(opts *controllerOptions, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("switchyard controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty means in-cluster configuration")
	fs.StringVar(&opts.Manifests, "manifests", "", "serve the Kubernetes objects in this directory of YAML files instead of an API server (quickstart)")
	fs.StringVar(&opts.WatchNamespace, "watch-namespace", "", "namespace to watch for Ingresses; empty means all")
	fs.StringVar(&opts.IngressClass, "ingress-class", "switchyard", "name of the IngressClass this controller serves")
	fs.StringVar(&opts.ControllerClass, "controller-class", "switchyard.dev/ingress-controller", "IngressClass spec.controller value to serve (k8s.io/ingress-nginx for a drop-in swap)")
	fs.StringVar(&opts.ConfigMap, "configmap", "", "namespace/name of the controller ConfigMap")
	fs.StringVar(&opts.TCPServicesConfigMap, "tcp-services-configmap", "", "namespace/name of the ConfigMap of TCP services")
	fs.StringVar(&opts.UDPServicesConfigMap, "udp-services-configmap", "", "namespace/name of the ConfigMap of UDP services")
	fs.StringVar(&opts.PublishService, "publish-service", "", "namespace/name of the Service whose addresses go into Ingress status")
	fs.StringVar(&opts.PublishStatusAddress, "publish-status-address", "", "comma-separated addresses to put into Ingress status")
	fs.StringVar(&opts.ElectionID, "election-id", "switchyard-leader", "name of the Lease used for leader election")
	fs.StringVar(&opts.DefaultBackendService, "default-backend-service", "", "namespace/name of the Service answering unmatched requests")
	fs.StringVar(&opts.DefaultSSLCertificate, "default-ssl-certificate", "", "namespace/name of the Secret served for unknown SNI")
	fs.BoolVar(&opts.IngressClassByName, "ingress-class-by-name", false, "also serve Ingresses whose spec.ingressClassName equals --ingress-class")
	fs.BoolVar(&opts.WatchIngressWithoutClass, "watch-ingress-without-class", false, "also serve Ingresses with no class at all")
	fs.BoolVar(&opts.EnableSSLPassthrough, "enable-ssl-passthrough", false, "route TLS by SNI to backends with the ssl-passthrough annotation")
	fs.IntVar(&opts.HTTPPort, "http-port", 80, "port for HTTP traffic")
	fs.IntVar(&opts.HTTPSPort, "https-port", 443, "port for HTTPS traffic")
	fs.IntVar(&opts.StatusPort, "status-port", 10254, "port of the status page, /metrics, /healthz and /readyz")
	fs.StringVar(&opts.StatusAddress, "status-address", "127.0.0.1", "address the status port binds to")
	fs.BoolVar(&opts.MetricsPerHost, "metrics-per-host", true, "label request metrics with the host")
	fs.Float64Var(&opts.SyncRateLimit, "sync-rate-limit", 0, "maximum configuration builds per second (burst 1; ingress-nginx uses 0.3); 0 means the coalescing holdoff alone limits them")
	fs.StringVar(&opts.DataPlane, "data-plane", "go", "data plane: go (the pure-Go proxy) or nginx")
	fs.StringVar(&opts.NginxBinary, "nginx-binary", "/usr/sbin/nginx", "nginx executable (--data-plane=nginx)")
	fs.StringVar(&opts.NginxDir, "nginx-dir", "/var/lib/switchyard/nginx", "directory for nginx.conf, certificates, temp files and the pick socket (--data-plane=nginx); must be absolute")
	fs.StringVar(&opts.LuaDir, "lua-dir", "/usr/share/switchyard/lua", "directory holding the Lua shim (balancer.lua) (--data-plane=nginx)")
	fs.DurationVar(&opts.PickTimeout, "pick-timeout", 50*time.Millisecond, "how long the Lua shim waits for the balancer before it falls back to round robin over the last peer list (--data-plane=nginx)")
	fs.IntVar(&opts.SSLPassthroughProxyPort, "ssl-passthrough-proxy-port", 442, "loopback port where nginx takes the TLS the SNI router does not pass through, behind a PROXY header (--data-plane=nginx --enable-ssl-passthrough)")
	fs.IntVar(&opts.NginxStatusPort, "nginx-status-port", 10245, "loopback port of nginx's internal status server (--data-plane=nginx)")
	fs.StringVar(&opts.ListenAddress, "listen-address", "", "address the data plane binds to; empty means all")
	fs.IntVar(&opts.Verbosity, "v", 0, "log verbosity")
	fs.BoolVar(&opts.Version, "version", false, "print the version and exit")
	return fs
}

// parseControllerFlags parses and validates args. Errors name the flag.
func parseControllerFlags(args []string, stderr io.Writer) (controllerOptions, error) {
	var opts controllerOptions
	fs := newControllerFlags(&opts, stderr)
	if err := fs.Parse(args); err != nil {
		return opts, err
	}
	if fs.NArg() > 0 {
		return opts, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return opts, opts.validate()
}

func (o *controllerOptions) validate() error {
	var errs []error
	for _, p := range []struct {
		name string
		v    int
	}{{"http-port", o.HTTPPort}, {"https-port", o.HTTPSPort}, {"status-port", o.StatusPort}} {
		if p.v < 1 || p.v > 65535 {
			errs = append(errs, fmt.Errorf("-%s: %d is not a port (1-65535)", p.name, p.v))
		}
	}
	for _, nn := range []struct{ name, v string }{
		{"configmap", o.ConfigMap}, {"tcp-services-configmap", o.TCPServicesConfigMap},
		{"udp-services-configmap", o.UDPServicesConfigMap}, {"publish-service", o.PublishService},
		{"default-backend-service", o.DefaultBackendService}, {"default-ssl-certificate", o.DefaultSSLCertificate},
	} {
		if nn.v == "" {
			continue
		}
		if ns, name, ok := strings.Cut(nn.v, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			errs = append(errs, fmt.Errorf("-%s: %q is not namespace/name", nn.name, nn.v))
		}
	}
	if o.PublishStatusAddress != "" {
		for _, a := range strings.Split(o.PublishStatusAddress, ",") {
			if strings.TrimSpace(a) == "" {
				errs = append(errs, fmt.Errorf("-publish-status-address: empty entry in %q", o.PublishStatusAddress))
			}
		}
	}
	switch o.DataPlane {
	case "go":
	case "nginx":
		for _, d := range []struct{ name, v string }{{"nginx-dir", o.NginxDir}, {"lua-dir", o.LuaDir}, {"nginx-binary", o.NginxBinary}} {
			if !filepath.IsAbs(d.v) {
				errs = append(errs, fmt.Errorf("-%s: %q is not an absolute path", d.name, d.v))
			}
		}
		if o.PickTimeout < time.Millisecond || o.PickTimeout > 10*time.Second {
			errs = append(errs, fmt.Errorf("-pick-timeout: %v is not between 1ms and 10s", o.PickTimeout))
		}
		if o.NginxStatusPort < 1 || o.NginxStatusPort > 65535 {
			errs = append(errs, fmt.Errorf("-nginx-status-port: %d is not a port (1-65535)", o.NginxStatusPort))
		}
		if o.SSLPassthroughProxyPort < 1 || o.SSLPassthroughProxyPort > 65535 {
			errs = append(errs, fmt.Errorf("-ssl-passthrough-proxy-port: %d is not a port (1-65535)", o.SSLPassthroughProxyPort))
		}
	default:
		errs = append(errs, fmt.Errorf("-data-plane: %q is not go or nginx", o.DataPlane))
	}
	if o.StatusAddress != "" && net.ParseIP(o.StatusAddress) == nil {
		errs = append(errs, fmt.Errorf("-status-address: %q is not an IP address", o.StatusAddress))
	}
	if o.ListenAddress != "" && net.ParseIP(o.ListenAddress) == nil {
		errs = append(errs, fmt.Errorf("-listen-address: %q is not an IP address", o.ListenAddress))
	}
	if o.SyncRateLimit < 0 {
		errs = append(errs, fmt.Errorf("-sync-rate-limit: %v is negative", o.SyncRateLimit))
	}
	if o.Manifests != "" && o.Kubeconfig != "" {
		errs = append(errs, errors.New("-manifests and -kubeconfig exclude each other"))
	}
	return errors.Join(errs...)
}
