package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/switchyard-proxy/switchyard/test/bench/internal/benchutil"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

const nginxBinary = "/usr/sbin/nginx"

// backends is one nginx (1 worker, as test/bench/shim.sh) answering 200
// with its own address on two ports of each of 127.0.0.2-4. The primary
// port of each address serves every case; chashsubset also gets the
// secondary ones, so its 6 endpoints make two subsets of 3.
type backends struct {
	primary, secondary []string // ip:port
	cmd                *exec.Cmd
}

func startBackends(dir string) (*backends, error) {
	b := &backends{}
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		for _, list := range []*[]string{&b.primary, &b.secondary} {
			p, err := benchutil.FreePort(ip)
			if err != nil {
				return nil, err
			}
			*list = append(*list, net.JoinHostPort(ip, strconv.Itoa(p)))
		}
	}
	d := filepath.Join(dir, "backends")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	conf := benchutil.BackendsConf(d, append(append([]string{}, b.primary...), b.secondary...), `"$server_addr:$server_port"`)
	cmd, err := benchutil.StartNginx(nginxBinary, d, conf)
	if err != nil {
		return nil, err
	}
	b.cmd = cmd
	for _, a := range append(append([]string{}, b.primary...), b.secondary...) {
		if err := benchutil.WaitHTTP("http://"+a+"/", 200); err != nil {
			b.stop()
			return nil, err
		}
	}
	return b, nil
}

func (b *backends) stop() { benchutil.Stop(b.cmd) }

// sidecar is `switchyard balancer`, shared by every shim nginx of the run.
type sidecar struct {
	cmd               *exec.Cmd
	apiSock, pickSock string
	pid               int
	metrics           string // its /metrics (the pick socket's frame counts)
}

func startSidecar(dir, bin, pprof string, procs int) (*sidecar, error) {
	s := &sidecar{apiSock: filepath.Join(dir, "configuration.sock"), pickSock: filepath.Join(dir, "pick.sock")}
	port, err := benchutil.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	s.metrics = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.cmd = exec.Command(bin, "balancer", "--configuration-socket", s.apiSock, "--pick-socket", s.pickSock,
		"--socket-gid", "65534", "--state-file", "", "--metrics-address", s.metrics)
	if pprof != "" {
		s.cmd.Args = append(s.cmd.Args, "--pprof-address", pprof)
	}
	if procs > 0 {
		s.cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(procs))
	}
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, os.Stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start switchyard balancer: %w", err)
	}
	s.pid = s.cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := net.Dial("unix", s.pickSock)
		if err == nil {
			c.Close()
			return s, nil
		}
		if ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("switchyard balancer did not open %s: %w", s.pickSock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *sidecar) stop() { benchutil.Stop(s.cmd) }

// frames returns the sidecar's count of pick-socket frames by type
// (switchyard_pick_socket_frames_total: "pick" frames are requests that
// waited for Go), or nil when /metrics cannot be read.
func (s *sidecar) frames() map[string]float64 {
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	const prefix = `switchyard_pick_socket_frames_total{type="`
	for _, l := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(l, prefix)
		if !ok {
			continue
		}
		typ, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[typ] = v
		}
	}
	return out
}

// front is the nginx under test, one per variant and worker count.
type front struct {
	variant, dir, listen string
	shim                 bool // runs the shim's Lua
	statusPort           int
	cmd                  *exec.Cmd
	cookies              map[string]string            // case → the Cookie field wrk sends (sticky cases)
	picks                map[string]map[string]string // case → what verify's requests reached (agree)
}

// frontTmpl is shaped like ingress-nginx v1.15.1's nginx.tmpl: its shared
// dicts (buildLuaSharedDictionaries' defaults, plus the template's
// luaconfig), the placeholder upstream with balancer_by_lua and the
// template's keepalive defaults, per location the variables the balancer
// reads and the rewrite/log hooks, and the status server's /configuration
// location. The template runs these hooks through ngx_conf_init.lua,
// ngx_rewrite.lua, ngx_conf_log_block.lua and ngx_conf_balancer.lua, which
// also call lua_ingress, monitor and certificate; here only configuration
// and balancer are loaded and called, the part the shim replaces. The two
// variants differ in lua_package_path's first entry and the two shim lines
// of init_by_lua (its socket paths).
var frontTmpl = template.Must(template.New("front").Parse(`load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
daemon off;
worker_processes {{.Workers}};
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events {
    worker_connections 16384;
    multi_accept on;
    use epoll;
}
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path {{.Dir}}/cb;
    proxy_temp_path {{.Dir}}/p;
    fastcgi_temp_path {{.Dir}}/f;
    uwsgi_temp_path {{.Dir}}/u;
    scgi_temp_path {{.Dir}}/s;

    lua_package_path "{{if .Shim}}{{.ShimLua}}/?.lua;{{end}}{{.IngressLua}}/?.lua;{{range .Libs}}{{.}}/?.lua;{{end}};";
    lua_package_cpath "{{.CLib}}/?.so;;";

    lua_shared_dict balancer_ewma 10M;
    lua_shared_dict balancer_ewma_last_touched_at 10M;
    lua_shared_dict balancer_ewma_locks 1M;
    lua_shared_dict certificate_data 20M;
    lua_shared_dict certificate_servers 5M;
    lua_shared_dict configuration_data 20M;
    lua_shared_dict ocsp_response_cache 5M;
    lua_shared_dict luaconfig 5m;

    init_by_lua_block {
        collectgarbage("collect")
        local ok, res
        ok, res = pcall(require, "configuration")
        if not ok then
            error("require failed: " .. tostring(res))
        else
            configuration = res
            configuration.prohibited_localhost_port = '{{.StatusPort}}'
        end
        ok, res = pcall(require, "balancer")
        if not ok then
            error("require failed: " .. tostring(res))
        else
            balancer = res
        end
{{- if .Shim}}
        configuration.api_socket = "unix:{{.APISocket}}"
        balancer.configure({ socket = "unix:{{.PickSocket}}" })
{{- end}}
    }

    init_worker_by_lua_block {
        balancer.init_worker()
{{- if .JITProfile}}
        local prof = require("jit.profile")
        local lines, funcs, stacks, states = {}, {}, {}, {}
        jitprof = { lines = lines, funcs = funcs, stacks = stacks, states = states }
        prof.start("li1", function(th, n, vmstate)
            local l = prof.dumpstack(th, "pl", 1)
            local f = prof.dumpstack(th, "pF", 1)
            local k = vmstate .. " " .. prof.dumpstack(th, "pl < Z", 4)
            lines[l] = (lines[l] or 0) + n
            funcs[f] = (funcs[f] or 0) + n
            stacks[k] = (stacks[k] or 0) + n
            states[vmstate] = (states[vmstate] or 0) + n
        end)
        require("jit.v").start("{{.JITProfile}}-" .. ngx.worker.pid() .. "-jitv.txt")
{{- end}}
    }
{{- if .JITProfile}}
    exit_worker_by_lua_block {
        require("jit.profile").stop()
        local f = io.open("{{.JITProfile}}-" .. ngx.worker.pid() .. ".txt", "w")
        if f then
            for kind, t in pairs(jitprof) do
                for k, v in pairs(t) do
                    f:write(kind, "\t", v, "\t", k, "\n")
                end
            end
            f:close()
        end
    }
{{- end}}

    upstream upstream_balancer {
        server 0.0.0.1; # placeholder
        balancer_by_lua_block {
            balancer.balance()
        }
        keepalive 320;
        keepalive_time 1h;
        keepalive_timeout 60s;
        keepalive_requests 10000;
    }

    server {
        server_name _;
        listen {{.Listen}} default_server reuseport backlog=4096;
{{range .Cases}}
        location {{.Path}} {
            set $namespace "default";
            set $ingress_name "bench";
            set $service_name "{{.Backend}}";
            set $service_port "80";
            set $location_path "{{.Path}}";

            rewrite_by_lua_block {
                balancer.rewrite()
            }
            log_by_lua_block {
                balancer.log()
            }

            set $balancer_ewma_score -1;
            set $proxy_upstream_name "{{.Backend}}";
            set $proxy_host $proxy_upstream_name;
            set $proxy_alternative_upstream_name "";

            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_connect_timeout 5s;
            proxy_next_upstream error timeout;
            proxy_next_upstream_tries 3;
            proxy_pass http://upstream_balancer;
        }
{{end}}
    }

    server {
        listen 127.0.0.1:{{.StatusPort}};
        keepalive_timeout 0;
        access_log off;
        location /configuration {
            client_max_body_size 21M;
            client_body_buffer_size 21M;
            proxy_buffering off;
            content_by_lua_block {
                configuration.call()
            }
        }
        location / {
            return 404;
        }
    }
}
`))

type tmplCase struct{ Path, Backend string }

// startFront starts the nginx of one variant; shim says whether it runs
// the shim's Lua over ingress-nginx's (false in the real slot, and in both
// slots of an A/A run).
func startFront(dir, variant string, shim bool, workers int, src sources, side *sidecar) (*front, error) {
	f := &front{variant: variant, shim: shim, dir: filepath.Join(dir, fmt.Sprintf("front-%s-%d", variant, workers))}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return nil, err
	}
	port, err := benchutil.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	f.listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if f.statusPort, err = benchutil.FreePort("127.0.0.1"); err != nil {
		return nil, err
	}
	var cases []tmplCase
	for _, c := range allCases {
		cases = append(cases, tmplCase{c.path, c.backend})
	}
	var conf bytes.Buffer
	if err := frontTmpl.Execute(&conf, map[string]any{
		"Shim": shim, "Workers": workers, "Dir": f.dir, "Listen": f.listen, "StatusPort": f.statusPort,
		"ShimLua": src.shimLua, "IngressLua": src.ingressLua, "Libs": src.libs, "CLib": src.clib,
		"APISocket": side.apiSock, "PickSocket": side.pickSock, "Cases": cases, "JITProfile": jitProfilePrefix(src.jitProfile, variant, workers),
	}); err != nil {
		return nil, err
	}
	if f.cmd, err = benchutil.StartNginx(nginxBinary, f.dir, conf.String()); err != nil {
		return nil, err
	}
	if err := benchutil.WaitHTTP(fmt.Sprintf("http://127.0.0.1:%d/nothing", f.statusPort), 404); err != nil {
		f.stop()
		return nil, fmt.Errorf("%w\n%s", err, f.tail())
	}
	return f, nil
}

func (f *front) stop() { benchutil.Stop(f.cmd) }

// jitProfilePrefix is where a front's workers write their profiles
// (-jitprofile): DIR/<variant>-<workers>w, to which each adds -<pid>.txt.
func jitProfilePrefix(dir, variant string, workers int) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, fmt.Sprintf("%s-%dw", variant, workers))
}

// tail returns the end of the front's error.log, for error messages.
func (f *front) tail() string {
	b, _ := os.ReadFile(filepath.Join(f.dir, "error.log"))
	return "error.log: " + string(b[max(0, len(b)-2048):])
}

// errorLines returns the error.log lines of level error or worse.
func (f *front) errorLines() []string {
	b, _ := os.ReadFile(filepath.Join(f.dir, "error.log"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, lvl := range []string{"[error]", "[crit]", "[alert]", "[emerg]"} {
			if strings.Contains(l, lvl) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}
