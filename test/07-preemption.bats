#!/usr/bin/env bats
# Preemption: the sync protocol of the reference's preemption sync manager
# as preemptwatch runs it over coordd (a notice, the death time, the window,
# every task posting its step, the barrier, max+1 as the sync point), the
# restart exit code and --max-restarts, a task lost mid-protocol, and the
# command line of syncpoint and preemptwatch. Every preemptwatch runs in the
# background with its output in $T and is ours: teardown SIGKILLs the ones
# still running (SIGTERM would be a preemption notice).

load helper

bats_require_minimum_version 1.5.0

LOOP=$BATS_TEST_DIRNAME/../examples/train-loop.sh

# two_arrived: coordd shows a barrier that two tasks arrived at; its
# barriers are left in $T/barriers.json.
two_arrived() {
	curl -s -m 5 -o "$T/barriers.json" "http://$MUSTER_COORD/v1/barriers" &&
		grep -q '"arrived":2' "$T/barriers.json"
}

# --- the protocol ---------------------------------------------------------------

@test "four tasks at different speeds all checkpoint at max+1 of their steps" {
	start_coordd --cluster worker=4 --heartbeat-timeout 2s
	local i pids=() times=(0.01 0.02 0.03 0.05)
	for i in 0 1 2 3; do
		STEPS=100000 STEP_TIME=${times[i]} CKPT=$T/ckpt.$i \
			spw "w$i" -t "worker:$i" --grace 3s -- "$LOOP"
		pids+=("$PID")
	done
	wait_connected 4
	# Every loop runs, and the fastest is well ahead.
	for i in 0 1 2 3; do
		wait_for 20 at_step "w$i" 1
	done
	wait_for 20 at_step w0 20

	# One notice, to one task, by SIGTERM: the whole cluster syncs.
	kill -TERM "${pids[2]}"
	for i in 0 1 2 3; do
		wait_exit "${pids[i]}" 30
		assert_equal "$STATUS" 42
	done
	grep -Eq 'preemption notice \((SIG)?TERM\)' "$T/w2.err"

	local n m line
	line=$(grep 'sync point: step' "$T/w0.err")
	[[ $line =~ sync\ point:\ step\ ([0-9]+)\ \(the\ furthest\ of\ 4\ tasks\ was\ at\ ([0-9]+)\) ]] ||
		fail "no sync point line with 4 tasks: $line"
	n=${BASH_REMATCH[1]} m=${BASH_REMATCH[2]}
	assert_equal "$n" "$((m + 1))"
	# The fast tasks were well past step 1 by then: a real max was taken.
	[ "$m" -gt 10 ]
	for i in 0 1 2 3; do
		# Every task agreed on the same point and saved exactly there.
		grep -qx "preemptwatch: sync point: step $n (the furthest of 4 tasks was at $m)" "$T/w$i.err" ||
			fail "worker:$i: $(cat "$T/w$i.err")"
		assert_equal "$(cat "$T/ckpt.$i")" "$n"
		grep -qx "worker:$i: preemption: checkpointed at step $n" "$T/w$i.out"
		grep -q 'the command checkpointed at the sync point and exited; exiting with the restart code 42' "$T/w$i.err"
	done
}

@test "--restart-exit-code 7 is the exit code after a preemption" {
	start_coordd --cluster worker=2 --heartbeat-timeout 2s
	local a b
	STEPS=100000 STEP_TIME=0.01 CKPT=$T/ckpt.0 \
		spw w0 -t worker:0 --grace 2s --restart-exit-code 7 -- "$LOOP"
	a=$PID
	STEPS=100000 STEP_TIME=0.02 CKPT=$T/ckpt.1 \
		spw w1 -t worker:1 --grace 2s --restart-exit-code 7 -- "$LOOP"
	b=$PID
	wait_connected 2
	wait_for 20 at_step w0 1
	wait_for 20 at_step w1 1
	kill -TERM "$b"
	wait_exit "$a" 20
	assert_equal "$STATUS" 7
	wait_exit "$b" 20
	assert_equal "$STATUS" 7
	grep -q 'exiting with the restart code 7' "$T/w0.err"
	assert_equal "$(cat "$T/ckpt.0")" "$(cat "$T/ckpt.1")"
}

@test "a death time beyond the protocol window: the sync step waits for the window" {
	start_coordd --cluster worker=1 --heartbeat-timeout 2s
	# A loop of steps that records what the page says: right at the
	# notice, half a second later, and when the sync point comes.
	script window.sh <<'EOF'
cd "$1"
( syncpoint --wait-notice --timeout 10s --json >notice.json
  sleep 0.5
  syncpoint --status --json >later.json ) &
step=0
while ((step < 1000)); do
	sleep 0.02
	step=$((step + 1))
	if syncpoint "$step"; then
		t=$EPOCHREALTIME
		echo $(( ${t%.*} * 1000 + 10#${t#*.} / 1000 )) >known.t
		syncpoint --status --json >known.json
		echo "$step" >ckpt
		wait
		exit 0
	fi
done
exit 5
EOF
	spw w0 -t worker:0 --grace 1s --notice "file:$T/notice" \
		--notice-interval 100ms --protocol-window 2s -- "$T/window.sh" "$T"
	local p=$PID death when
	wait_connected 1
	wait_for 20 at_step w0 1

	# A death time 5-6 s ahead, written whole (rename) so the notice is
	# read with its time.
	death=$(( $(date +%s) + 6 ))
	when=$(date -u -d "@$death" +%Y-%m-%dT%H:%M:%SZ)
	echo "$when" >"$T/notice.tmp"
	mv "$T/notice.tmp" "$T/notice"

	wait_file "$T/notice.json"
	assert_equal "$(js .state "$T/notice.json")" notice
	assert_equal "$(js .death_time "$T/notice.json")" "$when"
	assert_equal "$(js .sync_step "$T/notice.json")" null
	wait_file "$T/later.json"
	# Half a second on, still 2 s or more from the window: the protocol
	# has not started.
	assert_equal "$(js .state "$T/later.json")" notice
	assert_equal "$(js .sync_step "$T/later.json")" null

	wait_exit "$p" 20
	assert_equal "$STATUS" 42
	# Known only once the window (2 s before the death time) opened, and
	# before the death time.
	local known
	known=$(cat "$T/known.t")
	[ "$known" -ge $(( death * 1000 - 2000 )) ] ||
		fail "sync point known at $known, $(( death * 1000 - known )) ms before the death time"
	[ "$known" -lt $(( death * 1000 )) ]
	assert_equal "$(js .state "$T/known.json")" known
	assert_equal "$(js .sync_step "$T/known.json")" "$(cat "$T/ckpt")"
	assert_equal "$(js .death_time "$T/known.json")" "$when"
	grep -q 'the sync protocol starts in' "$T/w0.err"
}

@test "a task lost mid-protocol fails the barrier: the others stop well before its timeout" {
	start_coordd --cluster worker=3 --heartbeat-timeout 2s
	local i pids=() t0 took
	for i in 0 1 2; do
		STEPS=100000 STEP_TIME=0.02 CKPT=$T/ckpt.$i \
			spw "w$i" -t "worker:$i" --grace 1s --notice-grace 60s \
			--sync-barrier-timeout 40s -- "$LOOP"
		pids+=("$PID")
	done
	wait_connected 3
	for i in 0 1 2; do
		wait_for 20 at_step "w$i" 1
	done

	# worker:2 freezes (no heartbeat, never at the barrier); worker:0
	# gets the notice; worker:0 and worker:1 post their steps and wait.
	kill -STOP "${pids[2]}"
	t0=$(now_ms)
	kill -TERM "${pids[0]}"
	wait_for 10 two_arrived
	assert_equal "$(js '[.barriers[] | select(.id == "muster.preemption") | .tasks_waiting]' "$T/barriers.json")" '[["worker:2"]]'
	kill -KILL "${pids[2]}"
	wait_exit "${pids[2]}" 10

	local codes=()
	for i in 0 1; do
		wait_exit "${pids[i]}" 30
		codes+=("$STATUS")
	done
	took=$(( $(now_ms) - t0 ))
	# Far less than the 40 s barrier timeout (and the 60 s to the death
	# time): the failure of worker:2 ended the protocol.
	[ "$took" -lt 15000 ] || fail "the others took ${took} ms to stop"
	# coordd failed the barrier for the task in error; each survivor
	# learns it from the barrier ("is in error"), the error poll
	# ("failed"), or both, whichever comes first.
	grep -q 'barrier muster.preemption failed: .*worker:2' "$T/coordd.log"
	for i in 0 1; do
		grep -Eq 'task worker:2 (failed|is in error)' "$T/w$i.err" ||
			fail "worker:$i: $(cat "$T/w$i.err")"
		# No sync point was agreed, so nobody saved at one.
		[ ! -e "$T/ckpt.$i" ]
		run ! grep -q 'sync point: step' "$T/w$i.err"
	done
	# They were stopped because another task failed: exit 43, not the
	# restart code that says "preempted at the sync point".
	assert_equal "${codes[*]}" "43 43"
}

@test "a notice before anyone's first step: no task counts as at step 0, and the loops save at the step after their first" {
	# Unlike the reference, whose call counters start at 0: a task that has
	# reported no step is waited for, until it reports its first.
	start_coordd --cluster worker=2 --heartbeat-timeout 2s
	local i pids=()
	for i in 0 1; do
		STEPS=100 STEP_TIME=1 CKPT=$T/ckpt.$i \
			pw "w$i" -t "worker:$i" --notice "file:$T/notice" \
			--notice-interval 100ms --notice-grace 20s --grace 1s -- "$LOOP"
		pids+=("$PID")
	done
	wait_connected 2
	# The commands are in their first step (1 s long) when the notice comes.
	echo soon >"$T/notice"
	for i in 0 1; do
		wait_exit "${pids[i]}" 20
		assert_equal "$STATUS" 42
	done
	for i in 0 1; do
		[ -e "$T/ckpt.$i" ] || fail "worker:$i saved nothing: $(cat "$T/w$i.err")"
		assert_equal "$(cat "$T/ckpt.$i")" 2
		grep -q "sync point: step 2 (the furthest of 2 tasks was at 1)" "$T/w$i.err"
	done
}

@test "a notice while a task is still coming up: the protocol waits for the whole cluster" {
	start_coordd --cluster worker=2 --heartbeat-timeout 2s
	# The notice is there from the start; worker:1 comes half a second
	# after worker:0.
	echo soon >"$T/notice"
	local i pids=()
	for i in 0 1; do
		STEPS=100 STEP_TIME=0.05 CKPT=$T/ckpt.$i \
			pw "w$i" -t "worker:$i" --notice "file:$T/notice" \
			--notice-interval 100ms --notice-grace 6s --grace 1s -- "$LOOP"
		pids+=("$PID")
		[ "$i" = 1 ] || { wait_connected 1; sleep 0.5; }
	done
	for i in 0 1; do
		wait_exit "${pids[i]}" 20
		assert_equal "$STATUS" 42
	done
	# Both took part: one sync point, counted over both tasks.
	for i in 0 1; do
		if grep -q 'preemption sync failed' "$T/w$i.err"; then
			fail "worker:$i: $(cat "$T/w$i.err")"
		fi
		grep -q 'sync point: step [0-9]* (the furthest of 2 tasks' "$T/w$i.err" ||
			fail "worker:$i: $(cat "$T/w$i.err")"
	done
	assert_equal "$(grep 'sync point' "$T/w0.err")" "$(grep 'sync point' "$T/w1.err")"
}

@test "--max-restarts 1: every task resumes from its checkpoint and finishes" {
	start_coordd --cluster worker=3 --heartbeat-timeout 2s
	local i pids=() times=(0.01 0.015 0.02)
	for i in 0 1 2; do
		STEPS=100 STEP_TIME=${times[i]} CKPT=$T/ckpt.$i \
			spw "w$i" -t "worker:$i" --grace 2s --max-restarts 1 -- "$LOOP"
		pids+=("$PID")
	done
	wait_connected 3
	for i in 0 1 2; do
		wait_for 20 at_step "w$i" 1
	done
	kill -TERM "${pids[1]}"
	for i in 0 1 2; do
		wait_exit "${pids[i]}" 30
		assert_equal "$STATUS" 0
	done

	local n
	n=$(sed -n 's/^worker:0: preemption: checkpointed at step \([0-9]*\)$/\1/p' "$T/w0.out")
	[ -n "$n" ] && [ "$n" -lt 100 ] || fail "worker:0: $(cat "$T/w0.out")"
	for i in 0 1 2; do
		run cat "$T/w$i.out"
		assert_line --index 0 "worker:$i: preemption: checkpointed at step $n"
		assert_line --index 1 "worker:$i: resuming from step $n"
		assert_line --index 2 "worker:$i: finished 100 steps"
		assert_equal "${#lines[@]}" 3
		assert_equal "$(cat "$T/ckpt.$i")" 100
		grep -q 'restarting the command (1 of at most 1)' "$T/w$i.err"
	done
}

# --- syncpoint's command line ----------------------------------------------------

@test "syncpoint outside preemptwatch: exit 2 and says so" {
	unset MUSTER_SYNC_SOCKET
	local args
	for args in "5" "--status" "--status --json" "--wait-notice --timeout 100ms"; do
		# shellcheck disable=SC2086
		run -2 syncpoint $args
		assert_line --index 0 "syncpoint: not running under preemptwatch (MUSTER_SYNC_SOCKET is not set)"
	done
}

@test "syncpoint usage errors exit 2" {
	# A socket nobody serves: a well-formed call fails to reach it (9,
	# UNAVAILABLE), so 2 can only come from the argument check.
	export MUSTER_SYNC_SOCKET=$T/nobody.sock
	run -9 syncpoint 5
	assert_output --partial "cannot reach preemptwatch at $T/nobody.sock"

	run -2 syncpoint
	assert_line --index 0 "syncpoint: no STEP given"
	run -2 syncpoint abc
	assert_line --index 0 "syncpoint: STEP abc is not a step number"
	run -2 syncpoint 12x
	assert_line --index 0 "syncpoint: STEP 12x is not a step number"
	run -2 syncpoint ''
	assert_line --index 0 "syncpoint: STEP  is not a step number"
	run -2 syncpoint -- -3
	assert_line --index 0 "syncpoint: STEP -3 is not a step number"
	run -2 syncpoint 3 4
	assert_line --index 0 "syncpoint: more than one STEP given"
	run -2 syncpoint --status 3
	assert_line --index 0 "syncpoint: unexpected argument 3"
	run -2 syncpoint --status --wait-notice
	assert_line --index 0 "syncpoint: --status and --wait-notice exclude each other"
	run -2 syncpoint --json 3
	assert_line --index 0 "syncpoint: --json and --timeout go with --status or --wait-notice"
	run -2 syncpoint --wait-notice --timeout soon
	assert_line --index 0 "syncpoint: --timeout soon is not a duration"
	run -2 syncpoint --bogus
}

@test "syncpoint --wait-notice --timeout 300ms without a notice exits 4" {
	start_coordd --cluster worker=1 --heartbeat-timeout 2s
	script quiet.sh <<'EOF'
cd "$1"
syncpoint --status --json >idle.json
s=$EPOCHREALTIME
syncpoint --wait-notice --timeout 300ms >wait.out 2>wait.err
echo $? >wait.rc
e=$EPOCHREALTIME
echo $(( (${e%.*} - ${s%.*}) * 1000 + (10#${e#*.} - 10#${s#*.}) / 1000 )) >wait.ms
syncpoint 1; echo $? >step1.rc
EOF
	pw w0 -t worker:0 -- "$T/quiet.sh" "$T"
	wait_exit "$PID" 20
	# No notice: the command's own exit status, through the normal end.
	assert_equal "$STATUS" 0
	assert_equal "$(cat "$T/wait.rc")" 4
	assert_equal "$(cat "$T/wait.err")" "syncpoint: DEADLINE_EXCEEDED: no preemption notice within the timeout"
	[ ! -s "$T/wait.out" ]
	local ms
	ms=$(cat "$T/wait.ms")
	# Its 300 ms, and what a busy machine adds.
	[ "$ms" -ge 280 ] && [ "$ms" -lt 5000 ] || fail "waited ${ms} ms"
	assert_equal "$(cat "$T/idle.json")" '{"state":"idle","notice":false,"death_time":null,"sync_step":null,"step":null,"answered":null}'
	# Not a sync point, and not an error.
	assert_equal "$(cat "$T/step1.rc")" 1
}

# --- preemptwatch's command line -------------------------------------------------

# bad_flags ARGS...: preemptwatch -t worker:0 ARGS -- true must be a usage
# error. It points at a port nobody listens on, with a 1 s bring-up
# timeout, so a flag taken for good fails otherwise and soon.
bad_flags() {
	run -2 timeout 10 preemptwatch -c "127.0.0.1:$PORT" --timeout 1s \
		-t worker:0 "$@" -- true
	assert_line --partial "preemptwatch: "
	assert_output --partial "usage: preemptwatch"
}

@test "preemptwatch: bad notice flags exit 2" {
	PORT=$(free_port)
	bad_flags --notice bogus
	assert_line --index 0 --partial "--notice bogus: unknown notice source bogus"
	bad_flags --notice signal:NOPE
	assert_line --index 0 "preemptwatch: --notice signal:NOPE: unknown signal NOPE"
	bad_flags --notice file:
	bad_flags --notice gce --metadata-url ftp://x
	assert_line --index 0 --regexp '^preemptwatch: .*ftp://x is not http://HOST\[:PORT\]\[/PATH\]$'
	bad_flags --notice aws --metadata-url ftp://x
	bad_flags --notice azure --metadata-url http://
	bad_flags --max-restarts -1
	assert_line --index 0 "preemptwatch: --max-restarts -1 is not a number from 0 to 1000000"
	bad_flags --max-restarts many
	bad_flags --restart-exit-code 0
	assert_line --index 0 "preemptwatch: --restart-exit-code 0 is not a number from 1 to 255"
	bad_flags --restart-exit-code 256
	bad_flags --notice-interval 0
	bad_flags --notice-grace soon
	bad_flags --protocol-window -1s
	bad_flags --sync-barrier-timeout 0
}

@test "preemptwatch: a bad --metadata-url is a usage error even before --notice names a cloud" {
	PORT=$(free_port)
	bad_flags --metadata-url ftp://x
	assert_output --partial "ftp://x"
}

# --- what a real job's start-up, scheduler and command do to the protocol -------

@test "a resumed job whose tasks are still starting when the notice comes: every task checkpoints at one step past its first" {
	start_coordd --cluster worker=2 --heartbeat-timeout 5s
	local i pids=()
	for i in 0 1; do
		# Resumed from step 190, with three seconds of start-up (an
		# import) before the first step.
		echo 190 >"$T/ckpt.$i"
		STEPS=400 STEP_TIME=0.05 START_DELAY=3 CKPT=$T/ckpt.$i \
			pw "w$i" -t "worker:$i" --notice "file:$T/notice" \
			--notice-interval 100ms --notice-grace 30s --grace 2s -- "$LOOP"
		pids+=("$PID")
	done
	wait_connected 2
	# The notice while both are still starting: neither has a step.
	echo soon >"$T/notice"
	for i in 0 1; do
		wait_exit "${pids[i]}" 25
		assert_equal "$STATUS" 42
	done
	for i in 0 1; do
		# Not step 1 (no task counts as at step 0): the first step either
		# reported, 191, plus one.
		assert_equal "$(cat "$T/ckpt.$i")" 192
		grep -q "sync point: step 192 (the furthest of 2 tasks was at 191)" "$T/w$i.err" ||
			fail "worker:$i: $(cat "$T/w$i.err")"
		grep -q "reported no step yet: waiting for its first" "$T/w$i.err"
	done
}

@test "a command past the sync point is told so: syncpoint says past and exits 0, and preemptwatch exits 44" {
	start_coordd --cluster worker=1 --heartbeat-timeout 2s
	script past.sh <<'EOF2'
cd "$1"
syncpoint 5
kvctl put muster/preemption/notice "$(date -u -d '+20 sec' +%FT%TZ)"
until [ "$(syncpoint --status --json | jq -r .state)" = known ]; do sleep 0.05; done
syncpoint --status --json >known.json
# Jumping ahead, which a loop must not: the sync step (6) is behind.
syncpoint 9 2>past.err
echo $? >past.rc
syncpoint --status --json >after.json
EOF2
	pw w0 -t worker:0 --grace 1s -- "$T/past.sh" "$T"
	wait_exit "$PID" 20
	assert_equal "$(jq .sync_step "$T/known.json")" 6
	assert_equal "$(cat "$T/past.rc")" 0
	grep -q "syncpoint: step 9 is past the sync point, step 6: checkpoint now" "$T/past.err"
	assert_equal "$(jq -r .answered "$T/after.json")" past
	assert_equal "$STATUS" 44
	grep -q "past the sync point: it was already beyond step 6 when it asked" "$T/w0.err" ||
		fail "$(cat "$T/w0.err")"
}

@test "SIGTERM to both preemptwatch and its command, as Slurm sends it: 44, not 42, for the task whose command died" {
	start_coordd --cluster worker=2 --heartbeat-timeout 5s
	local i pids=()
	for i in 0 1; do
		STEPS=2000 STEP_TIME=0.05 CKPT=$T/ckpt.$i \
			spw "w$i" -t "worker:$i" --grace 2s -- "$LOOP"
		pids+=("$PID")
	done
	wait_connected 2
	wait_for 20 at_step w0 3
	wait_for 20 at_step w1 3
	# The loop's shell is the command's process group leader.
	local cmd
	cmd=$(pgrep -P "${pids[1]}" -f train-loop.sh | head -n 1)
	[ -n "$cmd" ] || fail "no command under worker:1"
	kill -TERM "${pids[1]}" "$cmd"
	for i in 0 1; do
		wait_exit "${pids[i]}" 30
		pids[i]=$STATUS
	done
	# worker:0 saved at the sync point; worker:1's command died of the
	# signal and saved nothing: it must not claim a checkpoint.
	assert_equal "${pids[0]}" 42
	assert_equal "${pids[1]}" 44
	grep -q "the command killed by SIGTERM after a preemption notice" "$T/w1.err" ||
		fail "$(cat "$T/w1.err")"
}

@test "a command that ignores SIGTERM, with --stop-signal INT: the scheduler's SIGTERM to both still ends at the sync point, 42" {
	start_coordd --cluster worker=2 --heartbeat-timeout 5s
	local i pids=()
	script ignoring.sh <<EOF2
trap '' TERM
exec "$LOOP"
EOF2
	for i in 0 1; do
		STEPS=2000 STEP_TIME=0.05 CKPT=$T/ckpt.$i \
			spw "w$i" -t "worker:$i" --grace 2s --stop-signal INT -- "$T/ignoring.sh"
		pids+=("$PID")
	done
	wait_connected 2
	wait_for 20 at_step w0 3
	wait_for 20 at_step w1 3
	local cmd
	cmd=$(pgrep -P "${pids[1]}" | head -n 1)
	kill -TERM "${pids[1]}" "$cmd"
	for i in 0 1; do
		wait_exit "${pids[i]}" 30
		assert_equal "$STATUS" 42
	done
	assert_equal "$(cat "$T/ckpt.0")" "$(cat "$T/ckpt.1")"
}

@test "--unsynced-exit-code, and codes that collide or a bad --stop-signal are usage errors" {
	run --separate-stderr preemptwatch -t worker:0 --unsynced-exit-code 42 -- true
	assert_failure 2
	[[ $stderr == *"must differ"* ]]
	run --separate-stderr preemptwatch -t worker:0 --unsynced-exit-code 43 -- true
	assert_failure 2
	[[ $stderr == *"43 is the code for a failed peer"* ]]
	run --separate-stderr preemptwatch -t worker:0 --stop-signal NOPE -- true
	assert_failure 2
	[[ $stderr == *"--stop-signal NOPE is not a signal"* ]]

	start_coordd --cluster worker=1 --heartbeat-timeout 2s
	script saveless.sh <<'EOF2'
kvctl put muster/preemption/notice "$(date -u -d '+20 sec' +%FT%TZ)"
syncpoint --wait-notice --timeout 10s >/dev/null
EOF2
	pw w0 -t worker:0 --unsynced-exit-code 77 -- "$T/saveless.sh"
	wait_exit "$PID" 20
	assert_equal "$STATUS" 77
}
