#!/usr/bin/env bash
# protocol.sh: how long the preemption sync protocol takes with N tasks
# (default 64) on this machine: from the notice being published to every
# task knowing the sync step (each preemptwatch records it under
# muster/preemption/synced/TASK once it does; the step itself is written
# once, under muster/preemption/sync_step). Also times `syncpoint STEP` as
# a whole process (hyperfine) and one syncpoint_reached() call (the C API)
# when no notice is pending. Prints "name value unit" lines; never fails
# on a figure. MUSTER_BIN is where the programs are.
set -u

here=$(cd "$(dirname "$0")" && pwd)
bin=${MUSTER_BIN:-$here/../build/bin}
n=${TASKS:-64}
T=$(mktemp -d "${TMPDIR:-/tmp}/muster-protocol.XXXXXX")
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
PATH=$bin:$PATH

"$bin/coordd" -l 127.0.0.1:0 --port-file "$T/port" --cluster "worker=$n" \
	--heartbeat-timeout 30s 2>"$T/coordd.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.05; done
export MUSTER_COORD=127.0.0.1:$(cat "$T/port")

# The C API and the process, under a one-task preemptwatch of its own
# (a single task does not need the others: --no-wait-all).
preemptwatch -t worker:0 --no-wait-all -- "$bin/bench-syncapi" 10000000 \
	2>>"$T/pw.log" | sed 's/^/  /'
if command -v hyperfine >/dev/null; then
	preemptwatch -t worker:0 --no-wait-all -- hyperfine -N -i --warmup 50 \
		-r 500 --export-json "$T/hf.json" "$bin/syncpoint 5" \
		>/dev/null 2>>"$T/pw.log"
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("  syncpoint_process_ms %.3f mean, %.3f min (hyperfine, 500 runs)" % (r["mean"]*1e3, r["min"]*1e3))' "$T/hf.json"
fi
echo "  targets: under 5 us per C API call, under 1 ms per syncpoint process"

# N tasks, each stepping every 20 ms and asking syncpoint each step.
for ((i = 0; i < n; i++)); do
	preemptwatch -t "worker:$i" --grace 5s -- sh -c '
		s=0
		while [ $s -lt 100000 ]; do
			s=$((s + 1))
			syncpoint $s && exit 0
			sleep 0.02
		done' 2>>"$T/pw.log" &
	pids+=($!)
done
for _ in $(seq 600); do
	kvctl --json status 2>/dev/null | grep -q "\"connected\":$n," && break
	sleep 0.1
done
sleep 1
rev=$(kvctl --json put muster/bench/start x | sed 's/.*"revision":\([0-9]*\).*/\1/')
# Only the changes go to watch.out: a watch that times out says so on
# stderr, and its message is no task's step.
kvctl watch --since "$rev" --count "$n" --timeout 60s \
	muster/preemption/synced >"$T/watch.out" 2>"$T/watch.err" &
watch=$!
sleep 0.2
death=$(date -u -d '+120 seconds' +%Y-%m-%dT%H:%M:%SZ)
t0=$(date +%s%N)
kvctl put muster/preemption/notice "$death"
wait "$watch"
t1=$(date +%s%N)
# "REV put muster/preemption/synced/TASK STEP": tasks, and the steps
# they were told.
got=$(awk '$2 == "put" || $2 == "update" {print $3}' "$T/watch.out" | sort -u | wc -l)
step=$(awk '$2 == "put" || $2 == "update" {print $4}' "$T/watch.out" | sort -u | tr '\n' ' ')
echo "  protocol_ms $(( (t1 - t0) / 1000000 )) from the notice to all $got of $n tasks knowing the sync step (steps seen: ${step:-none})"
[ -s "$T/watch.err" ] && sed 's/^/  /' "$T/watch.err"
echo "  target: under 300 ms for 64 tasks, one step"
