# Sourced by test/bench/proxy.sh and test/bench/proxy-ab.sh: the nginx both
# compare the Go proxy against, and the wait for the proxies to answer.

# bench_nginx_conf DIR LISTEN_PORT BACKEND_PORT: writes DIR/nginx.conf: one
# worker, a plain upstream block of 127.0.0.2-4:BACKEND_PORT with
# keep-alive, the request headers ingress-nginx's template sets (as
# nginxcompat renders them and as the Go proxy sends them: X-Request-ID,
# X-Real-IP, X-Forwarded-For/-Host/-Port/-Proto/-Scheme, X-Scheme), so both
# proxies send the backends the same request; no access log.
bench_nginx_conf() {
	local dir="$1" port="$2" bport="$3"
	mkdir -p "$dir/logs"
	cat >"$dir/nginx.conf" <<CONF
worker_processes 1;
daemon off;
error_log $dir/logs/error.log warn;
pid $dir/nginx.pid;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path $dir/body;
	proxy_temp_path $dir/proxy;
	fastcgi_temp_path $dir/fastcgi;
	uwsgi_temp_path $dir/uwsgi;
	scgi_temp_path $dir/scgi;
	map \$http_x_request_id \$req_id {
		default \$http_x_request_id;
		"" \$request_id;
	}
	upstream bench {
		server 127.0.0.2:$bport;
		server 127.0.0.3:$bport;
		server 127.0.0.4:$bport;
		keepalive 128;
	}
	server {
		listen 127.0.0.1:$port;
		server_name bench.local;
		location / {
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header Host \$host;
			proxy_set_header X-Request-ID \$req_id;
			proxy_set_header X-Real-IP \$remote_addr;
			proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
			proxy_set_header X-Forwarded-Host \$host;
			proxy_set_header X-Forwarded-Port \$server_port;
			proxy_set_header X-Forwarded-Proto \$scheme;
			proxy_set_header X-Forwarded-Scheme \$scheme;
			proxy_set_header X-Scheme \$scheme;
			proxy_pass http://bench;
		}
	}
}
CONF
}

# bench_wait_ports PORT...: waits until each of 127.0.0.1:PORT answers
# GET / for Host bench.local, and fails if one does not within 10 s.
bench_wait_ports() {
	local port
	for port in "$@"; do
		for _ in $(seq 100); do
			curl -sf -o /dev/null -H 'Host: bench.local' "http://127.0.0.1:$port/" && break
			sleep 0.1 # polling the listener; there is nothing to wait on
		done
		curl -sf -o /dev/null -H 'Host: bench.local' "http://127.0.0.1:$port/"
	done
}
