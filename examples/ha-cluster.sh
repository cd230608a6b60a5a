#!/bin/bash
# ha-cluster.sh: coordd and dispatchd past one machine, tried on this one.
#
#   examples/ha-cluster.sh [-k] [DIR]
#
# Starts three etcd members, two coordd replicas and two dispatchd
# replicas (--store etcd://...) and one workerloop, every one on a free
# loopback port, with their data and logs under DIR (default: a new
# directory under /tmp). Then it writes a key and schedules a closure,
# kills the coordd leader and then the dispatchd leader with -9, and
# shows the standbys taking over with the key and the closure's value.
# One line for each step. With -k it keeps the cluster running for you
# (it prints the exports to use) until Ctrl-C. It stops everything it
# started, by PID, when it exits.
set -u

keep=0
if [ "${1:-}" = -k ]; then
	keep=1
	shift
fi
case ${1:-} in
-*) echo "usage: ha-cluster.sh [-k] [DIR]" >&2; exit 2 ;;
esac
for prog in etcd coordd dispatchd workerloop kvctl dispatchctl curl; do
	command -v "$prog" >/dev/null && continue
	case $prog in
	etcd) echo "ha-cluster.sh: etcd: not found (apt-get install etcd-server)" >&2 ;;
	curl) echo "ha-cluster.sh: curl: not found (apt-get install curl)" >&2 ;;
	*) echo "ha-cluster.sh: $prog: not found (PATH=\$PWD/build/bin:\$PATH after make, or make install)" >&2 ;;
	esac
	exit 127
done
dir=${1:-$(mktemp -d /tmp/muster-ha.XXXXXX)}
mkdir -p "$dir" || exit 1
cd "$dir" || exit 1

pids=()
stop_all() {
	# The workerloop first (it would wait for its dispatchd), etcd last.
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null
		wait "${pids[i]}" 2>/dev/null
	done
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# kill9 PID: a replica lost, waited for, and off the list.
kill9() {
	local p rest=()
	kill -KILL "$1"
	wait "$1" 2>/dev/null
	for p in "${pids[@]}"; do
		[ "$p" != "$1" ] && rest+=("$p")
	done
	pids=("${rest[@]}")
}
die() {
	echo "ha-cluster.sh: $*" >&2
	exit 1
}
say() { printf '%-10s %s\n' "$1" "${*:2}"; }
# free_port: a loopback port nothing listens on, below the range the
# kernel hands out for port 0 (so that no daemon binding 0 takes it), and
# not taken before; added to taken.
free_port() {
	local lo port i
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
	((lo > 11000)) || lo=32768
	for ((i = 0; i < 100; i++)); do
		port=$((10000 + (RANDOM * 32768 + RANDOM) % (lo - 10000)))
		[[ " ${taken[*]} " == *" $port "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			taken+=("$port")
			return 0
		fi
	done
	die "no free port found"
}
taken=()
now_ms() { local t=$EPOCHREALTIME; echo $((${t%.*} * 1000 + 10#${t#*.} / 1000)); }

# 1. etcd: three members on loopback ports.
cluster='' store=''
cports=() pports=()
for i in 0 1 2; do
	free_port && cports+=("${taken[-1]}")
	free_port && pports+=("${taken[-1]}")
	cluster+=${cluster:+,}m$i=http://127.0.0.1:${pports[i]}
	store+=${store:+,}127.0.0.1:${cports[i]}
done
for i in 0 1 2; do
	etcd --name "m$i" --data-dir "etcd/m$i" \
	    --listen-client-urls "http://127.0.0.1:${cports[i]}" \
	    --advertise-client-urls "http://127.0.0.1:${cports[i]}" \
	    --listen-peer-urls "http://127.0.0.1:${pports[i]}" \
	    --initial-advertise-peer-urls "http://127.0.0.1:${pports[i]}" \
	    --initial-cluster "$cluster" --initial-cluster-state new \
	    --auto-compaction-retention 1h >"etcd-m$i.log" 2>&1 &
	pids+=("$!")
done
for i in 0 1 2; do
	for ((j = 0; j < 300; j++)); do
		curl -s -m 2 "http://127.0.0.1:${cports[i]}/health" 2>/dev/null |
		    grep -q '"health":"true"' && break
		sleep 0.1
	done
	((j < 300)) || die "etcd member m$i never became healthy (see $dir/etcd-m$i.log)"
done
say etcd "3 members at $store"

# replica PROG NAME ARGS...: a replica of PROG on the store, logging to
# NAME.log; sets pid and addr.
replica() {
	local prog=$1 name=$2 i
	shift 2
	rm -f "$name.port"
	"$prog" -l 127.0.0.1:0 --port-file "$name.port" \
	    --store "etcd://$store/muster/$prog" --store-lease 2s "$@" \
	    2>>"$name.log" &
	pid=$!
	pids+=("$pid")
	for ((i = 0; i < 300; i++)); do
		[ -s "$name.port" ] && break
		kill -0 "$pid" 2>/dev/null || die "$prog did not start (see $dir/$name.log)"
		sleep 0.05
	done
	[ -s "$name.port" ] || die "$prog did not start (see $dir/$name.log)"
	addr=127.0.0.1:$(cat "$name.port")
}
# role ADDR: leader, standby or starting.
role() {
	curl -s -m 5 "http://$1/v1/replicas" 2>/dev/null |
	    sed -n 's/.*"role":"\([a-z]*\)","replicas".*/\1/p'
}
wait_role() {
	local i
	for ((i = 0; i < 600; i++)); do
		[ "$(role "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	die "the replica at $1 is not $2 after 60 s"
}

# 2. Two replicas of each daemon: the first leads, the second stands by.
replica coordd coordd-a --cluster worker=2
ca_pid=$pid ca=$addr
wait_role "$ca" leader
replica coordd coordd-b --cluster worker=2
cb=$addr
wait_role "$cb" standby
say coordd "$ca leads, $cb stands by"
replica dispatchd dispatchd-a
da_pid=$pid da=$addr
wait_role "$da" leader
replica dispatchd dispatchd-b
db=$addr
wait_role "$db" standby
say dispatchd "$da leads, $db stands by"
export MUSTER_COORD=$ca,$cb MUSTER_DISPATCHER=$da,$db
workerloop -t w:0 -j 1 >workerloop.log 2>&1 &
pids+=("$!")
sleep 0.5
kill -0 "${pids[-1]}" 2>/dev/null || die "workerloop did not start (see $dir/workerloop.log)"
say workerloop "w:0, given both dispatchd replicas"

# 3. A key and a closure, then the coordd leader lost.
kvctl put job/config lr=0.1 >/dev/null || die "kvctl put failed"
id=$(dispatchctl schedule -- sh -c 'sleep 8; echo trained') ||
    die "dispatchctl schedule failed"
say write "job/config=lr=0.1 on $ca; closure $id scheduled on $da"
kill9 "$ca_pid"
t0=$(now_ms)
kvctl --timeout 30s put job/after-kill yes >/dev/null ||
    die "no coordd replica took the write"
t1=$(now_ms)
say kill "coordd $ca (-9): $cb took a write $((t1 - t0)) ms later;" \
    "job/config=$(kvctl get job/config)"

# 4. The dispatchd leader lost with the closure running.
for ((i = 0; i < 300; i++)); do
	dispatchctl --json ls 2>/dev/null | grep -q '"phase":"running"' && break
	sleep 0.1
done
((i < 300)) || die "closure $id never ran (see $dir/workerloop.log)"
kill9 "$da_pid"
t0=$(now_ms)
value=$(dispatchctl fetch --timeout 60s "$id") ||
    die "the closure's value never came"
t1=$(now_ms)
say kill "dispatchd $da (-9) while closure $id ran: its value" \
    "\"$value\" came from $db $((t1 - t0)) ms later"
kvctl status | sed -n '/^replicas/,$p' | sed 's/^/           /'

if [ "$keep" = 1 ]; then
	echo
	echo "Running under $dir; in another shell:"
	echo "  export MUSTER_COORD=$MUSTER_COORD MUSTER_DISPATCHER=$MUSTER_DISPATCHER"
	echo "Ctrl-C stops it all."
	wait
fi
