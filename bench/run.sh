#!/usr/bin/env bash
# run.sh: one benchmark run of coordd against its peers, on loopback, in a
# few minutes. It measures and prints, it never fails on a figure:
#
#   1. HTTP throughput with wrk (requests/s): GET of one key on coordd, on a
#      bare libmicrohttpd server configured like coordd (bench-bare, the
#      ceiling of our stack) and on etcd's JSON gateway (/v3/kv/range); PUT
#      of one key on coordd and on etcd (/v3/kv/put). Ratios: coordd GET /
#      bare, coordd GET / etcd GET, coordd PUT / etcd PUT.
#   2. A whole command with hyperfine: `kvctl get` against `etcdctl get`.
#   3. Parked waiters with bench-loadgen: 10,000 GET ?wait= requests parked
#      on one key, coordd's RSS per waiter, and how long after the reply to
#      the PUT that releases them the last one is answered; once on new
#      connections, once again on the same connections kept alive.
#   4. Many tasks with bench-loadgen tasks, against a coordd of its own with
#      --cluster worker=TASKS: bring-up of TASKS tasks (register, wait-all),
#      coordd's CPU time per heartbeat with every task heartbeating at 1 Hz,
#      and the release of a barrier of all TASKS tasks. That coordd runs
#      with --heartbeat-timeout 30s: heartbeats start once every task is
#      up, and keep going through the barrier, so 30s only spares a slow
#      bring-up on a loaded host from timing tasks out.
#   4b. The most tasks: MOST_TASKS (100000), or as many as the open files
#      limit lets one coordd hold a connection for (the hard limit less
#      1000), with bench-loadgen tasks --spread-addrs --detect against
#      coordd --heartbeat-timeout 30s (as in 4: the beats start once all
#      are up), heartbeats at the rate of 4 (10,000 a second in all, so
#      that CPU per heartbeat compares N, not rates): bring-up, CPU per
#      heartbeat against 4's, barrier release, and the time from the
#      last task's last beat to its error, the others beating on.
#   5. Failure detection with bench-loadgen detect, against a coordd with
#      --cluster worker=DETECT_TASKS --heartbeat-timeout 1s: from a task's
#      last heartbeat to GET /v1/errors answering, DETECT_ROUNDS times
#      (each round ends with every task leaving: a new epoch).
#   6. The same barrier on PyTorch's TCPStore (tcpstore_barrier.py; Debian
#      python3-torch), at TASKS participants or the most that fit under
#      the open files limit; the ratio to coordd is taken at the same N.
#      For reference, torch's own store-based barrier (add, then poll every
#      10 ms) with 1000 Python threads.
#
# Then bench/dispatch.sh, bench/values.sh, bench/data.sh,
# bench/durability.sh and bench/store.sh.
#
# Targets are printed next to the figures. Every process it starts is
# stopped by PID when it exits. MUSTER_BIN is where coordd, kvctl and the
# bench-* programs are; WRK_DURATION (5s), WRK_THREADS (2), WRK_CONNS (32),
# WRK_ROUNDS (2), HF_RUNS (200), WAITERS (10000), TASKS (10000),
# HB_DURATION (10s), MOST_TASKS (100000), DETECT_TASKS (16) and
# DETECT_ROUNDS (6) change the
# load.
set -u

here=$(cd "$(dirname "$0")" && pwd)
bin=${MUSTER_BIN:-$here/../build/bin}
wrk_duration=${WRK_DURATION:-5s}
wrk_threads=${WRK_THREADS:-2}
wrk_conns=${WRK_CONNS:-32}
wrk_rounds=${WRK_ROUNDS:-2}
hf_runs=${HF_RUNS:-200}
waiters=${WAITERS:-10000}
tasks=${TASKS:-10000}
most_tasks=${MOST_TASKS:-100000}
hb_duration=${HB_DURATION:-10s}
detect_tasks=${DETECT_TASKS:-16}
detect_rounds=${DETECT_ROUNDS:-6}
value=0123456789abcdef
key_b64=$(printf bench | base64)
value_b64=$(printf %s "$value" | base64)

T=$(mktemp -d "${TMPDIR:-/tmp}/muster-bench.XXXXXX")
pids=()

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

# run_bg OUT ERR CMD...: runs CMD in the background, where the cleanup can
# stop it by PID (a signal ends the wait at once), and waits for it;
# returns its exit status.
run_bg() {
	local out=$1 err=$2 pid rc
	shift 2
	"$@" >"$out" 2>"$err" &
	pid=$!
	pids+=("$pid")
	wait "$pid"
	rc=$?
	forget "$pid"
	return "$rc"
}

# start_coordd NAME ARGS...: a coordd of its own for a scenario, with ARGS;
# sets scen_pid and scen_addr, or returns 1.
start_coordd() {
	local name=$1
	shift
	"$bin/coordd" -l 127.0.0.1:0 --port-file "$T/$name.port" "$@" \
	    2>"$T/$name.log" &
	scen_pid=$!
	pids+=("$scen_pid")
	if ! wait_file "$T/$name.port" 5; then
		note "coordd $* did not start:"
		tail -5 "$T/$name.log" >&2
		stop "$scen_pid"
		return 1
	fi
	scen_addr=127.0.0.1:$(cat "$T/$name.port")
}

# figf NAME KEY: the value of figure KEY in $T/NAME.out.
figf() { awk -v k="$2" '$1 == k { print $2; exit }' "$T/$1.out" 2>/dev/null; }

# figsum NAME KEY...: the sum of figures KEY... in $T/NAME.out, or nothing
# if one is missing.
figsum() {
	local name=$1
	shift
	awk -v keys="$*" 'BEGIN { n = split(keys, k, " ")
		for (i = 1; i <= n; i++) want[k[i]] = 1 }
	    ($1 in want) && !($1 in seen) { seen[$1] = 1; s += $2; got++ }
	    END { if (got == n) print s }' "$T/$name.out" 2>/dev/null
}

# target_row LABEL VALUE UNIT OP TARGET: a figure beside its target and
# its verdict.
target_row() {
	printf '  %-36s %8s %-2s   target %s %s %s %s\n' "$1" "${2:-n/a}" "$3" \
	    "$4" "$5" "$3" "$(verdict "${2:-n/a}" "$4" "$5")"
}

# wrk_run NAME PID URL [METHOD BODY CTYPE]: "REQ/S CPU-US/REQ" (the
# server's own CPU time per request, from /proc), or nothing on failure.
wrk_run() {
	local name=$1 pid=$2 url=$3 out rps errs c0 c1 reqs
	c0=$(cpu_ticks "$pid")
	out=$(WRK_METHOD=${4:-GET} WRK_BODY=${5:-} WRK_CTYPE=${6:-} \
	    wrk -t"$wrk_threads" -c"$wrk_conns" -d"$wrk_duration" \
	    -s "$here/wrk-body.lua" "$url" 2>&1)
	c1=$(cpu_ticks "$pid")
	echo "$out" >>"$T/wrk-$name.out"
	rps=$(awk '/^Requests\/sec:/ { printf "%d", $2 }' <<<"$out")
	reqs=$(awk '/ requests in / { print $1 }' <<<"$out")
	errs=$(awk '/Non-2xx or 3xx responses:/ { print $NF }
	    /Socket errors:/ { print }' <<<"$out")
	[ -n "$errs" ] && note "wrk $name: $errs"
	[ -z "$rps" ] || [ "$rps" = 0 ] && return 0
	awk -v r="$rps" -v n="$reqs" -v c0="$c0" -v c1="$c1" -v hz="$clk_tck" \
	    'BEGIN { if (n + 0 > 0 && c1 != "" && c0 != "")
			printf "%d %.2f\n", r, (c1 - c0) / hz * 1e6 / n
		else printf "%d\n", r }'
}

# best OLD NEW: the higher requests/s and the lower CPU per request.
best() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		split(a, x, " "); split(b, y, " ")
		r = y[1] + 0 > x[1] + 0 ? y[1] : x[1]
		c = x[2]
		if (c == "" || (y[2] != "" && y[2] + 0 < c + 0)) c = y[2]
		if (r == "") exit
		print r, c }'
}

for prog in coordd kvctl bench-bare bench-loadgen; do
	if [ ! -x "$bin/$prog" ]; then
		note "$bin/$prog is missing: run make bench"
		exit 1
	fi
done

# Parked waiters hold a socket each at both ends.
ulimit -n "$(ulimit -Hn)" 2>/dev/null

ncpu=$(nproc)
clk_tck=$(getconf CLK_TCK)
echo "muster benchmarks: $ncpu CPUs, loopback, everything on the same host" \
    "(load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
echo

"$bin/coordd" -l 127.0.0.1:0 --port-file "$T/coordd.port" \
    2>"$T/coordd.log" &
coord_pid=$!
pids+=("$coord_pid")
"$bin/bench-bare" -l 127.0.0.1:0 --port-file "$T/bare.port" \
    2>"$T/bare.log" &
bare_pid=$!
pids+=("$bare_pid")

etcd_addr=
if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
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
	etcd_addr=127.0.0.1:$cport
else
	note "etcd or etcdctl not found: etcd figures are skipped"
fi

if ! wait_file "$T/coordd.port" 5; then
	note "coordd did not start:"
	cat "$T/coordd.log" >&2
	exit 1
fi
coord_addr=127.0.0.1:$(cat "$T/coordd.port")
bare_addr=
if wait_file "$T/bare.port" 5; then
	bare_addr=127.0.0.1:$(cat "$T/bare.port")
else
	note "bench-bare did not start; its figures are skipped"
	cat "$T/bare.log" >&2
fi
if [ -n "$etcd_addr" ]; then
	for ((i = 0; i < 100; i++)); do
		etcdctl --endpoints="http://$etcd_addr" put bench "$value" \
		    >/dev/null 2>&1 && break
		sleep 0.1
	done
	if ((i == 100)); then
		note "etcd did not start; its figures are skipped:"
		tail -5 "$T/etcd.log" >&2
		etcd_addr=
	fi
fi
if ! "$bin/kvctl" -c "$coord_addr" put -f bench "$value" >/dev/null; then
	note "cannot put the key into coordd"
	exit 1
fi

# 1. Throughput. The runs are interleaved, and each figure is the best of
# WRK_ROUNDS: on a shared host, noise only ever lowers a figure.
echo "HTTP throughput: wrk -t$wrk_threads -c$wrk_conns -d$wrk_duration," \
    "best of $wrk_rounds interleaved runs, one key, ${#value} byte value"
get_coord= get_bare= get_etcd= put_coord= put_etcd=
for ((r = 1; r <= wrk_rounds; r++)); do
	get_coord=$(best "$get_coord" "$(wrk_run get-coordd "$coord_pid" \
	    "http://$coord_addr/v1/kv/bench")")
	[ -n "$bare_addr" ] && get_bare=$(best "$get_bare" \
	    "$(wrk_run get-bare "$bare_pid" "http://$bare_addr/")")
	[ -n "$etcd_addr" ] && get_etcd=$(best "$get_etcd" \
	    "$(wrk_run get-etcd "$etcd_pid" "http://$etcd_addr/v3/kv/range" \
	    POST "{\"key\":\"$key_b64\"}" application/json)")
	put_coord=$(best "$put_coord" "$(wrk_run put-coordd "$coord_pid" \
	    "http://$coord_addr/v1/kv/bench?mode=overwrite" PUT "$value" \
	    application/octet-stream)")
	[ -n "$etcd_addr" ] && put_etcd=$(best "$put_etcd" \
	    "$(wrk_run put-etcd "$etcd_pid" "http://$etcd_addr/v3/kv/put" \
	    POST "{\"key\":\"$key_b64\",\"value\":\"$value_b64\"}" \
	    application/json)")
done
printf '  %-40s %10s  %s\n' "" "req/s" "server CPU per request"
row() {
	set -- "$1" $2
	printf '  %-40s %10s  %s\n' "$1" "${2:-n/a}" "${3:-n/a} us"
}
row "GET coordd /v1/kv/bench" "$get_coord"
row "GET bench-bare (libmicrohttpd ceiling)" "$get_bare"
row "GET etcd gateway /v3/kv/range" "$get_etcd"
row "PUT coordd /v1/kv/bench?mode=overwrite" "$put_coord"
row "PUT etcd gateway /v3/kv/put" "$put_etcd"
rps() { set -- $1; echo "${1:-}"; }
cpu() { set -- $1; echo "${2:-}"; }
# Ratios of requests/s; in brackets the same by server CPU per request,
# which the load generator sharing the CPUs disturbs less.
r_bare=$(ratio "$(rps "$get_coord")" "$(rps "$get_bare")")
r_etcd_get=$(ratio "$(rps "$get_coord")" "$(rps "$get_etcd")")
r_etcd_put=$(ratio "$(rps "$put_coord")" "$(rps "$put_etcd")")
c_bare=$(ratio "$(cpu "$get_bare")" "$(cpu "$get_coord")")
c_etcd_get=$(ratio "$(cpu "$get_etcd")" "$(cpu "$get_coord")")
c_etcd_put=$(ratio "$(cpu "$put_etcd")" "$(cpu "$put_coord")")
printf '  %-24s %7sx  target >= 0.7x  %-7s (by CPU: %sx)\n' \
    "coordd GET / bare GET" "$r_bare" "$(verdict "$r_bare" '>=' 0.7)" \
    "$c_bare"
printf '  %-24s %7sx  target >= 5x    %-7s (by CPU: %sx)\n' \
    "coordd GET / etcd GET" "$r_etcd_get" \
    "$(verdict "$r_etcd_get" '>=' 5)" "$c_etcd_get"
printf '  %-24s %7sx  %-23s (by CPU: %sx)\n' "coordd PUT / etcd PUT" \
    "$r_etcd_put" "no target" "$c_etcd_put"
echo

# 2. Whole commands.
if hyperfine --help 2>/dev/null | grep -q -- '^ *-N'; then
	noshell=-N
else
	noshell=--shell=none
fi
echo "Whole command: hyperfine $noshell --warmup 20 --runs $hf_runs"
kv_mean= ec_mean=
cmds=("$bin/kvctl -c $coord_addr get bench")
[ -n "$etcd_addr" ] &&
    cmds+=("etcdctl --endpoints=http://$etcd_addr get bench")
if hyperfine "$noshell" --warmup 20 --runs "$hf_runs" --style none \
    --export-csv "$T/hf.csv" "${cmds[@]}" >"$T/hf.out" 2>&1; then
	# command,mean,stddev,median,user,system,min,max; seconds.
	kv_mean=$(awk -F, 'NR == 2 { printf "%.3f", $2 * 1000 }' "$T/hf.csv")
	ec_mean=$(awk -F, 'NR == 3 { printf "%.3f", $2 * 1000 }' "$T/hf.csv")
	kv_sd=$(awk -F, 'NR == 2 { printf "%.3f", $3 * 1000 }' "$T/hf.csv")
	ec_sd=$(awk -F, 'NR == 3 { printf "%.3f", $3 * 1000 }' "$T/hf.csv")
else
	note "hyperfine failed:"
	tail -5 "$T/hf.out" >&2
fi
printf '  %-40s %10s ms (sd %s)\n' "kvctl get bench" "${kv_mean:-n/a}" \
    "${kv_sd:-n/a}" "etcdctl get bench" "${ec_mean:-n/a}" "${ec_sd:-n/a}"
r_cli=$(ratio "$ec_mean" "$kv_mean")
printf '  %-28s %8sx   target >= 5x     %s\n' "etcdctl time / kvctl time" \
    "$r_cli" "$(verdict "$r_cli" '>=' 5)"
echo

# 3. Parked waiters. Round 1 parks them on new connections; round 2 parks
# the same again on their kept-alive connections, as a task long-polling in
# a loop does.
echo "Parked waiters: bench-loadgen parked -n $waiters --rounds 2" \
    "(open files: $(ulimit -n))"
if ! "$bin/bench-loadgen" parked -c "$coord_addr" --pid "$coord_pid" \
    -n "$waiters" --rounds 2 --key bench-parked --timeout 60s \
    >"$T/lg.out" 2>"$T/lg.err"; then
	note "bench-loadgen failed:"
	cat "$T/lg.err" >&2
fi
sed 's/^/  /' "$T/lg.out"
fig() { awk -v k="$1" '$1 == k { print $2 }' "$T/lg.out"; }
rss1=$(fig rss_per_waiter) rss2=$(fig rss_per_waiter_r2)
rel1=$(fig release) rel2=$(fig release_r2)
target_row "RSS per waiter, new connection" "$rss1" KiB '<=' 16
target_row "RSS per waiter, kept-alive conn." "$rss2" KiB '<=' 16
target_row "last reply after PUT, new conn." "$rel1" ms '<=' 100
target_row "last reply after PUT, kept-alive" "$rel2" ms '<=' 100
echo

# tasks_run NAME N DURATION [TIMEOUT [LOADGEN-ARGS...]]: bench-loadgen
# tasks against a coordd of its own with --heartbeat-timeout TIMEOUT (30s);
# the figures go to $T/NAME.out.
tasks_run() {
	local name=$1 n=$2 dur=$3 hbt=${4:-30s}
	shift $(($# < 4 ? $# : 4))
	: >"$T/$name.out"
	start_coordd "$name" --cluster "worker=$n" --heartbeat-timeout "$hbt" ||
	    return 0
	if ! run_bg "$T/$name.out" "$T/$name.err" "$bin/bench-loadgen" tasks \
	    -c "$scen_addr" --pid "$scen_pid" -n "$n" --duration "$dur" \
	    --timeout 180s "$@"; then
		note "bench-loadgen tasks -n $n failed:"
		tail -8 "$T/$name.err" >&2
	fi
	stop "$scen_pid"
}

# 4. Many tasks. One connection kept alive per task, heartbeats on a pool
# of their own.
echo "Many tasks: bench-loadgen tasks -n $tasks --duration $hb_duration" \
    "(4 processes), coordd --cluster worker=$tasks --heartbeat-timeout 30s"
tasks_run tasks "$tasks" "$hb_duration"
sed 's/^/  /' "$T/tasks.out"
t_up=$(figf tasks bringup) t_cpu=$(figf tasks hb_cpu)
t_rel=$(figf tasks barrier_release)
t_fail=$(figsum tasks hb_failures barrier_hb_failures)
target_row "bring-up of $tasks tasks" "$t_up" ms '<=' 2000
target_row "coordd CPU per heartbeat" "$t_cpu" us '<=' 20
target_row "failed heartbeats" "$t_fail" '' '<=' 0
target_row "barrier release, $tasks tasks" "$t_rel" ms '<=' 100
# The load generator's own lag: when it is near the heartbeat latency, the
# client, not coordd, set the pace.
t_lag=$(figf tasks client_lag_p99) t_lcpu=$(figf tasks client_cpu)
printf '  %-36s %8s ms   (client CPU %s%% of one, busiest process)\n' \
    "load generator lag p99" "${t_lag:-n/a}" "${t_lcpu:-n/a}"
echo

# 4b. The most tasks. One coordd holds a connection per task, so the open
# files limit, not coordd, bounds N on a machine whose limit is low (the
# load generator's processes need a quarter each). Each task connects
# from an address of its own (--spread-addrs): from one, the ports run
# out near 28,000.
hard=$(ulimit -Hn)
most=$most_tasks
if [ "$hard" != unlimited ] && [ $((hard - 1000)) -lt "$most" ]; then
	most=$((hard - 1000))
fi
# The beats of 4, TASKS a second: the CPU per beat of a loop that wakes
# for fewer beats is higher, whatever N.
most_iv=$((most * 1000 / tasks))
[ "$most_iv" -ge 1000 ] || most_iv=1000
[ "$most_iv" -le 10000 ] || most_iv=10000
echo "The most tasks: bench-loadgen tasks -n $most --spread-addrs" \
    "--detect --hb-interval ${most_iv}ms --duration 10s, coordd" \
    "--cluster worker=$most --heartbeat-timeout 30s"
if [ "$most" -lt "$most_tasks" ]; then
	echo "  (not $most_tasks: the open files limit is $hard, ulimit -Hn," \
	    "and coordd holds one connection per task)"
fi
tasks_run most "$most" 10s 30s --spread-addrs --detect \
    --hb-interval "${most_iv}ms"
sed 's/^/  /' "$T/most.out"
m_up=$(figf most bringup) m_cpu=$(figf most hb_cpu)
m_rel=$(figf most barrier_release) m_det=$(figf most detect)
m_fail=$(figsum most hb_failures barrier_hb_failures detect_hb_failures)
m_ratio=$(ratio "$m_cpu" "$t_cpu")
target_row "tasks" "$most" '' '>=' "$most_tasks"
target_row "bring-up of $most tasks" "$m_up" ms '<=' 20000
target_row "CPU per heartbeat / at $tasks tasks" "$m_ratio" x '<=' 1.5
target_row "barrier release, $most tasks" "$m_rel" ms '<=' 1000
target_row "detection (timeout 30 s), $most tasks" "$m_det" ms '<=' 37500
target_row "failed heartbeats" "$m_fail" '' '<=' 0
echo

# 5. Failure detection.
echo "Failure detection: bench-loadgen detect --rounds $detect_rounds," \
    "coordd --cluster worker=$detect_tasks --heartbeat-timeout 1s"
: >"$T/detect.out"
if start_coordd detect --cluster "worker=$detect_tasks" \
    --heartbeat-timeout 1s; then
	if ! run_bg "$T/detect.out" "$T/detect.err" "$bin/bench-loadgen" \
	    detect -c "$scen_addr" --rounds "$detect_rounds" --timeout 120s; then
		note "bench-loadgen detect failed:"
		tail -5 "$T/detect.err" >&2
	fi
	stop "$scen_pid"
fi
sed 's/^/  /' "$T/detect.out"
d_max=$(figf detect detect_max) d_to=$(figf detect detect_timeout)
d_target=$(awk -v t="${d_to:-1000}" 'BEGIN { printf "%d", t * 1.25 }')
target_row "slowest of $detect_rounds detections" "$d_max" ms '<=' "$d_target"
echo

# 6. TCPStore. Debian's torch is for the system python3, which may not be
# the first python3 on PATH.
torch_py=
for py in /usr/bin/python3 python3; do
	if "$py" -c 'import torch.distributed' 2>/dev/null; then
		torch_py=$py
		break
	fi
done
echo "TCPStore barrier: tcpstore_barrier.py -n $tasks --fit" \
    "(add, then wait for the key the last arrival sets)"
: >"$T/ts.out"
: >"$T/tspoll.out"
if [ -z "$torch_py" ]; then
	note "no python3 with torch.distributed: TCPStore figures are skipped"
else
	if ! run_bg "$T/ts.out" "$T/ts.err" "$torch_py" \
	    "$here/tcpstore_barrier.py" -n "$tasks" --fit --timeout 150; then
		note "tcpstore_barrier.py failed:"
		tail -5 "$T/ts.err" >&2
	fi
	sed 's/^/  /' "$T/ts.out"
fi
ts_n=$(figf ts tcpstore_n) ts_rel=$(figf ts tcpstore_release)
# coordd's barrier at the N TCPStore managed, if that is not TASKS.
c_rel=$t_rel
if [ -n "$ts_n" ] && [ "$ts_n" != "$tasks" ]; then
	echo "  coordd at the same N: bench-loadgen tasks -n $ts_n --duration 1s"
	tasks_run tasks2 "$ts_n" 1s
	sed -n 's/^barrier_release /  barrier_release /p' "$T/tasks2.out"
	c_rel=$(figf tasks2 barrier_release)
fi
r_ts=$(ratio "$c_rel" "$ts_rel")
printf '  %-36s %8s ms\n' "TCPStore release, ${ts_n:-?} participants" \
    "${ts_rel:-n/a}" "coordd release, ${ts_n:-?} tasks" "${c_rel:-n/a}"
printf '  %-36s %8sx   target <= 1.0x    %s (below 1: coordd is faster)\n' \
    "coordd / TCPStore release time" "$r_ts" "$(verdict "$r_ts" '<=' 1.0)"
if [ -n "$torch_py" ]; then
	echo "  torch's own store-based barrier (add, then add(key, 0) every" \
	    "10 ms), 1000 Python threads with a TCPStore client each:"
	if ! run_bg "$T/tspoll.out" "$T/tspoll.err" "$torch_py" \
	    "$here/tcpstore_barrier.py" -n 1000 --clients threads \
	    --pattern poll --timeout 60; then
		note "tcpstore_barrier.py --pattern poll failed:"
		tail -5 "$T/tspoll.err" >&2
	fi
	sed -n 's/^\(tcpstore_release\)/    \1/p' "$T/tspoll.out"
fi

echo
echo "Preemption: the syncpoint C API and process, and the sync protocol" \
    "with ${PROTOCOL_TASKS:-64} tasks (bench/protocol.sh)"
MUSTER_BIN=$bin TASKS=${PROTOCOL_TASKS:-64} "$here/protocol.sh" ||
	note "protocol.sh failed"

echo
echo "Closures: dispatchd, workerloop and dispatchctl against a spawn loop," \
    "xargs, GNU parallel and Dask (bench/dispatch.sh)"
MUSTER_BIN=$bin "$here/dispatch.sh" || note "dispatch.sh failed"

echo
echo "Values: dispatchd's memory per MiB of closure values held" \
    "(bench/values.sh)"
MUSTER_BIN=$bin "$here/values.sh" || note "values.sh failed"

echo
echo "Data: get-split, dispatchctl read against cat and raw TCP, a dead" \
    "worker's splits read again (bench/data.sh)"
MUSTER_BIN=$bin "$here/data.sh" || note "data.sh failed"

echo
echo "Durability: --state-dir against etcd and against memory, restarts" \
    "with 1,000,000 keys and splits (bench/durability.sh)"
MUSTER_BIN=$bin "$here/durability.sh" || note "durability.sh failed"

echo
echo "Replication: coordd and dispatchd with --store on three etcd members," \
    "failover, PUT and heartbeats (bench/store.sh)"
MUSTER_BIN=$bin "$here/store.sh" || note "store.sh failed"
exit 0
