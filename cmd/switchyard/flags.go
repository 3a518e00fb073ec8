package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/switchyard-proxy/switchyard/tcpproxy"
	"k8s.io/klog/v2"
)

// controllerOptions are the flags of `switchyard controller`. Names and
// meanings follow ingress-nginx's controller flags where one exists; the
// status of every flag is in controllerFlagTable.
type controllerOptions struct {
	// ShutdownGraceSeconds is --shutdown-grace-period: how long the
	// controller keeps serving after SIGTERM before it starts to stop.
	ShutdownGraceSeconds int
	// Profiling is --profiling: serve Go's /debug/pprof on
	// ProfilerAddress:ProfilerPort (loopback only), as ingress-nginx does.
	Profiling       bool
	ProfilerPort    int
	ProfilerAddress net.IP
	// AccessLog receives the Go data plane's access log (standard output
	// when run as a command); nil, none.
	AccessLog io.Writer
	// APIServerHost and CertificateAuthority reach the API server as
	// ingress-nginx's --apiserver-host and --certificate-authority do.
	APIServerHost        string
	CertificateAuthority string
	// SyncPeriod is the informers' resync (--sync-period); zero, none.
	SyncPeriod time.Duration
	// ElectionTTL is the leader election Lease's duration (--election-ttl).
	ElectionTTL              time.Duration
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
	L4EventLoops             int
	L4BusyPoll               time.Duration
	GoIdleSpin               time.Duration
	HTTP2Server              string
	// GoWorkers is --go-workers: how many processes serve the Go data
	// plane's HTTP and HTTPS; 1 serves them in this process, 0 runs one
	// per CPU the process may use.
	GoWorkers     int
	ListenAddress string
	Verbosity     int
	Version       bool

	// ValidatingWebhook is the address of the admission webhook's HTTPS
	// server (ingress-nginx's chart passes ":8443"); empty, none.
	// ValidatingWebhookCertificate and ValidatingWebhookKey are its PEM
	// files, reloaded when they change (webhook.go).
	ValidatingWebhook, ValidatingWebhookCertificate, ValidatingWebhookKey string
}

// migrationFlagsSection is where the migration guide explains the flags;
// TestMigrationGuideFlagTable checks that the heading exists.
const (
	migrationGuide        = "docs/migrating-from-ingress-nginx.md"
	migrationFlagsHeading = "### 2. Flags"
	migrationFlagsSection = migrationGuide + `, section "2. Flags"`
)

// newControllerFlags binds opts to a pflag FlagSet with ingress-nginx's
// syntax (--flag=value, --flag value, --flag for booleans). It reports errors
// instead of printing or exiting, so run can map them to exit status 2.
// Flags that have no effect in Switchyard are parsed with ingress-nginx's
// types into values nobody reads; parseControllerFlags warns about them.
func newControllerFlags(opts *controllerOptions) *pflag.FlagSet {
	fs := pflag.NewFlagSet("switchyard controller", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	noEffect := func(name string) string {
		return "no effect: " + controllerFlagTable[name].Note
	}

	// Kubernetes API
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty means in-cluster configuration")
	fs.StringVar(&opts.APIServerHost, "apiserver-host", "", "address of the Kubernetes API server (protocol://address:port), over --kubeconfig's and the in-cluster one")
	fs.StringVar(&opts.CertificateAuthority, "certificate-authority", "", "path to the CA certificate of the API server, with --apiserver-host")
	fs.StringVar(&opts.Manifests, "manifests", "", "serve the Kubernetes objects in this directory of YAML files instead of an API server (quickstart)")

	// Ingress classes and namespaces
	fs.StringVar(&opts.IngressClass, "ingress-class", "switchyard", "name of the IngressClass this controller serves")
	fs.StringVar(&opts.ControllerClass, "controller-class", "switchyard.dev/ingress-controller", "IngressClass spec.controller value to serve (k8s.io/ingress-nginx for a drop-in swap)")
	fs.BoolVar(&opts.IngressClassByName, "ingress-class-by-name", false, "also serve Ingresses whose spec.ingressClassName equals --ingress-class")
	fs.BoolVar(&opts.WatchIngressWithoutClass, "watch-ingress-without-class", false, "also serve Ingresses with no class at all")
	fs.StringVar(&opts.WatchNamespace, "watch-namespace", "", "namespace to watch for Ingresses; empty means all")
	fs.String("watch-namespace-selector", "", noEffect("watch-namespace-selector"))
	fs.String("annotations-prefix", "nginx.ingress.kubernetes.io", noEffect("annotations-prefix"))
	fs.Bool("enable-annotation-validation", true, noEffect("enable-annotation-validation"))
	fs.Bool("deep-inspect", true, noEffect("deep-inspect"))
	fs.Bool("disable-catch-all", false, noEffect("disable-catch-all"))
	fs.Bool("disable-svc-external-name", false, noEffect("disable-svc-external-name"))
	fs.Bool("enable-topology-aware-routing", false, noEffect("enable-topology-aware-routing"))

	// Configuration sources and defaults
	fs.StringVar(&opts.ConfigMap, "configmap", "", "namespace/name of the controller ConfigMap")
	fs.StringVar(&opts.TCPServicesConfigMap, "tcp-services-configmap", "", "namespace/name of the ConfigMap of TCP services")
	fs.StringVar(&opts.UDPServicesConfigMap, "udp-services-configmap", "", "namespace/name of the ConfigMap of UDP services")
	fs.StringVar(&opts.DefaultBackendService, "default-backend-service", "", "namespace/name of the Service answering unmatched requests")
	fs.StringVar(&opts.DefaultSSLCertificate, "default-ssl-certificate", "", "namespace/name of the Secret served for unknown SNI")
	fs.BoolVar(&opts.EnableSSLPassthrough, "enable-ssl-passthrough", false, "route TLS by SNI to backends with the ssl-passthrough annotation")
	fs.Bool("enable-ssl-chain-completion", false, noEffect("enable-ssl-chain-completion"))
	fs.Float64Var(&opts.SyncRateLimit, "sync-rate-limit", 0, "maximum syncs per second (burst 1; ingress-nginx uses 0.3); 0 means the coalescing holdoff (and, for EndpointSlice changes alone, one sync per 10 ms) limits them")
	fs.DurationVar(&opts.SyncPeriod, "sync-period", 0, "period of the informers' full resync; 0 means none")
	fs.Int("dynamic-configuration-retries", 15, noEffect("dynamic-configuration-retries"))
	fs.Bool("disable-sync-events", false, noEffect("disable-sync-events"))

	// Ingress status and leader election
	fs.StringVar(&opts.PublishService, "publish-service", "", "namespace/name of the Service whose addresses go into Ingress status")
	fs.StringVar(&opts.PublishStatusAddress, "publish-status-address", "", "comma-separated addresses to put into Ingress status")
	fs.Bool("update-status", true, "write Ingress status; false drops --publish-service and --publish-status-address")
	fs.Bool("update-status-on-shutdown", true, noEffect("update-status-on-shutdown"))
	fs.Bool("report-node-internal-ip-address", false, noEffect("report-node-internal-ip-address"))
	fs.Int("status-update-interval", 60, noEffect("status-update-interval"))
	fs.StringVar(&opts.ElectionID, "election-id", "switchyard-leader", "name of the Lease used for leader election")
	fs.DurationVar(&opts.ElectionTTL, "election-ttl", 30*time.Second, "duration of the leader election Lease (renewed within half of it, retried every quarter)")
	fs.Bool("disable-leader-election", false, noEffect("disable-leader-election"))

	// Metrics
	fs.Bool("enable-metrics", false, noEffect("enable-metrics"))
	fs.BoolVar(&opts.MetricsPerHost, "metrics-per-host", true, "label request metrics with the host")
	fs.Bool("metrics-per-undefined-host", false, noEffect("metrics-per-undefined-host"))
	fs.Bool("report-status-classes", false, noEffect("report-status-classes"))
	fs.Float64Slice("time-buckets", nil, noEffect("time-buckets"))
	fs.Float64Slice("length-buckets", nil, noEffect("length-buckets"))
	fs.Float64Slice("size-buckets", nil, noEffect("size-buckets"))
	fs.Float64("bucket-factor", 0, noEffect("bucket-factor"))
	fs.Uint32("max-buckets", 100, noEffect("max-buckets"))
	fs.StringSlice("exclude-socket-metrics", nil, noEffect("exclude-socket-metrics"))
	fs.Int("monitor-max-batch-size", 10000, noEffect("monitor-max-batch-size"))

	// Ports and addresses
	fs.IntVar(&opts.HTTPPort, "http-port", 80, "port for HTTP traffic")
	fs.IntVar(&opts.HTTPSPort, "https-port", 443, "port for HTTPS traffic")
	fs.StringVar(&opts.ListenAddress, "listen-address", "", "address the data plane binds to; empty means all")
	fs.IntVar(&opts.StatusPort, "status-port", 10254, "port of the status page, /metrics, /healthz and /readyz")
	fs.StringVar(&opts.StatusAddress, "status-address", "127.0.0.1", "address the status port binds to")
	fs.Int("healthz-port", 10254, "ingress-nginx's name for --status-port; wins over it")
	fs.String("healthz-host", "", "ingress-nginx's name for --status-address; empty means all addresses")
	fs.IntVar(&opts.SSLPassthroughProxyPort, "ssl-passthrough-proxy-port", 442, "loopback port where nginx takes the TLS the SNI router does not pass through, behind a PROXY header (--data-plane=nginx --enable-ssl-passthrough)")
	fs.Int("default-server-port", 8181, noEffect("default-server-port"))
	fs.Int("stream-port", 10247, noEffect("stream-port"))
	fs.String("health-check-path", "/healthz", noEffect("health-check-path"))
	fs.Int("health-check-timeout", 10, noEffect("health-check-timeout"))
	fs.String("internal-logger-address", "127.0.0.1:11514", noEffect("internal-logger-address"))

	// Admission webhook
	fs.StringVar(&opts.ValidatingWebhook, "validating-webhook", "", "address of the validating admission webhook's HTTPS server for Ingresses (e.g. :8443); empty means none")
	fs.StringVar(&opts.ValidatingWebhookCertificate, "validating-webhook-certificate", "", "PEM certificate file of the admission webhook (reloaded when it changes)")
	fs.StringVar(&opts.ValidatingWebhookKey, "validating-webhook-key", "", "PEM private key file of the admission webhook (reloaded when it changes)")
	fs.Bool("disable-full-test", false, noEffect("disable-full-test"))

	// Profiling
	fs.BoolVar(&opts.Profiling, "profiling", true, "serve Go's /debug/pprof on --profiler-address:--profiler-port")
	fs.IntVar(&opts.ProfilerPort, "profiler-port", 10245, "port of /debug/pprof (with --profiling)")
	fs.IPVar(&opts.ProfilerAddress, "profiler-address", net.IPv4(127, 0, 0, 1), "loopback address of /debug/pprof (with --profiling)")

	// Shutdown
	fs.IntVar(&opts.ShutdownGraceSeconds, "shutdown-grace-period", 0, "seconds to keep serving after SIGTERM before shutting down")
	fs.Int("post-shutdown-grace-period", 10, noEffect("post-shutdown-grace-period"))

	// GeoIP
	fs.String("maxmind-mirror", "", noEffect("maxmind-mirror"))
	fs.String("maxmind-license-key", "", noEffect("maxmind-license-key"))
	fs.String("maxmind-edition-ids", "GeoLite2-City,GeoLite2-ASN", noEffect("maxmind-edition-ids"))
	fs.Int("maxmind-retries-count", 1, noEffect("maxmind-retries-count"))
	fs.Duration("maxmind-retries-timeout", 0, noEffect("maxmind-retries-timeout"))

	// Data plane
	fs.StringVar(&opts.DataPlane, "data-plane", "go", "data plane: go (the pure-Go proxy) or nginx")
	fs.StringVar(&opts.NginxBinary, "nginx-binary", "/usr/sbin/nginx", "nginx executable (--data-plane=nginx)")
	fs.StringVar(&opts.NginxDir, "nginx-dir", "/var/lib/switchyard/nginx", "directory for nginx.conf, certificates, temp files and the pick socket (--data-plane=nginx); must be absolute")
	fs.StringVar(&opts.LuaDir, "lua-dir", "/usr/share/switchyard/lua", "directory holding the Lua shim (balancer.lua) (--data-plane=nginx)")
	fs.IntVar(&opts.L4EventLoops, "l4-event-loops", 1, "event loops (each on a thread of its own) serving TCP services and the SSL passthrough router on Linux; 0 serves each connection on its own goroutines")
	fs.DurationVar(&opts.L4BusyPoll, "l4-busy-poll", tcpproxy.DefaultBusyPoll, "the longest an L4 event loop keeps looking for the next event without sleeping after one arrived, adapting from 20µs up to it (yielding its CPU to anything runnable there; at most 10 ms of polling in each 100 ms); 0 sleeps at once")
	fs.DurationVar(&opts.GoIdleSpin, "go-idle-spin", defaultGoIdleSpin, "the longest a Go data plane thread that ran out of work keeps looking for more before it sleeps, while another thread works (yielding its CPU to anything runnable there; at most a tenth of the processors' time); 0 sleeps at once; needs the release build's runtime (make build)")
	fs.IntVar(&opts.GoWorkers, "go-workers", 1, "processes serving the Go data plane's HTTP and HTTPS, each with one Go processor, sharing the ports as nginx's workers do; 1 serves them in the controller's process, 0 runs one per CPU")
	fs.StringVar(&opts.HTTP2Server, "http2-server", "switchyard", "what serves HTTP/2 clients on the Go data plane: switchyard (its own) or x/net (golang.org/x/net/http2's server)")
	fs.DurationVar(&opts.PickTimeout, "pick-timeout", 50*time.Millisecond, "how long the Lua shim waits for the balancer before it falls back to round robin over the last peer list (--data-plane=nginx)")
	fs.IntVar(&opts.NginxStatusPort, "nginx-status-port", 10246, "loopback port of nginx's internal status server (--data-plane=nginx)")

	// Logging: -v sets klog's verbosity when the controller starts
	// (klogFlags); klog's other flags are klog's own, as ingress-nginx adds
	// them, so setting them changes klog at once.
	fs.IntVarP(&opts.Verbosity, "v", "v", 0, "log verbosity")
	klogFS := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFS)
	klogFS.VisitAll(func(f *flag.Flag) {
		if f.Name != "v" {
			fs.AddGoFlag(f)
		}
	})

	fs.BoolVar(&opts.Version, "version", false, "print the version and exit")
	return fs
}

// parseControllerFlags parses and validates args, then writes one warning to
// stderr for each flag given that has no effect. Errors name the flag.
func parseControllerFlags(args []string, stderr io.Writer) (controllerOptions, error) {
	var opts controllerOptions
	fs := newControllerFlags(&opts)
	if err := singleDashFlag(fs, args); err != nil {
		return opts, err
	}
	if err := fs.Parse(args); err != nil {
		var notExist *pflag.NotExistError
		if errors.As(err, &notExist) {
			return opts, fmt.Errorf("%w; the ingress-nginx flags Switchyard knows are listed in %s", err, migrationFlagsSection)
		}
		return opts, err
	}
	if fs.NArg() > 0 {
		return opts, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	opts.applyIngressNginxNames(fs, stderr)
	if !opts.Version {
		warnNoEffect(fs, stderr)
	}
	return opts, opts.validate()
}

// singleDashFlag rejects a long flag written with one dash (-http-port),
// which the standard flag package took: pflag would read it as shorthands
// (-h, the help) and print the usage instead of running.
func singleDashFlag(fs *pflag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		if !strings.HasPrefix(a, "-") || strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		if len(name) > 1 && fs.Lookup(name) != nil {
			return fmt.Errorf("%s: a long flag takes two dashes, as in ingress-nginx: --%s", a, a[1:])
		}
	}
	return nil
}

// applyIngressNginxNames maps ingress-nginx flags whose effect Switchyard
// has under another name onto controllerOptions.
func (o *controllerOptions) applyIngressNginxNames(fs *pflag.FlagSet, stderr io.Writer) {
	if fs.Changed("healthz-port") {
		port, _ := fs.GetInt("healthz-port")
		if fs.Changed("status-port") && port != o.StatusPort {
			fmt.Fprintf(stderr, "switchyard controller: --status-port=%d ignored: --healthz-port=%d sets the status port (in ingress-nginx --status-port is an internal nginx port; %s)\n",
				o.StatusPort, port, migrationFlagsSection)
		}
		o.StatusPort = port
	}
	if fs.Changed("healthz-host") {
		o.StatusAddress, _ = fs.GetString("healthz-host")
	}
	if update, _ := fs.GetBool("update-status"); !update {
		o.PublishService, o.PublishStatusAddress = "", ""
	}
}

// warnNoEffect writes one line per flag given on the command line that
// Switchyard accepts but ignores, naming the flag and why.
func warnNoEffect(fs *pflag.FlagSet, stderr io.Writer) {
	fs.Visit(func(f *pflag.Flag) {
		if row := controllerFlagTable[f.Name]; row.Status == flagNoEffect {
			fmt.Fprintf(stderr, "switchyard controller: warning: --%s has no effect: %s (%s)\n", f.Name, row.Note, migrationFlagsSection)
		}
	})
}

func (o *controllerOptions) validate() error {
	var errs []error
	for _, p := range []struct {
		name string
		v    int
	}{{"http-port", o.HTTPPort}, {"https-port", o.HTTPSPort}, {"status-port", o.StatusPort}} {
		if p.v < 1 || p.v > 65535 {
			errs = append(errs, fmt.Errorf("--%s: %d is not a port (1-65535)", p.name, p.v))
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
			errs = append(errs, fmt.Errorf("--%s: %q is not namespace/name", nn.name, nn.v))
		}
	}
	if o.PublishStatusAddress != "" {
		for _, a := range strings.Split(o.PublishStatusAddress, ",") {
			if strings.TrimSpace(a) == "" {
				errs = append(errs, fmt.Errorf("--publish-status-address: empty entry in %q", o.PublishStatusAddress))
			}
		}
	}
	switch o.DataPlane {
	case "go":
	case "nginx":
		for _, d := range []struct{ name, v string }{{"nginx-dir", o.NginxDir}, {"lua-dir", o.LuaDir}, {"nginx-binary", o.NginxBinary}} {
			if !filepath.IsAbs(d.v) {
				errs = append(errs, fmt.Errorf("--%s: %q is not an absolute path", d.name, d.v))
			}
		}
		if o.PickTimeout < time.Millisecond || o.PickTimeout > 10*time.Second {
			errs = append(errs, fmt.Errorf("--pick-timeout: %v is not between 1ms and 10s", o.PickTimeout))
		}
		if o.NginxStatusPort < 1 || o.NginxStatusPort > 65535 {
			errs = append(errs, fmt.Errorf("--nginx-status-port: %d is not a port (1-65535)", o.NginxStatusPort))
		}
		if o.SSLPassthroughProxyPort < 1 || o.SSLPassthroughProxyPort > 65535 {
			errs = append(errs, fmt.Errorf("--ssl-passthrough-proxy-port: %d is not a port (1-65535)", o.SSLPassthroughProxyPort))
		}
	default:
		errs = append(errs, fmt.Errorf("--data-plane: %q is not go or nginx", o.DataPlane))
	}
	if o.StatusAddress != "" && net.ParseIP(o.StatusAddress) == nil {
		errs = append(errs, fmt.Errorf("--status-address: %q is not an IP address", o.StatusAddress))
	}
	if o.ListenAddress != "" && net.ParseIP(o.ListenAddress) == nil {
		errs = append(errs, fmt.Errorf("--listen-address: %q is not an IP address", o.ListenAddress))
	}
	if o.L4EventLoops < 0 || o.L4EventLoops > 64 {
		errs = append(errs, fmt.Errorf("--l4-event-loops: %d is not between 0 and 64", o.L4EventLoops))
	}
	if o.L4BusyPoll < 0 || o.L4BusyPoll > time.Millisecond {
		errs = append(errs, fmt.Errorf("--l4-busy-poll: %v is not between 0 and 1ms", o.L4BusyPoll))
	}
	if o.GoIdleSpin < 0 || o.GoIdleSpin > time.Millisecond {
		errs = append(errs, fmt.Errorf("--go-idle-spin: %v is not between 0 and 1ms", o.GoIdleSpin))
	}
	if o.GoWorkers < 0 || o.GoWorkers > 256 {
		errs = append(errs, fmt.Errorf("--go-workers: %d is not between 0 and 256", o.GoWorkers))
	}
	if o.HTTP2Server != "x/net" && o.HTTP2Server != "switchyard" {
		errs = append(errs, fmt.Errorf("--http2-server: %q is not switchyard or x/net", o.HTTP2Server))
	}
	if o.SyncRateLimit < 0 {
		errs = append(errs, fmt.Errorf("--sync-rate-limit: %v is negative", o.SyncRateLimit))
	}
	errs = append(errs, o.validateWebhook()...)
	if o.Manifests != "" && o.Kubeconfig != "" {
		errs = append(errs, errors.New("--manifests and --kubeconfig exclude each other"))
	}
	return errors.Join(errs...)
}

// goWorkers is how many worker processes --go-workers asks for: 1 means
// none (the controller's process serves).
func (o controllerOptions) goWorkers() int {
	if o.GoWorkers == 0 {
		// GOMAXPROCS: the CPUs this process may use, its cgroup's CPU
		// limit included.
		return runtime.GOMAXPROCS(0)
	}
	return o.GoWorkers
}
