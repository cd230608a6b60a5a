#!/bin/sh
# data-train.sh: a training loop fed from a directory of files by two
# workers, one of them killed with -9 half-way. Starts dispatchd and two
# workerloops on this machine, writes 16 shard files of 50 records each,
# registers them as a dataset (one split per file, read with cat), and
# pipes `dispatchctl read` into a stand-in training loop that counts what
# it gets. The killed worker's unfinished shards are read again by the
# other worker from the record after the last one delivered: the loop sees
# every one of the 800 records exactly once.
#
#   PATH=$PWD/build/bin:$PATH examples/data-train.sh [DIR]
#
# On a cluster: workerloop on each data machine, and the two dispatchctl
# lines below on the trainer.
set -eu

for prog in dispatchd workerloop dispatchctl; do
	command -v "$prog" >/dev/null || { echo "data-train.sh: $prog: not found" \
	    "(PATH=\$PWD/build/bin:\$PATH after make, or make install)" >&2; exit 127; }
done
dir=${1:-$(mktemp -d)}
mkdir -p "$dir/shards"
cd "$dir"

dispatchd -l 127.0.0.1:0 --port-file dispatchd.port 2>dispatchd.log &
dispatchd_pid=$!
worker_pids=
trap 'kill $worker_pids 2>/dev/null; kill $dispatchd_pid 2>/dev/null; wait' EXIT
i=0
while [ ! -s dispatchd.port ] && kill -0 "$dispatchd_pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -s dispatchd.port ] || { echo "data-train.sh: dispatchd did not start:" >&2; cat dispatchd.log >&2; exit 1; }
MUSTER_DISPATCHER=127.0.0.1:$(cat dispatchd.port)
export MUSTER_DISPATCHER

workerloop -t reader:0 --lease 2 2>reader-0.log &
w0=$!
workerloop -t reader:1 --lease 2 2>reader-1.log &
w1=$!
worker_pids="$w0 $w1"

for s in $(seq -w 0 15); do
	seq 1 50 | sed "s/^/shard-$s record /" >"shards/shard-$s.txt"
done
# A reader that takes its time, so that the kill lands mid-shard.
id=$(dispatchctl splits files "$dir/shards/*.txt" |
	dispatchctl dataset add --splits - \
	    --reader 'while IFS= read -r r; do echo "$r"; sleep 0.002; done <"$MUSTER_SPLIT"')
echo "dataset $id: $(dispatchctl dataset splits "$id" | wc -l) shards"

# The training loop: one step per 10 records.
cat >train.sh <<'TRAIN'
#!/bin/sh
n=0
while IFS= read -r record; do
	echo "$record" >>seen
	n=$((n + 1))
	[ $((n % 100)) -ne 0 ] || echo "step $((n / 10)): $n records"
done
echo "training done: $n records"
TRAIN
chmod +x train.sh
: >seen

dispatchctl read "$id" | ./train.sh &
train=$!
while [ "$(wc -l <seen)" -lt 300 ]; do sleep 0.05; done
echo "kill -9 reader:0 (pid $w0) with $(wc -l <seen) records read"
kill -9 "$w0"
worker_pids=$w1
wait "$train"
echo "records: $(wc -l <seen), distinct: $(sort -u seen | wc -l) (800 written)"
