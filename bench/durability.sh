#!/usr/bin/env bash
# durability.sh: what --state-dir costs and how fast it comes back, on the
# disk that holds DURABILITY_DIR (default /var/tmp: a real disk, not a
# tmpfs, where fsync is free). It measures and prints, never fails on a
# figure:
#
#   1. PUT of one key, wrk -t2 -c32: coordd --state-dir --fsync always
#      against etcd (which fsyncs every commit), both on that disk; coordd
#      in memory against coordd --fsync batch.
#   2. Restart: a store of KEYS (1,000,000) distinct keys filled by wrk
#      (bench/wrk-keys.lua), coordd stopped and started again on its
#      directory: from exec to the port file (serving), and the replay as
#      coordd logs it; once from the journal, once after a compaction into
#      a snapshot.
#
# Every process it starts is stopped by PID when it exits.
set -u

here=$(cd "$(dirname "$0")" && pwd)
bin=${MUSTER_BIN:-$here/../build/bin}
keys=${KEYS:-1000000}
base=${DURABILITY_DIR:-/var/tmp}
T=$(mktemp -d "$base/muster-durability.XXXXXX")
pids=()
value=0123456789abcdef

cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null
	done
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=bench/lib.sh
. "$here/lib.sh"

# coordd NAME ARGS... and dispatchd NAME ARGS...: a daemon of the run;
# set c_pid and c_addr, or d_pid and d_addr.
coordd() {
	start_daemon "$1" coordd "${@:2}" || return 1
	c_pid=$daemon_pid c_addr=$daemon_addr
}
dispatchd() {
	start_daemon "$1" dispatchd --heartbeat-timeout 60s "${@:2}" || return 1
	d_pid=$daemon_pid d_addr=$daemon_addr
}

# restarted LABEL DAEMON NAME ARGS...: starts DAEMON (coordd or dispatchd)
# on the state directory $T/NAME and prints how long it took to serve, and
# how long it says reading its state took.
restarted() {
	local label=$1 daemon=$2 name=$3 s0 s1 line
	shift 3
	s0=$(date +%s%N)
	"$daemon" "$name" --state-dir "$T/$name" "$@" || return 1
	s1=$(date +%s%N)
	line=$(grep 'state directory' "$T/$name.log" | tail -1)
	printf '  %-44s %7d ms to serve (%s)\n' "$label" "$(((s1 - s0) / 1000000))" \
	    "$(sed 's/.*read in \([0-9]* ms\).*/read in \1/' <<<"$line")"
}

# compacted NAME: waits until the state directory $T/NAME holds a snapshot
# and a short journal (a daemon started with a small --journal-max-bytes
# compacts at its next change).
compacted() {
	local i
	for ((i = 0; i < 600; i++)); do
		[ -s "$T/$1/snapshot" ] && [ "$(stat -c %s "$T/$1/journal")" -lt 100000 ] && return 0
		sleep 0.1
	done
	return 1
}

echo "Durability (bench/durability.sh): state directories on $(df -P "$base" | awk 'NR == 2 { print $1 }') ($base)"

# 1. Throughput.
coordd always --state-dir "$T/always" --fsync always || exit 1
always_pid=$c_pid always_addr=$c_addr
coordd batch --state-dir "$T/batch" --fsync batch || exit 1
batch_pid=$c_pid batch_addr=$c_addr
coordd memory || exit 1
memory_pid=$c_pid memory_addr=$c_addr
etcd_rps=
if command -v etcd >/dev/null; then
	cport=$(free_port)
	pport=$(free_port)
	etcd --name bench --data-dir "$T/etcd" \
	    --listen-client-urls "http://127.0.0.1:$cport" \
	    --advertise-client-urls "http://127.0.0.1:$cport" \
	    --listen-peer-urls "http://127.0.0.1:$pport" \
	    --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
	    --initial-cluster "bench=http://127.0.0.1:$pport" \
	    --log-level error >"$T/etcd.log" 2>&1 &
	etcd_pid=$!
	pids+=("$etcd_pid")
	for ((i = 0; i < 100; i++)); do
		curl -s -m 1 -o /dev/null -X POST "http://127.0.0.1:$cport/v3/kv/put" \
		    -d "{\"key\":\"$(printf bench | base64)\",\"value\":\"$(printf %s "$value" | base64)\"}" && break
		sleep 0.1
	done
fi
a1=$(put_rps "http://$always_addr/v1/kv/bench?mode=overwrite" PUT "$value" application/octet-stream)
[ -n "${etcd_pid:-}" ] && e1=$(put_rps "http://127.0.0.1:$cport/v3/kv/put" POST \
    "{\"key\":\"$(printf bench | base64)\",\"value\":\"$(printf %s "$value" | base64)\"}" application/json)
m1=$(put_rps "http://$memory_addr/v1/kv/bench?mode=overwrite" PUT "$value" application/octet-stream)
b1=$(put_rps "http://$batch_addr/v1/kv/bench?mode=overwrite" PUT "$value" application/octet-stream)
# Interleaved twice; the better of the two, as noise only lowers a figure.
a2=$(put_rps "http://$always_addr/v1/kv/bench?mode=overwrite" PUT "$value" application/octet-stream)
[ -n "${etcd_pid:-}" ] && e2=$(put_rps "http://127.0.0.1:$cport/v3/kv/put" POST \
    "{\"key\":\"$(printf bench | base64)\",\"value\":\"$(printf %s "$value" | base64)\"}" application/json)
m2=$(put_rps "http://$memory_addr/v1/kv/bench?mode=overwrite" PUT "$value" application/octet-stream)
b2=$(put_rps "http://$batch_addr/v1/kv/bench?mode=overwrite" PUT "$value" application/octet-stream)
max() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { print (a + 0 > b + 0 ? a : b) + 0 }'; }
always=$(max "$a1" "$a2") memory=$(max "$m1" "$m2") batch=$(max "$b1" "$b2")
etcd_rps=$(max "${e1:-}" "${e2:-}")
printf '  %-44s %10s req/s\n' "PUT coordd --fsync always (wrk -t2 -c32)" "$always" \
    "PUT etcd /v3/kv/put (fsync per commit)" "$etcd_rps" \
    "PUT coordd in memory" "$memory" \
    "PUT coordd --fsync batch" "$batch"
r1=$(ratio "$always" "$etcd_rps")
r2=$(ratio "$batch" "$memory")
printf '  %-44s %7sx  target >= 3x    %s\n' "coordd --fsync always / etcd" "$r1" "$(verdict "$r1" '>=' 3)"
printf '  %-44s %7sx  target >= 0.7x  %s\n' "coordd --fsync batch / in memory" "$r2" "$(verdict "$r2" '>=' 0.7)"
stop "$always_pid"
stop "$batch_pid"
stop "$memory_pid"
[ -n "${etcd_pid:-}" ] && stop "$etcd_pid"

# 2. Restart with KEYS keys.
coordd fill --state-dir "$T/fill" --fsync batch --max-keys $((keys * 2)) || exit 1
fill_pid=$c_pid
per=$((keys / 2))
# Two wrk threads number their keys apiece: run until both have made
# keys/2 each (wrk stops on time; its count is checked after).
t0=$(date +%s.%N)
wrk -t2 -c32 -d600s --timeout 10s -s "$here/wrk-keys.lua" "http://$c_addr" >"$T/fill.out" 2>&1 &
wrk_pid=$!
pids+=("$wrk_pid")
for ((i = 0; i < 6000; i++)); do
	n=$(curl -s "http://$c_addr/metrics" | awk '$1 == "muster_kv_keys" { print $2 }')
	[ "${n:-0}" -ge "$keys" ] && break
	sleep 0.1
done
kill -INT "$wrk_pid" 2>/dev/null
wait "$wrk_pid" 2>/dev/null
t1=$(date +%s.%N)
n=$(curl -s "http://$c_addr/metrics" | awk '$1 == "muster_kv_keys" { print $2 }')
printf '  %-44s %10s keys in %.1f s (%s PUT/s, --fsync batch)\n' "filled with wrk" "$n" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
    "$(awk -v a="$t0" -v b="$t1" -v n="$n" 'BEGIN { printf "%d", n / (b - a) }')"
stop "$fill_pid"
restarted "restart, from $(du -sh "$T/fill" | cut -f1) of journal and snapshot" \
    coordd fill --max-keys $((keys * 2))
stop "$c_pid"
coordd fill --state-dir "$T/fill" --max-keys $((keys * 2)) --journal-max-bytes 4K || exit 1
"$bin/kvctl" -c "$c_addr" put compact now >/dev/null
compacted fill
stop "$c_pid"
restarted "restart, from a snapshot of $(du -sh "$T/fill/snapshot" | cut -f1)" \
    coordd fill --max-keys $((keys * 2))
stop "$c_pid"

# 3. dispatchd's restart with a job over SPLITS (1,000,000) splits, LEASED
# (600,000) of them leased and open (each lease with its delivered ranges
# is restored): filled over the HTTP API by bench/splits_restart.py.
splits=${SPLITS:-1000000}
leased=${LEASED:-600000}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if dispatchd splits --state-dir "$T/splits" --fsync batch; then
	out=$("$py" "$here/splits_restart.py" "$d_addr" "$splits" "$leased" 2>&1)
	printf '  %-44s %s\n' "a job over $splits splits" "$out"
	stop "$d_pid"
	restarted "dispatchd restart, from $(du -sh "$T/splits" | cut -f1) of journal" \
	    dispatchd splits
	stop "$d_pid"
	dispatchd splits --state-dir "$T/splits" --journal-max-bytes 4K || exit 1
	"$bin/dispatchctl" -d "$d_addr" schedule --no-block -- true >/dev/null
	compacted splits
	stop "$d_pid"
	restarted "dispatchd restart, from a snapshot of $(du -sh "$T/splits/snapshot" | cut -f1)" \
	    dispatchd splits
	stop "$d_pid"
fi
