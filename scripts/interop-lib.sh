# Shared by scripts/interop.sh, scripts/interop-cm.sh,
# scripts/interop-perftest.sh and scripts/interop-rvtd.sh (sourced, not
# run): the environment defaults, the root and peer checks, the helpers, the
# work directory and its cleanup, building rvt, starting the guest, creating
# the TAP (and the AF_XDP netns) in the guest's bridge, and the checks of
# the pingpong, rdma_cm and perftest tools' outputs. See scripts/interop.sh
# for the topology and the environment. The sourcing script sets IOP (its name, for messages)
# first; it keeps its own cases, timeouts and per-case logic.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
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
# One MAC for every run of the rvt tools on the TAP (they pick a random
# one by default): the guest keeps the address's old MAC in its neighbour
# table from the case before, and the gratuitous ARP the tool sends at
# start goes out before the harness puts the TAP in the bridge; rxe's
# rdma_cm then failed to move its QP to RTR (REJ 28 to our REP, and
# UNREACHABLE -110 in the guest) in 4 of 20 back-to-back cases.
SVMAC=${SVMAC:-02:5e:0a:32:00:c8}
GO=${GO:-go}
XNS=svxdp
XIF=svx0
XIP=$SUBNET.201

# inns NS CMD...: run CMD in netns NS ("" = this namespace).
inns() {
	local n=$1
	shift
	if [ -n "$n" ]; then ip netns exec "$n" "$@"; else "$@"; fi
}
nsx() { inns "$NS" "$@"; }
nsip() { if [ -n "$NS" ]; then ip -n "$NS" "$@"; else ip "$@"; fi; }
log() { printf '%s: %s\n' "$IOP" "$*" >&2; }

# until_listening OUT CMD...: runs the client CMD (output to OUT) again,
# up to 10 times a second apart, while it fails because it came before the
# guest's server listened (the guest is slow when the host is busy): REJ
# reason 8 (rping: "error 8", the others "error: 8"), or for udaddy's SIDR
# UNREACHABLE. Its status is the last run's.
until_listening() {
	local out=$1 try
	shift
	for try in 1 2 3 4 5 6 7 8 9 10; do
		"$@" >"$out" 2>&1 && return 0
		grep -qE 'RDMA_CM_EVENT_(REJECTED, error:? 8|UNREACHABLE)' "$out" || return 1
		log "client rejected (try $try): the guest's server does not listen yet"
		sleep 1
	done
	return 1
}

# perftest_clock_failed FILE...: the guest's perftest gave up calibrating
# its clock. Its get_cpu_mhz fits cycle counts against gettimeofday and
# exits ("Correlation coefficient r^2: ... < 0.9", "Can't produce a
# report") when the guest's vCPU was descheduled meanwhile: about once in
# a hundred runs on a quiet host, far more often on a busy one. That is
# the peer tool's clock, not the exchange: such a case runs once more.
perftest_clock_failed() { grep -q 'Correlation coefficient r^2' "$@" 2>/dev/null; }

# check_host: root, and the peer's peer.sh.
check_host() {
	[ "$(id -u)" = 0 ] || { echo "$IOP: needs root (netns, TAP, QEMU guests)" >&2; exit 1; }
	[ -x "$PEERSH" ] || { echo "$IOP: $PEERSH not found" >&2; exit 1; }
}

# setup_work PREFIX: the work directory /tmp/PREFIX.XXXXXX (kept on failure
# or with KEEP=1) and the cleanup on exit: rvt (and the other host processes
# in bg_pids), the guest job (and those in guest_jobs), rvtd (SIGTERM, then
# waited for: it releases its TAP), the TAP, the AF_XDP netns, and the guest
# if this script started it (unless KEEP_GUEST).
rvt_pid=
bg_pids=()
guest_job=
guest_jobs=()
rvtd_pid=
started_guest=
xdp_up=
setup_work() {
	WORK=$(mktemp -d "/tmp/$1.XXXXXX")
	RVT=$WORK/rvt
	trap cleanup EXIT
}
cleanup() {
	local rc=$?
	local p j
	[ -n "$rvt_pid" ] && kill "$rvt_pid" 2>/dev/null || true
	for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -n "$guest_job" ] && "$PEERSH" stop "$G" "$guest_job" >/dev/null 2>&1 || true
	for j in "${guest_jobs[@]}"; do "$PEERSH" stop "$G" "$j" >/dev/null 2>&1 || true; done
	if [ -n "$rvtd_pid" ]; then
		kill "$rvtd_pid" 2>/dev/null || true
		wait "$rvtd_pid" 2>/dev/null || true
	fi
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

# build_rvt: rvt into $RVT, and the peer's dependencies.
build_rvt() {
	log "building rvt"
	(cd "$ROOT" && "$GO" build -o "$RVT" ./cmd/rvt)
	log "peer.sh deps"
	"$PEERSH" deps
}

# start_guest [MTU]: start guest $G unless it is up; sets guest_mtu (its
# eth0 MTU). With MTU, the guest is started with RXE_MTU=MTU, and a running
# guest whose eth0 MTU is smaller is restarted.
start_guest() {
	local want=${1:-} cur=
	if "$PEERSH" status 2>/dev/null | grep -q "^guest $G: up"; then
		if [ -z "$want" ]; then
			cur=up
		else
			cur=$("$PEERSH" run "$G" 'cat /sys/class/net/eth0/mtu' 2>/dev/null | tr -dc 0-9 || true)
		fi
	fi
	if [ -n "$want" ] && [ -n "$cur" ] && [ "$cur" -lt "$want" ]; then
		log "guest $G has eth0 MTU $cur; restarting it with $want"
		"$PEERSH" down "$G"
		cur=
	fi
	if [ -z "$cur" ]; then
		# build refuses to run while any guest is up; the image is then current.
		if "$PEERSH" status 2>/dev/null | grep -q '^guest [0-9]*: up'; then
			log "other guests are up: using the existing build"
		else
			log "peer.sh build"
			"$PEERSH" build
		fi
		if [ -n "$want" ]; then
			log "starting guest $G (eth0 MTU $want)"
			RXE_MTU=$want "$PEERSH" up "$G"
		else
			log "starting guest $G"
			"$PEERSH" up "$G"
		fi
		started_guest=1
	fi
	guest_mtu=$("$PEERSH" run "$G" 'cat /sys/class/net/eth0/mtu' | tr -dc 0-9)
}

# setup_links QLEN XDP: the TAP $TAP, persistent, in the bridge, up, at the
# guest's MTU, before rvt opens it (so no frame, not even rvt's gratuitous
# ARP, goes out before the TAP is bridged); with QLEN, the txqueuelen of it
# and of the guest's TAP; with XDP non-empty, the AF_XDP netns $XNS if a
# case (in the array cases) ends in " xdp". Then the guest forgets its
# neighbours.
setup_links() {
	local qlen=$1 xdp=$2 q=()
	[ -n "$qlen" ] && q=(txqueuelen "$qlen")
	pin_bridge_mac
	nsip link del "$TAP" >/dev/null 2>&1 || true
	nsip tuntap add dev "$TAP" mode tap
	nsx sysctl -qw "net.ipv6.conf.$TAP.disable_ipv6=1" 2>/dev/null || true
	nsip link set "$TAP" mtu "$guest_mtu" "${q[@]}" master "$BR" up
	# The guest's TAP queues what the bridge forwards to the emulated NIC.
	# At its default 1000 packets it overflows when softverbs sends a 1 MiB
	# message at path MTU 1024 (1024 packets at once) faster than the TCG
	# guest drains it: RC recovers by retransmitting, UC loses the message.
	# A deeper queue stands in for the line rate a real peer would have.
	guest_tap_qlen "$qlen"
	# The AF_XDP side: a netns joined to the bridge by a veth.
	if [ -n "$xdp" ] && printf '%s\n' "${cases[@]}" | grep -q ' xdp$'; then
		RXE_MTU=$guest_mtu "$PEERSH" veth "$XNS" "$XIP/24" "$XIF" >/dev/null
		# The same MAC every run, so the guest's ARP cache entry for $XIP
		# from an earlier run is still right.
		ip -n "$XNS" link set "$XIF" address 02:5f:00:00:00:c9
		xdp_up=1
	fi
	guest_forget_neighbours
}

# pin_bridge_mac: a Linux bridge takes the lowest MAC of its ports unless
# its address was set: adding or removing our ports would then change the
# MAC behind 10.50.0.254, and the guest, with the old one in its ARP cache,
# could not reach the out-of-band TCP port for ~15 s. Pin the bridge's
# current MAC.
pin_bridge_mac() {
	nsip link set "$BR" address "$(nsip -br link show "$BR" | awk '{print $3}')"
}

# guest_tap_qlen QLEN: the txqueuelen of the guest's TAP (nothing if empty).
guest_tap_qlen() {
	[ -z "$1" ] || nsip link set "$("$PEERSH" tap "$G")" txqueuelen "$1"
}

# guest_forget_neighbours: forget what the guest learned in earlier runs
# (MACs of our ports may have changed since).
guest_forget_neighbours() {
	"$PEERSH" run "$G" 'ip neigh flush dev eth0' >/dev/null
}

# check_pingpong_out FILE BYTES ITERS WHO: FILE holds an ibv_*_pingpong's
# (or rvt pingpong's) two result lines with the right numbers, and (the
# server checks, with -c) no "invalid data".
check_pingpong_out() {
	local file=$1 bytes=$2 iters=$3 who=$4
	grep -Eq "^$bytes bytes in [0-9]+\.[0-9]{2} seconds = " "$file" &&
		grep -Eq "^$iters iters in [0-9]+\.[0-9]{2} seconds = " "$file" ||
		{ log "$who: no result lines"; return 1; }
	if grep -q "invalid data" "$file"; then
		log "$who: $(grep -c 'invalid data' "$file") invalid pages"
		return 1
	fi
}

# check_cm_out FILE TOOL WHO SIDE [COUNT]: the lines rping (-C COUNT -v,
# COUNT 100 by default), ucmatose or udaddy print on success; SIDE is client
# or server.
check_cm_out() {
	local f=$1 tool=$2 who=$3 side=$4
	case $tool in
	rping)
		local want=${5:-100} n
		if [ "$side" = client ]; then
			n=$(grep -c '^ping data: rdma-ping-' "$f" || true)
		else
			n=$(grep -c '^server ping data: rdma-ping-' "$f" || true)
		fi
		[ "$n" = "$want" ] || { log "$who: $n of $want ping data lines"; return 1; }
		! grep -q 'data mismatch' "$f" || { log "$who: data mismatch"; return 1; }
		;;
	mckey)
		grep -q "joined dgid: ::ffff:$5 " "$f" || { log "$who: no join of ::ffff:$5"; return 1; }
		grep -q '^test complete$' "$f" && grep -q '^return status 0$' "$f" &&
			grep -q '^data transfers complete$' "$f" || { log "$who: not complete"; return 1; }
		;;
	cmtime)
		# The client's table, every step with figures; nothing failed
		# (cmtime exits 0 whatever happened). The server prints nothing.
		if [ "$side" = client ]; then
			local step
			for step in 'create id' 'bind addr' 'resolve addr' 'resolve route' 'create qp' connect disconnect destroy; do
				grep -Eq "^$step *: +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$f" || { log "$who: no figures for $step"; return 1; }
			done
		fi
		! grep -Eq 'fail|event:' "$f" || { log "$who: a failure"; return 1; }
		;;
	rdma_xclient)
		grep -Eq "^rdma_x(client|server): end 0$" "$f" || { log "$who: did not end with 0"; return 1; }
		;;
	ucmatose | udaddy)
		grep -q '^test complete$' "$f" && grep -q '^return status 0$' "$f" &&
			grep -q '^data transfers complete$' "$f" || { log "$who: not complete"; return 1; }
		;;
	esac
}

# check_perftest_out FILE TOOL SIDE SIZE WHO: perftest's table in FILE: its
# title line, then a result row for SIZE (none on the servers of ib_read_bw and
# ib_atomic_bw, which print only the title, as perftest's do).
check_perftest_out() {
	local f=$1 tool=$2 side=$3 size=$4 who=$5 title rows
	case $tool in
	*_lat) title='^ *#bytes +#iterations +(t_min|t_avg)\[usec\]' ;; # t_avg: a timed (-D) run's
	*) title='^ *#bytes +#iterations +BW peak\[' ;;
	esac
	grep -Eq '^ *remote address: ' "$f" || { log "$who: no remote address"; return 1; }
	if [ "$side-$tool" = server-ib_read_lat ]; then
		! grep -Eq "$title" "$f" || { log "$who: a table, where perftest prints none"; return 1; }
		return 0
	fi
	grep -Eq "$title" "$f" || { log "$who: no table title"; return 1; }
	grep -Eq "^ *$size +[0-9]+ +[0-9]" "$f" || { log "$who: no result row for $size B"; return 1; }
}

# parse_case_args FORMAT ARGS...: the scripts' common flags. --quick sets
# quick=1, --list list=1, and each --case "FORMAT" adds to custom[].
parse_case_args() {
	local fmt=$1
	shift
	list= quick= custom=()
	while [ $# -gt 0 ]; do
		case $1 in
		--quick) quick=1 ;;
		--list) list=1 ;;
		--case)
			[ $# -ge 2 ] || { echo "--case needs \"$fmt\"" >&2; exit 2; }
			custom+=("$2")
			shift
			;;
		*) echo "usage: $0 [--quick] [--list] [--case '$fmt']..." >&2; exit 2 ;;
		esac
		shift
	done
}
