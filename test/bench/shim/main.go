// Command shim benchmarks nginx balancing through the Lua shim against two
// baselines in one run, on the same three loopback backends (issue 5):
//
//	a. nginx with a plain upstream block
//	b. nginx with a pure-Lua round robin in balancer_by_lua (lua_rr.lua, the
//	   stand-in for ingress-nginx's Lua balancer)
//	c. nginx with Switchyard's shim asking `switchyard balancer`
//
// For each worker count and wrk connection count it runs the variants in
// turn, rounds times, and prints medians of rps, p50 and p99 with the ratios
// c/b and c/a as a Markdown table. Run it through test/bench/shim.sh.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/benchutil"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

func main() {
	var (
		duration = flag.Duration("duration", 5*time.Second, "wrk run length per sample")
		rounds   = flag.Int("rounds", 3, "samples per cell (median reported)")
		conns    = flag.String("connections", "8,64", "wrk connection counts")
		workers  = flag.String("workers", "1,2", "nginx worker counts")
		keep     = flag.Bool("keep", false, "keep the work directory")
		pprofOut = flag.String("cpuprofile", "", "write a CPU profile of the Go balancer during the last c run to this file")
		extra    = flag.Bool("hooks", false, "also run variant h: b plus empty rewrite/log Lua hooks touching ngx.ctx (the cost of the phases alone)")
		binary   = flag.String("switchyard", "", "use this switchyard binary instead of building ./cmd/switchyard from the working tree")
	)
	only := flag.String("variants", "", "comma-separated subset of variants to run (for profiling); the table needs a, b and c")
	flag.Parse()
	if *only != "" {
		variants = strings.Split(*only, ",")
		for _, v := range variants {
			if v != "a" && v != "b" && v != "c" && v != "h" {
				fmt.Fprintf(os.Stderr, "unknown variant %q\n", v)
				os.Exit(2)
			}
		}
	}
	if *extra {
		variants = append(variants, "h")
	}
	if err := run(*duration, *rounds, ints(*conns), ints(*workers), *keep, *pprofOut, *binary); err != nil {
		fmt.Fprintln(os.Stderr, "shim bench:", err)
		os.Exit(1)
	}
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad number %q\n", f)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

var variants = []string{"a", "b", "c"}

// sample is one wrk run: p50/p99 in ms; cpu is the CPU time the front
// nginx (all its processes) used per request and gocpu what the Go balancer
// used (c only), in microseconds: less sensitive than rps to other load on a
// shared machine.
type sample struct{ rps, p50, p99, cpu, gocpu float64 }

type bench struct {
	dir, nginx, bin, luaDir, benchDir string
	backends                          []string
	goProc                            *exec.Cmd
	pprofPort                         int
}

func run(d time.Duration, rounds int, conns, workers []int, keep bool, pprofOut, binary string) error {
	root, err := benchutil.RepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "switchyard-shim-bench")
	if err != nil {
		return err
	}
	if !keep {
		defer func() { _ = os.RemoveAll(dir) }()
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	b := &bench{dir: dir, nginx: "/usr/sbin/nginx", luaDir: filepath.Join(root, "lua"), benchDir: filepath.Join(root, "test/bench/shim")}
	b.bin = binary
	if b.bin == "" {
		b.bin = filepath.Join(dir, "switchyard")
		if out, err := exec.Command("go", "build", "-o", b.bin, filepath.Join(root, "cmd/switchyard")).CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		p, err := benchutil.FreePort(ip)
		if err != nil {
			return err
		}
		b.backends = append(b.backends, net.JoinHostPort(ip, strconv.Itoa(p)))
	}
	stopBackends, err := b.startBackends()
	if err != nil {
		return err
	}
	defer stopBackends()
	if err := b.startGo(); err != nil {
		return err
	}
	defer b.stopGo()

	fmt.Printf("# load before: %s on %d cores; wrk -t2 -d%s, %d rounds, medians\n\n", benchutil.Loadavg(), nproc(), d, rounds)
	fmt.Println("| workers | conns | a plain rps | b Lua rr rps | c shim rps | c/b | c/a | a p50/p99 ms | b p50/p99 ms | c p50/p99 ms | c p99 / b p99 | nginx CPU µs/req a / b / c | b cpu / c cpu | Go CPU µs/req (c) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, w := range workers {
		for _, c := range conns {
			res := map[string][]sample{}
			for r := 0; r < rounds; r++ {
				for _, v := range variants {
					prof := ""
					if v == "c" && r == rounds-1 && w == workers[len(workers)-1] && c == conns[len(conns)-1] {
						prof = pprofOut
					}
					s, err := b.measure(v, w, c, d, prof)
					if err != nil {
						return fmt.Errorf("variant %s, %d workers, %d connections: %w", v, w, c, err)
					}
					res[v] = append(res[v], s)
				}
			}
			if h, ok := res["h"]; ok {
				hh := median(h)
				fmt.Printf("| %d | %d | h (b + empty rewrite/log hooks): %.0f rps, %.2f / %.2f ms, %.1f nginx CPU µs/req |\n", w, c, hh.rps, hh.p50, hh.p99, hh.cpu)
			}
			if len(res["a"]) == 0 || len(res["b"]) == 0 || len(res["c"]) == 0 {
				for v, r := range res {
					m := median(r)
					fmt.Printf("| %d | %d | %s: %.0f rps, %.2f / %.2f ms, %.1f nginx CPU µs/req, Go %.2f |\n", w, c, v, m.rps, m.p50, m.p99, m.cpu, m.gocpu)
				}
				continue
			}
			a, bb, cc := median(res["a"]), median(res["b"]), median(res["c"])
			fmt.Printf("| %d | %d | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2f | %.1f / %.1f / %.1f | %.2f | %.2f |\n",
				w, c, a.rps, bb.rps, cc.rps, cc.rps/bb.rps, cc.rps/a.rps, a.p50, a.p99, bb.p50, bb.p99, cc.p50, cc.p99, cc.p99/bb.p99,
				a.cpu, bb.cpu, cc.cpu, bb.cpu/cc.cpu, cc.gocpu)
		}
	}
	fmt.Printf("\n# load after: %s\n", benchutil.Loadavg())
	return nil
}

func median(s []sample) sample {
	pick := func(f func(sample) float64) float64 {
		v := make([]float64, len(s))
		for i, x := range s {
			v[i] = f(x)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return sample{pick(func(x sample) float64 { return x.rps }), pick(func(x sample) float64 { return x.p50 }),
		pick(func(x sample) float64 { return x.p99 }), pick(func(x sample) float64 { return x.cpu }),
		pick(func(x sample) float64 { return x.gocpu })}
}

// startBackends runs one nginx (1 worker) answering 200 "ok" on the three
// backend addresses.
func (b *bench) startBackends() (func(), error) {
	d := filepath.Join(b.dir, "backends")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	conf := benchutil.BackendsConf(d, b.backends, `"ok"`)
	cmd, err := benchutil.StartNginx(b.nginx, d, conf)
	if err != nil {
		return nil, err
	}
	for _, a := range b.backends {
		if err := benchutil.WaitHTTP("http://"+a+"/", 200); err != nil {
			benchutil.Stop(cmd)
			return nil, err
		}
	}
	return func() { benchutil.Stop(cmd) }, nil
}

func (b *bench) startGo() error {
	p, err := benchutil.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	b.pprofPort = p
	cmd := exec.Command(b.bin, "balancer", "--configuration-socket", filepath.Join(b.dir, "configuration.sock"),
		"--pick-socket", filepath.Join(b.dir, "pick.sock"), "--socket-gid", "65534", "--state-file", "",
		"--pprof-address", fmt.Sprintf("127.0.0.1:%d", p))
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	b.goProc = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", filepath.Join(b.dir, "pick.sock"))
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("switchyard balancer did not start: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *bench) stopGo() { benchutil.Stop(b.goProc) }

var frontTmpl = template.Must(template.New("front").Parse(`load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
daemon off;
worker_processes {{.Workers}};
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events { worker_connections 4096; multi_accept on; }
http {
    access_log off;
    keepalive_requests 1000000;
    lua_package_path "{{.LuaDir}}/?.lua;{{.BenchDir}}/?.lua;;";
    lua_shared_dict configuration_data 20M;
    client_body_temp_path {{.Dir}}/cb;
    proxy_temp_path {{.Dir}}/p;
    fastcgi_temp_path {{.Dir}}/f;
    uwsgi_temp_path {{.Dir}}/u;
    scgi_temp_path {{.Dir}}/s;
{{- if or (eq .Variant "b") (eq .Variant "h")}}
    init_by_lua_block {
        lua_rr = require("lua_rr")
        lua_rr.peers = { {{range $i, $b := .Backends}}{{if $i}}, {{end}}"{{$b}}"{{end}} }
    }
{{- end}}
{{- if eq .Variant "c"}}
    init_by_lua_block {
        configuration = require("configuration")
        configuration.prohibited_localhost_port = "{{.StatusPort}}"
        configuration.api_socket = "unix:{{.APISocket}}"
        balancer = require("balancer")
        balancer.configure({ socket = "unix:{{.PickSocket}}" })
    }
    init_worker_by_lua_block {
        balancer.init_worker()
    }
{{- end}}
    upstream upstream_balancer {
{{- if eq .Variant "a"}}
{{- range .Backends}}
        server {{.}};
{{- end}}
{{- else}}
        server 0.0.0.1;
        balancer_by_lua_block {
{{- if or (eq .Variant "b") (eq .Variant "h")}}
            lua_rr.balance()
{{- else}}
            balancer.balance()
{{- end}}
        }
{{- end}}
        keepalive 320;
        keepalive_requests 10000;
    }
    server {
        listen {{.Listen}};
        location / {
            set $proxy_upstream_name "default-bench-80";
            set $proxy_alternative_upstream_name "";
            set $balancer_ewma_score -1;
            set $location_path "/";
{{- if eq .Variant "c"}}
            rewrite_by_lua_block {
                balancer.rewrite()
            }
            log_by_lua_block {
                balancer.log()
            }
{{- end}}
{{- if eq .Variant "h"}}
            rewrite_by_lua_block {
                ngx.ctx.x = 1
            }
            log_by_lua_block {
                local x = ngx.ctx.x
            }
{{- end}}
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://upstream_balancer;
        }
    }
{{- if eq .Variant "c"}}
    server {
        listen 127.0.0.1:{{.StatusPort}};
        location /configuration {
            client_max_body_size 21M;
            client_body_buffer_size 21M;
            content_by_lua_block {
                configuration.call()
            }
        }
    }
{{- end}}
}
`))

// measure starts the front nginx for variant v, warms it, runs wrk once and
// stops it.
func (b *bench) measure(v string, workers, conns int, d time.Duration, profile string) (sample, error) {
	dir := filepath.Join(b.dir, "front-"+v)
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sample{}, err
	}
	port, err := benchutil.FreePort("127.0.0.1")
	if err != nil {
		return sample{}, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	statusPort, err := benchutil.FreePort("127.0.0.1")
	if err != nil {
		return sample{}, err
	}
	var conf bytes.Buffer
	if err := frontTmpl.Execute(&conf, map[string]any{
		"Variant": v, "Workers": workers, "Dir": dir, "LuaDir": b.luaDir, "BenchDir": b.benchDir,
		"Backends": b.backends, "Listen": listen, "StatusPort": statusPort,
		"APISocket": filepath.Join(b.dir, "configuration.sock"), "PickSocket": filepath.Join(b.dir, "pick.sock"),
	}); err != nil {
		return sample{}, err
	}
	cmd, err := benchutil.StartNginx(b.nginx, dir, conf.String())
	if err != nil {
		return sample{}, err
	}
	defer benchutil.Stop(cmd)
	if v == "c" {
		if err := benchutil.WaitHTTP(fmt.Sprintf("http://127.0.0.1:%d/configuration/general", statusPort), 0); err != nil {
			return sample{}, err
		}
		if err := b.postBackends(statusPort); err != nil {
			return sample{}, err
		}
	}
	if err := benchutil.WaitHTTP("http://"+listen+"/", 200); err != nil {
		return sample{}, err
	}
	// Warm up: connections, keepalive pools, the shim's backend info.
	if _, err := exec.Command("wrk", "-t2", fmt.Sprintf("-c%d", conns), "-d1s", "http://"+listen+"/").Output(); err != nil {
		return sample{}, fmt.Errorf("wrk warm-up: %w", err)
	}
	var profDone chan error
	if profile != "" {
		profDone = make(chan error, 1)
		go func() { profDone <- b.fetchProfile(profile, d) }()
	}
	front, goSide := []int{-cmd.Process.Pid}, []int{b.goProc.Process.Pid}
	cpu0, go0 := benchutil.CPUTicks(front), benchutil.CPUTicks(goSide)
	out, err := exec.Command("wrk", "-t2", fmt.Sprintf("-c%d", conns), fmt.Sprintf("-d%s", d), "--latency", "http://"+listen+"/").Output()
	if err != nil {
		return sample{}, fmt.Errorf("wrk: %w", err)
	}
	cpu1, go1 := benchutil.CPUTicks(front), benchutil.CPUTicks(goSide)
	if profDone != nil {
		if err := <-profDone; err != nil {
			fmt.Fprintln(os.Stderr, "cpu profile:", err)
		}
	}
	smp, err := parseWrk(string(out))
	if err == nil && smp.rps > 0 {
		// USER_HZ is 100 on Linux.
		smp.cpu = float64(cpu1-cpu0) * 10000 / (smp.rps * d.Seconds())
		if v == "c" {
			smp.gocpu = float64(go1-go0) * 10000 / (smp.rps * d.Seconds())
		}
	}
	return smp, err
}

func (b *bench) postBackends(statusPort int) error {
	var eps []string
	for _, a := range b.backends {
		h, p, _ := net.SplitHostPort(a)
		eps = append(eps, fmt.Sprintf(`{"address":%q,"port":%q}`, h, p))
	}
	body := `[{"name":"default-bench-80","port":80,"endpoints":[` + strings.Join(eps, ",") + `],` +
		`"sessionAffinityConfig":{"name":"","mode":"","cookieSessionAffinity":{"name":""}},` +
		`"upstreamHashByConfig":{"upstream-hash-by-subset-size":3},"noServer":false,` +
		`"trafficShapingPolicy":{"weight":0,"weightTotal":0,"header":"","headerValue":"","headerPattern":"","cookie":""}}]`
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/configuration/backends", statusPort), "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 201 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST backends: %d %s", resp.StatusCode, b)
	}
	return nil
}

func (b *bench) fetchProfile(path string, d time.Duration) error {
	secs := int(d.Seconds()) - 1
	if secs < 1 {
		secs = 1
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", b.pprofPort, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("pprof: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

func nproc() int {
	out, err := exec.Command("nproc").Output()
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

// parseWrk reads wrk --latency output (benchutil.ParseWrk).
func parseWrk(out string) (sample, error) {
	w, err := benchutil.ParseWrk(out)
	return sample{rps: w.RPS, p50: w.P50, p99: w.P99}, err
}
