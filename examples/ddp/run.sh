#!/bin/sh
# run.sh: what `make example-ddp` runs. Four ranks of a real data-parallel
# PyTorch job (gloo, CPU) on this machine, each under preemptwatch:
#
#   1. a preemption notice to one rank: every rank checkpoints at the same
#      step and exits 42;
#   2. the job runs again from those checkpoints, and one rank's training
#      process is killed: the others stop at once and exit 43;
#   3. the job runs again from the same checkpoints and finishes.
#
# It prints how long each took. Needs Debian's python3-torch.
set -u

here=$(cd "$(dirname "$0")" && pwd)
PATH="${MUSTER_BIN:-$here/../../build/bin}:$PATH"
export PATH
PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
	echo "example-ddp: skipped: $PYTHON cannot import torch" \
	    "(apt-get install python3-torch)"
	exit 0
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/muster-ddp.XXXXXX")
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
now_ms() { date +%s%3N; }
n=4
steps=${STEPS:-400}

coordd -l 127.0.0.1:0 --port-file port --cluster "worker=$n" \
	--heartbeat-timeout 5s 2>coordd.log &
pids=$!
i=0
while [ ! -s port ] && [ "$i" -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -s port ] || { say "example-ddp: coordd did not start"; exit 1; }
MUSTER_COORD=127.0.0.1:$(cat port)
export MUSTER_COORD STEPS="$steps" CKPT_DIR="$dir/ckpt"

run_job() {
	jobpids=""
	: >run.log
	i=0
	while [ "$i" -lt "$n" ]; do
		preemptwatch -t "worker:$i" --grace 10s -- \
		    "$PYTHON" "$here/train_ddp.py" >>"rank-$i.log" 2>&1 &
		jobpids="$jobpids $!"
		i=$((i + 1))
	done
	pids="$pids $jobpids"
}

# wait_log FILE TEXT: until TEXT appears in FILE (two minutes at most).
wait_log() {
	i=0
	while ! grep -q "$2" "$1" 2>/dev/null && [ "$i" -lt 1200 ]; do
		sleep 0.1
		i=$((i + 1))
	done
}

wait_job() {
	codes=""
	for pid in $jobpids; do
		wait "$pid"
		codes="$codes $?"
	done
}

say "1. coordd is up at $MUSTER_COORD; four ranks start a DDP job of $steps steps."
run_job
wait_log rank-0.log "step 100 "
set -- $jobpids
t0=$(now_ms)
kill -TERM "$3"
wait_job
t1=$(now_ms)
say "   worker:2 got SIGTERM at step ~100; every rank stopped $((t1 - t0)) ms later,"
say "   with exit codes:$codes (42: checkpointed at the sync point)."
grep -h 'sync point: step' rank-0.log | tail -n 1 | sed 's/^preemptwatch: /   /'
grep -h 'checkpointed at step' rank-*.log | sed 's/^/     /'

say "2. the job runs again from the checkpoints; worker:3's training process is killed."
run_job
wait_log rank-0.log "resuming"
wait_log rank-3.log "resuming from"
sleep 2
victim=$(pgrep -f "train_ddp.py" -P "$(echo "$jobpids" | awk '{print $4}')" | head -n 1)
t0=$(now_ms)
[ -n "$victim" ] && kill -9 "$victim"
wait_job
t1=$(now_ms)
say "   the other ranks stopped $((t1 - t0)) ms after the kill, exit codes:$codes"
say "   (137: killed; 43: stopped because another task failed). Their logs say why:"
grep -h 'stopping the command' rank-0.log | tail -n 1 | sed 's/^preemptwatch: /     /'

say "3. the job runs again and finishes."
run_job
wait_job
grep -h 'resuming from' rank-0.log | tail -n 1 | sed 's/^/     /'
grep -h 'finished' rank-*.log | sed 's/^/     /'
ok=1
for c in $codes; do [ "$c" -eq 0 ] || ok=0; done
if [ "$ok" -eq 1 ]; then
	say "   done: exit codes:$codes."
else
	say "   something went wrong; exit codes:$codes. Logs:"
	tail -n 5 rank-*.log coordd.log
	exit 1
fi
