# Sourced by test/bench/product*.sh, ratelimit.sh and extauth.sh: the
# manifests `switchyard controller --manifests` serves in those benchmarks
# (issue 17), and the wait for it to answer.

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
