#!/bin/sh
# build-ab.sh: BenchmarkBuild at 50k Ingresses, two builder test binaries in
# alternating rounds, each round a fresh process.
#
#   go test -c -o /tmp/build-base.test ./controlplane/builder   # at each revision
#   test/bench/build-ab.sh /tmp/build-base.test /tmp/build-new.test [first-rounds] > out.txt
#
# Rounds: the default benchtime (b.N adapts to ~1 s: a fresh process's
# first builds), 8 builds per process, and BenchmarkBuildDistinctSettings
# (no two Ingresses with equal LocationSettings). Split the output by its
# "## <base|new> <kind>" headers for benchstat.
set -eu
base=$1 new=$2 rounds=${3:-6}
one() { # binary, bench regexp, extra flags
	"$1" -test.run '^$' -test.bench "$2" -test.benchmem -test.count 1 $3 | grep '^Benchmark'
}
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
i=0
while [ $i -lt "$rounds" ]; do
	i=$((i + 1))
	for v in base new; do
		eval bin=\$$v
		echo "## $v first-builds round $i"
		one "$bin" '^BenchmarkBuild$/^ingresses=50000$' ''
	done
done
for i in 1 2 3; do
	for v in base new; do
		eval bin=\$$v
		echo "## $v 8x round $i"
		one "$bin" '^BenchmarkBuild$/^ingresses=50000$' '-test.benchtime 8x'
	done
done
for i in 1 2 3 4; do
	for v in base new; do
		eval bin=\$$v
		echo "## $v distinct round $i"
		one "$bin" '^BenchmarkBuildDistinctSettings$' ''
	done
done
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
