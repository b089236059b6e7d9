#!/usr/bin/env bash
# Interop of `rvt rping`, `rvt ucmatose` and `rvt udaddy` (the connection
# manager, package cm) with Linux Soft-RoCE (rxe) and rdma-core's rping,
# ucmatose and udaddy, in both roles, using the reference guest of
# ../shared/rxe-peer (root only). `make interop` runs it after
# scripts/interop.sh; `make interop-quick` runs its --quick subset.
#
#   scripts/interop-cm.sh           every case: rping (-C 100, -S 64 B ..
#                                   64 KiB, -v -V), ucmatose (1 and 4
#                                   connections), udaddy (1 and 2
#                                   connections), softverbs as server and
#                                   as client, over TAP; rping 4096,
#                                   ucmatose -c 4 and udaddy -c 2 over the
#                                   UDP link and AF_XDP too
#   scripts/interop-cm.sh --quick   the CI subset: rping -C 100 -S 4096 in
#                                   each role over TAP
#   scripts/interop-cm.sh --list    print the cases and exit
#   scripts/interop-cm.sh --case 'sv-server rping 65535 tap'   (repeatable)
#
# A case is "ROLE TOOL ARG [LINK]": ROLE sv-server runs rvt as the server
# and the rdma-core tool in the guest as the client, rxe-server the other
# way; ARG is rping's -S, or the -c of ucmatose and udaddy; LINK is tap
# (default), udp or xdp. The topology is scripts/interop.sh's: rvt on the
# TAP svtap0 in the bridge (10.50.0.200), on the UDP socket link on the
# bridge's own 10.50.0.254 (netns rxepeer), or on AF_XDP on svx0
# (10.50.0.201, netns svxdp, joined to the bridge by a veth).
#
# Environment: PEER, GUEST, SVTAP, SVIP, CASE_TIMEOUT (120), GO, KEEP,
# KEEP_GUEST, as for scripts/interop.sh.
set -euo pipefail

IOP=interop-cm
. "$(dirname "$0")/interop-lib.sh"
T=${CASE_TIMEOUT:-120}
DELAY=${RXE_SERVER_DELAY:-3}

parse_case_args "ROLE TOOL ARG [LINK]" "$@"

cases=()
add() { local role; for role in sv-server rxe-server; do cases+=("$role $*"); done; }
if [ ${#custom[@]} -gt 0 ]; then
	cases=("${custom[@]}")
elif [ -n "$quick" ]; then
	add rping 4096
else
	add rping 64
	add rping 4096
	add rping 65535
	add ucmatose 1
	add ucmatose 4
	add udaddy 1
	add udaddy 2
	for lk in udp xdp; do
		add rping 4096 "$lk"
		add ucmatose 4 "$lk"
		add udaddy 2 "$lk"
	done
fi
if [ -n "$list" ]; then
	printf '%s\n' "${cases[@]}"
	exit 0
fi

check_host
setup_work svinterop-cm
build_rvt
start_guest
log "guest $G: $GIP, eth0 MTU $guest_mtu"

# The TAP (no deep queues); the AF_XDP netns if a case needs it
# (scripts/interop-lib.sh).
setup_links "" xdp

pass=0
fail=0
n=0
for c in "${cases[@]}"; do
	read -r role tool arg lk <<<"$c"
	lk=${lk:-tap}
	n=$((n + 1))
	name=$(printf '%02d-%s-%s-%s-%s' "$n" "$lk" "$role" "$tool" "$arg")
	sout=$WORK/$name.rvt.txt
	gout=$WORK/$name.rxe.txt
	case $lk in
	tap) pre=(ip netns exec "$NS") myip=${SVIP%/*} link=(--tap "$TAP" --ip "$SVIP" --mac "$SVMAC" --link-mtu "$guest_mtu") ;;
	udp) pre=(ip netns exec "$NS") myip=$HOSTIP link=(--udp "$HOSTIP") ;;
	xdp) pre=(ip netns exec "$XNS") myip=$XIP link=(--xdp "$XIF") ;;
	esac
	link+=(--pcap "$WORK/$name.pcap" --timeout "${T}s")
	# The server's and the client's command lines.
	case $tool in
	rping)
		sv_srv=(rping -s -a "$myip" -v -V -S "$arg")
		sv_cli=(rping -c -a "$GIP" -C 100 -v -V -S "$arg")
		rxe_srv="rping -s -a $GIP -v -V -S $arg"
		rxe_cli="rping -c -a $myip -C 100 -v -V -S $arg"
		;;
	ucmatose | udaddy)
		sv_srv=("$tool" -b "$myip" -c "$arg")
		sv_cli=("$tool" -s "$GIP" -c "$arg")
		rxe_srv="$tool -b $GIP -c $arg"
		rxe_cli="$tool -s $myip -c $arg"
		;;
	esac
	t0=$(date +%s%N)
	ok=1
	if [ "$role" = sv-server ]; then
		"${pre[@]}" timeout "$((T + 30))" "$RVT" "${sv_srv[@]}" "${link[@]}" >"$sout" 2>&1 &
		rvt_pid=$!
		sleep 1.5
		kill -0 "$rvt_pid" 2>/dev/null || { log "$name: rvt exited early"; ok=0; }
		if [ $ok = 1 ] && ! "$PEERSH" run "$G" "timeout $T $rxe_cli" >"$gout" 2>&1; then
			ok=0
		fi
		[ $ok = 1 ] || kill "$rvt_pid" 2>/dev/null || true
		wait "$rvt_pid" || ok=0
		rvt_pid=
		[ $ok = 1 ] && check_cm_out "$sout" "$tool" "$name rvt" server || ok=0
		[ $ok = 1 ] && check_cm_out "$gout" "$tool" "$name rxe" client || ok=0
	else
		guest_job=$("$PEERSH" spawn "$G" "timeout $T $rxe_srv")
		sleep "$DELAY"
		until_listening "$sout" "${pre[@]}" timeout "$((T + 30))" "$RVT" "${sv_cli[@]}" "${link[@]}" || ok=0
		[ $ok = 1 ] || "$PEERSH" stop "$G" "$guest_job" >/dev/null 2>&1 || true
		"$PEERSH" wait "$G" "$guest_job" "$((T + 30))" >"$gout" 2>&1 || ok=0
		guest_job=
		[ $ok = 1 ] && check_cm_out "$sout" "$tool" "$name rvt" client || ok=0
		[ $ok = 1 ] && check_cm_out "$gout" "$tool" "$name rxe" server || ok=0
	fi
	ms=$((($(date +%s%N) - t0) / 1000000))
	secs=$((ms / 1000)).$((ms % 1000 / 100))
	if [ $ok = 1 ]; then
		pass=$((pass + 1))
		printf 'PASS %-40s %5ss\n' "$name" "$secs"
	else
		fail=$((fail + 1))
		printf 'FAIL %-40s %5ss\n' "$name" "$secs"
		sed 's/^/    rvt| /' "$sout" | head -40
		sed 's/^/    rxe| /' "$gout" | head -40
	fi
done
printf 'interop-cm: %d passed, %d failed\n' "$pass" "$fail"
[ "$fail" = 0 ]
