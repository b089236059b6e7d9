#!/usr/bin/env bash
# Interop through the rvtd daemon (issues 17 and 20) with Linux Soft-RoCE
# (rxe) and rdma-core's tools in the reference guest of ../shared/rxe-peer,
# in both roles (root only). `make interop` runs it after the other interop
# scripts; `make interop-quick` runs its --quick subset.
#
#   scripts/interop-rvtd.sh           every case (below)
#   scripts/interop-rvtd.sh --quick   the CI subset: RC `rvt pingpong --rvtd`
#                                     in each role, and Debian's
#                                     ibv_rc_pingpong on our libibverbs as
#                                     the client, and Debian's rping on our
#                                     librdmacm as the server
#   scripts/interop-rvtd.sh --list    print the cases and exit
#   scripts/interop-rvtd.sh --case 'pp rxe-server rc 4096 50'   (repeatable)
#
# One rvtd, built from the tree, serves every case: its config has one
# device, t0, on a TAP the daemon creates (svtap0, 10.50.0.200/24, at the
# guest's eth0 MTU) in netns rxepeer; the script puts that TAP in the
# guest's bridge once rvtd listens. At the end rvtd is stopped (SIGTERM, by
# PID) and the last case checks that it exited 0 and took its TAP and
# socket with it. The topology is otherwise scripts/interop.sh's:
#
#   netns rxepeer: bridge rxebr0 10.50.0.254/24 (TCP 18515/18516 of the
#                  pingpong exchange when softverbs is the server)
#     +- rxetap1 -- guest 1: eth0 10.50.0.1, rxe0 (rdma-core tools)
#     +- svtap0  -- rvtd's device t0, 10.50.0.200 (GID 1 ::ffff:10.50.0.200)
#   host processes (in netns rxepeer, for the TCP exchange) reach t0 through
#   rvtd's unix socket in the work directory.
#
# A case is "KIND ROLE ARGS...". ROLE sv-server runs the host side as the
# server and the guest's tool as the client, rxe-server the other way.
#   pp     TR SIZE ITERS  rvt pingpong --rvtd SOCK -d t0 --TR against the
#                         guest's ibv_TR_pingpong
#   dropin TR SIZE ITERS  Debian's unmodified ibv_TR_pingpong on the host
#                         with LD_LIBRARY_PATH=build/lib RVTD_SOCKET=SOCK
#                         -d t0 -g 1 (issue 20) against the guest's
#   multi  TR SIZE ITERS  two rvt pingpong --rvtd at once on t0 (TCP ports
#                         18515 and 18516), against two guest tools
#   mixed  TR SIZE ITERS  rvt pingpong --rvtd and Debian's tool on our
#                         library at once on t0, against two guest tools
#   perf   HOST TOOL SIZE a perftest tool (-x 1, TCP exchange): HOST rvt is
#                         `rvt TOOL --rvtd SOCK -d t0`, HOST dropin is
#                         Debian's perftest on our library; against the
#                         guest's perftest. Debian's ib_read_bw and
#                         ib_atomic_bw take the peer's outstanding reads
#                         (rxe: 128) as their initiator depth, above t0's
#                         max_qp_init_rd_atom (16), so the guest's side of
#                         those runs with -o 16 (rvt's clamps it itself)
#   cm     TOOL ARG       rvt rping (-S ARG, -C 100), ucmatose or udaddy
#                         (-c ARG) with --rvtd SOCK --ib-dev t0, the
#                         connection manager in the daemon, against the
#                         guest's rdmacm-utils tool
#   dropincm TOOL ARGS... Debian's unmodified rping, ucmatose or udaddy on
#                         our librdmacm and libibverbs (LD_LIBRARY_PATH,
#                         RVTD_SOCKET; issue 20) against the guest's.
#                         rping COUNT SIZE: -C COUNT -S SIZE -v -V;
#                         ucmatose/udaddy CONNS [MSGS]: -c CONNS (-C MSGS,
#                         "-": the default); then options for both ends,
#                         or with srv: or cli: for the server or client
#                         only (@self, @peer: that end's address, the
#                         other's); mckey GROUP [MSGS]: the receiver
#                         (-m GROUP) is the server, the sender (-s) the
#                         client; cmtime N: N connections (the server is
#                         ended when the client is done); rdma_xclient
#                         PORT: rdma_xserver and rdma_xclient over RC;
#                         rstream, riostream COUNT SIZE: rsockets (our
#                         librdmacm's rsocket.c against Linux's), -C COUNT
#                         -S SIZE, one iteration; both ends must print
#                         their "custom" result line (with -T v both check
#                         the data); each case has its own -p;
#                         rcopy BYTES
#                         PORT: a file of BYTES random bytes copied by
#                         rcopy (-p PORT) to the other end's server
#                         (which runs until ended), compared by MD5
# The overlap of the two processes of multi and mixed is printed (their
# start and end times, from the host).
#
# Environment: DROPIN_OPTS (more options for the host's ibv_*_pingpong of
# kind dropin, e.g. "-e "), DROPIN_ENV (more environment for them, e.g.
# "RVTD_POLL_YIELD=1 "); PEER, GUEST, SVTAP, SVIP, GO, KEEP, KEEP_GUEST as for
# scripts/interop.sh; CASE_TIMEOUT (120); QLEN (4096, the guest TAP's
# txqueuelen). A capture of UDP 4791 on the TAP over the whole run is
# $WORK/rvtd.pcap (kept on failure or with KEEP=1), rvtd's log
# $WORK/rvtd.log.
set -euo pipefail

IOP=interop-rvtd
. "$(dirname "$0")/interop-lib.sh"
T=${CASE_TIMEOUT:-120}
QLEN=${QLEN:-4096}
DELAY=${RXE_SERVER_DELAY:-3}
DEV=t0
PORTS=(18515 18516)

parse_case_args "KIND ROLE ARGS..." "$@"

cases=()
add() { local k=$1 role; shift; for role in sv-server rxe-server; do cases+=("$k $role $*"); done; }
if [ ${#custom[@]} -gt 0 ]; then
	cases=("${custom[@]}")
elif [ -n "$quick" ]; then
	add pp rc 4096 50
	cases+=("dropin rxe-server rc 4096 50")
	cases+=("dropincm sv-server rping 10 64")
else
	add pp rc 1 20
	add pp rc 4096 50
	add pp rc 65536 10
	add pp rc 1048576 3
	add pp uc 4096 20
	add pp uc 65536 10
	add pp ud 1024 20
	add multi rc 4096 500
	add multi ud 1024 500
	add mixed rc 4096 500
	add dropin rc 1 20
	add dropin rc 4096 50
	add dropin rc 1048576 3
	add dropin uc 4096 20
	add dropin ud 1024 20
	for h in rvt dropin; do
		add perf "$h" ib_write_bw 65536
		add perf "$h" ib_read_bw 65536
		add perf "$h" ib_send_bw 4096
		add perf "$h" ib_atomic_bw 8
		add perf "$h" ib_send_lat 64
	done
	add cm rping 64
	add cm rping 4096
	add cm ucmatose 4
	add cm udaddy 2
	add dropincm rping 100 64
	add dropincm rping 20 60000
	add dropincm ucmatose 1
	add dropincm ucmatose 4 20
	add dropincm udaddy 1
	add dropincm udaddy 4 20
	add dropincm rping 20 64 srv:-a srv:0.0.0.0 cli:-I cli:@self
	add dropincm ucmatose 2 10 -S 4096 srv:-b srv:0.0.0.0
	add dropincm udaddy 2 10 -S 1024 cli:-b cli:@self
	add dropincm ucmatose 2 10 -P ib
	add dropincm mckey 239.1.2.30
	add dropincm mckey 239.1.2.31 20 cli:-o
	add dropincm cmtime 100
	add dropincm rdma_xclient 7471
	add dropincm rstream 100 1000 -p 7481 -T v
	add dropincm rstream 30 100000 -p 7482 -T b -T v
	# -T a on our end only: Linux's rpoll sets POLLHUP with the data that
	# came before the peer's disconnect, and rstream -T a then fails its
	# last receive when the data and the disconnect arrive together (a
	# slow guest's client, often); docs/rsockets.md.
	cases+=("dropincm sv-server rstream 100 4096 -p 7483 -T v srv:-T srv:a")
	cases+=("dropincm rxe-server rstream 100 4096 -p 7483 -T v cli:-T cli:a")
	# Keepalives every second both ways (rstream -k 1) for the run's
	# seconds (6.5 s each on the TCG guest); the run must pass -T v.
	add dropincm rstream 10000 1000 -p 7487 -k 1 -T v
	add dropincm riostream 50 10000 -p 7484 -T v
	add dropincm riostream 20 100000 -p 7485 -T b -T v
	add dropincm rcopy 3000000 7486
fi
if [ -n "$list" ]; then
	printf '%s\n' "${cases[@]}"
	exit 0
fi

check_host
setup_work svinterop-rvtd
build_rvt
RVTD=$WORK/rvtd
SOCK=$WORK/rvtd.sock
log "building rvtd and the C library (make libs)"
(cd "$ROOT" && "$GO" build -o "$RVTD" ./cmd/rvtd)
make --no-print-directory -C "$ROOT" libs >"$WORK/libs.log" 2>&1 || { cat "$WORK/libs.log" >&2; exit 1; }
LIBDIR=$ROOT/build/lib
start_guest
log "guest $G: $GIP, eth0 MTU $guest_mtu"

# rvtd with t0 on a TAP it creates in netns $NS; the TAP joins the bridge
# once the daemon listens (no RoCE traffic can go out before: no client).
pin_bridge_mac
guest_tap_qlen "$QLEN"
nsip link del "$TAP" >/dev/null 2>&1 || true
cat >"$WORK/rvtd.yaml" <<EOF
socket: $SOCK
log: {format: text, level: info}
devices:
  - {name: $DEV, tap: $TAP, ip: $SVIP, mtu: $guest_mtu}
EOF
# Plain commands (not functions), so that $! is the process's own PID.
ip netns exec "$NS" "$RVTD" --config "$WORK/rvtd.yaml" >"$WORK/rvtd.log" 2>&1 &
rvtd_pid=$!
for i in $(seq 200); do
	grep -q 'msg=listening' "$WORK/rvtd.log" && break
	kill -0 "$rvtd_pid" 2>/dev/null || break
	sleep 0.05
done
grep -q 'msg=listening' "$WORK/rvtd.log" || { log "rvtd did not start:"; cat "$WORK/rvtd.log" >&2; exit 1; }
nsip link set "$TAP" master "$BR"
guest_forget_neighbours
ip netns exec "$NS" tcpdump -i "$TAP" -U -w "$WORK/rvtd.pcap" udp port 4791 >"$WORK/tcpdump.log" 2>&1 &
tcpdump_pid=$!
bg_pids+=("$tcpdump_pid")
log "rvtd (pid $rvtd_pid) serves $DEV on $TAP ($SVIP, MTU $guest_mtu) at $SOCK"

# host_cmd KIND TR SIZE ITERS PORT SERVER: the host side's command line
# (no argument has a space). SERVER is the address to connect to, or "" for
# a server. KIND perf-rvt and perf-dropin: TR is the perftest tool.
host_cmd() {
	local k=$1 tr=$2 size=$3 iters=$4 port=$5 peer=$6 m= s="-s $3"
	[ "$tr" != ud ] && m="-m 1024"
	[ "$tr" = ib_atomic_bw ] && s=
	case $k in
	pp) echo "timeout $T $RVT pingpong --rvtd $SOCK -d $DEV --$tr -g 1 -s $size -n $iters -c $m -p $port --timeout ${T}s $peer" ;;
	dropin) echo "timeout $T env LD_LIBRARY_PATH=$LIBDIR RVTD_SOCKET=$SOCK ${DROPIN_ENV:-}ibv_${tr}_pingpong -d $DEV -g 1 -s $size -n $iters -c $m -p $port ${DROPIN_OPTS:-}$peer" ;;
	perf-rvt) echo "timeout $T $RVT $tr --rvtd $SOCK -d $DEV -x 1 $s -n $iters -p $port --timeout ${T}s $peer" ;;
	perf-dropin) echo "timeout $T env LD_LIBRARY_PATH=$LIBDIR RVTD_SOCKET=$SOCK $tr -d $DEV -x 1 $s -n $iters -p $port $peer" ;;
	esac
}
# guest_cmd KIND TR SIZE ITERS PORT SERVER: the guest side's.
guest_cmd() {
	local k=$1 tr=$2 size=$3 iters=$4 port=$5 peer=$6 m= s="-s $3" o=
	case $k in
	perf-*)
		[ "$tr" = ib_atomic_bw ] && s=
		case $k-$tr in perf-dropin-ib_read_* | perf-dropin-ib_atomic_*) o="-o 16" ;; esac
		echo "timeout $T $tr -d rxe0 -x 1 $s -n $iters $o -p $port $peer"
		;;
	*)
		[ "$tr" != ud ] && m="-m 1024"
		echo "timeout $T ibv_${tr}_pingpong -d rxe0 -g 1 -s $size -n $iters -c $m -p $port $peer"
		;;
	esac
}

# host_run OUT CMD...: CMD in netns $NS, its output in $WORK/OUT.txt, its
# start and end (ns) in $WORK/OUT.time; run in the background, it passes a
# SIGTERM on to CMD.
host_run() {
	local out=$1 s c rc=0
	shift
	s=$(date +%s%N)
	ip netns exec "$NS" "$@" >"$WORK/$out.txt" 2>&1 &
	c=$!
	trap 'kill "$c" 2>/dev/null; exit 143' TERM
	wait "$c" || rc=$?
	echo "$s $(date +%s%N)" >"$WORK/$out.time"
	return $rc
}

# listening_host PORT PID: something in netns $NS listens on TCP PORT
# while PID lives.
listening_host() {
	local i
	for i in $(seq 400); do
		nsx ss -ltnH "sport = :$1" | grep -q . && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}
listening_guest() {
	"$PEERSH" run "$G" "for i in \$(seq 600); do ss -ltnH 'sport = :$1' | grep -q . && exit 0; sleep 0.05; done; exit 1" >/dev/null
}

# run_pp NAME ROLE TR SIZE ITERS KIND...: one pair per KIND (pp or dropin)
# at once, the i-th on port PORTS[i]; outputs $WORK/NAME.{h,g}I.txt; times
# of the host processes in $WORK/NAME.hI.time (start and end, ns).
run_pp() {
	local name=$1 role=$2 tr=$3 size=$4 iters=$5 ok=1 i k pids=() gjobs=()
	shift 5
	local kinds=("$@")
	if [ "$role" = sv-server ]; then
		for i in "${!kinds[@]}"; do
			k=${kinds[$i]}
			host_run "$name.h$i" $(host_cmd "$k" "$tr" "$size" "$iters" "${PORTS[$i]}" "") &
			pids+=($!)
			bg_pids+=($!)
		done
		for i in "${!kinds[@]}"; do
			listening_host "${PORTS[$i]}" "${pids[$i]}" || { log "$name: host server $i is not listening"; ok=0; }
		done
		if [ $ok = 1 ]; then
			for i in "${!kinds[@]}"; do
				gjobs+=("$("$PEERSH" spawn "$G" "$(guest_cmd "${kinds[$i]}" "$tr" "$size" "$iters" "${PORTS[$i]}" "$HOSTIP")")")
			done
			guest_jobs=("${gjobs[@]}")
			for i in "${!gjobs[@]}"; do
				"$PEERSH" wait "$G" "${gjobs[$i]}" "$((T + 30))" >"$WORK/$name.g$i.txt" 2>&1 || ok=0
			done
			guest_jobs=()
		fi
		[ $ok = 1 ] || kill "${pids[@]}" 2>/dev/null || true
		for p in "${pids[@]}"; do wait "$p" || ok=0; done
	else
		for i in "${!kinds[@]}"; do
			gjobs+=("$("$PEERSH" spawn "$G" "$(guest_cmd "${kinds[$i]}" "$tr" "$size" "$iters" "${PORTS[$i]}" "")")")
		done
		guest_jobs=("${gjobs[@]}")
		for i in "${!kinds[@]}"; do
			listening_guest "${PORTS[$i]}" || { log "$name: guest server $i is not listening"; ok=0; }
		done
		if [ $ok = 1 ]; then
			for i in "${!kinds[@]}"; do
				k=${kinds[$i]}
				host_run "$name.h$i" $(host_cmd "$k" "$tr" "$size" "$iters" "${PORTS[$i]}" "$GIP") &
				pids+=($!)
				bg_pids+=($!)
			done
			for p in "${pids[@]}"; do wait "$p" || ok=0; done
		fi
		if [ $ok = 0 ]; then
			for j in "${gjobs[@]}"; do "$PEERSH" stop "$G" "$j" >/dev/null 2>&1 || true; done
		fi
		for i in "${!gjobs[@]}"; do
			"$PEERSH" wait "$G" "${gjobs[$i]}" "$((T + 30))" >"$WORK/$name.g$i.txt" 2>&1 || ok=0
		done
		guest_jobs=()
	fi
	bg_pids=("$tcpdump_pid")
	local bytes=$((size * iters * 2))
	local hside=client gside=server
	[ "$role" = sv-server ] && hside=server gside=client
	for i in "${!kinds[@]}"; do
		case ${kinds[$i]} in
		perf-*)
			[ $ok = 1 ] && check_perftest_out "$WORK/$name.h$i.txt" "$tr" "$hside" "$size" "$name host (${kinds[$i]})" || ok=0
			[ $ok = 1 ] && check_perftest_out "$WORK/$name.g$i.txt" "$tr" "$gside" "$size" "$name rxe" || ok=0
			;;
		*)
			[ $ok = 1 ] && check_pingpong_out "$WORK/$name.h$i.txt" "$bytes" "$iters" "$name host $i (${kinds[$i]})" || ok=0
			[ $ok = 1 ] && check_pingpong_out "$WORK/$name.g$i.txt" "$bytes" "$iters" "$name rxe $i" || ok=0
			;;
		esac
	done
	[ $ok = 1 ]
}

# overlap NAME: how long the two host processes of NAME ran at the same
# time, against each one's run time.
overlap() {
	local a0 a1 b0 b1
	read -r a0 a1 <"$WORK/$1.h0.time" && read -r b0 b1 <"$WORK/$1.h1.time" || return 0
	local s=$((a0 > b0 ? a0 : b0)) e=$((a1 < b1 ? a1 : b1))
	local ov=$(((e > s ? e - s : 0) / 1000000))
	echo "overlap ${ov} ms (runs $(((a1 - a0) / 1000000)) and $(((b1 - b0) / 1000000)) ms)"
	[ "$ov" -gt 0 ]
}

# run_cm NAME ROLE TOOL ARG
run_cm() {
	local name=$1 role=$2 tool=$3 arg=$4 ok=1 myip=${SVIP%/*}
	local sout=$WORK/$name.h0.txt gout=$WORK/$name.g0.txt
	local via=(--rvtd "$SOCK" --ib-dev "$DEV" --timeout "${T}s")
	local sv_srv sv_cli rxe_srv rxe_cli
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
	if [ "$role" = sv-server ]; then
		nsx timeout "$((T + 30))" "$RVT" "${sv_srv[@]}" "${via[@]}" >"$sout" 2>&1 &
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
		until_listening "$sout" nsx timeout "$((T + 30))" "$RVT" "${sv_cli[@]}" "${via[@]}" || ok=0
		[ $ok = 1 ] || "$PEERSH" stop "$G" "$guest_job" >/dev/null 2>&1 || true
		"$PEERSH" wait "$G" "$guest_job" "$((T + 30))" >"$gout" 2>&1 || ok=0
		guest_job=
		[ $ok = 1 ] && check_cm_out "$sout" "$tool" "$name rvt" client || ok=0
		[ $ok = 1 ] && check_cm_out "$gout" "$tool" "$name rxe" server || ok=0
	fi
	[ $ok = 1 ]
}

# until_rs_listening OUT CMD...: until_listening for rstream and riostream,
# whose clients print "...: Connection refused" (the REJ) when the guest's
# server does not listen yet.
until_rs_listening() {
	local out=$1 try
	shift
	for try in 1 2 3 4 5 6 7 8 9 10; do
		"$@" >"$out" 2>&1 && return 0
		grep -q 'Connection refused' "$out" || return 1
		log "client refused (try $try): the guest's server does not listen yet"
		sleep 1
	done
	return 1
}

# check_rs_out FILE TOOL WHO: rstream's and riostream's result line
# ("custom  1000  100  1  195k  0.05s  0.03  263.12"), and no error.
check_rs_out() {
	case $2 in rstream | riostream) ;; *) return 0 ;; esac
	grep -Eq '^custom +[0-9.]+[kmg]? +[0-9.]+[kmg]? +1 +[0-9.]+[kmg]? +[0-9.]+s +[0-9.]+ +[0-9.]+$' "$1" || { log "$3: no result line"; return 1; }
	! grep -Eq '^(r[a-z]+|async rconnect|riomap|riowrite): ' "$1" || { log "$3: an error"; return 1; }
}

# run_rcopy NAME ROLE BYTES PORT: a file of BYTES random bytes from the
# client's end to the server's by rcopy (the server never exits: ended
# once the client is done); both ends' MD5 sums must agree.
run_rcopy() {
	local name=$1 role=$2 bytes=$3 port=$4 ok=1 myip=${SVIP%/*} hpid gsum hsum
	local hout=$WORK/$name.h0.txt gout=$WORK/$name.g0.txt
	local env=(env LD_LIBRARY_PATH="$LIBDIR" RVTD_SOCKET="$SOCK")
	if [ "$role" = sv-server ]; then
		ip netns exec "$NS" timeout "$((T + 30))" "${env[@]}" rcopy -p "$port" >"$hout" 2>&1 &
		hpid=$!
		bg_pids+=("$hpid")
		sleep 1.5
		kill -0 "$hpid" 2>/dev/null || { log "$name: host server exited early"; ok=0; }
		if [ $ok = 1 ] && ! "$PEERSH" run "$G" "head -c $bytes /dev/urandom >/tmp/$name.src && timeout $T rcopy /tmp/$name.src $myip:$WORK/$name.dst -p $port && md5sum /tmp/$name.src" >"$gout" 2>&1; then
			ok=0
		fi
		kill "$hpid" 2>/dev/null || { log "$name: host server ended"; ok=0; }
		wait "$hpid" || true
		gsum=$(awk -v f="/tmp/$name.src" '$2 == f {print $1}' "$gout")
		hsum=$(md5sum <"$WORK/$name.dst" 2>/dev/null | awk '{print $1}')
	else
		guest_job=$("$PEERSH" spawn "$G" "cd /tmp && timeout --foreground $T rcopy -p $port")
		sleep "$DELAY"
		head -c "$bytes" /dev/urandom >"$WORK/$name.src"
		until_rs_listening "$hout" nsx timeout "$((T + 30))" "${env[@]}" rcopy "$WORK/$name.src" "$GIP:/tmp/$name.dst" -p "$port" || ok=0
		gsum=$("$PEERSH" run "$G" "md5sum </tmp/$name.dst" 2>/dev/null | awk '{print $1}')
		"$PEERSH" stop "$G" "$guest_job" >/dev/null 2>&1 || true
		"$PEERSH" wait "$G" "$guest_job" "$((T + 30))" >"$gout" 2>&1 || true
		guest_job=
		hsum=$(md5sum <"$WORK/$name.src" | awk '{print $1}')
	fi
	bg_pids=("$tcpdump_pid")
	[ -n "$gsum" ] && [ "$gsum" = "$hsum" ] || { log "$name: MD5 $hsum (host) and $gsum (guest) differ"; ok=0; }
	grep -q '^opening\.\.\.transferring\.\.\.closing\.\.\.done$' "$hout" "$gout" || { log "$name: the client did not end with done"; ok=0; }
	[ $ok = 1 ]
}

# run_dropincm NAME ROLE TOOL A [B [OPT...]]: Debian's TOOL on our
# libraries on the host (in netns $NS) against the guest's. rping: A pings
# (-C) of B bytes (-S); ucmatose and udaddy: A connections (-c), B messages
# each (-C; "-" or none: the tool's default). OPTs go to both ends (those
# written srv:OPT or cli:OPT to the server or client only), with @self and
# @peer standing for that end's own address and the other's.
run_dropincm() {
	local name=$1 role=$2 tool=$3 a=$4 rest=${5:-} ok=1 myip=${SVIP%/*} hpid b
	local hout=$WORK/$name.h0.txt gout=$WORK/$name.g0.txt
	local env=(env LD_LIBRARY_PATH="$LIBDIR" RVTD_SOCKET="$SOCK")
	local opt sv_srv sv_cli rxe_srv rxe_cli forever=
	if [ "$tool" = rcopy ]; then
		run_rcopy "$name" "$role" "$a" "${rest%% *}"
		return
	fi
	read -r b rest <<<"$rest"
	[ "$b" = - ] && b=
	# xopts SIDE SELF PEER: the OPTs for the server or client SIDE.
	xopts() {
		local o out=
		for o in $rest; do
			case $o in srv:* | cli:*) [ "${o%%:*}" = "${1:0:3}" ] || continue; o=${o#*:} ;; esac
			o=${o//@self/$2}
			out+=" ${o//@peer/$3}"
		done
		echo "$out"
	}
	case $tool in
	rping)
		opt="-C $a -S $b -v -V"
		sv_srv="rping -s -a $myip $opt$(xopts srv "$myip" "$GIP")"
		sv_cli="rping -c -a $GIP $opt$(xopts cli "$myip" "$GIP")"
		rxe_srv="rping -s -a $GIP $opt$(xopts srv "$GIP" "$myip")"
		rxe_cli="rping -c -a $myip $opt$(xopts cli "$GIP" "$myip")"
		;;
	ucmatose | udaddy)
		opt="-c $a${b:+ -C $b}"
		sv_srv="$tool -b $myip $opt$(xopts srv "$myip" "$GIP")"
		sv_cli="$tool -s $GIP $opt$(xopts cli "$myip" "$GIP")"
		rxe_srv="$tool -b $GIP $opt$(xopts srv "$GIP" "$myip")"
		rxe_cli="$tool -s $myip $opt$(xopts cli "$GIP" "$myip")"
		;;
	mckey)
		# A is the group (IPv4); the receiver is the "server", the
		# sender (-s, which sends 3 s after its join) the "client".
		opt="-m $a${b:+ -C $b}"
		sv_srv="mckey $opt -b $myip$(xopts srv "$myip" "$GIP")"
		sv_cli="mckey $opt -b $myip -s$(xopts cli "$myip" "$GIP")"
		rxe_srv="mckey $opt -b $GIP$(xopts srv "$GIP" "$myip")"
		rxe_cli="mckey $opt -b $GIP -s$(xopts cli "$GIP" "$myip")"
		;;
	cmtime)
		# A connections set up at once, then torn down; the server
		# never exits by itself (ended once the client is done).
		forever=1
		sv_srv="cmtime -b $myip$(xopts srv "$myip" "$GIP")"
		sv_cli="cmtime -s $GIP -b $myip -c $a$(xopts cli "$myip" "$GIP")"
		rxe_srv="cmtime -b $GIP$(xopts srv "$GIP" "$myip")"
		rxe_cli="cmtime -s $myip -b $GIP -c $a$(xopts cli "$GIP" "$myip")"
		;;
	rdma_xclient)
		# A is the port; RC (the tools' default): one 16-byte inline SEND.
		sv_srv="rdma_xserver -p $a"
		sv_cli="rdma_xclient -s $GIP -p $a"
		rxe_srv="rdma_xserver -p $a"
		rxe_cli="rdma_xclient -s $myip -p $a"
		;;
	rstream | riostream)
		opt="-C $a -S $b -I 1"
		sv_srv="$tool -b $myip $opt$(xopts srv "$myip" "$GIP")"
		sv_cli="$tool -s $GIP $opt$(xopts cli "$myip" "$GIP")"
		rxe_srv="$tool -b $GIP $opt$(xopts srv "$GIP" "$myip")"
		rxe_cli="$tool -s $myip $opt$(xopts cli "$GIP" "$myip")"
		;;
	esac
	if [ "$role" = sv-server ]; then
		# A plain command (not nsx), so that $! is the tool's own PID.
		# shellcheck disable=SC2086
		ip netns exec "$NS" timeout "$((T + 30))" "${env[@]}" $sv_srv >"$hout" 2>&1 &
		hpid=$!
		bg_pids+=("$hpid")
		sleep 1.5
		kill -0 "$hpid" 2>/dev/null || { log "$name: host server exited early"; ok=0; }
		if [ $ok = 1 ] && ! "$PEERSH" run "$G" "timeout $T $rxe_cli" >"$gout" 2>&1; then
			ok=0
		fi
		if [ $ok = 1 ] && [ -n "$forever" ]; then
			kill "$hpid" 2>/dev/null || { log "$name: host server ended"; ok=0; }
			wait "$hpid" || true
		else
			[ $ok = 1 ] || kill "$hpid" 2>/dev/null || true
			wait "$hpid" || ok=0
		fi
		[ $ok = 1 ] && check_cm_out "$hout" "$tool" "$name host" server "$a" || ok=0
		[ $ok = 1 ] && check_cm_out "$gout" "$tool" "$name rxe" client "$a" || ok=0
		[ $ok = 1 ] && check_rs_out "$hout" "$tool" "$name host" || ok=0
		[ $ok = 1 ] && check_rs_out "$gout" "$tool" "$name rxe" || ok=0
	else
		# --foreground: the tool stays in the job's process group, which
		# "peer.sh stop" signals (plain timeout makes a group of its own,
		# and the tool would outlive the stop).
		guest_job=$("$PEERSH" spawn "$G" "timeout --foreground $T $rxe_srv")
		sleep "$DELAY"
		# shellcheck disable=SC2086
		local until=until_listening
		case $tool in rstream | riostream) until=until_rs_listening ;; esac
		$until "$hout" nsx timeout "$((T + 30))" "${env[@]}" $sv_cli || ok=0
		if [ -n "$forever" ]; then
			"$PEERSH" stop "$G" "$guest_job" >/dev/null 2>&1 || true
			"$PEERSH" wait "$G" "$guest_job" "$((T + 30))" >"$gout" 2>&1 || true
		else
			[ $ok = 1 ] || "$PEERSH" stop "$G" "$guest_job" >/dev/null 2>&1 || true
			"$PEERSH" wait "$G" "$guest_job" "$((T + 30))" >"$gout" 2>&1 || ok=0
		fi
		guest_job=
		[ $ok = 1 ] && check_cm_out "$hout" "$tool" "$name host" client "$a" || ok=0
		[ $ok = 1 ] && check_cm_out "$gout" "$tool" "$name rxe" server "$a" || ok=0
		[ $ok = 1 ] && check_rs_out "$hout" "$tool" "$name host" || ok=0
		[ $ok = 1 ] && check_rs_out "$gout" "$tool" "$name rxe" || ok=0
	fi
	bg_pids=("$tcpdump_pid")
	[ $ok = 1 ]
}

pass=0
fail=0
n=0
result() { # NAME OK T0 NOTE
	local ms=$((($(date +%s%N) - $3) / 1000000))
	local secs=$((ms / 1000)).$((ms % 1000 / 100))
	if [ "$2" = 1 ]; then
		pass=$((pass + 1))
		printf 'PASS %-40s %5ss  %s\n' "$1" "$secs" "$4"
	else
		fail=$((fail + 1))
		printf 'FAIL %-40s %5ss  %s\n' "$1" "$secs" "$4"
		local f
		for f in "$WORK/$1".*.txt; do
			[ -e "$f" ] || continue
			echo "    --- ${f##*/}"
			sed 's/^/    | /' "$f" | head -40
		done
		echo "    --- rvtd.log (last lines)"
		tail -n 15 "$WORK/rvtd.log" | sed 's/^/    | /'
	fi
}
for c in "${cases[@]}"; do
	read -r kind role a1 a2 a3 <<<"$c"
	n=$((n + 1))
	name=$(printf '%02d-%s-%s-%s-%s' "$n" "$kind" "$role" "$a1" "$a2")
	[ "$kind" = perf ] && name=$(printf '%02d-perf-%s-%s-%s' "$n" "$a1" "$role" "$a2")
	if [ "$kind" = dropincm ]; then
		x=${a3#* }
		[ "$x" = "$a3" ] && x= || x=-opts
		name=$(printf '%02d-dropincm-%s-%s-%s-%s%s' "$n" "$role" "$a1" "$a2" "${a3%% *}" "$x")
	fi
	t0=$(date +%s%N)
	ok=1
	note=
	case $kind in
	pp | dropin) run_pp "$name" "$role" "$a1" "$a2" "$a3" "$kind" || ok=0 ;;
	multi) run_pp "$name" "$role" "$a1" "$a2" "$a3" pp pp || ok=0 ;;
	mixed) run_pp "$name" "$role" "$a1" "$a2" "$a3" pp dropin || ok=0 ;;
	perf)
		if ! run_pp "$name" "$role" "$a2" "$a3" 200 "perf-$a1"; then
			ok=0
			if perftest_clock_failed "$WORK/$name".[hg]*.txt; then
				log "$name: the guest's perftest could not calibrate its clock (r^2 < 0.9): once more"
				ok=1
				run_pp "$name" "$role" "$a2" "$a3" 200 "perf-$a1" || ok=0
			fi
		fi
		;;
	cm) run_cm "$name" "$role" "$a1" "$a2" || ok=0 ;;
	dropincm) run_dropincm "$name" "$role" "$a1" "$a2" "$a3" || ok=0 ;;
	*) log "$name: unknown kind $kind"; ok=0 ;;
	esac
	case $kind in
	multi | mixed) note=$(overlap "$name") || { log "$name: the two clients did not overlap"; ok=0; } ;;
	pp | dropin) note=$(grep -h ' iters in ' "$WORK/$name.h0.txt" 2>/dev/null | head -1 || true) ;;
	perf) note=$(grep -hE "^ *$a3 +[0-9]+ +[0-9]" "$WORK/$name.h0.txt" "$WORK/$name.g0.txt" 2>/dev/null | head -1 | tr -s ' \t' ' ' || true) ;;
	esac
	result "$name" "$ok" "$t0" "$note"
done

# Shutdown: rvtd exits 0 on SIGTERM and takes its TAP and socket with it;
# nothing of ours (TAP, XDP program) is left in the netns.
t0=$(date +%s%N)
n=$((n + 1))
name=$(printf '%02d-shutdown' "$n")
# tcpdump drops what the kernel still holds for it when it is stopped: give
# it the last case's frames first.
sleep 1
kill "$tcpdump_pid" 2>/dev/null || true
wait "$tcpdump_pid" 2>/dev/null || true
bg_pids=()
ok=1
kill -TERM "$rvtd_pid"
rc=0
wait "$rvtd_pid" || rc=$?
rvtd_pid=
{
	echo "rvtd exit status $rc"
	nsip -d link show
} >"$WORK/$name.links.txt" 2>&1
[ "$rc" = 0 ] || { log "rvtd exited $rc"; ok=0; }
if nsip link show "$TAP" >/dev/null 2>&1; then log "$TAP still exists after rvtd stopped"; ok=0; fi
if nsip -d link show | grep -q 'prog/xdp'; then log "an XDP program is left in netns $NS"; ok=0; fi
[ ! -e "$SOCK" ] || { log "$SOCK still exists"; ok=0; }
grep -q 'msg=stopped' "$WORK/rvtd.log" || { log "rvtd did not log its stop"; ok=0; }
result "$name" "$ok" "$t0" "$(grep -o 'sessions_served=[0-9]*' "$WORK/rvtd.log" || true)"

printf 'interop-rvtd: %d passed, %d failed\n' "$pass" "$fail"
[ "$fail" = 0 ]
