#!/usr/bin/env bash
# Endpoint churn against --data-plane=nginx (issue 4): the real binary, the
# real API server and Debian's nginx in the test network namespace; the
# EndpointSlice changes 20 times per second for DURATION (default 5m) while
# 4 clients request through nginx. Prints changes, reloads (target 0) and
# failed requests. Usage: test/bench/churn.sh [duration]
set -euo pipefail
cd "$(dirname "$0")/../.."
dur="${1:-5m}"
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
SWITCHYARD_CHURN_DURATION="$dur" go test -count=1 -timeout 30m -run 'TestNginxEndpointChurn$' -v ./test/k8s 2>&1 |
	grep -E 'churn:|^(--- |ok|FAIL)'
