#!/usr/bin/env bash
# Installs the host tools the tests use, when missing: iproute2 (ip, for
# the namespace tests) and tshark (decodes our pcap captures as RoCE).
# Needs root; without root it only reports what is missing.
set -euo pipefail
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tshark >/dev/null 2>&1 || need+=(tshark)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing ${need[*]} (run as root to install); the tests that need them skip" >&2
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
echo "deps: installing ${need[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
