#!/bin/bash
# dispatch.sh: dispatchd, workerloop and dispatchctl against the tools a
# user would run the same work with, in one run on this machine:
#  - N no-op closures (/bin/true) end to end with two slots, against a raw
#    posix_spawn loop with two in flight (the limit), xargs -P2, GNU
#    parallel -j2 and Dask (2 workers) running subprocess.run(["/bin/true"]);
#  - --serve closures against Dask no-op tasks;
#  - dispatchd's CPU per closure; schedule --each's enqueue rate;
#  - enqueue-to-start latency on an idle worker.
# Prints figures and ratios next to their targets; never fails on one.
set -u
here=$(cd "$(dirname "$0")" && pwd)
N=${CLOSURES:-2000}
NE=${ENQUEUE:-100000}
py=/usr/bin/python3

# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_setup
rate() { awk -v n="$1" -v ms="$2" 'BEGIN { if (ms > 0) printf "%.0f\n", n * 1000 / ms; else print "n/a" }'; }

start_dispatchd() {
	start_daemon dispatchd dispatchd "$@"
	dpid=$daemon_pid
	export MUSTER_DISPATCHER=$daemon_addr
}

# closures_run ARGS...: rate of N closures of $CMD (/bin/true; serve.py
# answers "true" itself) through a fresh
# dispatchd and one workerloop -j 2 ARGS; sets cpu_us (dispatchd's CPU per
# closure) in $T/cpu.
closures_run() {
	start_dispatchd
	workerloop -t worker:0 -j 2 "$@" 2>>"$T/worker.log" &
	local w=$! t0 t1 c0 c1
	pids+=("$w")
	until dispatchctl status 2>/dev/null | grep -q 'worker:0 *yes'; do sleep 0.05; done
	c0=$(cpu_ticks "$dpid")
	t0=$(now_ms)
	seq "$N" | dispatchctl schedule --each -- "${CMD:-/bin/true}" >/dev/null
	dispatchctl join --timeout 300s || echo "join failed" >&2
	t1=$(now_ms)
	c1=$(cpu_ticks "$dpid")
	awk -v c=$((c1 - c0)) -v n="$N" -v hz="$(getconf CLK_TCK)" \
	    'BEGIN { printf "%.1f\n", c * 1e6 / hz / n }' >"$T/cpu"
	stop "$w"
	stop "$dpid"
	rate "$N" $((t1 - t0))
}

echo "dispatch: $N no-op closures, two at a time"
# The same command lines as the closures: /bin/true 1 .. /bin/true N.
spawn=$("$bin/bench-spawnloop" --each "$N" 2 | awk '{print $2}')
fork=$(closures_run)
fork_cpu=$(cat "$T/cpu")
t0=$(now_ms); seq "$N" | xargs -P2 -n1 /bin/true >/dev/null 2>&1 || true; t1=$(now_ms)
xargs_r=$(rate "$N" $((t1 - t0)))
if command -v parallel >/dev/null; then
	t0=$(now_ms); seq "$N" | parallel -j2 /bin/true >/dev/null 2>&1; t1=$(now_ms)
	par_r=$(rate "$N" $((t1 - t0)))
else par_r=n/a; fi
dask_sub=$($py "$here/dask_bench.py" subprocess "$N" 2>/dev/null | awk '{print $2}')
printf '    %-34s %8s/s\n' "raw posix_spawn loop (limit)" "$spawn" "dispatchd + workerloop -j2" "$fork" \
    "xargs -P2" "$xargs_r" "GNU parallel -j2" "$par_r" "Dask, subprocess.run(/bin/true)" "${dask_sub:-n/a}"
r1=$(ratio "$fork" "$spawn"); r2=$(ratio "$fork" "$dask_sub")
echo "    fork mode / raw spawn loop      $r1   (target >= 0.9: $(verdict "$r1" '>=' 0.9))"
echo "    fork mode / Dask subprocess     $r2   (target >= 2: $(verdict "$r2" '>=' 2))"
echo "    fork mode / xargs -P2           $(ratio "$fork" "$xargs_r")"
echo "    fork mode / GNU parallel -j2    $(ratio "$fork" "$par_r")"
echo "    dispatchd CPU per closure       ${fork_cpu} us"

echo "dispatch: --serve closures against Dask no-op tasks ($N each)"
serve=$(CMD=true closures_run --serve "$py $here/../examples/serve.py")
dask_noop=$($py "$here/dask_bench.py" noop "$N" 2>/dev/null | awk '{print $2}')
r3=$(ratio "$serve" "$dask_noop")
printf '    %-34s %8s/s\n' "workerloop --serve (python)" "$serve" "Dask no-op tasks" "${dask_noop:-n/a}"
echo "    --serve / Dask no-op            $r3   (target >= 10: $(verdict "$r3" '>=' 10))"
echo "    dispatchd CPU per closure       $(cat "$T/cpu") us"

echo "dispatch: schedule --each of $NE closures (no worker)"
start_dispatchd
t0=$(now_ms); seq "$NE" | dispatchctl schedule --each -- /bin/true >/dev/null; t1=$(now_ms)
enq=$(rate "$NE" $((t1 - t0)))
echo "    enqueued per second             $enq   (target >= 100000: $(verdict "$enq" '>=' 100000))"
stop "$dpid"

echo "dispatch: enqueue-to-start latency on an idle worker"
start_dispatchd
workerloop -t worker:0 2>>"$T/worker.log" &
pids+=("$!")
until dispatchctl status 2>/dev/null | grep -q 'worker:0 *yes'; do sleep 0.05; done
$py "$here/latency.py" "$MUSTER_DISPATCHER" "$bin/bench-stamp" "${LATENCY_RUNS:-200}" >"$T/lat.out"
p50=$(awk '$1 == "enqueue_start_p50_ms" {print $2}' "$T/lat.out")
p99=$(awk '$1 == "enqueue_start_p99_ms" {print $2}' "$T/lat.out")
n50=$(awk '$1 == "enqueue_start_newconn_p50_ms" {print $2}' "$T/lat.out")
n99=$(awk '$1 == "enqueue_start_newconn_p99_ms" {print $2}' "$T/lat.out")
echo "    from the POST sent on an open connection:"
echo "      p50 ${p50:-n/a} ms, p99 ${p99:-n/a} ms   (target p50 <= 1: $(verdict "$p50" '<=' 1))"
echo "    with a new connection for each POST, its setup counted:"
echo "      p50 ${n50:-n/a} ms, p99 ${n99:-n/a} ms"
exit 0
