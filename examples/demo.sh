#!/bin/sh
# demo.sh: what `make demo` runs. A 4-task training job on loopback loses
# one machine to a preemption, checkpoints everywhere at the same step,
# is restarted, resumes from the checkpoints and finishes.
set -u

here=$(cd "$(dirname "$0")" && pwd)
PATH="${MUSTER_BIN:-$here/../build/bin}:$here:$PATH"
export PATH
dir=$(mktemp -d "${TMPDIR:-/tmp}/muster-demo.XXXXXX")
pids=""
cleanup() {
	# shellcheck disable=SC2086
	[ -n "$pids" ] && kill $pids 2>/dev/null
	wait 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cd "$dir" || exit 1

say() { printf '%s\n' "$*"; }
steps=200

coordd -l 127.0.0.1:0 --port-file port --cluster worker=4 \
	--heartbeat-timeout 2s 2>coordd.log &
pids=$!
i=0
while [ ! -s port ] && [ "$i" -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -s port ] || { say "demo: coordd did not start"; cat coordd.log; exit 1; }
MUSTER_COORD=127.0.0.1:$(cat port)
export MUSTER_COORD STEPS=$steps

run_job() {
	jobpids=""
	for i in 0 1 2 3; do
		STEP_TIME=0.0$((1 + i)) preemptwatch -t "worker:$i" \
			--grace 5s -- train-loop.sh >>"worker-$i.log" 2>&1 &
		jobpids="$jobpids $!"
	done
	pids="$pids $jobpids"
}

wait_job() {
	codes=""
	for pid in $jobpids; do
		wait "$pid"
		codes="$codes $?"
	done
}

say "1. coordd is up at $MUSTER_COORD; four workers start training $steps steps,"
say "   each at its own speed (a step takes 10, 20, 30 or 40 ms)."
run_job
sleep 2
say "2. worker:2 gets a preemption notice: SIGTERM, as Kubernetes and Slurm send it."
set -- $jobpids
kill -TERM "$3"
wait_job
say "3. every worker stopped with exit codes:$codes (42: preempted, restart me)."
line=$(grep -h 'sync point: step' worker-0.log | tail -n 1)
say "   preemptwatch agreed on the ${line#*: } and each worker checkpointed there:"
for i in 0 1 2 3; do
	say "     worker:$i at step $(cat ckpt.worker:$i)"
done
say "4. the scheduler starts the job again; each worker resumes from its checkpoint."
run_job
wait_job
for i in 0 1 2 3; do
	grep -h "resuming from step\|finished" "worker-$i.log" | tr '\n' ' ' |
		sed "s/^/     /; s/ \$//"
	echo
done
ok=1
for c in $codes; do [ "$c" -eq 0 ] || ok=0; done
if [ "$ok" -eq 1 ]; then
	say "5. done: the job finished all $steps steps, exit codes:$codes."
else
	say "5. something went wrong; exit codes:$codes. Logs:"
	tail -n 5 worker-*.log coordd.log
	exit 1
fi
