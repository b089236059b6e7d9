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

IOP=interop
. "$(dirname "$0")/interop-lib.sh"
T=${CASE_TIMEOUT:-300}
PORT=18515
QLEN=${QLEN:-4096}

mode=full
parse_case_args "ROLE TRANSPORT MTU SIZE ITERS" "$@"
[ -n "$quick" ] && mode=quick

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

check_host
setup_work svinterop
build_rvt

want_mtu=1500
[ "$mode" = full ] && want_mtu=4200
start_guest "$want_mtu"
log "guest $G: $GIP, eth0 MTU $guest_mtu, $("$PEERSH" run "$G" 'ibv_devinfo -d rxe0 | grep active_mtu' | tr -s ' \t' ' ')"

# The TAP, with deep queues (QLEN) on it and the guest's TAP; the AF_XDP
# netns if a case needs it (scripts/interop-lib.sh).
setup_links "$QLEN" xdp

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

# run_case runs the case the loop set up ($role, $name, $rvt_args, ...)
# once and sets ok to 1 if both sides completed every iteration.
run_case() {
	ok=1
	if [ "$role" = sv-server ]; then
		"${pre[@]}" timeout "$((tt + 30))" "$RVT" "${rvt_args[@]}" >"$sout" 2>&1 &
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
			"${pre[@]}" timeout "$((tt + 30))" "$RVT" "${rvt_args[@]}" "$GIP" >"$sout" 2>&1 || ok=0
		fi
		[ $ok = 1 ] || "$PEERSH" stop "$G" "$guest_job" >/dev/null 2>&1 || true
		"$PEERSH" wait "$G" "$guest_job" "$((tt + 30))" >"$gout" 2>&1 || ok=0
		guest_job=
	fi
	bytes=$((size * iters * 2))
	[ $ok = 1 ] && check_pingpong_out "$sout" "$bytes" "$iters" "$name rvt" || ok=0
	[ $ok = 1 ] && check_pingpong_out "$gout" "$bytes" "$iters" "$name rxe" || ok=0
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
		rvt_args=(pingpong --tap "$TAP" --ip "$SVIP" --mac "$SVMAC" --link-mtu "$lmtu")
	fi
	# A plain command (not a function), so that $! is its own PID.
	pre=()
	[ -n "$rns" ] && pre=(ip netns exec "$rns")
	# A lost UC message (see below) waits out the timeout: a minute is
	# ample for the largest UC case.
	tt=$T
	[ "$tr" = uc ] && [ "$tt" -gt 60 ] && tt=60
	rvt_args+=("--$tr" -g 1 -s "$size" -n "$iters" -c --timeout "${tt}s" --pcap "$WORK/$name.pcap")
	tool="timeout $tt ibv_${tr}_pingpong -d rxe0 -g 1 -s $size -n $iters -c"
	if [ "$tr" != ud ]; then
		rvt_args+=(-m "$mtu")
		tool+=" -m $mtu"
	fi
	t0=$(date +%s%N)
	run_case
	if [ $ok = 0 ] && [ "$tr" = uc ] && grep -q 'timed out' "$sout" "$gout"; then
		# UC does not retransmit: a packet the guest drops (its TX queue
		# under TCG) loses the message and the pingpong waits for ever.
		# The capture of the failed run is kept; the case runs once more.
		cp "$WORK/$name.pcap" "$WORK/$name.lost.pcap" 2>/dev/null || true
		log "$name: a UC message was lost (UC has no retransmission; capture in $name.lost.pcap): once more"
		run_case
	fi
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
