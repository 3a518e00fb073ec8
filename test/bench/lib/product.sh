# Sourced by test/bench/product*.sh, h2-soak.sh, ratelimit.sh, extauth.sh,
# tcpproxy.sh, rss.sh and shim-real.sh: the product built as the release
# builds it (bench_build_product), the
# manifests `switchyard controller --manifests` serves in those benchmarks
# (issue 17), the wait for it to answer, nginx configured as ingress-nginx
# configures it, the tools they install and the h2load run.

# bench_scratch: sets tmp to a new directory and pids to an empty list; on
# exit the processes in pids are killed and waited for, and tmp removed.
# A script that needs more on exit defines bench_on_exit, run first.
bench_scratch() {
	tmp="$(mktemp -d)"
	pids=()
	trap bench_scratch_end EXIT
}
bench_scratch_end() {
	if declare -F bench_on_exit >/dev/null; then bench_on_exit; fi
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}

# bench_build_product OUT [SRC]: builds cmd/switchyard of SRC (default: the
# working tree) into OUT as the release does, with the runtime overlay of
# SRC's deploy/goruntime/overlay.sh (netpoll-fifo.sh before it was renamed)
# when SRC has one (older commits do not: they build as they did).
bench_build_product() {
	local out="$1" src="${2:-.}" ov= s
	for s in overlay.sh netpoll-fifo.sh; do
		if [ -x "$src/deploy/goruntime/$s" ]; then
			ov=$("$src/deploy/goruntime/$s" "$(dirname "$out")/goruntime-$(basename "$out")")
			break
		fi
	done
	(cd "$src" && go build ${ov:+-overlay="$ov"} -o "$out" ./cmd/switchyard)
}

# bench_need COMMAND PACKAGE: installs Debian's PACKAGE when COMMAND is
# missing (apt-get, as root), and exits naming it if that fails.
bench_need() {
	command -v "$1" >/dev/null && return
	echo "# installing $2 for $1" >&2
	apt-get install -y "$2" >/dev/null 2>&1 || (apt-get update >/dev/null 2>&1 && apt-get install -y "$2" >/dev/null 2>&1) || true
	command -v "$1" >/dev/null || { echo "$(basename "$0"): $1 is missing and apt-get install $2 failed" >&2; exit 1; }
}

# bench_app_manifests FILE BACKEND_PORT ADDRESS...: writes FILE with the
# IngressClass switchyard, the Service bench/app (port 80 named http, to
# BACKEND_PORT) and its EndpointSlice of ADDRESS... (ready).
bench_app_manifests() {
	local file="$1" bport="$2"
	shift 2
	local addrs
	addrs=$(printf '"%s", ' "$@")
	cat >"$file" <<YAML
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: switchyard}
spec: {controller: switchyard.dev/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: bench}
spec:
  ports:
  - {name: http, port: 80, targetPort: $bport}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: app-1
  namespace: bench
  labels: {kubernetes.io/service-name: app}
addressType: IPv4
ports:
- {name: http, port: $bport, protocol: TCP}
endpoints:
- addresses: [${addrs%, }]
  conditions: {ready: true}
YAML
}

# bench_app_ingress FILE NAME HOST ANNOTATIONS: appends to FILE the Ingress
# bench/NAME routing HOST, path / (Prefix), to the Service bench/app;
# ANNOTATIONS is a YAML flow map ("{}" for none).
bench_app_ingress() {
	cat >>"$1" <<YAML
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: $2
  namespace: bench
  annotations: $4
spec:
  ingressClassName: switchyard
  rules:
  - host: $3
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: app, port: {name: http}}}}
YAML
}

# bench_ticks PID: the CPU clock ticks (user + system) PID and its children
# (nginx's workers) have spent so far, from /proc/PID/stat.
bench_ticks() {
	# shellcheck disable=SC2046 # one path a word
	cat "/proc/$1/stat" $(pgrep -P "$1" | sed 's|.*|/proc/&/stat|') 2>/dev/null | awk '{ s += $14 + $15 } END { print s }'
}

# bench_wait_200 PORT HOST [CURL_ARG...]: polls http://127.0.0.1:PORT/ with
# Host HOST until it answers 200 (10 s); returns 1 if it never does.
bench_wait_200() {
	local port="$1" host="$2"
	shift 2
	for _ in $(seq 100); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $host" "$@" "http://127.0.0.1:$port/" || true)" = 200 ] && return 0
		sleep 0.1 # polling the listener; there is nothing to wait on
	done
	return 1
}

# bench_app_tls FILE DIR: appends to FILE what product.sh's h2 section
# serves: the Secret bench/bench-tls (a self-signed RSA 2048 certificate
# for bench.local, written to DIR/tls.crt and DIR/tls.key by openssl), the
# ConfigMap bench/h2 raising keep-alive-requests to 1000000 (h2load does
# not reconnect after the GOAWAY at 1000) and the Ingress bench/app for
# bench.local with spec.tls and no redirect to HTTPS. Pass the product
# `--configmap bench/h2`.
bench_app_tls() {
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=bench.local -addext subjectAltName=DNS:bench.local \
		-keyout "$2/tls.key" -out "$2/tls.crt" 2>/dev/null
	cat >>"$1" <<YAML
---
apiVersion: v1
kind: Secret
metadata: {name: bench-tls, namespace: bench}
type: kubernetes.io/tls
data:
  tls.crt: $(base64 -w0 "$2/tls.crt")
  tls.key: $(base64 -w0 "$2/tls.key")
---
apiVersion: v1
kind: ConfigMap
metadata: {name: h2, namespace: bench}
data: {keep-alive-requests: "1000000"}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: app
  namespace: bench
  annotations: {nginx.ingress.kubernetes.io/ssl-redirect: "false"}
spec:
  ingressClassName: switchyard
  tls:
  - {hosts: [bench.local], secretName: bench-tls}
  rules:
  - host: bench.local
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: app, port: {name: http}}}}
YAML
}

# bench_app_load FILE DIR: appends to FILE the Ingress the load needs:
# with H2 set, bench_app_tls's (certificate in DIR) and cm set to the
# product's --configmap flag for it; otherwise bench_app_ingress's for
# bench.local, and cm empty.
bench_app_load() {
	cm=()
	if [ -n "${H2:-}" ]; then
		bench_app_tls "$1" "$2"
		cm=(--configmap bench/h2)
	else
		bench_app_ingress "$1" app bench.local '{}'
	fi
}

# bench_h2load HTTPS_PORT CONNS STREAMS SECONDS [PREFIX...]: h2load over
# HTTPS with HTTP/2 to 127.0.0.1:HTTPS_PORT (bench.local), CONNS
# connections of STREAMS concurrent streams, run under PREFIX (taskset);
# prints its requests per second, or fails when a request failed.
bench_h2load() {
	local port="$1" conns="$2" streams="$3" secs="$4" out
	shift 4
	out=$("$@" h2load -t1 -c"$conns" -m"$streams" -D"$secs" --connect-to="127.0.0.1:$port" https://bench.local/)
	if ! grep -q '^requests: .* 0 failed, 0 errored, 0 timeout' <<<"$out"; then
		grep -E '^(requests|status codes):' <<<"$out" >&2
		return 1
	fi
	awk '/^finished in/ { sub(/,$/, "", $4); print $4 }' <<<"$out"
}

# bench_ingress_nginx_conf DIR HTTP_PORT HTTPS_PORT WORKERS LOG KA_REQUESTS
# BACKEND_PORT CERT_DIR: writes DIR/nginx.conf, nginx as ingress-nginx
# v1.15.1 configures it (nginx.tmpl and the defaults of
# internal/ingress/controller/config/config.go) for one Ingress, with a
# plain upstream block where ingress-nginx has Lua: bench.local on
# 127.0.0.1:HTTP_PORT and, with CERT_DIR/tls.crt and tls.key, on
# HTTPS_PORT; the backends 127.0.0.2-4:BACKEND_PORT. LOG "on": its access
# log (to DIR/access.log); "off": none.
bench_ingress_nginx_conf() {
	local dir="$1" http="$2" https="$3" workers="$4" log="$5" kareqs="$6" backend_port="$7" certs="$8" access
	mkdir -p "$dir"
	access="access_log $dir/access.log upstreaminfo;"
	[ "$log" = on ] || access="access_log off;"
	cat >"$dir/nginx.conf" <<CONF
worker_processes $workers;
daemon off;
error_log $dir/error.log warn;
pid $dir/nginx.pid;
events {
	multi_accept on;
	worker_connections 16384;
	use epoll;
}
http {
	aio threads;
	tcp_nopush on;
	tcp_nodelay on;
	reset_timedout_connection on;
	keepalive_timeout 75s;
	keepalive_requests $kareqs;
	server_tokens off;
	http2_max_concurrent_streams 128;
	client_body_temp_path $dir/body;
	proxy_temp_path $dir/proxy;
	fastcgi_temp_path $dir/fastcgi;
	uwsgi_temp_path $dir/uwsgi;
	scgi_temp_path $dir/scgi;
	# ingress-nginx's default log-format-upstream.
	log_format upstreaminfo '\$remote_addr - \$remote_user [\$time_local] "\$request" \$status \$body_bytes_sent "\$http_referer" "\$http_user_agent" \$request_length \$request_time [\$proxy_upstream_name] [\$proxy_alternative_upstream_name] \$upstream_addr \$upstream_response_length \$upstream_response_time \$upstream_status \$req_id';
	$access
	map \$http_x_request_id \$req_id {
		default \$http_x_request_id;
		"" \$request_id;
	}
	map \$http_upgrade \$connection_upgrade {
		default upgrade;
		'' '';
	}
	# HSTS on HTTPS (lua_ingress.lua with hsts true, max-age 31536000, includeSubDomains).
	map \$scheme \$hsts {
		https "max-age=31536000; includeSubDomains";
		default "";
	}
	ssl_protocols TLSv1.2 TLSv1.3;
	ssl_early_data off;
	ssl_session_cache shared:SSL:10m;
	ssl_session_timeout 10m;
	ssl_session_tickets off;
	ssl_buffer_size 4k;
	ssl_ciphers 'ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-AES128-GCM-SHA256';
	ssl_prefer_server_ciphers on;
	ssl_ecdh_curve auto;
	upstream upstream_balancer {
		server 127.0.0.2:$backend_port;
		server 127.0.0.3:$backend_port;
		server 127.0.0.4:$backend_port;
		keepalive 320;
		keepalive_time 1h;
		keepalive_timeout 60s;
		keepalive_requests 10000;
	}
	server {
		server_name bench.local;
		listen 127.0.0.1:$http reuseport;
		listen 127.0.0.1:$https reuseport ssl http2;
		ssl_certificate $certs/tls.crt;
		ssl_certificate_key $certs/tls.key;
		location / {
			set \$proxy_upstream_name "bench-app-80";
			set \$proxy_alternative_upstream_name "";
			add_header Strict-Transport-Security \$hsts always;
			proxy_set_header Host \$http_host;
			proxy_set_header Upgrade \$http_upgrade;
			proxy_set_header Connection \$connection_upgrade;
			proxy_set_header X-Request-ID \$req_id;
			proxy_set_header X-Real-IP \$remote_addr;
			proxy_set_header X-Forwarded-For \$remote_addr;
			proxy_set_header X-Forwarded-Host \$http_host;
			proxy_set_header X-Forwarded-Port \$server_port;
			proxy_set_header X-Forwarded-Proto \$scheme;
			proxy_set_header X-Forwarded-Scheme \$scheme;
			proxy_set_header X-Scheme \$scheme;
			proxy_set_header X-Original-Forwarded-For \$http_x_forwarded_for;
			proxy_set_header X-Original-Forwarded-Host \$http_x_forwarded_host;
			proxy_set_header Proxy "";
			proxy_connect_timeout 5s;
			proxy_send_timeout 60s;
			proxy_read_timeout 60s;
			proxy_buffering off;
			proxy_buffer_size 4k;
			proxy_buffers 4 4k;
			proxy_request_buffering on;
			proxy_http_version 1.1;
			proxy_next_upstream error timeout;
			proxy_next_upstream_timeout 0;
			proxy_next_upstream_tries 3;
			proxy_pass http://upstream_balancer;
		}
	}
}
CONF
}
