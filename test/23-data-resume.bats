#!/usr/bin/env bats
# Resuming a job where its consumer stopped: the position a consumer saves
# from a positioned stream (dispatchctl read --positions), through a pipe,
# with the consumer killed -9 or stopped by SIGTERM at random moments,
# three times in a row; a job's consumers' positions merged; a reader
# whose stdout breaks.

load helper

bats_require_minimum_version 1.5.0


# shards N LINES: N files of LINES records each (64 bytes a record) under
# $T/shards, the sorted records in $T/expected; prints the dataset's id.
shards() {
	mkdir -p "$T/shards"
	for ((s = 0; s < $1; s++)); do
		seq -f "shard-$s record %07g padding padding padding padding" 1 "$2" \
			>"$T/shards/$s"
	done
	sort "$T"/shards/* >"$T/expected"
	dispatchctl splits files "$T/shards/*" |
		dispatchctl dataset add --splits - --reader 'cat "$MUSTER_SPLIT"'
}

# consume DIR ID [ARGS...]: one run of the consumer in DIR, fed by
# dispatchctl read --positions (resumed from DIR/ckpt's position), in the
# background: the reader's PID in READ_PID, the consumer's in EAT_PID.
consume() {
	local d=$1 id=$2 from=()
	shift 2
	if [ -s "$d/ckpt" ] && jq -e '.data != null' "$d/ckpt" >/dev/null; then
		jq .data "$d/ckpt" >"$d/state"
		from=(--from-state "$d/state")
	fi
	start_pair "$d" dispatchctl read --positions "${from[@]}" "$@" "$id"
}

# start_pair DIR READ...: READ (a dispatchctl read) into the consumer
# through a FIFO, both in the background (READ_PID, EAT_PID), once the
# consumer has started: a signal sent before would reach the shell that
# starts it, with the test's traps.
start_pair() {
	local d=$1
	shift
	rm -f "$d/pipe" "$d/started"
	mkfifo "$d/pipe"
	"$@" >"$d/pipe" 2>>"$d/read.err" &
	READ_PID=$!
	"$PYTHON" "$BATS_TEST_DIRNAME/data-consumer.py" "$d" "${DELAY:-0}" <"$d/pipe" 2>>"$d/eat.err" &
	EAT_PID=$!
	BG_PIDS+=("$READ_PID" "$EAT_PID")
	wait_file "$d/started" 60
}

# done_exactly DIR: the consumer's checkpoint says the data ended, and its
# records are the dataset's, each once.
done_exactly() {
	jq -e '.done' "$1/ckpt" >/dev/null || { echo "not done: $(cat "$1/ckpt")"; return 1; }
	sort "$1/records" >"$1/got"
	local dups missing
	dups=$(uniq -d "$1/got" | wc -l)
	missing=$(comm -23 "$T/expected" "$1/got" | wc -l)
	echo "$(wc -l <"$1/got") records, $dups duplicated, $missing missing"
	[ "$dups" -eq 0 ] && [ "$missing" -eq 0 ] && cmp -s "$T/expected" "$1/got"
}

@test "resume through a pipe is exact: 20 trials, the consumer killed -9 or stopped by SIGTERM at random moments, three deep" {
	start_dispatchd
	start_worker a:0 --buffer 256k --lease 2
	start_worker b:0 --buffer 256k --lease 2
	# 2 MB: more than a pipe holds (1 MiB) and than a worker buffers.
	id=$(shards 16 2000)
	for trial in $(seq 1 20); do
		d=$T/trial$trial
		mkdir "$d"
		sig=KILL
		((trial % 2 == 0)) && sig=TERM
		stops=
		for stop in 1 2 3; do
			if [ -s "$d/ckpt" ] && jq -e .done "$d/ckpt" >/dev/null; then
				break
			fi
			DELAY=0.00003 consume "$d" "$id"
			nap "0.$((RANDOM % 6))$((RANDOM % 10))"
			kill -"$sig" "$EAT_PID" 2>/dev/null || true
			wait_exit "$EAT_PID" 30 || true
			stops+=" $(cat "$d/records" 2>/dev/null | wc -l)"
			# Its stdout broken, the reader says so (8), unless the data
			# had ended first (0).
			wait_exit "$READ_PID" 30
			[[ $STATUS == 0 || $STATUS == 8 ]] || {
				echo "trial $trial: dispatchctl read exited $STATUS"
				cat "$d/read.err"
				return 1
			}
		done
		consume "$d" "$id"
		wait_exit "$EAT_PID" 120
		wait_exit "$READ_PID" 30
		[ "$STATUS" = 0 ] || {
			echo "trial $trial (stopped at records:$stops): read $STATUS"
			cat "$d/read.err" "$d/eat.err" "$d/ckpt"
			done_exactly "$d"
			return 1
		}
		run done_exactly "$d"
		echo "trial $trial ($sig, stopped at records:$stops): $output" >>"$T/trials"
		[ "$status" -eq 0 ] || { cat "$T/trials"; cat "$d"/*.err; return 1; }
	done
	cat "$T/trials"
}

# states ROUND DIR...: the positions the consumers in DIR... saved, as
# --from-state options in FROM, taken once for a round's consumers.
states() {
	local round=$1 f
	shift
	FROM=()
	for f in "$@"; do
		if [ -s "$f/ckpt" ] && jq -e '.data != null' "$f/ckpt" >/dev/null; then
			jq .data "$f/ckpt" >"$f/state.$round"
			FROM+=(--from-state "$f/state.$round")
		fi
	done
}

# consume_shared DIR ID: consume, in a job shared by name, in run $RUN,
# from the positions in FROM (merged).
consume_shared() {
	start_pair "$1" dispatchctl read --positions --job shared --run "$RUN" "${FROM[@]}" "$2"
}

@test "two consumers of one job, both killed at random three times: their positions merged resume the job, every element once" {
	start_dispatchd
	start_worker a:0 --buffer 256k --lease 2
	start_worker b:0 --buffer 256k --lease 2
	# 3 MB: more than both pipes hold.
	id=$(shards 16 3000)
	mkdir "$T/A" "$T/B"
	for round in 1 2 3 4; do
		RUN=$round
		states "$round" "$T/A" "$T/B"
		DELAY=0.00003 consume_shared "$T/A" "$id"
		ra=$READ_PID ea=$EAT_PID
		DELAY=0.00003 consume_shared "$T/B" "$id"
		rb=$READ_PID eb=$EAT_PID
		if [ "$round" -lt 4 ]; then
			nap "0.$((RANDOM % 5))$((RANDOM % 10))"
			kill -KILL "$ea" "$eb" 2>/dev/null || true
		fi
		for p in "$ea" "$eb" "$ra" "$rb"; do
			wait_exit "$p" 120
		done
	done
	for d in A B; do
		jq -e .done "$T/$d/ckpt" >/dev/null || {
			echo "$d did not end: $(cat "$T/$d/ckpt")"
			cat "$T/$d/read.err" "$T/$d/eat.err"
			return 1
		}
	done
	sort "$T/A/records" "$T/B/records" >got
	echo "A $(wc -l <"$T/A/records"), B $(wc -l <"$T/B/records"), $(uniq -d got | wc -l) duplicated, $(comm -23 "$T/expected" got | wc -l) missing"
	cmp "$T/expected" got
}

@test "a reader whose stdout breaks says so and exits 8; --close-ok ends it quietly; the stream ends with its end record" {
	start_dispatchd
	start_worker a:0
	# More than the pipe holds (1 MiB): the read is still writing when its
	# consumer leaves. (What sits in the pipe once the read has written
	# its last byte, the read cannot tell read from dropped.)
	id=$(shards 4 9000)
	run -0 bash -c "set -o pipefail; dispatchctl read $id --close-ok | head -1"
	run -8 bash -c "set -o pipefail; dispatchctl read $id | head -1"
	[[ $output == *"CANCELLED"*"closed by its reader"* ]]
	# The whole positioned stream: a consumer sees its end; cut short, it
	# raises rather than end as if the data had.
	dispatchctl read --positions "$id" >stream
	run -0 "$PYTHON" -c "
import sys; sys.path.insert(0, '$BATS_TEST_DIRNAME/../python')
import muster_data
s = muster_data.Stream(open('stream', 'rb'))
print(sum(1 for _ in s), s.position()['done'])"
	[ "$output" = "36000 4" ]
	head -c 1000000 stream >cut
	run -1 "$PYTHON" -c "
import sys; sys.path.insert(0, '$BATS_TEST_DIRNAME/../python')
import muster_data
for _ in muster_data.Stream(open('cut', 'rb')): pass"
	[[ $output == *"StreamError"* ]]
	# Positions are of dynamic jobs only.
	run -2 dispatchctl read --positions --mode off "$id"
	[[ $output == *"only dynamic"* ]]
}

@test "in-process, with the C API (libmuster-data): a program stopped after any number of elements resumes from its saved position" {
	command -v cc >/dev/null || skip "no C compiler"
	cc -o read-positions "$BATS_TEST_DIRNAME/../examples/read-positions.c" \
		-I"$BATS_TEST_DIRNAME/../lib/client" -L"$MUSTER_BIN/../lib" \
		-Wl,-rpath,"$MUSTER_BIN/../lib" -lmuster-data -ljansson
	start_dispatchd
	start_worker a:0 --buffer 256k --lease 2
	start_worker b:0 --buffer 256k --lease 2
	id=$(shards 8 2000)
	runs=0
	while :; do
		runs=$((runs + 1))
		[ "$runs" -le 40 ]
		run ./read-positions "$id" $((1 + RANDOM % 3000)) state
		[[ $status -eq 0 || $status -eq 3 ]] || { echo "$output" | tail -3; return 1; }
		[ -n "$output" ] && echo "$output" >>got
		[ "$status" -eq 0 ] && break
	done
	echo "$runs runs"
	sort got | cmp - "$T/expected"
}

@test "runs: a new run from the same state reads anew what a run that died had read; a run's readers join its job; --job with a state needs a run" {
	start_dispatchd
	start_worker a:0
	# 2 MB: what is left after the state does not fit in a pipe.
	id=$(shards 4 8000)
	# A state part-way: the first 5,000 elements, kept by their reader.
	dispatchctl read --positions "$id" >stream
	"$PYTHON" -c "
import json, sys; sys.path.insert(0, '$BATS_TEST_DIRNAME/../python')
import muster_data
s = muster_data.Stream(open('stream', 'rb'))
with open('kept', 'wb') as f:
    for n, e in enumerate(s, 1):
        f.write(e + b'\n')
        if n == 5000:
            break
json.dump(s.position(), open('S', 'w'))"
	run -2 dispatchctl read --job j --from-state S "$id"
	[[ $output == *"--run"* ]]
	# Run 1 reads some of the rest into a program that dies unsaved.
	run -8 bash -c "set -o pipefail; dispatchctl read --job j --run 1 --from-state S $id | head -c 100000 >/dev/null"
	# Run 2, from the same state, reads all of the rest.
	dispatchctl read --job j --run 2 --from-state S "$id" >rest
	sort kept rest | cmp - "$T/expected"
	run -0 dispatchctl --json job show j
	[ "$(jq -c '[.iteration, .run]' <<<"$output")" = '[2,"2"]' ]
	# Another reader of run 2 joins its job (read already: nothing left);
	# with another state it is refused.
	run -0 dispatchctl read --job j --run 2 --from-state S "$id"
	[ -z "$output" ]
	jq '.open = []' S >other
	run -5 dispatchctl read --job j --run 2 --from-state other "$id"
	# MUSTER_EPOCH, which preemptwatch sets, is the run.
	MUSTER_EPOCH=3 dispatchctl read --job j --from-state S "$id" >rest3
	sort kept rest3 | cmp - "$T/expected"
	run -0 dispatchctl --json job show j
	[ "$(jq -c '[.iteration, .run]' <<<"$output")" = '[3,"3"]' ]
}
