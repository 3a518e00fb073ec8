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
