#!/usr/bin/env bash
# The product's memory at scale (issue 22): `switchyard controller
# --data-plane=go` in manifests mode over N Ingresses, each with its own
# Service (port 80 -> 8080) and an EndpointSlice of one ready address, in
# namespace "stage" (k8s.Stage's shape), 1,000 per file. Prints the time to
# /readyz and VmRSS/VmHWM at ready, 60 s later, and after one /metrics
# scrape (what Prometheus does every 15-30 s), with the Go heap the scrape
# reports.
#
# Usage: test/bench/rss.sh [ingresses] [binary]
#   ingresses  default 50000
#   binary     default: built from this tree
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib/product.sh
n="${1:-50000}"
tmp="$(mktemp -d)"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
bin="${2:-}"
if [ -z "$bin" ]; then
	bin="$tmp/switchyard"
	bench_build_product "$bin"
fi
mkdir "$tmp/m"
cat >"$tmp/m/00-class.yaml" <<'EOF'
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: switchyard
spec:
  controller: switchyard.dev/ingress-controller
EOF
awk -v n="$n" -v dir="$tmp/m" 'BEGIN {
	for (i = 0; i < n; i++) {
		f = sprintf("%s/f%03d.yaml", dir, int(i / 1000))
		s = sprintf("s%05d", i)
		ip = sprintf("10.%d.%d.%d", 1 + int(i / 65536), int(i / 256) % 256, i % 256)
		printf "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: stage\nspec:\n  ports:\n  - name: http\n    port: 80\n    targetPort: 8080\n---\n", s >> f
		printf "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-1\n  namespace: stage\n  labels:\n    kubernetes.io/service-name: %s\naddressType: IPv4\nports:\n- name: http\n  port: 8080\nendpoints:\n- addresses: [\"%s\"]\n  conditions:\n    ready: true\n---\n", s, s, ip >> f
		printf "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: %s\n  namespace: stage\nspec:\n  ingressClassName: switchyard\n  rules:\n  - host: %s.stage.example\n    http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          service:\n            name: %s\n            port:\n              name: http\n---\n", s, s, s >> f
	}
}'
mem() { grep -E 'VmRSS|VmHWM' "/proc/$pid/status" | tr -s ' \t' ' ' | tr '\n' ' '; }
echo "# $(date -u +%FT%TZ) $n Ingresses, $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
"$bin" --manifests "$tmp/m" --data-plane=go --http-port 18080 --https-port 18443 \
	--status-port 18254 --status-address 127.0.0.1 >"$tmp/log" 2>&1 &
pid=$!
until curl -sf http://127.0.0.1:18254/readyz >/dev/null 2>&1; do
	sleep 1
	kill -0 "$pid" 2>/dev/null || { echo "rss.sh: the controller exited" >&2; tail "$tmp/log" >&2; exit 1; }
done
echo "ready after $(($(date +%s) - start)) s: $(mem)"
sleep 60
echo "60 s later: $(mem)"
curl -sf http://127.0.0.1:18254/metrics | grep -E '^go_memstats_heap_(alloc|inuse)_bytes' || { echo "rss.sh: no /metrics" >&2; exit 1; }
echo "after one scrape: $(mem)"
sleep 60
echo "60 s after the scrape: $(mem)"
