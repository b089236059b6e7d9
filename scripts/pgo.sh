#!/usr/bin/env bash
# Writes the profiles Go's profile-guided optimization builds the rvt and
# rvtd commands with (cmd/rvt/default.pgo, cmd/rvtd/default.pgo: `go build`
# uses a main package's default.pgo by itself). The profile is the CPU
# profile of the work those binaries spend their time on, merged:
#
#   - rvt's benchmarks: small SENDs and WRITEs on the loopback and between
#     two devices on the in-memory fabric (the transport, keys, qp, cq);
#   - rvtd's measurements (RVTD_BENCH=1 TestBenchmark*): the daemon's side
#     of client processes' SENDs, WRITEs and ping-pongs, in the test process;
#   - the perftest tools' end-to-end test (their loops and statistics).
#
# Each is built with -pgo=off, so that the profile does not depend on the
# one it replaces. Takes about a minute and a half on 2 cores. Rerun it
# after changes to hot paths (a stale profile costs only the gain: code
# the profile does not name is compiled as without it).
#
# usage: scripts/pgo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "pgo: rvt benchmarks"
$GO test -pgo=off -c -o "$tmp/rvt.test" ./rvt
(cd rvt && "$tmp/rvt.test" -test.run '^$' -test.benchtime 1s \
	-test.bench 'LoopbackSend8B|LoopbackSendQPs|LoopbackWrite|FabricWrite/(inline|workers)/|FabricSend8B|FabricSendPingPong' \
	-test.cpuprofile "$tmp/rvt.prof" >/dev/null)

echo "pgo: rvtd measurements"
$GO test -pgo=off -c -o "$tmp/rvtd.test" ./rvtd
(cd rvtd && RVTD_BENCH=1 "$tmp/rvtd.test" -test.run '^TestBenchmark' \
	-test.cpuprofile "$tmp/rvtd.prof" >/dev/null)

echo "pgo: perftest tools"
$GO test -pgo=off -c -o "$tmp/perftest.test" ./internal/perftest
(cd internal/perftest && "$tmp/perftest.test" -test.run '^TestTools' \
	-test.cpuprofile "$tmp/perftest.prof" >/dev/null)

# Without the benchmarks' baselines (a channel ping-pong, copies, the
# copy-and-ICRC limit): they are not what the binaries run, and optimizing
# them for the profile would move the yardstick the same-run ratios use.
$GO tool pprof -proto -ignore 'chanPingPong|memcpyGBps|limitGBps|limitRates|perftest\.MemcpyBW|perftest\.ChanPingPong' \
	"$tmp/rvt.prof" "$tmp/rvtd.prof" "$tmp/perftest.prof" >"$tmp/merged.pgo"
cp "$tmp/merged.pgo" cmd/rvt/default.pgo
cp "$tmp/merged.pgo" cmd/rvtd/default.pgo
ls -l cmd/rvt/default.pgo cmd/rvtd/default.pgo
