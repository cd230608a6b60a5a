#!/usr/bin/env bats
# dispatchd --state-dir: what a restart keeps (closures and their values,
# idempotency keys, resources, datasets and jobs), kill -9 under load with
# a checker of acknowledged schedules, a DYNAMIC read that goes on through
# a kill -9 of dispatchd, and a training-shaped job: two preemptwatch tasks
# reading one shared dataset while coordd and dispatchd are each killed
# with -9 and restarted. Every daemon and client is ours, stopped by PID.

load helper

bats_require_minimum_version 1.5.0

# dup [ARGS...]: dispatchd on port $DPORT (chosen once per test) with the
# state directory $T/dstate.
dup() {
	: "${DPORT:=$(free_port)}"
	start_dispatchd -l "127.0.0.1:$DPORT" --state-dir "$T/dstate" "$@"
}

# dcrash: kill -9 of the running dispatchd.
dcrash() {
	kill9 "$DISPATCH_PID"
}

@test "closures with their values, keys, queues' errors and resources survive kill -9" {
	dup
	a=$(dispatchctl schedule --key first -- sh -c 'echo one; echo err >&2')
	b=$(dispatchctl -q bad schedule -- sh -c 'exit 3')
	dispatchctl resource add venv -- true
	start_worker w:0
	dispatchctl fetch --timeout 30s "$a" >a.out
	wait_for 30 eval '[ "$(closure_field "$b" state)" = READY ]'
	kill "$WORKER_PID"
	wait "$WORKER_PID" || true
	c=$(dispatchctl schedule --key third -- echo three)
	dcrash
	dup
	assert_equal "$(dispatchctl fetch --timeout 5s "$a")" one
	assert_equal "$(closure_field "$a" stderr_tail | base64 -d)" err
	assert_equal "$(closure_field "$b" exit)" 3
	assert_equal "$(closure_field "$c" phase)" queued
	# The same key is the same closure, after the restart too.
	assert_equal "$(dispatchctl schedule --key first -- echo again)" "$a"
	assert_equal "$(dispatchctl schedule --key third -- echo again)" "$c"
	assert_equal "$(dispatchctl resource ls)" venv
	# The queue's error (b's exit 3) is still there for join to report.
	run dispatchctl -q bad join --timeout 5s
	assert_failure
	[[ "$output" == *"exited with status 3"* ]]
	# The queued closure runs once a worker comes.
	start_worker w:1
	assert_equal "$(dispatchctl fetch --timeout 30s "$c")" three
	grep -q 'state directory .*: 3 closures' "$T/dispatchd.log"
}

@test "an --independent closure's failure stays its own through kill -9, replayed from the journal and from a snapshot" {
	local n=0
	for snap in journal snapshot; do
		rm -rf "$T/dstate"
		if [ "$snap" = snapshot ]; then
			# Compacted at once: the state comes back from a snapshot.
			dup --journal-max-bytes 4k
		else
			dup
		fi
		start_worker "w:$((n++))"
		bad=$(dispatchctl schedule --independent -- sh -c 'exit 3')
		wait_for 30 eval '[ "$(closure_field "$bad" state)" = READY ]'
		# Enough records for a compaction or two.
		seq 1 40 | dispatchctl schedule --each -- printf '%0200d' {} >/dev/null
		dispatchctl join --timeout 30s
		kill "$WORKER_PID"
		wait "$WORKER_PID" || true
		dcrash
		dup
		[ "$snap" = journal ] || ls "$T/dstate" | grep -q snapshot
		assert_equal "$(closure_field "$bad" independent)" true
		assert_equal "$(closure_field "$bad" exit)" 3
		# No error held for the queue: what comes next runs, join is 0.
		start_worker "w:$((n++))"
		c=$(dispatchctl schedule -- echo after)
		run -0 dispatchctl join --timeout 30s
		assert_equal "$(dispatchctl fetch --timeout 30s "$c")" after
		kill "$WORKER_PID"
		wait "$WORKER_PID" || true
		kill "$DISPATCH_PID"
		wait "$DISPATCH_PID" || true
	done
}

@test "every acknowledged schedule survives kill -9 under load from three clients, and keys stay idempotent" {
	dup
	local i
	for i in 1 2 3; do
		(
			for ((j = 1; j <= 80; j++)); do
				if id=$(dispatchctl schedule --no-block --key "c$i-$j" -- echo "$i-$j" 2>/dev/null); then
					echo "$j $id" >>"$T/acked.$i"
				fi
			done
			echo done >"$T/finished.$i"
		) &
		BG_PIDS+=($!)
	done
	wait_for 60 eval '[ "$(cat "$T"/acked.* 2>/dev/null | wc -l)" -ge 40 ]'
	dcrash
	dup
	for i in 1 2 3; do
		wait_file "$T/finished.$i" 240
	done
	dispatchctl --json ls | jq -r '.closures[].id' | sort -n >ids
	for i in 1 2 3; do
		while read -r j id; do
			grep -qx "$id" ids || { echo "closure $id (c$i-$j) lost" >&2; false; }
			# The key gives the same closure.
			assert_equal "$(dispatchctl schedule --no-block --key "c$i-$j" -- echo x)" "$id"
		done <"$T/acked.$i"
	done
	# Keys are unique: no closure made twice for one key.
	[ "$(wc -l <ids)" -le 240 ]
	# And every one of them runs.
	start_worker w:0 --slots 4
	run dispatchctl join --timeout 120s
	assert_success
}

@test "a DYNAMIC read goes on through kill -9 of dispatchd: every element exactly once" {
	dup --heartbeat-timeout 5s
	start_worker w:0 --lease 4
	start_worker w:1 --lease 4
	seq 1 300 >splits
	id=$(dispatchctl dataset add --splits splits --reader 'sleep 0.02; echo "$MUSTER_SPLIT a"; echo "$MUSTER_SPLIT b"')
	dispatchctl read "$id" >out 2>read.err &
	reader=$!
	BG_PIDS+=("$reader")
	wait_for 60 eval '[ "$(wc -l <out)" -ge 100 ]'
	dcrash
	dup --heartbeat-timeout 5s
	wait_exit "$reader" 300
	[ "$STATUS" = 0 ] || { cat read.err; false; }
	assert_equal "$(wc -l <out)" 600
	assert_equal "$(sort -u out | wc -l)" 600
	grep -q 'state directory .*: 0 closures, 1 datasets, 1 jobs' "$T/dispatchd.log"
}

@test "a full disk refuses schedules with RESOURCE_EXHAUSTED, reads go on, and schedules work again once there is room" {
	small_disk "$T/small" 256k
	DPORT=$(free_port)
	start_dispatchd -l "127.0.0.1:$DPORT" --state-dir "$T/small/dstate"
	first=$(dispatchctl schedule --no-block -- echo first)
	head -c 60000 /dev/zero | tr '\0' x >big
	local refused=0
	for ((i = 0; i < 10; i++)); do
		if ! dispatchctl schedule --no-block --stdin big -- cat >/dev/null 2>"$T/sched.err"; then
			refused=1
			break
		fi
	done
	# The schedule whose write failed: its outcome is unknown.
	[ "$refused" = 1 ]
	grep -q 'RESOURCE_EXHAUSTED: the change could not be written' "$T/sched.err" ||
		{ cat "$T/sched.err"; false; }
	# Reads are served; later changes are refused, with Retry-After
	# (dispatchctl and workerloop wait and ask again).
	assert_equal "$(closure_field "$first" phase)" queued
	run curl -s -i -X POST "http://$MUSTER_DISPATCHER/v1/queues/default/closures" \
		-d '{"closures":[{"argv":["true"]}]}'
	assert_output --partial 'Retry-After: 1'
	assert_output --partial '"RESOURCE_EXHAUSTED"'
	# Room again: the file system grows, and schedules come back.
	mount -o remount,size=4m "$T/small"
	again=$(dispatchctl schedule --no-block -- echo again)
	# The log says so, once, named once.
	wait_grep '^dispatchd: the state directory is written again$' "$T/dispatchd.log"
	grep -q '^dispatchd: the state directory cannot be written: No space' "$T/dispatchd.log"
	! grep -q 'dispatchd: dispatchd:' "$T/dispatchd.log"
	dcrash
	start_dispatchd -l "127.0.0.1:$DPORT" --state-dir "$T/small/dstate"
	assert_equal "$(closure_field "$first" phase)" queued
	assert_equal "$(closure_field "$again" phase)" queued
}

@test "a second dispatchd on the same state directory is refused; a flipped byte mid-journal stops start-up with its offset" {
	dup
	for i in 1 2 3 4 5 6; do dispatchctl schedule -- echo "$i" >/dev/null; done
	run --separate-stderr dispatchd -l 127.0.0.1:0 --state-dir "$T/dstate"
	assert_failure 6
	[[ "$stderr" == *"is in use by process $DISPATCH_PID"* ]]
	dcrash
	size=$(stat -c %s "$T/dstate/journal")
	off=$((size / 2))
	byte=$(od -An -tu1 -j "$off" -N1 "$T/dstate/journal" | tr -d ' ')
	printf "$(printf '\\%03o' $(((byte + 1) % 256)))" |
		dd of="$T/dstate/journal" bs=1 seek="$off" conv=notrunc status=none
	run --separate-stderr dispatchd -l 127.0.0.1:0 --state-dir "$T/dstate"
	assert_failure 10
	[[ "$stderr" == *"offset"* ]]
}

@test "training-shaped: two preemptwatch tasks read a shared dataset while coordd and dispatchd are each killed with -9 and restarted; the job finishes, no split lost" {
	CPORT=$(free_port)
	start_coordd -l "127.0.0.1:$CPORT" --state-dir "$T/cstate" --cluster trainer=2 --heartbeat-timeout 10s
	dup --heartbeat-timeout 5s
	start_worker data:0 --lease 2
	start_worker data:1 --lease 2
	seq 1 200 >splits
	id=$(dispatchctl dataset add --splits splits --reader 'sleep 0.03; echo "record $MUSTER_SPLIT"')
	# Each task: one training step per record of the shared job, a step
	# counter in coordd.
	cat >train.sh <<-'EOF'
		#!/bin/sh
		{ dispatchctl read --job epoch0 "$1"; echo $? >"read.$MUSTER_TASK_INDEX"; } |
			while IFS= read -r r; do
				echo "$r" >>"seen.$MUSTER_TASK_INDEX"
				# UNAVAILABLE (9): coordd went away mid-call, the
				# step's outcome unknown: counted again.
				until kvctl --timeout 60s add steps 1 >/dev/null; do
					[ $? = 9 ] || exit 1
				done
			done || exit 1
		exit "$(cat "read.$MUSTER_TASK_INDEX")"
	EOF
	chmod +x train.sh
	for i in 0 1; do
		(
			MUSTER_TASK_INDEX=$i preemptwatch -t "trainer:$i" -- ./train.sh "$id" \
				>"$T/pw$i.out" 2>"$T/pw$i.err"
			echo $? >"$T/pw$i.rc"
		) &
		BG_PIDS+=($!)
	done
	wait_for 60 eval '[ "$(cat seen.* 2>/dev/null | wc -l)" -ge 40 ]'
	kill9 "$COORD_PID"
	start_coordd -l "127.0.0.1:$CPORT" --state-dir "$T/cstate" --cluster trainer=2 --heartbeat-timeout 10s
	wait_for 60 eval '[ "$(cat seen.* 2>/dev/null | wc -l)" -ge 90 ]'
	dcrash
	dup --heartbeat-timeout 5s
	wait_file "$T/pw0.rc" 300
	wait_file "$T/pw1.rc" 300
	assert_equal "$(cat "$T/pw0.rc") $(cat "$T/pw1.rc")" "0 0"
	# No split lost. Two consumers of one job read at least once: an
	# element whose consumer's connection ended before it asked for the
	# next may go to the other too (dispatchctl(1): at least once).
	cat seen.* | sort >all
	assert_equal "$(sort -u all | wc -l)" 200
	[ "$(wc -l <all)" -le 204 ]
	# A step whose add was made but whose answer was lost to the kill may
	# be counted twice when the loop asks again.
	steps=$(kvctl get steps)
	[ "$steps" -ge 200 ] && [ "$steps" -le 202 ]
}
