#!/usr/bin/env bats
# Chaos: a DYNAMIC read of 10,000 splits while workers are killed with -9
# and restarted at random. With a deterministic reader every element comes
# out exactly once, and the read ends.

load helper

bats_require_minimum_version 1.5.0

@test "10,000 splits, 3 workers killed and restarted at random: every element exactly once" {
	start_dispatchd --heartbeat-timeout 5s
	declare -A pids
	for i in 0 1 2; do
		start_worker "w:$i" --lease 8
		pids[$i]=$WORKER_PID
	done
	seq 1 10000 >splits
	id=$(dispatchctl dataset add --splits splits --reader 'echo "$MUSTER_SPLIT a"; echo "$MUSTER_SPLIT b"')
	dispatchctl read "$id" >out 2>read.err &
	reader=$!
	BG_PIDS+=("$reader")
	kills=0
	while running "$reader" && ((kills < 20)); do
		nap 0.$((RANDOM % 5 + 3))
		i=$((RANDOM % 3))
		kill -9 "${pids[$i]}" 2>/dev/null || true
		kills=$((kills + 1))
		workerloop -t "w:$i" --lease 8 2>>"$T/w:$i.log" &
		pids[$i]=$!
		BG_PIDS+=("$!")
	done
	wait_exit "$reader" 600
	[ "$STATUS" = 0 ]
	[ "$(wc -l <out)" = 20000 ]
	[ -z "$(sort out | uniq -d | head -5)" ]
	[ "$(sort -u out | wc -l)" = 20000 ]
	echo "# $kills kills; $(dispatchctl job ls | head -3)" >&3
}
