package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/benchutil"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/turns"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// benchCase is one location of the front nginx, with its own backend in the
// payload (payload.go).
type benchCase struct {
	name    string // ingress-nginx's implementation name, or canary_weight
	path    string // the location, also $location_path
	backend string // $proxy_upstream_name
	nkeys   int    // request URIs wrk spreads over (hashing cases)
	sticky  bool   // wrk sends the affinity cookie on every second request
	// header and values: wrk sends each request URI once without the
	// header and once with each value (wrk.lua), e.g. X-Canary with "yes"
	// (routes to the canary) and "no" (falls through to the weight, 0).
	header string
	values []string
}

var allCases = []benchCase{
	{name: "round_robin", path: "/rr/", backend: "bench-rr-80"},
	{name: "ewma", path: "/ewma/", backend: "bench-ewma-80"},
	{name: "chash", path: "/chash/", backend: "bench-chash-80", nkeys: 100},
	{name: "chashsubset", path: "/chashsubset/", backend: "bench-chashsubset-80", nkeys: 100},
	{name: "sticky_balanced", path: "/sticky_balanced/", backend: "bench-sticky-balanced-80", sticky: true},
	{name: "sticky_persistent", path: "/sticky_persistent/", backend: "bench-sticky-persistent-80", sticky: true},
	{name: "canary_weight", path: "/canary/", backend: "bench-main-80"},
	{name: "canary_header", path: "/hcanary/", backend: "bench-hmain-80", header: "X-Canary", values: []string{"yes", "no"}},
	{name: "canary_header_pattern", path: "/pcanary/", backend: "bench-pmain-80", header: "X-Canary", values: []string{"on", "off"}},
	{name: "chash_canary_chash", path: "/chcanary/", backend: "bench-chmain-80", nkeys: 100},
	{name: "chash_canary_chashsubset", path: "/cscanary/", backend: "bench-csmain-80", nkeys: 100},
}

// Variants, in the order each round runs them.
const (
	variantReal = "real"
	variantShim = "shim"
)

var variants = []string{variantReal, variantShim}

// options are the command line; zero values are not used (flags set them).
type options struct {
	ingressLua, restyBalancer, restyCookie, restyLock, restyDNS string
	shimLua, binary, commit                                     string
	duration, warmup                                            time.Duration
	rounds                                                      int
	// quietSteal is the most host steal (ms/s) a quiet round pair has.
	quietSteal     float64
	conns, workers []int
	cases          []benchCase
	keep           bool
	// isolate runs wrk and the backends under SCHED_FIFO.
	isolate bool
	pprof   string
	// sidecarProcs, when not 0, is the GOMAXPROCS the sidecar runs with.
	sidecarProcs int
	// aa runs ingress-nginx's Lua in the shim's place too (an A/A run):
	// what the ratios read when nothing differs.
	aa bool
	// jitProfile: see sources.jitProfile.
	jitProfile string
	// pace, when not 0, is how long each wrk connection waits after each
	// answer (whole milliseconds): latencies below saturation.
	pace time.Duration
	// interleave, when not 0, replaces wrk with the interleaved load
	// (interleave.go): the fronts take turns in slices this long.
	interleave time.Duration
}

func main() {
	var o options
	var conns, workers, cases string
	flag.StringVar(&o.ingressLua, "ingress-nginx", "", "ingress-nginx checkout at controller-v1.15.1 (or its rootfs/etc/nginx/lua directory)")
	flag.StringVar(&o.restyBalancer, "resty-balancer", "", "lua-resty-balancer checkout (v0.05): lib/ and chash.c")
	flag.StringVar(&o.restyCookie, "resty-cookie", "", "lua-resty-cookie checkout (f418d77)")
	flag.StringVar(&o.restyLock, "resty-lock", "", "lua-resty-lock checkout (v0.09)")
	flag.StringVar(&o.restyDNS, "resty-dns", "", "lua-resty-dns checkout (v0.23; util/dns.lua requires it at load time)")
	flag.StringVar(&o.shimLua, "lua", "", "the shim's Lua tree (default: lua/ of this repository)")
	flag.StringVar(&o.binary, "switchyard", "", "switchyard binary (default: built from ./cmd/switchyard)")
	flag.StringVar(&o.commit, "commit", "", "what the shim's Lua and binary were built from, for the report")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "wrk run length per sample")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured wrk run before each sample, whole seconds (connections, keep-alive pools, the shim's backend info and leases)")
	flag.Float64Var(&o.quietSteal, "quiet-steal", 20, "a round pair is quiet when the host stole at most this many ms per second from the machine during both of its rounds; the table adds the pooled p99 of the quiet pairs")
	flag.IntVar(&o.rounds, "rounds", 3, "samples per cell and configuration (medians reported)")
	flag.StringVar(&conns, "connections", "8,64", "wrk connection counts")
	flag.StringVar(&workers, "workers", "1,2", "nginx worker counts")
	flag.StringVar(&cases, "cases", "", "comma-separated subset of cases (default all: "+caseNames(allCases)+")")
	flag.BoolVar(&o.aa, "aa", false, "A/A: run ingress-nginx's own Lua in the shim's place too, to measure what the ratios read when nothing differs (the table's \"shim\" columns are then a second real nginx)")
	flag.BoolVar(&o.isolate, "isolate", true, "run wrk (or the interleaved load, -interleave) and the backends' nginx under SCHED_FIFO (chrt), so that they never wait for a CPU the fronts hold and the fronts' latencies are the fronts' (false: all share the CPUs as equals, as runs 1-27 did)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configurations, error logs)")
	flag.IntVar(&o.sidecarProcs, "sidecar-gomaxprocs", 0, "run the sidecar with this GOMAXPROCS (0: the Go runtime's default, the CPU count)")
	flag.StringVar(&o.pprof, "pprof", "", "serve the sidecar's Go /debug/pprof on this loopback address (host:port), to profile it during a run")
	flag.StringVar(&o.jitProfile, "jitprofile", "", "profile each nginx worker's Lua with LuaJIT's jit.profile (1 ms samples) and write, when it exits, the samples per VM state, function, line and 4-frame stack to DIR/<variant>-<workers>w-<pid>.txt, and jit.v's trace log to DIR/<variant>-<workers>w-<pid>-jitv.txt")
	flag.DurationVar(&o.pace, "pace", 0, "each wrk connection waits this long (whole milliseconds) after each answer before its next request, so the fronts run below saturation and the p99 is their time per request, not a queue's; paced, the rps ratios are the pace's (0, the default: each connection asks again as soon as it has its answer)")
	flag.DurationVar(&o.interleave, "interleave", 0, "instead of a wrk run per front and round, one load process (this binary, under SCHED_FIFO with -isolate) runs the fronts in turns this long, in the order ABBA..., on connections it opens for each turn, so both are measured across the same seconds; a round is -duration of load on each front, -warmup warms each up once per cell (0, the default: wrk)")
	loadWorker := flag.Bool("load-worker", false, "run as the interleaved load's worker (started by -interleave; reads its spec on standard input)")
	table := flag.String("table", "", "print the table from the sample lines of an earlier run's output file (with that run's -duration) and exit")
	flag.Parse()
	if *loadWorker {
		if err := turns.Serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "shimreal -load-worker:", err)
			os.Exit(1)
		}
		return
	}
	var err error
	if o.conns, err = ints(conns); err == nil {
		o.workers, err = ints(workers)
	}
	if err == nil {
		o.cases, err = selectCases(cases)
	}
	if err == nil && o.rounds < 1 {
		err = errors.New("-rounds must be at least 1")
	}
	for _, d := range []time.Duration{o.duration, o.warmup} {
		if err == nil && (d < time.Second || d%time.Second != 0) {
			err = fmt.Errorf("-duration and -warmup are whole seconds, at least 1s (wrk's -d): %s", d)
		}
	}
	if err == nil && (o.pace < 0 || o.pace%time.Millisecond != 0) {
		err = fmt.Errorf("-pace is whole milliseconds (wrk's delay()): %s", o.pace)
	}
	if err == nil && o.interleave != 0 && (o.interleave < 10*time.Millisecond || o.interleave > o.duration || o.pace != 0) {
		err = fmt.Errorf("-interleave is at least 10ms and at most -duration, and the interleaved load is not paced: %s", o.interleave)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "shimreal:", err)
		os.Exit(2)
	}
	if *table != "" {
		if err := tableFrom(o, *table); err != nil {
			fmt.Fprintln(os.Stderr, "shimreal:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "shimreal:", err)
		os.Exit(1)
	}
}

func caseNames(cs []benchCase) string {
	var n []string
	for _, c := range cs {
		n = append(n, c.name)
	}
	return strings.Join(n, ",")
}

func selectCases(s string) ([]benchCase, error) {
	if s == "" {
		return allCases, nil
	}
	var out []benchCase
	for _, name := range strings.Split(s, ",") {
		i := slices.IndexFunc(allCases, func(c benchCase) bool { return c.name == strings.TrimSpace(name) })
		if i < 0 {
			return nil, fmt.Errorf("unknown case %q (have %s)", name, caseNames(allCases))
		}
		out = append(out, allCases[i])
	}
	return out, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// cell identifies one line of the table.
type cell struct {
	c              string
	workers, conns int
}

func run(o options) error {
	root, err := benchutil.RepoRoot()
	if err != nil {
		return err
	}
	if o.shimLua == "" {
		o.shimLua = filepath.Join(root, "lua")
	}
	src, err := checkSources(o)
	if err != nil {
		return err
	}
	if o.jitProfile != "" {
		// The workers (nobody) write there.
		if err := os.MkdirAll(o.jitProfile, 0o755); err != nil {
			return fmt.Errorf("-jitprofile: %w", err)
		}
		if err := os.Chmod(o.jitProfile, 0o777); err != nil { //nolint:gosec // a bench's scratch directory
			return fmt.Errorf("-jitprofile: %w", err)
		}
		if src.jitProfile, err = filepath.Abs(o.jitProfile); err != nil {
			return fmt.Errorf("-jitprofile: %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "switchyard-shim-real")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "work directory:", dir)
	} else {
		defer func() { _ = os.RemoveAll(dir) }()
	}
	// nginx workers run as nobody and must reach the sockets and Lua files.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if src.clib, err = buildChash(dir, o.restyBalancer); err != nil {
		return err
	}
	bin := o.binary
	if bin == "" {
		bin = filepath.Join(dir, "switchyard")
		if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd/switchyard")).CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	wrkScript := filepath.Join(root, "test/bench/shimreal/wrk.lua")

	bk, err := startBackends(dir)
	if err != nil {
		return err
	}
	defer bk.stop()
	if o.isolate {
		if err := benchutil.Realtime(isolatePrio, []int{-bk.cmd.Process.Pid}); err != nil {
			return fmt.Errorf("-isolate: the backends: %w", err)
		}
	}
	side, err := startSidecar(dir, bin, o.pprof, o.sidecarProcs)
	if err != nil {
		return err
	}
	defer side.stop()
	payload, err := buildPayload(bk)
	if err != nil {
		return err
	}

	printHeader(o, src)
	perRun := o.duration + o.warmup
	total := time.Duration(len(o.workers)*len(o.cases)*len(o.conns)*o.rounds*len(variants)) * perRun
	if o.interleave > 0 {
		// The warm-up is once per cell and front.
		total = time.Duration(len(o.workers)*len(o.cases)*len(o.conns)*len(variants)) * (time.Duration(o.rounds)*o.duration + o.warmup)
	}
	fmt.Printf("# matrix: cases %s; workers %v; connections %v; %d rounds of %s (+%s warm-up each); about %s of load\n",
		caseNames(o.cases), o.workers, o.conns, o.rounds, o.duration, o.warmup, total.Round(time.Second))
	fmt.Printf("# load before: %s\n\n", benchutil.Loadavg())
	fmt.Println("# raw samples: case workers conns round variant rps p50_ms p99_ms nginx_cpu_us_per_req sidecar_cpu_s loadavg1 steal_ms_per_s")
	fmt.Println("# after each cell, per variant: pooled case workers conns variant, then its rounds' latency histogram pooled (bucket:count; bucket b holds [1.01^b, 1.01^(b+1)) µs)")
	fmt.Printf("# and quiet case workers conns variant pairs, then the same over the quiet round pairs only (host steal at most %.0f ms/s in both rounds)\n", o.quietSteal)

	results := map[cell]map[string][]sample{}
	pooled := map[cell]map[string]turns.Hist{}
	quietN := map[cell]int{}
	for _, w := range o.workers {
		fronts := map[string]*front{}
		for _, v := range variants {
			f, err := startFront(dir, v, v == variantShim && !o.aa, w, src, side)
			if err != nil {
				stopAll(fronts)
				return fmt.Errorf("%s nginx, %d workers: %w", v, w, err)
			}
			fronts[v] = f
		}
		if err := prepare(fronts, payload, bk, o.cases); err != nil {
			stopAll(fronts)
			return fmt.Errorf("%d workers: %w", w, err)
		}
		for _, bc := range o.cases {
			for _, c := range o.conns {
				k := cell{bc.name, w, c}
				results[k] = map[string][]sample{}
				emit := func(r int, v string, s sample) {
					results[k][v] = append(results[k][v], s)
					load, _, _ := strings.Cut(benchutil.Loadavg(), " ")
					fmt.Printf("sample %s %d %d %d %s %.0f %.2f %.2f %.1f %.2f %s %.1f\n", bc.name, w, c, r+1, v, s.rps, s.p50, s.p99, s.nginxCPU, s.sidecarCPU, load, s.steal)
					if s.frames != nil {
						fmt.Printf("# frames per 1000 requests: %s\n", frameLine(s.frames))
					}
				}
				var err error
				if o.interleave > 0 {
					err = interleavedCell(o, fronts, side, bc, c, emit)
				} else {
					err = wrkCell(o, fronts, side, bc, c, wrkScript, emit)
				}
				if err != nil {
					stopAll(fronts)
					return fmt.Errorf("%s, %d workers, %d connections: %w", bc.name, w, c, err)
				}
				pooled[k] = map[string]turns.Hist{}
				quiet := quietPairs(results[k], o.quietSteal)
				quietN[k] = len(quiet)
				for _, v := range variants {
					h, q := turns.Hist{}, turns.Hist{}
					for i, s := range results[k][v] {
						h.Add(s.hist)
						if slices.Contains(quiet, i) {
							q.Add(s.hist)
						}
					}
					pooled[k][v], pooled[k][v+quietSuffix] = h, q
					fmt.Printf("pooled %s %d %d %s %s\n", bc.name, w, c, v, h)
					fmt.Printf("quiet %s %d %d %s %d %s\n", bc.name, w, c, v, len(quiet), q)
				}
			}
		}
		for _, v := range variants {
			fronts[v].stop()
			lines := fronts[v].errorLines()
			fmt.Printf("# %s nginx, %d workers: %d lines of level error or worse in error.log\n", v, w, len(lines))
			for _, l := range distinct(lines, 3) {
				fmt.Printf("#   %s\n", l)
			}
		}
	}
	fmt.Printf("\n# load after: %s\n\n", benchutil.Loadavg())
	printTable(o, results, pooled, quietN)
	return nil
}

// distinct returns up to n different messages of error.log lines, without
// their time, pid and connection prefix.
func distinct(lines []string, n int) []string {
	var out []string
	for _, l := range lines {
		if i := strings.Index(l, "] "); i >= 0 {
			l = l[i+2:]
		}
		if _, rest, ok := strings.Cut(l, ": "); ok {
			l = rest // "pid#tid: "
		}
		if _, rest, ok := strings.Cut(l, " "); ok && strings.HasPrefix(l, "*") {
			l = rest // "*connection "
		}
		l, _, _ = strings.Cut(l, ", client: ")
		if !slices.Contains(out, l) {
			out = append(out, l)
			if len(out) == n {
				break
			}
		}
	}
	return out
}

// quietSuffix marks, in a cell's pooled histograms, those of its quiet
// round pairs.
const quietSuffix = "/quiet"

// quietPairs are the rounds in which the host stole at most limit ms/s
// during both variants' runs. The host's steal is the one thing in these
// runs neither Lua causes, and it is what the 8-connection p99 follows
// (docs/benchmarks.md, run 27): a pooled p99 over the quiet pairs is the
// proxies' own tail, reported beside the p99 of every round, never
// instead of it.
func quietPairs(res map[string][]sample, limit float64) []int {
	var quiet []int
	re, sh := res[variantReal], res[variantShim]
	for i := range min(len(re), len(sh)) {
		if re[i].steal >= 0 && sh[i].steal >= 0 && re[i].steal <= limit && sh[i].steal <= limit {
			quiet = append(quiet, i)
		}
	}
	return quiet
}

// stealCol is the median host steal of each variant's rounds, "–" where a
// run did not record it (output from before the column).
func stealCol(re, sh []sample) string {
	med := func(ss []sample) float64 {
		var v []float64
		for _, s := range ss {
			if s.steal >= 0 {
				v = append(v, s.steal)
			}
		}
		if len(v) == 0 {
			return -1
		}
		return median(v)
	}
	r, s := med(re), med(sh)
	if r < 0 || s < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f / %.1f", r, s)
}

// frameLine formats frame counts per 1000 requests, pick first.
func frameLine(frames map[string]float64) string {
	typs := make([]string, 0, len(frames))
	for typ := range frames {
		typs = append(typs, typ)
	}
	slices.Sort(typs)
	line := fmt.Sprintf("pick %.2f", frames["pick"])
	for _, typ := range typs {
		if typ != "pick" && frames[typ] != 0 {
			line += fmt.Sprintf(", %s %.2f", typ, frames[typ])
		}
	}
	return line
}

func stopAll(fronts map[string]*front) {
	for _, f := range fronts {
		f.stop()
	}
}

func printHeader(o options, src sources) {
	fmt.Printf("# shim vs ingress-nginx's own Lua (test/bench/shim-real.sh), %s\n", time.Now().UTC().Format("2006-01-02T15:04Z"))
	fmt.Printf("# machine: nproc %d, kernel %s, %s, %s\n", nproc(), firstLine("uname", "-r"), firstLine("nginx", "-v"), firstLine("wrk", "-v"))
	if o.interleave > 0 {
		fmt.Printf("# interleaved (-interleave %s): one load process, not wrk, runs each front in turn for %s (ABBA...) over %v keep-alive connections it opens for each turn; a round is %s of load on each; its latencies are from each request's write to its answer's last byte\n", o.interleave, o.interleave, o.conns, o.duration)
	}
	if o.pace > 0 {
		fmt.Printf("# paced: each wrk connection waits %s after each answer; the rps ratios are the pace's, the latencies the fronts'\n", o.pace)
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f", "${Package} ${Version}; ", "libnginx-mod-http-lua", "lua-resty-core", "lua-cjson", "libluajit2-5.1-2").Output(); err == nil {
		fmt.Printf("# packages: %s\n", strings.TrimSpace(string(out)))
	}
	fmt.Printf("# real: ingress-nginx %s Lua at %s (balancer.lua sha256 %s)\n", src.ingressTag, src.ingressLua, sha(filepath.Join(src.ingressLua, "balancer.lua")))
	fmt.Printf("# shim: %s (pick.lua sha256 %s), commit %s\n", o.shimLua, sha(filepath.Join(o.shimLua, "switchyard/pick.lua")), o.commit)
	if o.sidecarProcs > 0 {
		fmt.Printf("# sidecar: GOMAXPROCS=%d\n", o.sidecarProcs)
	}
	if o.isolate {
		load := "wrk"
		if o.interleave > 0 {
			load = "the load process"
		}
		fmt.Printf("# isolated (-isolate): %s and the backends' nginx run under SCHED_FIFO %d; the fronts and the sidecar share what CPU they leave\n", load, isolatePrio)
	} else {
		fmt.Println("# not isolated (-isolate=false): wrk, the backends, the fronts and the sidecar share the CPUs as equals")
	}
	if o.aa {
		fmt.Println("# A/A (-aa): the \"shim\" columns are a second nginx running ingress-nginx's own Lua, not the shim")
	}
	fmt.Println("# both: access_log off, no monitor.lua (metrics), no lua_ingress.lua; the shim with its defaults (request_metrics off)")
}

// printTable prints the cells' table; quietN is how many quiet round
// pairs each cell's quiet histograms pool.
func printTable(o options, results map[cell]map[string][]sample, pooled map[cell]map[string]turns.Hist, quietN map[cell]int) {
	fmt.Printf("shim ÷ real: median of the per-round ratios [min–max]; rps, p99 and CPU: medians of %d rounds of %s; pooled p99: the 99th percentile of all the requests of the %d rounds (wrk's latencies, 1 %% buckets), real / shim ms, and their ratio. CPU per request: the front nginx's (all processes) and, for the shim, `switchyard balancer`'s user+system time; sidecar: its CPU seconds per shim run (µs per request); asked Go: the sidecar's pick frames per 1000 shim requests (requests that waited for Go), median; host steal: the time the hypervisor took from the machine's CPUs during the rounds, ms per second summed over CPUs, real / shim, median\n\n", o.rounds, o.duration, o.rounds)
	fmt.Println("| case | workers | conns | real rps | shim rps | shim ÷ real rps | real p99 ms | shim p99 ms | shim ÷ real p99 | pooled p99 ms real / shim | shim ÷ real pooled p99 | CPU µs/req: real nginx / shim nginx + sidecar | shim ÷ real CPU/req | sidecar CPU s/run (µs/req) | asked Go /1k req | host steal ms/s real / shim | quiet pairs: n, pooled p99 ms real / shim, ratio |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, bc := range o.cases {
		for _, w := range o.workers {
			for _, c := range o.conns {
				res := results[cell{bc.name, w, c}]
				re, sh := res[variantReal], res[variantShim]
				if len(re) == 0 || len(sh) == 0 {
					continue
				}
				var rpsR, p99R, cpuR, asked []float64
				for _, x := range sh {
					if x.frames != nil {
						asked = append(asked, x.frames["pick"])
					}
				}
				askedCol := "–"
				if len(asked) > 0 {
					askedCol = fmt.Sprintf("%.2f", median(asked))
				}
				for i := range min(len(re), len(sh)) {
					rpsR = append(rpsR, sh[i].rps/re[i].rps)
					p99R = append(p99R, sh[i].p99/re[i].p99)
					cpuR = append(cpuR, (sh[i].nginxCPU+sh[i].sidecarUS)/re[i].nginxCPU)
				}
				mr, ms := medianSample(re), medianSample(sh)
				pooledP99, pooledRatio := "–", "–"
				if ph := pooled[cell{bc.name, w, c}]; ph != nil && ph[variantReal].Count() > 0 && ph[variantShim].Count() > 0 {
					pr, ps := ph[variantReal].Quantile(0.99), ph[variantShim].Quantile(0.99)
					pooledP99, pooledRatio = fmt.Sprintf("%.2f / %.2f", pr, ps), fmt.Sprintf("%.2f", ps/pr)
				}
				quietCol := "–"
				if ph := pooled[cell{bc.name, w, c}]; ph != nil && ph[variantReal+quietSuffix].Count() > 0 && ph[variantShim+quietSuffix].Count() > 0 {
					pr, ps := ph[variantReal+quietSuffix].Quantile(0.99), ph[variantShim+quietSuffix].Quantile(0.99)
					quietCol = fmt.Sprintf("%d, %.2f / %.2f, %.2f", quietN[cell{bc.name, w, c}], pr, ps, ps/pr)
				}
				fmt.Printf("| %s | %d | %d | %.0f | %.0f | %.2f [%.2f–%.2f] | %.2f | %.2f | %.2f [%.2f–%.2f] | %s | %s | %.1f / %.1f + %.1f | %.2f [%.2f–%.2f] | %.2f (%.1f) | %s | %s | %s |\n",
					bc.name, w, c, mr.rps, ms.rps, median(rpsR), slices.Min(rpsR), slices.Max(rpsR),
					mr.p99, ms.p99, median(p99R), slices.Min(p99R), slices.Max(p99R), pooledP99, pooledRatio,
					mr.nginxCPU, ms.nginxCPU, ms.sidecarUS, median(cpuR), slices.Min(cpuR), slices.Max(cpuR),
					ms.sidecarCPU, ms.sidecarUS, askedCol, stealCol(re, sh), quietCol)
			}
		}
	}
}

// tableFrom prints the table again from the raw sample lines of an earlier
// run's output (the -table flag), e.g. after the table's columns changed.
func tableFrom(o options, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	results := map[cell]map[string][]sample{}
	seen := map[string]bool{}
	var cases []benchCase
	var workers, conns []int
	pooled := map[cell]map[string]turns.Hist{}
	quietN := map[cell]int{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[0] == "quiet" {
			w, err1 := strconv.Atoi(f[2])
			c, err2 := strconv.Atoi(f[3])
			n, err3 := strconv.Atoi(f[5])
			h, err4 := turns.ParseHist(f[6:])
			if err := errors.Join(err1, err2, err3, err4); err != nil {
				return fmt.Errorf("%s: bad quiet line: %w", path, err)
			}
			k := cell{f[1], w, c}
			quietN[k] = n
			if pooled[k] == nil {
				pooled[k] = map[string]turns.Hist{}
			}
			pooled[k][f[4]+quietSuffix] = h
			continue
		}
		if len(f) >= 5 && f[0] == "pooled" {
			w, err1 := strconv.Atoi(f[2])
			c, err2 := strconv.Atoi(f[3])
			h, err3 := turns.ParseHist(f[5:])
			if err := errors.Join(err1, err2, err3); err != nil {
				return fmt.Errorf("%s: bad pooled line: %w", path, err)
			}
			k := cell{f[1], w, c}
			if pooled[k] == nil {
				pooled[k] = map[string]turns.Hist{}
			}
			pooled[k][f[4]] = h
			continue
		}
		if len(f) < 11 || f[0] != "sample" {
			continue
		}
		var w, c int
		var s sample
		nums := []*float64{&s.rps, &s.p50, &s.p99, &s.nginxCPU, &s.sidecarCPU}
		if w, err = strconv.Atoi(f[2]); err == nil {
			c, err = strconv.Atoi(f[3])
		}
		for i, p := range nums {
			if err == nil {
				*p, err = strconv.ParseFloat(f[6+i], 64)
			}
		}
		s.steal = -1
		if len(f) >= 13 && err == nil {
			s.steal, err = strconv.ParseFloat(f[12], 64)
		}
		if err != nil {
			return fmt.Errorf("%s: bad sample line %q: %w", path, line, err)
		}
		if s.rps > 0 {
			s.sidecarUS = s.sidecarCPU * 1e6 / (s.rps * o.duration.Seconds())
		}
		k := cell{f[1], w, c}
		if results[k] == nil {
			results[k] = map[string][]sample{}
		}
		results[k][f[5]] = append(results[k][f[5]], s)
		if !seen["c"+f[1]] {
			seen["c"+f[1]] = true
			i := slices.IndexFunc(allCases, func(bc benchCase) bool { return bc.name == f[1] })
			if i < 0 {
				return fmt.Errorf("%s: unknown case %q", path, f[1])
			}
			cases = append(cases, allCases[i])
		}
		if !slices.Contains(workers, w) {
			workers = append(workers, w)
		}
		if !slices.Contains(conns, c) {
			conns = append(conns, c)
		}
	}
	o.cases, o.workers, o.conns = cases, workers, conns
	slices.Sort(o.workers)
	slices.Sort(o.conns)
	printTable(o, results, pooled, quietN)
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianSample(s []sample) sample {
	pick := func(f func(sample) float64) float64 {
		v := make([]float64, len(s))
		for i, x := range s {
			v[i] = f(x)
		}
		return median(v)
	}
	return sample{
		rps:        pick(func(x sample) float64 { return x.rps }),
		p50:        pick(func(x sample) float64 { return x.p50 }),
		p99:        pick(func(x sample) float64 { return x.p99 }),
		nginxCPU:   pick(func(x sample) float64 { return x.nginxCPU }),
		sidecarCPU: pick(func(x sample) float64 { return x.sidecarCPU }),
		sidecarUS:  pick(func(x sample) float64 { return x.sidecarUS }),
	}
}

func nproc() int {
	n, _ := strconv.Atoi(firstLine("nproc"))
	return n
}

// firstLine runs a command and returns the first line of its output
// (stdout and stderr: nginx -v prints on stderr).
func firstLine(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
