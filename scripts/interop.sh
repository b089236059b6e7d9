#!/usr/bin/env bash
# Interop of `rvt pingpong` with Linux Soft-RoCE (rxe) and rdma-core's
# ibv_rc_pingpong, ibv_uc_pingpong and ibv_ud_pingpong, in both roles, over
# a TAP link, using the reference guests of ../shared/rxe-peer (root only).
#
#   scripts/interop.sh           the full matrix: RC, UC and UD; softverbs
#                                as server and as client; path MTU 1024 and
#                                4096; message sizes 1 B .. 1 MiB; over TAP,
#                                and subsets over AF_XDP and the UDP link
#   scripts/interop.sh --quick   the CI subset: RC in each role, MTU 1024,
#                                4 KiB and 1 B messages
#   scripts/interop.sh --list    print the cases and exit
#   scripts/interop.sh --case 'rxe-server uc 4096 1048576 3 [tap|xdp|udp]'
#                                run the given cases only (repeatable)
#
# Topology (see ../shared/rxe-peer/README.md):
#
#   netns rxepeer: bridge rxebr0 10.50.0.254/24 (the kernel: TCP 18515 for
#                  the pingpong's out-of-band exchange when rvt is server)
#     +- rxetap1 -- guest 1: eth0 10.50.0.1, rxe0 (rdma-core tools)
#     +- svtap0  -- rvt pingpong --tap svtap0 --ip 10.50.0.200/24
#     |             (softverbs is a host of its own on the TAP: its own MAC,
#     |             ARP, RoCEv2 on UDP 4791)
#     +- rxeb-svx0 == veth == netns svxdp: svx0 10.50.0.201/24 (the kernel
#                   keeps the address, ARP and TCP 18515)
#                   rvt pingpong --xdp svx0 (RoCEv2 steered into AF_XDP)
#   rvt pingpong --udp 10.50.0.254 in netns rxepeer: the UDP-socket link on
#                  the bridge's own address (the kernel does IP and ARP)
#
# The script creates svtap0 as a persistent TAP and puts it in the bridge
# before rvt starts (rvt attaches to an existing TAP), so no frame, not even
# rvt's gratuitous ARP, goes out before the TAP is bridged. The full matrix
# needs the guest's eth0 at MTU 4200 (rxe active MTU 4096): the guest is
# (re)started with RXE_MTU=4200 if it runs with a smaller one.
#
# Environment:
#   PEER          the rxe-peer directory (default ../shared/rxe-peer from the
#                 repository root); RXE_* variables go to peer.sh unchanged
#   GUEST         guest number (1); SVTAP (svtap0); SVIP (10.50.0.200/24)
#   CASE_TIMEOUT  seconds per case (300)
#   QLEN          txqueuelen of the guest's TAP and ours (4096; see below)
#   GO            the go command (go)
#   KEEP=1        keep the work directory (outputs, pcaps) even on success
#   KEEP_GUEST=1  leave a guest this script started running
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEER=${PEER:-$ROOT/../shared/rxe-peer}
PEERSH=$PEER/peer.sh
NS=${RXE_NETNS-rxepeer}
BR=${RXE_BRIDGE:-rxebr0}
SUBNET=${RXE_SUBNET:-10.50.0}
G=${GUEST:-1}
GIP=$SUBNET.$G
HOSTIP=$SUBNET.254
TAP=${SVTAP:-svtap0}
SVIP=${SVIP:-$SUBNET.200/24}
T=${CASE_TIMEOUT:-300}
GO=${GO:-go}
PORT=18515
XNS=svxdp
XIF=svx0
XIP=$SUBNET.201
QLEN=${QLEN:-4096}

mode=full
list=
custom=()
while [ $# -gt 0 ]; do
	case $1 in
	--quick) mode=quick ;;
	--list) list=1 ;;
	--case)
		[ $# -ge 2 ] || { echo "--case needs \"ROLE TRANSPORT MTU SIZE ITERS\"" >&2; exit 2; }
		custom+=("$2")
		shift
		;;
	*) echo "usage: $0 [--quick] [--list] [--case 'ROLE TRANSPORT MTU SIZE ITERS']..." >&2; exit 2 ;;
	esac
	shift
done

# The cases: "ROLE TRANSPORT MTU SIZE ITERS [LINK]". ROLE sv-server runs rvt
# as the server and the rdma-core tool as the client; rxe-server the other
# way. LINK is tap (the default), xdp or udp.
cases=()
add() { local role; for role in sv-server rxe-server; do cases+=("$role $*"); done; }
if [ ${#custom[@]} -gt 0 ]; then
	cases=("${custom[@]}")
	for c in "${cases[@]}"; do
		read -r _ tr mtu _ <<<"$c"
		[ "$mtu" -gt 1024 ] && mode=full # the guest needs MTU 4200
	done
	[ "$mode" = full ] || mode=quick
elif [ "$mode" = quick ]; then
	add rc 1024 4096 50
	add rc 1024 1 20
else
	for mtu in 1024 4096; do
		add rc "$mtu" 1 20
		add rc "$mtu" 4096 20
		add rc "$mtu" 65536 10
		add rc "$mtu" 1048576 3
		add uc "$mtu" 1 20
		add uc "$mtu" 4096 20
		add uc "$mtu" 65536 10
		add uc "$mtu" 1048576 3
		add ud "$mtu" 1 20
		add ud "$mtu" "$mtu" 20
		add rc "$mtu" 4096 20 xdp
		add rc "$mtu" 1048576 3 xdp
		add uc "$mtu" 65536 10 xdp
		add ud "$mtu" "$mtu" 20 xdp
		add rc "$mtu" 65536 10 udp
		add ud "$mtu" "$mtu" 20 udp
	done
fi
if [ -n "$list" ]; then
	printf '%s\n' "${cases[@]}"
	exit 0
fi

[ "$(id -u)" = 0 ] || { echo "interop: needs root (netns, TAP, QEMU guests)" >&2; exit 1; }
[ -x "$PEERSH" ] || { echo "interop: $PEERSH not found" >&2; exit 1; }

# inns NS CMD...: run CMD in netns NS ("" = this namespace).
inns() {
	local n=$1
	shift
	if [ -n "$n" ]; then ip netns exec "$n" "$@"; else "$@"; fi
}
nsx() { inns "$NS" "$@"; }
nsip() { if [ -n "$NS" ]; then ip -n "$NS" "$@"; else ip "$@"; fi; }
log() { printf 'interop: %s\n' "$*" >&2; }

WORK=$(mktemp -d /tmp/svinterop.XXXXXX)
RVT=$WORK/rvt
rvt_pid=
guest_job=
started_guest=
xdp_up=
cleanup() {
	local rc=$?
	[ -n "$rvt_pid" ] && kill "$rvt_pid" 2>/dev/null || true
	[ -n "$guest_job" ] && "$PEERSH" stop "$G" "$guest_job" >/dev/null 2>&1 || true
	nsip link del "$TAP" >/dev/null 2>&1 || true
	[ -n "$xdp_up" ] && ip netns del "$XNS" >/dev/null 2>&1 || true
	if [ -n "$started_guest" ] && [ -z "${KEEP_GUEST:-}" ]; then
		"$PEERSH" down "$G" >/dev/null 2>&1 || true
	fi
	if [ "$rc" = 0 ] && [ -z "${KEEP:-}" ]; then
		rm -rf "$WORK"
	else
		log "outputs and captures kept in $WORK"
	fi
}
trap cleanup EXIT

log "building rvt"
(cd "$ROOT" && "$GO" build -o "$RVT" ./cmd/rvt)

log "peer.sh deps"
"$PEERSH" deps

want_mtu=1500
[ "$mode" = full ] && want_mtu=4200
cur_mtu=
if "$PEERSH" status 2>/dev/null | grep -q "^guest $G: up"; then
	cur_mtu=$("$PEERSH" run "$G" 'cat /sys/class/net/eth0/mtu' 2>/dev/null | tr -dc 0-9 || true)
fi
if [ -n "$cur_mtu" ] && [ "$cur_mtu" -lt "$want_mtu" ]; then
	log "guest $G has eth0 MTU $cur_mtu; restarting it with $want_mtu"
	"$PEERSH" down "$G"
	cur_mtu=
fi
if [ -z "$cur_mtu" ]; then
	# build refuses to run while any guest is up; the image is then current.
	if "$PEERSH" status 2>/dev/null | grep -q '^guest [0-9]*: up'; then
		log "other guests are up: using the existing build"
	else
		log "peer.sh build"
		"$PEERSH" build
	fi
	log "starting guest $G (eth0 MTU $want_mtu)"
	RXE_MTU=$want_mtu "$PEERSH" up "$G"
	started_guest=1
fi
guest_mtu=$("$PEERSH" run "$G" 'cat /sys/class/net/eth0/mtu' | tr -dc 0-9)
log "guest $G: $GIP, eth0 MTU $guest_mtu, $("$PEERSH" run "$G" 'ibv_devinfo -d rxe0 | grep active_mtu' | tr -s ' \t' ' ')"

# A Linux bridge takes the lowest MAC of its ports unless its address was
# set: adding or removing our ports would then change the MAC behind
# 10.50.0.254, and the guest, with the old one in its ARP cache, could not
# reach the out-of-band TCP port for ~15 s. Pin the bridge's current MAC.
nsip link set "$BR" address "$(nsip -br link show "$BR" | awk '{print $3}')"

# The TAP: persistent, in the bridge, up, before rvt opens it.
nsip link del "$TAP" >/dev/null 2>&1 || true
nsip tuntap add dev "$TAP" mode tap
nsx sysctl -qw "net.ipv6.conf.$TAP.disable_ipv6=1" 2>/dev/null || true
nsip link set "$TAP" mtu "$guest_mtu" txqueuelen "$QLEN" master "$BR" up
# The guest's TAP queues what the bridge forwards to the emulated NIC. At
# its default 1000 packets it overflows when softverbs sends a 1 MiB message
# at path MTU 1024 (1024 packets at once) faster than the TCG guest drains
# it: RC recovers by retransmitting, UC loses the message. A deeper queue
# stands in for the line rate a real peer would have.
nsip link set "$("$PEERSH" tap "$G")" txqueuelen "$QLEN"

# The AF_XDP side: a netns joined to the bridge by a veth, if a case needs it.
if printf '%s\n' "${cases[@]}" | grep -q ' xdp$'; then
	RXE_MTU=$guest_mtu "$PEERSH" veth "$XNS" "$XIP/24" "$XIF" >/dev/null
	# The same MAC every run, so the guest's ARP cache entry for $XIP from
	# an earlier run is still right.
	ip -n "$XNS" link set "$XIF" address 02:5f:00:00:00:c9
	xdp_up=1
fi

# Forget what the guest learned in earlier runs (MACs of our ports may have
# changed since).
"$PEERSH" run "$G" 'ip neigh flush dev eth0' >/dev/null

# listening_here waits until something in netns $1 listens on TCP $PORT.
listening_here() {
	local i
	for i in $(seq 400); do
		inns "$1" ss -ltnH "sport = :$PORT" | grep -q . && return 0
		kill -0 "$rvt_pid" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# Each output must hold the tools' two result lines with the right numbers,
# and the server (which checks, with -c) no "invalid data".
check_out() {
	local file=$1 bytes=$2 iters=$3 who=$4
	grep -Eq "^$bytes bytes in [0-9]+\.[0-9]{2} seconds = " "$file" &&
		grep -Eq "^$iters iters in [0-9]+\.[0-9]{2} seconds = " "$file" ||
		{ log "$who: no result lines"; return 1; }
	if grep -q "invalid data" "$file"; then
		log "$who: $(grep -c 'invalid data' "$file") invalid pages"
		return 1
	fi
}

pass=0
fail=0
n=0
for c in "${cases[@]}"; do
	read -r role tr mtu size iters lk <<<"$c"
	lk=${lk:-tap}
	n=$((n + 1))
	name=$(printf '%02d-%s-%s-%s-mtu%s-s%s' "$n" "$lk" "$role" "$tr" "$mtu" "$size")
	sout=$WORK/$name.rvt.txt
	gout=$WORK/$name.rxe.txt
	# rvt's link MTU sets its active MTU, which bounds UD messages.
	lmtu=$guest_mtu
	[ "$tr" = ud ] && [ "$mtu" = 1024 ] && lmtu=1500
	if [ "$lk" = xdp ]; then
		rns=$XNS oob=$XIP
		rvt_args=(pingpong --xdp "$XIF")
	elif [ "$lk" = udp ]; then
		rns=$NS oob=$HOSTIP
		rvt_args=(pingpong --udp "$HOSTIP")
	else
		rns=$NS oob=$HOSTIP
		rvt_args=(pingpong --tap "$TAP" --ip "$SVIP" --link-mtu "$lmtu")
	fi
	# A plain command (not a function), so that $! is its own PID.
	pre=()
	[ -n "$rns" ] && pre=(ip netns exec "$rns")
	rvt_args+=("--$tr" -g 1 -s "$size" -n "$iters" -c --timeout "${T}s" --pcap "$WORK/$name.pcap")
	tool="timeout $T ibv_${tr}_pingpong -d rxe0 -g 1 -s $size -n $iters -c"
	if [ "$tr" != ud ]; then
		rvt_args+=(-m "$mtu")
		tool+=" -m $mtu"
	fi
	t0=$(date +%s%N)
	ok=1
	if [ "$role" = sv-server ]; then
		"${pre[@]}" timeout "$((T + 30))" "$RVT" "${rvt_args[@]}" >"$sout" 2>&1 &
		rvt_pid=$!
		if ! listening_here "$rns"; then
			log "$name: rvt is not listening"
			ok=0
		fi
		if [ $ok = 1 ] && ! "$PEERSH" run "$G" "$tool $oob" >"$gout" 2>&1; then
			ok=0
		fi
		[ $ok = 1 ] || kill "$rvt_pid" 2>/dev/null || true
		wait "$rvt_pid" || ok=0
		rvt_pid=
	else
		guest_job=$("$PEERSH" spawn "$G" "$tool")
		if ! "$PEERSH" run "$G" "for i in \$(seq 600); do ss -ltnH 'sport = :$PORT' | grep -q . && exit 0; sleep 0.05; done; exit 1" >/dev/null; then
			log "$name: the rdma-core server is not listening"
			ok=0
		fi
		if [ $ok = 1 ]; then
			"${pre[@]}" timeout "$((T + 30))" "$RVT" "${rvt_args[@]}" "$GIP" >"$sout" 2>&1 || ok=0
		fi
		[ $ok = 1 ] || "$PEERSH" stop "$G" "$guest_job" >/dev/null 2>&1 || true
		"$PEERSH" wait "$G" "$guest_job" "$((T + 30))" >"$gout" 2>&1 || ok=0
		guest_job=
	fi
	bytes=$((size * iters * 2))
	[ $ok = 1 ] && check_out "$sout" "$bytes" "$iters" "$name rvt" || ok=0
	[ $ok = 1 ] && check_out "$gout" "$bytes" "$iters" "$name rxe" || ok=0
	ms=$((($(date +%s%N) - t0) / 1000000))
	secs=$((ms / 1000)).$((ms % 1000 / 100))
	if [ $ok = 1 ]; then
		pass=$((pass + 1))
		printf 'PASS %-40s %5ss  rvt: %s | rxe: %s\n' "$name" "$secs" \
			"$(grep ' iters in ' "$sout")" "$(grep ' iters in ' "$gout")"
	else
		fail=$((fail + 1))
		printf 'FAIL %-40s %5ss\n' "$name" "$secs"
		sed 's/^/    rvt| /' "$sout"
		sed 's/^/    rxe| /' "$gout"
	fi
done
printf 'interop: %d passed, %d failed\n' "$pass" "$fail"
[ "$fail" = 0 ]
