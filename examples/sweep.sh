#!/bin/sh
# sweep.sh: an evaluation sweep over checkpoints on workers that survive
# kills. Starts dispatchd and two workerloops on this machine, makes
# twelve stand-in checkpoints, schedules one evaluation per checkpoint,
# kills a worker with -9 half-way and starts it again, then joins and
# prints each checkpoint's score. Every evaluation runs to the end; the
# ones the killed worker was running run again (MUSTER_ATTEMPT 2).
#
#   PATH=$PWD/build/bin:$PATH examples/sweep.sh [DIR]
#
# A real sweep is the two dispatchctl lines at the end, with workerloop
# started on each machine (under preemptwatch, if they can be preempted).
set -eu

for prog in dispatchd workerloop dispatchctl; do
	command -v "$prog" >/dev/null || { echo "sweep.sh: $prog: not found" \
	    "(PATH=\$PWD/build/bin:\$PATH after make, or make install)" >&2; exit 127; }
done
dir=${1:-$(mktemp -d)}
mkdir -p "$dir/ckpt"
cd "$dir"

dispatchd -l 127.0.0.1:0 --port-file dispatchd.port 2>dispatchd.log &
dispatchd_pid=$!
worker_pids=
trap 'kill $worker_pids 2>/dev/null; kill $dispatchd_pid 2>/dev/null; wait' EXIT
i=0
while [ ! -s dispatchd.port ] && kill -0 "$dispatchd_pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -s dispatchd.port ] || { echo "sweep.sh: dispatchd did not start:" >&2; cat dispatchd.log >&2; exit 1; }
MUSTER_DISPATCHER=127.0.0.1:$(cat dispatchd.port)
export MUSTER_DISPATCHER

workerloop -t worker:0 -j 2 2>worker-0.log &
w0=$!
workerloop -t worker:1 -j 2 2>worker-1.log &
w1=$!
worker_pids="$w0 $w1"

# Stand-in checkpoints, and an evaluation that takes a moment.
for s in 1000 2000 3000 4000 5000 6000 7000 8000 9000 10000 11000 12000; do
	echo "$s" >"ckpt/step-$s.pt"
done
cat >eval.sh <<'EVAL'
#!/bin/sh
sleep 0.5
step=$(cat "$1")
echo "$(basename "$1") score=$((step / 100)) on $MUSTER_WORKER attempt $MUSTER_ATTEMPT"
EVAL
chmod +x eval.sh

ls ckpt/*.pt | dispatchctl schedule --each -- "$dir/eval.sh" "$dir/{}" >ids
echo "scheduled $(wc -l <ids) evaluations"

sleep 1
echo "kill -9 worker:0 (pid $w0) in the middle of its evaluations"
kill -9 "$w0"
workerloop -t worker:0 -j 2 2>>worker-0.log &
worker_pids="$! $w1"

dispatchctl join --timeout 120s
dispatchctl fetch $(cat ids)
