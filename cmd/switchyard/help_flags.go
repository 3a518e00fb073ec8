package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// flagStatus says how Switchyard treats a controller flag.
type flagStatus string

const (
	flagImplemented    flagStatus = "implemented"
	flagNoEffect       flagStatus = "accepted, no effect"
	flagDifferent      flagStatus = "different meaning"
	flagSwitchyardOnly flagStatus = "Switchyard only"
)

// flagGroup orders the controller's help and the migration guide's flag
// table, following the grouping of ingress-nginx's flag definitions.
type flagGroup int

const (
	groupKubernetes flagGroup = iota
	groupClasses
	groupConfiguration
	groupStatus
	groupMetrics
	groupPorts
	groupWebhook
	groupProfiling
	groupShutdown
	groupGeoIP
	groupDataPlane
	groupLogging
	groupOther
)

var flagGroupTitles = [...]string{
	groupKubernetes:    "Kubernetes API",
	groupClasses:       "Ingress classes, namespaces and annotations",
	groupConfiguration: "Configuration sources and defaults",
	groupStatus:        "Ingress status and leader election",
	groupMetrics:       "Metrics",
	groupPorts:         "Ports and addresses",
	groupWebhook:       "Admission webhook",
	groupProfiling:     "Profiling",
	groupShutdown:      "Shutdown",
	groupGeoIP:         "GeoIP (MaxMind)",
	groupDataPlane:     "Data plane",
	groupLogging:       "Logging (klog)",
	groupOther:         "Other",
}

// flagRow is one controller flag's entry: its help group, its status, and a
// note for the migration guide. For flagNoEffect the note is also the
// warning's reason, so it says why the flag changes nothing.
type flagRow struct {
	Group  flagGroup
	Status flagStatus
	Note   string
}

// controllerFlagTable has a row for every flag of `switchyard controller`
// (TestControllerFlagTableCoversFlags), which includes every flag of
// ingress-nginx v1.15.1's controller (TestIngressNginxFlagsAccepted). The
// migration guide's flag table is rendered from it
// (TestMigrationGuideFlagTable).
var controllerFlagTable = map[string]flagRow{
	"kubeconfig":            {groupKubernetes, flagImplemented, ""},
	"apiserver-host":        {groupKubernetes, flagImplemented, ""},
	"certificate-authority": {groupKubernetes, flagImplemented, ""},
	"manifests":             {groupKubernetes, flagSwitchyardOnly, "serve a directory of YAML manifests instead of an API server (quickstart); excludes --kubeconfig"},

	"ingress-class":                 {groupClasses, flagImplemented, "default `switchyard` (ingress-nginx: `nginx`)"},
	"controller-class":              {groupClasses, flagImplemented, "default `switchyard.dev/ingress-controller` (ingress-nginx: `k8s.io/ingress-nginx`)"},
	"ingress-class-by-name":         {groupClasses, flagImplemented, ""},
	"watch-ingress-without-class":   {groupClasses, flagImplemented, ""},
	"watch-namespace":               {groupClasses, flagImplemented, ""},
	"watch-namespace-selector":      {groupClasses, flagNoEffect, "Switchyard watches one namespace (--watch-namespace) or all of them"},
	"annotations-prefix":            {groupClasses, flagNoEffect, "Switchyard reads annotations under nginx.ingress.kubernetes.io/ only; annotations under another prefix are not read"},
	"enable-annotation-validation":  {groupClasses, flagNoEffect, "Switchyard always checks the annotation values it reads and reports a rejected one in the Ingress's events"},
	"deep-inspect":                  {groupClasses, flagNoEffect, "Switchyard has no separate deep inspection to turn on or off; values are checked when the configuration is built"},
	"disable-catch-all":             {groupClasses, flagNoEffect, "an Ingress's spec.defaultBackend is always served, as ingress-nginx's default does"},
	"disable-svc-external-name":     {groupClasses, flagNoEffect, "ExternalName Services are always served as backends (one pointing at loopback is refused)"},
	"enable-topology-aware-routing": {groupClasses, flagNoEffect, "endpoints are balanced over all zones; topology hints are not read"},

	"configmap":                     {groupConfiguration, flagImplemented, ""},
	"tcp-services-configmap":        {groupConfiguration, flagImplemented, "`namespace/name` is checked"},
	"udp-services-configmap":        {groupConfiguration, flagImplemented, "`namespace/name` is checked"},
	"default-backend-service":       {groupConfiguration, flagImplemented, ""},
	"default-ssl-certificate":       {groupConfiguration, flagImplemented, "`namespace/name` is checked"},
	"enable-ssl-passthrough":        {groupConfiguration, flagImplemented, ""},
	"enable-ssl-chain-completion":   {groupConfiguration, flagNoEffect, "certificates are served as the Secret holds them; put the intermediate certificates in tls.crt"},
	"sync-rate-limit":               {groupConfiguration, flagImplemented, "syncs per second, token bucket of burst 1; default 0: other changes coalesced by a 50 ms holdoff (500 ms at most), EndpointSlice changes alone applied at once, at most one sync per 10 ms (ingress-nginx: 0.3)"},
	"sync-period":                   {groupConfiguration, flagImplemented, ""},
	"dynamic-configuration-retries": {groupConfiguration, flagNoEffect, "backends reach the balancer in-process, so there is no configuration POST to retry"},
	"disable-sync-events":           {groupConfiguration, flagNoEffect, "Switchyard creates no Sync events; it creates Warning events for objects it cannot serve as written"},

	"publish-service":                 {groupStatus, flagImplemented, "`namespace/name` is checked"},
	"publish-status-address":          {groupStatus, flagImplemented, ""},
	"update-status":                   {groupStatus, flagImplemented, "`--update-status=false` drops --publish-service and --publish-status-address. With neither, Switchyard writes no status and runs no leader election (ingress-nginx writes its nodes' addresses)"},
	"update-status-on-shutdown":       {groupStatus, flagNoEffect, "Switchyard leaves Ingress status as it is when it stops"},
	"report-node-internal-ip-address": {groupStatus, flagNoEffect, "status comes from --publish-service or --publish-status-address only, never from node addresses"},
	"status-update-interval":          {groupStatus, flagNoEffect, "status is written when the published addresses or the Ingresses change, not on an interval"},
	"election-id":                     {groupStatus, flagImplemented, "default `switchyard-leader` (ingress-nginx: `ingress-controller-leader`); the Lease lives in `$POD_NAMESPACE`"},
	"election-ttl":                    {groupStatus, flagImplemented, "renewed within half of it, retried every quarter, as ingress-nginx"},
	"disable-leader-election":         {groupStatus, flagNoEffect, "Switchyard elects a leader only to write status; --update-status=false runs it without either"},

	"enable-metrics":             {groupMetrics, flagNoEffect, "/metrics is always served on --status-port"},
	"metrics-per-host":           {groupMetrics, flagImplemented, ""},
	"metrics-per-undefined-host": {groupMetrics, flagNoEffect, "Switchyard has no separate host label for requests to hosts no Ingress names"},
	"report-status-classes":      {groupMetrics, flagNoEffect, "the status label carries the status code, never its class"},
	"time-buckets":               {groupMetrics, flagNoEffect, "Switchyard's request histograms have fixed buckets"},
	"length-buckets":             {groupMetrics, flagNoEffect, "Switchyard's request histograms have fixed buckets"},
	"size-buckets":               {groupMetrics, flagNoEffect, "Switchyard's request histograms have fixed buckets"},
	"bucket-factor":              {groupMetrics, flagNoEffect, "Switchyard exports no native histograms"},
	"max-buckets":                {groupMetrics, flagNoEffect, "Switchyard exports no native histograms"},
	"exclude-socket-metrics":     {groupMetrics, flagNoEffect, "every request metric is exported"},
	"monitor-max-batch-size":     {groupMetrics, flagNoEffect, "Switchyard has no batch of socket metrics to size"},

	"http-port":                  {groupPorts, flagImplemented, ""},
	"https-port":                 {groupPorts, flagImplemented, ""},
	"listen-address":             {groupPorts, flagSwitchyardOnly, "address the data plane binds to; empty means all"},
	"status-port":                {groupPorts, flagDifferent, "in ingress-nginx it is nginx's internal status server (default 10246), and health and metrics are on --healthz-port (10254). In Switchyard, --status-port (default **10254**) carries `/healthz`, `/readyz`, `/metrics`, the status page and `/debug/*`, so probes on port 10254 keep working. --healthz-port, when given, wins over it"},
	"status-address":             {groupPorts, flagSwitchyardOnly, "address of the status port, default `127.0.0.1`; the DaemonSet sets `0.0.0.0` so that the kubelet can probe it"},
	"healthz-port":               {groupPorts, flagImplemented, "sets Switchyard's status port (--status-port), which serves `/healthz` and `/metrics` as ingress-nginx's healthz port does"},
	"healthz-host":               {groupPorts, flagImplemented, "sets the status port's address (--status-address); must be an IP address, empty means all"},
	"ssl-passthrough-proxy-port": {groupPorts, flagImplemented, "default 442: with `--data-plane=nginx --enable-ssl-passthrough`, the loopback port where nginx takes the TLS the SNI router does not pass through, behind a PROXY header. With the Go data plane an ephemeral loopback port is used"},
	"default-server-port":        {groupPorts, flagNoEffect, "unmatched requests are answered on --http-port and --https-port; there is no separate default server port"},
	"stream-port":                {groupPorts, flagNoEffect, "TCP and UDP services are configured in-process, without ingress-nginx's Lua stream port"},
	"health-check-path":          {groupPorts, flagNoEffect, "the health path is always /healthz on --status-port"},
	"health-check-timeout":       {groupPorts, flagNoEffect, "/healthz answers from the controller itself, with no probe to time out"},
	"internal-logger-address":    {groupPorts, flagNoEffect, "Switchyard runs no internal syslog listener"},

	"validating-webhook":             {groupWebhook, flagImplemented, "an HTTPS server (TLS 1.2+) answering AdmissionReview v1 for Ingresses at any path, `/networking/v1/ingresses` included (the chart's); it denies what a sync would refuse or fail closed on, with the builder's message, and never renders nginx.conf or runs `nginx -t`"},
	"validating-webhook-certificate": {groupWebhook, flagImplemented, "required with `--validating-webhook`; reloaded when the file changes"},
	"validating-webhook-key":         {groupWebhook, flagImplemented, "required with `--validating-webhook`; reloaded when the file changes"},
	"disable-full-test":              {groupWebhook, flagNoEffect, "the webhook always builds only the Ingress under review and those sharing a host and path with it"},

	"profiling":        {groupProfiling, flagImplemented, "serves Go's `/debug/pprof` on --profiler-address:--profiler-port; a profiler that cannot bind is logged and left off, it does not stop the controller"},
	"profiler-port":    {groupProfiling, flagImplemented, ""},
	"profiler-address": {groupProfiling, flagImplemented, "must be a loopback address: profiles are never served beyond the node"},

	"shutdown-grace-period":      {groupShutdown, flagImplemented, "a second SIGTERM or SIGINT during it stops at once"},
	"post-shutdown-grace-period": {groupShutdown, flagNoEffect, "Switchyard exits as soon as its servers have stopped"},

	"maxmind-mirror":          {groupGeoIP, flagNoEffect, "Switchyard downloads no GeoIP databases"},
	"maxmind-license-key":     {groupGeoIP, flagNoEffect, "Switchyard downloads no GeoIP databases"},
	"maxmind-edition-ids":     {groupGeoIP, flagNoEffect, "Switchyard downloads no GeoIP databases"},
	"maxmind-retries-count":   {groupGeoIP, flagNoEffect, "Switchyard downloads no GeoIP databases"},
	"maxmind-retries-timeout": {groupGeoIP, flagNoEffect, "Switchyard downloads no GeoIP databases"},

	"data-plane":        {groupDataPlane, flagSwitchyardOnly, "`go` (default) or `nginx`"},
	"nginx-binary":      {groupDataPlane, flagSwitchyardOnly, "with `--data-plane=nginx`"},
	"nginx-dir":         {groupDataPlane, flagSwitchyardOnly, "with `--data-plane=nginx`"},
	"lua-dir":           {groupDataPlane, flagSwitchyardOnly, "with `--data-plane=nginx`"},
	"pick-timeout":      {groupDataPlane, flagSwitchyardOnly, "with `--data-plane=nginx`"},
	"http2-server":      {groupDataPlane, flagSwitchyardOnly, "`switchyard` (default) or `x/net`: what serves HTTP/2 clients on the Go data plane. `switchyard` is the proxy's own HTTP/2 server (proxy/h2srv): one goroutine per connection reads the frames and each request's answer is written by its own handler; it passes all 145 h2spec cases, costs 0.59× the CPU per request of `x/net` (golang.org/x/net/http2's server, which passes every frame through the connection's goroutine) and holds 22 KiB per idle connection where `x/net` holds 33 (docs/benchmarks/product.md). `x/net` stays as a fallback. ingress-nginx has no such setting"},
	"go-workers":        {groupDataPlane, flagSwitchyardOnly, "default 1 (deploy/base and the Helm chart set 0); 0 runs one per CPU the process may use (GOMAXPROCS, which follows the cgroup's CPU limit); with `--data-plane=go`: how many worker processes serve HTTP and HTTPS, each with one Go processor, as nginx runs `worker-processes`. Each has its own socket on each port in a `SO_REUSEPORT` group, so the kernel spreads connections over them; the controller keeps the control plane, the status port, TCP and UDP services and the SSL passthrough router, sends every configuration to every worker, restarts a worker that ends (its queued connections wait for the next), and sums their request metrics on each scrape (a replaced worker's counts stay in the sums as of the last scrape before it ended). limit-rps, limit-rpm and limit-connections are counted in shared memory, once per client whichever worker serves it; TLS session ticket keys are shared; auth-type digest nonces and failure counts stay in the controller, which the workers ask. Each worker keeps its own balancer state (round-robin position, EWMA), upstream keep-alive connections and external-auth cache, as each nginx worker does. ingress-nginx has no such flag: its ConfigMap's `worker-processes` sets nginx's workers"},
	"go-idle-spin":      {groupDataPlane, flagSwitchyardOnly, "default 100µs, at most 1ms, 0 to turn it off; with `--data-plane=go` and the release build's Go runtime (`make build`, the image; `switchyard version` ends in `+idle-spin`): the longest a thread of the Go runtime that ran out of work keeps its processor and looks again (its queue, the others', the network poller) before it sleeps, yielding its CPU to anything else runnable there between looks, while another thread works. The next ready connection then finds a thread running instead of one to wake on a CPU that went idle. A thread stops spinning one window after the process's last work, and all threads together spin for at most a tenth of the process's processors' time (time given to other threads not counted). Unpinned on 2 vCPUs at 64 connections it served 7 % more requests with a third off the p99, for 3-5 % more CPU per request; at 8 connections the same requests for 8 % more CPU (docs/benchmarks/product.md). Pinned to one CPU (GOMAXPROCS=1) it never spins, and the processors the L4 event loops keep do not count as another thread working. Its counters: `switchyard_go_idle_spins_total`, `switchyard_go_idle_spins_found_total`, `switchyard_go_idle_spin_seconds_total`. ingress-nginx has no such setting"},
	"l4-busy-poll":      {groupDataPlane, flagSwitchyardOnly, "default 500µs, at most 1ms, 0 to turn it off: the longest an L4 event loop (`--l4-event-loops`) with a connection open keeps looking for the next event after one before it sleeps, yielding its CPU to anything else runnable there, so the next leg of a handshake or chunk of a transfer finds the loop running instead of a halted CPU to wake (on a virtual machine, an exit to the hypervisor). How long it looks adapts from 20µs up to this value, as the kernel's guest halt polling does: it doubles while events come soon after the loop fell asleep and loses a quarter while they come later than this. A loop polls for at most 10 ms in each 100 ms: a tenth of a core at worst. On 2 vCPUs the default took the connection setup each L4 path adds to 0.32–0.64× HAProxy's and nginx stream's with the loop on a CPU of its own and 0.67–0.90× on shared CPUs, and the added 1-byte round trip to 0.2–0.3× theirs, for more CPU per connection (1.4–1.5 ms against about 1.2 ms at 20µs for a connection moving 1 MiB; docs/benchmarks/tcpproxy.md). A loop that has just relayed 64 KiB or more looks only 20µs: the next chunk of a transfer needs no look. ingress-nginx has no such setting; HAProxy's `busy-polling` is the same idea without a bound, off by default"},
	"l4-event-loops":    {groupDataPlane, flagSwitchyardOnly, "default 1: TCP services and the SSL passthrough router run on this many epoll event loops, each on a thread of its own (Linux; GOMAXPROCS grows by one per loop), as nginx's stream workers; 0 gives every connection its own goroutines. Either way the same behaviour. On 2 vCPUs one loop kept up with nginx stream's two workers at eight concurrent downloads, and two loops cost what one does (docs/benchmarks/tcpproxy.md). A loop uses at most one core, so a node with more cores and heavy L4 traffic may want more"},
	"nginx-status-port": {groupDataPlane, flagSwitchyardOnly, "with `--data-plane=nginx`"},

	"v":                                {groupLogging, flagImplemented, "also `-v N`"},
	"vmodule":                          {groupLogging, flagImplemented, "klog's"},
	"log_dir":                          {groupLogging, flagImplemented, "klog's"},
	"log_file":                         {groupLogging, flagImplemented, "klog's"},
	"log_file_max_size":                {groupLogging, flagImplemented, "klog's"},
	"logtostderr":                      {groupLogging, flagImplemented, "klog's"},
	"alsologtostderr":                  {groupLogging, flagImplemented, "klog's"},
	"alsologtostderrthreshold":         {groupLogging, flagImplemented, "klog's"},
	"stderrthreshold":                  {groupLogging, flagImplemented, "klog's"},
	"legacy_stderr_threshold_behavior": {groupLogging, flagImplemented, "klog's"},
	"add_dir_header":                   {groupLogging, flagImplemented, "klog's"},
	"skip_headers":                     {groupLogging, flagImplemented, "klog's"},
	"skip_log_headers":                 {groupLogging, flagImplemented, "klog's"},
	"one_output":                       {groupLogging, flagImplemented, "klog's"},
	"log_backtrace_at":                 {groupLogging, flagImplemented, "klog's"},

	"version": {groupOther, flagImplemented, ""},
}

// controllerFlagNames returns the table's flag names in help order: by
// group, then by name.
func controllerFlagNames() []string {
	names := make([]string, 0, len(controllerFlagTable))
	for name := range controllerFlagTable {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if ga, gb := controllerFlagTable[a].Group, controllerFlagTable[b].Group; ga != gb {
			return int(ga) - int(gb)
		}
		return strings.Compare(a, b)
	})
	return names
}

// printControllerHelp writes the controller's usage: its flags by group, in
// pflag's format.
func printControllerHelp(w io.Writer) {
	var opts controllerOptions
	fs := newControllerFlags(&opts)
	fmt.Fprintf(w, "Usage: switchyard controller [flags]\n       switchyard [flags]\n\n")
	fmt.Fprintf(w, "Runs the control plane, the balancer and the data plane. Every flag of ingress-nginx's\ncontroller is accepted; see %s for those that have no effect.\n", migrationFlagsSection)
	names := controllerFlagNames()
	for g := range flagGroupTitles {
		group := pflag.NewFlagSet(flagGroupTitles[g], pflag.ContinueOnError)
		for _, name := range names {
			if controllerFlagTable[name].Group == flagGroup(g) {
				if f := fs.Lookup(name); f != nil {
					group.AddFlag(f)
				}
			}
		}
		if !group.HasFlags() {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n%s", flagGroupTitles[g], group.FlagUsages())
	}
}

// migrationFlagTable renders controllerFlagTable as the migration guide's
// Markdown table.
func migrationFlagTable() string {
	var b strings.Builder
	b.WriteString("| group | flag | status | notes |\n|---|---|---|---|\n")
	prev := flagGroup(-1)
	for _, name := range controllerFlagNames() {
		row := controllerFlagTable[name]
		group := ""
		if row.Group != prev {
			group, prev = flagGroupTitles[row.Group], row.Group
		}
		dashes := "--"
		if len(name) == 1 {
			dashes = "-"
		}
		status := string(row.Status)
		if row.Status == flagDifferent {
			status = "**" + status + "**"
		}
		fmt.Fprintf(&b, "| %s | `%s%s` | %s | %s |\n", group, dashes, name, status, row.Note)
	}
	return b.String()
}
