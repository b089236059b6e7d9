#!/bin/bash
# Measures every row of issue 19 in one sitting (docs/performance.md,
# "The cost of a packet"): the loopback SEND, the fabric WRITE against
# its copy-and-CRC limit and under loss, 10,000 QPs, the AF_XDP link's
# floor and `rvt perf --link xdp` (root: network namespaces and a veth),
# and `rvt demo --loss 0.05`, RUNS times each, at nice -20.
#
# Usage: docs/issue19-rows.sh OUTDIR [RUNS]   (from the repository's root)
# Then: python3 docs/issue19-med.py OUTDIR/*.txt OUTDIR/*.log for medians and ranges.
set -u
out=${1:?usage: docs/issue19-rows.sh OUTDIR [RUNS]}; runs=${2:-3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
go test -c -pgo=off -o "$out/rvt.test" ./rvt &&
	go test -c -pgo=cmd/rvt/default.pgo -o "$out/rvt.pgo.test" ./rvt &&
	go test -c -o "$out/xdp.test" ./netdev/xdp &&
	go build -o "$out/rvt" ./cmd/rvt || exit 1
N="nice -n -20"
cd rvt
for _ in $(seq "$runs"); do
	date -u +%T
	uptime
	$N "$out/rvt.test" -test.run '^$' -test.bench LoopbackSend8B -test.benchtime 1s >>"$out/send.off.txt"
	$N "$out/rvt.pgo.test" -test.run '^$' -test.bench LoopbackSend8B -test.benchtime 1s >>"$out/send.pgo.txt"
	$N "$out/rvt.test" -test.run '^$' -test.bench 'FabricWrite|FabricLoss' -test.benchtime 1s >>"$out/fabric.txt"
	$N "$out/rvt.test" -test.run '^$' -test.bench 'FabricScale/qps=10000$' -test.benchtime 200000x >>"$out/scale1.txt"
	$N "$out/rvt.test" -test.run '^$' -test.bench 'FabricScale/qps=10000_window=8' -test.benchtime 1000000x >>"$out/scale8.txt"
	(cd ../netdev/xdp &&
		$N "$out/xdp.test" -test.run '^$' -test.bench 'XDPFloor/stream' -test.benchtime 400000x >>"$out/floor.txt" &&
		$N "$out/xdp.test" -test.run '^$' -test.bench 'XDPFloor/pingpong' -test.benchtime 20000x >>"$out/floor.txt")
	$N "$out/rvt" perf --link xdp --seconds 2 >>"$out/perf.log" 2>&1
	$N "$out/rvt" demo --loss 0.05 >>"$out/demo.log" 2>&1
done
date -u +%T
uptime
