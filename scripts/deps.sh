#!/usr/bin/env bash
# Installs the host tools the tests use, when missing: iproute2 (ip, for
# the namespace tests), tshark (decodes our pcap captures as RoCE), and for
# the drop-in C libraries (rvtd/libibverbs, `make libs`) gcc, make, the
# rdma-core headers (libibverbs-dev, librdmacm-dev) and the Debian binaries
# the drop-in tests run (ibverbs-utils, rdmacm-utils, perftest).
# Needs root; without root it only reports what is missing.
set -euo pipefail
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tshark >/dev/null 2>&1 || need+=(tshark)
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v make >/dev/null 2>&1 || need+=(make)
[ -f /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
[ -f /usr/include/rdma/rdma_cma.h ] || need+=(librdmacm-dev)
command -v ibv_rc_pingpong >/dev/null 2>&1 || need+=(ibverbs-utils)
command -v rping >/dev/null 2>&1 || need+=(rdmacm-utils)
command -v ib_write_bw >/dev/null 2>&1 || need+=(perftest)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing ${need[*]} (run as root to install); the tests that need them skip" >&2
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
echo "deps: installing ${need[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
