#!/bin/sh
# demo.sh: what `make demo` runs: the whole control plane on this machine.
# coordd and dispatchd with two supervised workers; four training tasks
# under preemptwatch reading one shared dataset through dispatchd; a worker
# killed -9 mid-epoch; a preemption notice, after which every task
# checkpoints its model and data position at one step and exits 42; the
# job started again, resuming exactly; an evaluation sweep as closures with
# a worker killed. Each step is a line; every process it starts is stopped.
set -u

here=$(cd "$(dirname "$0")" && pwd)
PATH="${MUSTER_BIN:-$here/../build/bin}:$here:$PATH"
export PATH
PYTHON=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
for prog in coordd dispatchd workerloop dispatchctl preemptwatch; do
	command -v "$prog" >/dev/null || { echo "demo: $prog: not found" \
	    "(make, then make demo)" >&2; exit 127; }
done
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
fail() {
	say "demo: $*; the logs:"
	tail -n 5 ./*.log
	exit 1
}
# wait_port FILE PID: until the daemon wrote its port.
wait_port() {
	i=0
	while [ ! -s "$1" ] && kill -0 "$2" 2>/dev/null && [ "$i" -lt 200 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	[ -s "$1" ] || fail "a daemon did not start"
}

coordd -l 127.0.0.1:0 --port-file coordd.port --cluster worker=4 \
	--heartbeat-timeout 3s 2>coordd.log &
coordd_pid=$!
pids=$coordd_pid
dispatchd -l 127.0.0.1:0 --port-file dispatchd.port --local-workers 2 \
	2>dispatchd.log &
dispatchd_pid=$!
pids="$pids $dispatchd_pid"
wait_port coordd.port "$coordd_pid"
wait_port dispatchd.port "$dispatchd_pid"
MUSTER_COORD=127.0.0.1:$(cat coordd.port)
MUSTER_DISPATCHER=127.0.0.1:$(cat dispatchd.port)
PYTHONPATH=$here/../python
export MUSTER_COORD MUSTER_DISPATCHER PYTHONPATH

# The data: 8 shards of 300 records, a reader that takes its time.
mkdir shards
for s in 0 1 2 3 4 5 6 7; do
	seq 1 300 | sed "s/^/shard-$s record /" >"shards/$s.txt"
done
# shellcheck disable=SC2016
dataset=$(dispatchctl splits files "$dir/shards/*.txt" |
	dispatchctl dataset add --splits - \
	    --reader 'while IFS= read -r r; do echo "$r"; sleep 0.0005; done <"$MUSTER_SPLIT"') ||
	fail "no dataset"
say "1. coordd at $MUSTER_COORD, dispatchd at $MUSTER_DISPATCHER with two"
say "   supervised workers (local:0, local:1) serving dataset $dataset: 8 shards, 2400 records."

run_job() {
	jobpids=""
	for i in 0 1 2 3; do
		STEP_TIME=0.0$((6 + i)) preemptwatch -t "worker:$i" --grace 10s -- \
			"$PYTHON" "$here/data-trainer.py" "$dir" "$dataset" \
			>>"worker-$i.log" 2>&1 &
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
used() { cat used.worker:* 2>/dev/null | wc -l | tr -d ' '; }
# until_used N: until the tasks used N records (10 s at most).
until_used() {
	i=0
	while [ "$(used)" -lt "$1" ] && [ "$i" -lt 200 ]; do
		sleep 0.05
		i=$((i + 1))
	done
}
# kill_worker: kill -9 of a local worker (its supervisor restarts it).
kill_worker() {
	sup=$(ps -o pid= --ppid "$dispatchd_pid" | head -n 1 | tr -d ' ')
	w=$(ps -o pid= --ppid "${sup:-0}" | head -n 1 | tr -d ' ')
	[ -n "$w" ] || fail "no worker to kill"
	kill -9 "$w"
}

run_job
say "2. four training tasks start under preemptwatch, each reading its share of"
say "   one job of the dataset through dispatchctl read (muster_data in Python)."
until_used 500
kill_worker
say "3. a worker is killed with -9 mid-epoch, $(used) records in: its supervisor"
say "   starts it again, and what it was reading is read again from where it stopped."
until_used 1100
# shellcheck disable=SC2086
set -- $jobpids
kill -TERM "$3"
say "4. worker:2 gets a preemption notice (SIGTERM, as Kubernetes and Slurm send it)."
wait_job
line=$(grep -h 'sync point: step' worker-0.log | tail -n 1)
steps=$(for i in 0 1 2 3; do
	grep -h 'checkpointed at step' "worker-$i.log" | tail -n 1 | sed 's/.* //'
done | sort -u | tr '\n' ' ')
say "5. every task stopped, exit codes:$codes (42: preempted, restart me)."
say "   preemptwatch agreed on the ${line#*: };"
say "   each task saved its model and data position at step ${steps% }."
before=$(used)
run_job
wait_job
[ "$codes" = " 0 0 0 0" ] || fail "the job ended with exit codes:$codes"
total=$(used)
distinct=$(cat used.worker:* | sort -u | wc -l | tr -d ' ')
say "6. started again, the tasks resumed from their checkpoints ($before records used) and"
say "   finished the epoch, exit codes:$codes: $total records used, $distinct distinct, of 2400."
if [ "$total" != 2400 ] || [ "$distinct" != 2400 ]; then
	fail "records lost or repeated"
fi

# The sweep: one evaluation per task's checkpoint, a worker killed mid-way.
# shellcheck disable=SC2016
printf '%s\n' ckpt.*.json | dispatchctl schedule --each --independent -- \
	sh -c 'sleep 1; "$0" -c "import json,sys; c = json.load(open(sys.argv[1])); print(sys.argv[1], \"step\", c[\"step\"], \"score %.3f\" % (c[\"model\"] / 100))" "$1"' \
	"$PYTHON" "$dir/{}" >ids || fail "no sweep"
sleep 0.5
kill_worker
dispatchctl join --timeout 60s || fail "the sweep did not finish"
again=$(dispatchctl ls --state READY | awk 'NR > 1 && $6 > 1' | wc -l | tr -d ' ')
say "7. an evaluation sweep as closures, one per task's model, a worker killed mid-way"
say "   ($again of them ran again elsewhere):"
# shellcheck disable=SC2046
dispatchctl fetch $(cat ids) | sed "s|$dir/||; s/^/     /"
say "8. done: every record used once across a worker's death and a preemption."
