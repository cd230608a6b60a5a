#!/usr/bin/env bats
# preemptwatch with real processes and real signals: a coordd with a 1 s
# heartbeat timeout and a few wrapped commands, one per task. Commands are
# bounded (sleep 8 or 10 at most), every preemptwatch is ours and is
# stopped by PID in teardown, its command with it.

load helper

bats_require_minimum_version 1.5.0

# preemptwatch processes by name: PW[NAME] is the preemptwatch itself,
# PWW[NAME] the subshell of ours that waits for it.
declare -gA PW=() PWW=()
eval "helper_$(declare -f teardown)"
teardown() {
	local name
	# SIGHUP reaches the commands through preemptwatch (SIGTERM would be
	# a preemption notice); coordd is still up, so that they leave at once.
	for name in "${!PW[@]}"; do
		[ -e "$T/$name.rc" ] || kill -HUP "${PW[$name]}" 2>/dev/null || true
	done
	for name in "${!PW[@]}"; do
		wait_for 5 test -e "$T/$name.rc" ||
			kill -KILL "${PW[$name]}" 2>/dev/null || true
		wait "${PWW[$name]}" 2>/dev/null || true
	done
	helper_teardown
}

# pw NAME ARGS...: `preemptwatch ARGS` in the background, with stdout and
# stderr in NAME.out and NAME.err. When it exits, NAME.t gets the time
# (µs since the epoch) and then NAME.rc its exit status.
pw() {
	local name=$1
	shift
	rm -f "$T/$name.pid" "$T/$name.rc" "$T/$name.t"
	(
		preemptwatch "$@" >"$T/$name.out" 2>"$T/$name.err" &
		echo $! >"$T/$name.pid"
		rc=0
		wait $! || rc=$?
		echo "${EPOCHREALTIME/./}" >"$T/$name.t"
		echo "$rc" >"$T/$name.rc"
	) 3>&- &
	PWW[$name]=$!
	wait_file "$T/$name.pid"
	PW[$name]=$(cat "$T/$name.pid")
}

# pw_wait NAME SECONDS: waits for preemptwatch NAME to exit, for at most
# SECONDS; sets STATUS to its exit status ("running" if it did not exit in
# time) and EXIT_US to the time it exited.
pw_wait() {
	STATUS=running
	wait_for "$2" test -s "$T/$1.rc" || return 0
	STATUS=$(cat "$T/$1.rc")
	EXIT_US=$(cat "$T/$1.t")
}

# alive PID: PID (ours or not) exists and is not a zombie.
alive() {
	running "$1"
}

# dead PID: PID is gone (or a zombie).
dead() {
	! running "$1"
}

# status_json FILTER: the jq FILTER over `kvctl --json status`, as js
# prints it.
status_json() {
	kvctl --timeout 10s --json status >"$T/status.json" &&
		js "$1" "$T/status.json"
}

# state TASK: TASK's state as coordd sees it.
state() {
	status_json ".tasks[] | select(.task == \"$1\") | .state"
}

# state_is TASK STATE: coordd shows TASK in STATE now.
state_is() {
	[ "$(state "$1")" = "$2" ]
}

# wait_state TASK STATE SECONDS: until coordd shows TASK in STATE.
wait_state() {
	wait_for "$3" state_is "$1" "$2" && return 0
	echo "wait_state: $1 is $(state "$1"), not $2" >&2
	return 1
}

# A command that writes its PID to $T/NAME.cmd once started, then sleeps
# (10 s at most): `bash -c "$SLEEPER" _ $T/NAME`.
SLEEPER='echo $$ >"$1.cmd"; exec sleep 10'

# --- the command line -------------------------------------------------------

@test "preemptwatch usage errors exit 2 and register nothing" {
	start_coordd --cluster worker=1 --heartbeat-timeout 1s
	run --separate-stderr preemptwatch -t worker:0
	assert_failure 2
	[[ $stderr == *"no COMMAND given"*"usage: preemptwatch"* ]]
	run --separate-stderr preemptwatch -t worker:0 --
	assert_failure 2
	run --separate-stderr preemptwatch -- true
	assert_failure 2
	[[ $stderr == *"no task: use -t TASK or set MUSTER_TASK"* ]]
	MUSTER_TASK= run --separate-stderr preemptwatch -- true
	assert_failure 2
	local bad
	for bad in worker w:x :0 worker:-1 "worker 0"; do
		run --separate-stderr preemptwatch -t "$bad" -- true
		assert_failure 2
		[[ $stderr == *"$bad is not a task (want JOB:INDEX)"* ]] || fail "-t '$bad': $stderr"
	done
	run --separate-stderr preemptwatch -t worker:0 --grace soon -- true
	assert_failure 2
	run --separate-stderr preemptwatch -t worker:0 --timeout 0 -- true
	assert_failure 2
	run --separate-stderr preemptwatch -h
	assert_success
	assert_line --index 0 --partial 'usage: preemptwatch'
	assert_equal "$(state worker:0)" disconnected
	assert_equal "$(status_json '.tasks[0].incarnation')" null
}

# --- the command's environment and exit status ------------------------------

@test "the command sees MUSTER_COORD, MUSTER_TASK and MUSTER_INCARNATION, and runs as a connected task" {
	start_coordd --cluster worker=2 --heartbeat-timeout 1s
	local addr=$MUSTER_COORD
	pw w1 -t worker:1 -- sleep 8
	# -c gives the address (over MUSTER_COORD), and the name may be
	# written /job:J/task:I.
	MUSTER_COORD=127.0.0.1:1 pw w0 -c "$addr" -t /job:worker/task:0 --timeout 15s -- bash -c '
		echo "$MUSTER_COORD $MUSTER_TASK $MUSTER_INCARNATION" >"$1/env.out"
		kvctl --timeout 10s --json status >"$1/inside.json"' _ "$T"
	pw_wait w0 20
	assert_equal "$STATUS" 0
	read -r coord task inc <"$T/env.out"
	assert_equal "$coord" "$addr"
	assert_equal "$task" worker:0
	[[ $inc =~ ^[0-9a-f]{16}$ ]] || fail "MUSTER_INCARNATION=$inc"
	# While the command ran, coordd knew the task as connected with it.
	run js '.tasks[] | select(.task == "worker:0") | "\(.state) \(.incarnation)"' "$T/inside.json"
	assert_output "connected $inc"
	# And it left cleanly.
	assert_equal "$(state worker:0)" disconnected
}

@test "the command's exit status passes through, and the others stop with 43 naming the failed task" {
	start_coordd --cluster worker=3 --heartbeat-timeout 1s
	pw w0 -t worker:0 -- sleep 8
	pw w1 -t worker:1 -- sleep 8
	run --separate-stderr timeout -k 1 8 preemptwatch -t worker:2 -- bash -c 'sleep 0.3; exit 3'
	local t_fail
	t_fail=$(now_us)
	assert_failure 3
	pw_wait w0 10
	assert_equal "$STATUS" 43
	# Upon the failure, long before its own command (sleep 8) would end.
	[ $(((EXIT_US - t_fail) / 1000)) -lt 5000 ] ||
		fail "worker:0 stopped $(((EXIT_US - t_fail) / 1000))ms after the failure"
	pw_wait w1 10
	assert_equal "$STATUS" 43
	grep -q "task worker:2 failed: INTERNAL: command bash exited with status 3" "$T/w0.err" ||
		fail "$(cat "$T/w0.err")"
	grep -q "stopped because task worker:2 failed" "$T/w1.err"
	assert_equal "$(status_json '[.tasks[2].error.code, .tasks[2].error.reported]')" '["INTERNAL",true]'
}

@test "a command killed by SIGKILL gives 137, and the others stop with 43" {
	start_coordd --cluster worker=2 --heartbeat-timeout 1s
	pw w1 -t worker:1 -- sleep 8
	run --separate-stderr timeout -k 1 8 preemptwatch -t worker:0 -- bash -c 'sleep 0.3; kill -9 $$'
	assert_failure 137
	pw_wait w1 10
	assert_equal "$STATUS" 43
	grep -q "task worker:0 failed: INTERNAL: command bash killed by SIGKILL" "$T/w1.err" ||
		fail "$(cat "$T/w1.err")"
}

# --- failures of whole tasks ------------------------------------------------

@test "kill -9 of one preemptwatch stops the others' commands within 4 s, exit 43 naming it" {
	start_coordd --cluster worker=3 --heartbeat-timeout 1s
	pw w0 -t worker:0 -- bash -c "$SLEEPER" _ "$T/w0"
	pw w1 -t worker:1 -- bash -c "$SLEEPER" _ "$T/w1"
	pw w2 -t worker:2 -- sleep 8
	wait_file "$T/w0.cmd"
	wait_file "$T/w1.cmd"
	# Let a few heartbeats go by: everyone is healthy.
	sleep 1.2
	alive "$(cat "$T/w0.cmd")"
	[ ! -e "$T/w0.rc" ]

	local t_kill took name
	t_kill=$(now_us)
	kill -9 "${PW[w2]}"
	# Its command's guard reports the lost agent at once; without it,
	# coordd would declare the task failed within 1.2 heartbeat timeouts.
	# The rest is a busy machine's slack.
	for name in w0 w1; do
		pw_wait "$name" 10
		assert_equal "$STATUS" 43
		took=$(((EXIT_US - t_kill) / 1000))
		[ "$took" -lt 4000 ] || fail "$name stopped ${took}ms after the kill"
		# Every log names the task whose agent was lost.
		grep -q "task worker:2 failed: UNAVAILABLE: the agent (preemptwatch) of worker:2 died" "$T/$name.err" ||
			fail "$name: $(cat "$T/$name.err")"
		dead "$(cat "$T/$name.cmd")"
	done
	pw_wait w2 10
	assert_equal "$STATUS" 137
	assert_equal "$(status_json '.tasks[2].error.code')" UNAVAILABLE
}

@test "--grace: a command that ignores SIGTERM is killed with SIGKILL after the grace" {
	start_coordd --cluster worker=2 --heartbeat-timeout 1s
	pw w0 -t worker:0 --grace 1s -- bash -c 'trap "" TERM; echo $$ >"$1.cmd"; sleep 10' _ "$T/w0"
	run --separate-stderr timeout -k 1 8 preemptwatch -t worker:1 -- bash -c '
		sleep 0.5
		echo "${EPOCHREALTIME/./}" >"$1.failed"
		exit 3' _ "$T/w1"
	assert_failure 3
	pw_wait w0 10
	assert_equal "$STATUS" 43
	# SIGTERM went out upon the failure, which came no sooner than the
	# failed command's exit; the command shrugged it off, and lived on
	# until the SIGKILL at the end of the 1 s grace.
	local t_fail took
	t_fail=$(cat "$T/w1.failed")
	took=$(((EXIT_US - t_fail) / 1000))
	[ "$took" -ge 900 ] && [ "$took" -lt 5000 ] || fail "stopped ${took}ms after the failure"
	dead "$(cat "$T/w0.cmd")"
}

@test "commands that exit 0 everywhere: every preemptwatch exits 0, and coordd shows them disconnected" {
	start_coordd --cluster worker=3 --heartbeat-timeout 1s
	pw w0 -t worker:0 -- sleep 0.2
	pw w1 -t worker:1 -- sleep 0.5
	pw w2 -t worker:2 -- sleep 0.8
	local name
	for name in w0 w1 w2; do
		pw_wait "$name" 15
		assert_equal "$STATUS" 0
		[ ! -s "$T/$name.out" ]
	done
	assert_equal "$(status_json '[.tasks[] | [.state, .error]]')" \
		'[["disconnected",null],["disconnected",null],["disconnected",null]]'
	assert_equal "$(status_json .connected)" 0
}

@test "with --shutdown-barrier-timeout, tasks that finish early leave with the last one" {
	start_coordd --cluster worker=2 --heartbeat-timeout 1s --shutdown-barrier-timeout 20s
	pw w0 -t worker:0 -- sleep 0.1
	pw w1 -t worker:1 -- bash -c 'sleep 1.5; echo "${EPOCHREALTIME/./}" >"$1.done"' _ "$T/w1"
	pw_wait w0 15
	assert_equal "$STATUS" 0
	local w0_exit=$EXIT_US
	pw_wait w1 15
	assert_equal "$STATUS" 0
	# worker:0 was done first but waited for worker:1 to finish.
	[ "$w0_exit" -ge "$(cat "$T/w1.done")" ] || fail "worker:0 left $(( ($(cat "$T/w1.done") - w0_exit) / 1000 ))ms before worker:1 finished"
	assert_equal "$(status_json '[.tasks[].state]')" '["disconnected","disconnected"]'
}

@test "SIGTERM to preemptwatch is forwarded to the command, whose trap runs, when SIGTERM is not a notice source" {
	start_coordd --cluster worker=1 --heartbeat-timeout 1s
	# SIGTERM is the default preemption notice; with another --notice
	# source (a file that never appears) it is a plain signal again.
	pw w0 -t worker:0 --notice "file:$T/no-notice" -- bash -c '
		trap "echo got TERM >\"\$1.trap\"; exit 5" TERM
		echo $$ >"$1.cmd"
		for ((i = 0; i < 100; i++)); do sleep 0.1; done' _ "$T/w0"
	wait_file "$T/w0.cmd"
	kill -TERM "${PW[w0]}"
	pw_wait w0 10
	assert_equal "$STATUS" 5
	assert_equal "$(cat "$T/w0.trap")" "got TERM"
	dead "$(cat "$T/w0.cmd")"
}

@test "SIGHUP to preemptwatch is forwarded to a lone task's command, whose exit status passes through" {
	start_coordd --cluster worker=1 --heartbeat-timeout 1s
	pw w0 -t worker:0 -- bash -c '
		trap "echo got HUP >\"\$1.trap\"; exit 5" HUP
		echo $$ >"$1.cmd"
		for ((i = 0; i < 100; i++)); do sleep 0.1; done' _ "$T/w0"
	wait_file "$T/w0.cmd"
	kill -HUP "${PW[w0]}"
	pw_wait w0 10
	assert_equal "$STATUS" 5
	assert_equal "$(cat "$T/w0.trap")" "got HUP"
	dead "$(cat "$T/w0.cmd")"
}

@test "a recoverable worker killed with -9 and started again rejoins while the others keep running" {
	start_coordd --cluster chief=1,worker=2 --recoverable worker --heartbeat-timeout 1s
	pw c0 -t chief:0 -- bash -c "$SLEEPER" _ "$T/c0"
	pw w0 -t worker:0 -- bash -c "$SLEEPER" _ "$T/w0"
	pw w1 -t worker:1 -- bash -c 'echo "$MUSTER_INCARNATION" >"$1.inc"; exec sleep 10' _ "$T/w1"
	wait_file "$T/c0.cmd"
	wait_file "$T/w0.cmd"
	wait_file "$T/w1.inc"
	local old
	old=$(cat "$T/w1.inc")

	kill -9 "${PW[w1]}"
	wait_state worker:1 error 10
	pw w1b -t worker:1 -- bash -c 'echo "$MUSTER_INCARNATION" >"$1.inc"; exec sleep 10' _ "$T/w1b"
	wait_file "$T/w1b.inc"
	[ "$(cat "$T/w1b.inc")" != "$old" ]
	# Past another heartbeat timeout: nothing reached the others.
	sleep 1.3
	local name
	for name in c0 w0; do
		[ ! -e "$T/$name.rc" ] || fail "$name exited $(cat "$T/$name.rc"): $(cat "$T/$name.err")"
		alive "${PW[$name]}"
		alive "$(cat "$T/$name.cmd")"
	done
	alive "${PW[w1b]}"
	run --separate-stderr kvctl --timeout 10s status
	assert_success
	assert_line --regexp "^worker:1 +connected\\* +$(cat "$T/w1b.inc") "
	assert_line --regexp '^chief:0 +connected '
	assert_line --regexp '^worker:0 +connected\* '
	assert_equal "$(status_json .connected)" 3
}

@test "a barrier over a subset passes in the wrapped commands while a task outside it is dead" {
	start_coordd --cluster chief=1,worker=2 --recoverable worker --heartbeat-timeout 1s
	local script='
		echo started >"$1.started"
		kvctl --timeout 30s get go >/dev/null || exit 20
		barrierwait --timeout 10s --tasks chief:0,worker:0 ckpt1
		echo "$?" >"$1.bw"'
	pw c0 -t chief:0 -- bash -c "$script" _ "$T/c0"
	pw w0 -t worker:0 -- bash -c "$script" _ "$T/w0"
	pw w1 -t worker:1 -- sleep 8
	wait_file "$T/c0.started"
	wait_file "$T/w0.started"
	kill -9 "${PW[w1]}"
	wait_state worker:1 error 10

	kvctl put go 1
	pw_wait c0 15
	assert_equal "$STATUS" 0
	pw_wait w0 15
	assert_equal "$STATUS" 0
	assert_equal "$(cat "$T/c0.bw")" 0
	assert_equal "$(cat "$T/w0.bw")" 0
}

# --- bring-up ---------------------------------------------------------------

@test "--no-wait-all starts the command before the others register" {
	start_coordd --cluster worker=3 --heartbeat-timeout 1s
	local script='echo "$(kvctl --timeout 10s --json status)" >"$1.started"; sleep 8'
	pw w0 -t worker:0 --no-wait-all -- bash -c "$script" _ "$T/w0"
	wait_file "$T/w0.started"
	# worker:0's command saw itself alone.
	run js .connected "$T/w0.started"
	assert_output 1

	# Without the flag the command waits for everyone.
	pw w1 -t worker:1 -- bash -c "$script" _ "$T/w1"
	wait_state worker:1 connected 10
	sleep 0.5
	[ ! -e "$T/w1.started" ] || fail "worker:1 started before worker:2 registered"
	pw w2 -t worker:2 --no-wait-all -- sleep 8
	wait_file "$T/w1.started"
}

@test "preemptwatch --timeout: a task that never comes ends the bring-up with 4, and the command never starts" {
	start_coordd --cluster worker=2 --heartbeat-timeout 1s
	local t0 took
	t0=$(now_us)
	run --separate-stderr timeout -k 1 8 preemptwatch -t worker:0 --timeout 1s -- bash -c 'touch "$1.started"' _ "$T/w0"
	took=$((($(now_us) - t0) / 1000))
	assert_failure 4
	[[ $stderr == *DEADLINE_EXCEEDED* ]] || fail "$stderr"
	# Its 1 s, and what a busy machine adds, well within the 8 s guard.
	[ "$took" -lt 6000 ] || fail "took ${took}ms"
	[ ! -e "$T/w0.started" ]
	assert_equal "$(state worker:0)" disconnected
}

@test "a preemptwatch started before coordd registers once coordd is up" {
	local port
	port=$(free_port)
	export MUSTER_COORD=127.0.0.1:$port
	pw w0 -t worker:0 --timeout 10s -- bash -c 'echo "$MUSTER_INCARNATION" >"$1.inc"' _ "$T/w0"
	sleep 0.7
	[ ! -e "$T/w0.rc" ] || fail "preemptwatch gave up: $(cat "$T/w0.err")"

	coordd -l "127.0.0.1:$port" --cluster worker=1 --heartbeat-timeout 1s 2>>"$T/coordd.log" &
	DAEMON_PIDS+=($!)
	pw_wait w0 15
	assert_equal "$STATUS" 0
	grep -q "task worker:0 registered (incarnation $(cat "$T/w0.inc"))" "$T/coordd.log"
	assert_equal "$(state worker:0)" disconnected
}

@test "when preemptwatch is killed with SIGKILL its command gets SIGTERM and stops" {
	start_coordd --cluster worker=1 --heartbeat-timeout 1s
	pw w0 -t worker:0 -- bash -c '
		trap "echo got TERM >\"\$1.trap\"; exit 0" TERM
		echo $$ >"$1.cmd"
		for ((i = 0; i < 100; i++)); do sleep 0.1; done' _ "$T/w0"
	wait_file "$T/w0.cmd"
	kill -9 "${PW[w0]}"
	pw_wait w0 10
	assert_equal "$STATUS" 137
	wait_file "$T/w0.trap"
	assert_equal "$(cat "$T/w0.trap")" "got TERM"
	local cmd
	cmd=$(cat "$T/w0.cmd")
	wait_for 10 dead "$cmd" || fail "the command $cmd still runs"
}

@test "when preemptwatch is killed with SIGKILL, what its command started stops too" {
	start_coordd --cluster worker=1 --heartbeat-timeout 1s
	# A command that does not exec its work: a shell running a child.
	pw w0 -t worker:0 -- bash -c '
		sleep 8 &
		echo $! >"$1.child"
		echo $$ >"$1.cmd"
		wait' _ "$T/w0"
	wait_file "$T/w0.child"
	wait_file "$T/w0.cmd"
	local child
	child=$(cat "$T/w0.child")
	alive "$child"
	kill -9 "${PW[w0]}"
	pw_wait w0 10
	assert_equal "$STATUS" 137
	wait_for 10 dead "$child" || true
	wait_for 10 dead "$(cat "$T/w0.cmd")"
	if alive "$child"; then
		kill "$child" 2>/dev/null || true
		fail "the command's child $child (sleep 8) trains on alone after preemptwatch was killed"
	fi
}

@test "when the command's leader ends, what it left running in its group is stopped too" {
	start_coordd --cluster worker=1 --heartbeat-timeout 1s
	pw w0 -t worker:0 --grace 1s -- bash -c '
		sleep 8 &
		echo $! >"$1.child"
		exit 3' _ "$T/w0"
	pw_wait w0 15
	assert_equal "$STATUS" 3
	local child
	child=$(cat "$T/w0.child")
	wait_for 10 dead "$child" || true
	if alive "$child"; then
		kill "$child" 2>/dev/null || true
		fail "sleep 8, left behind by the command, is still running"
	fi
}

@test "the command gets SIGPIPE as usual, and none of preemptwatch's descriptors" {
	start_coordd --cluster worker=1 --heartbeat-timeout 1s
	pw w0 -t worker:0 -- bash -c '
		yes | head -n 1 >/dev/null
		echo "pipe ${PIPESTATUS[0]}" >"$1.out2"
		for f in /proc/$$/fd/*; do readlink "$f"; done >"$1.fds"' _ "$T/w0"
	pw_wait w0 15
	assert_equal "$STATUS" 0
	# yes died of SIGPIPE (141), not of an EPIPE error message.
	assert_equal "$(head -n 1 "$T/w0.out2")" "pipe 141"
	[ ! -s "$T/w0.err" ] || ! grep -q "Broken pipe" "$T/w0.err"
	# None of preemptwatch's sockets, signalfd or shared page.
	run grep -E 'socket:|signalfd|memfd:' "$T/w0.fds"
	assert_failure
}

@test "a lone task whose command failed runs again in a new preemptwatch" {
	start_coordd --cluster worker=1 --heartbeat-timeout 1s
	pw w0 -t worker:0 -- sh -c 'exit 3'
	pw_wait w0 15
	assert_equal "$STATUS" 3
	pw w1 -t worker:0 --timeout 15s -- sh -c 'exit 0'
	pw_wait w1 20
	assert_equal "$STATUS" 0
}

# --- a task started again, the run's environment, a frozen agent --------------

@test "a preemptwatch started again right after kill -9 joins the next run; with --max-restarts the job resumes on its own" {
	start_coordd --cluster worker=2 --heartbeat-timeout 5s
	# The second run of either task ends at once, and well.
	local job='[ -e "$1.again" ] && exit 0; echo $$ >"$1.cmd"; exec sleep 10'
	pw w0 -t worker:0 --max-restarts 1 -- bash -c "$job" _ "$T/w0"
	pw w1 -t worker:1 -- bash -c "$job" _ "$T/w1"
	wait_file "$T/w0.cmd"
	wait_file "$T/w1.cmd"
	touch "$T/w0.again" "$T/w1.again"
	# kill -9, and the scheduler starts it again at once: well within
	# the 5 s heartbeat timeout.
	kill -9 "${PW[w1]}"
	pw w1b -t worker:1 -- bash -c "$job" _ "$T/w1"
	# The new incarnation is not refused (exit 7): the old one counts as
	# failed, its peer stops (43) and runs again, and the new one joins
	# that run. Both then end normally.
	pw_wait w0 20
	assert_equal "$STATUS" 0
	pw_wait w1b 20
	assert_equal "$STATUS" 0
	grep -q "restarting the command (1 of at most 1)" "$T/w0.err"
	# The new one ran in the run after the kill, whether it had to wait
	# for it or the run ended first.
	[ "$(status_json .epoch)" -ge 2 ]
}

@test "--max-restarts 3, three runs deep: each failed run is run again, and the run that succeeds ends both tasks for good" {
	start_coordd --cluster worker=2 --heartbeat-timeout 5s
	# worker:0's command fails in the first run, worker:1's in the second;
	# both succeed in the third. Each run of a command leaves a line; one
	# that fails does so once the other's command has left its line too.
	# A command that does not fail works for a while: the other's failure
	# stops it, as in a job whose tasks finish together.
	local job='echo "$MUSTER_RESTARTS $MUSTER_EPOCH" >>"$1.runs"
if [ "$MUSTER_RESTARTS" = "$2" ]; then
	for ((i = 0; i < 400; i++)); do
		grep -q " $MUSTER_EPOCH\$" "$3.runs" 2>/dev/null && break
		sleep 0.05
	done
	exit 3
fi
sleep 3'
	pw w0 -t worker:0 --max-restarts 3 -- bash -c "$job" _ "$T/w0" 0 "$T/w1"
	pw w1 -t worker:1 --max-restarts 3 -- bash -c "$job" _ "$T/w1" 1 "$T/w0"
	# Well within an hour: a task that restarted after the success would
	# wait that long (--timeout) for the other, which has left for good.
	pw_wait w0 60
	assert_equal "$STATUS" 0
	pw_wait w1 60
	assert_equal "$STATUS" 0
	local i
	for i in 0 1; do
		run cat "$T/w$i.runs"
		# Three runs, in three epochs, and no fourth.
		assert_output "$(printf '0 0\n1 1\n2 2')"
		grep -q 'restarting the command (2 of at most 3)' "$T/w$i.err"
		run ! grep -q 'restarting the command (3 of at most 3)' "$T/w$i.err"
	done
	grep -q 'command bash exited with status 3' "$T/w0.err"
	grep -q 'stopped because task worker:0 failed' "$T/w1.err"
	grep -q 'stopped because task worker:1 failed' "$T/w0.err"
	# Both left the cluster after the third run: it is in a new epoch,
	# with nobody connected.
	assert_equal "$(status_json '[.epoch, .connected]')" '[3,0]'
}

@test "a task that finished its work in the run another failed in: the other does not restart to wait for it" {
	start_coordd --cluster worker=2 --heartbeat-timeout 5s
	# worker:1 is done and leaves; worker:0 fails after that.
	pw w1 -t worker:1 --max-restarts 3 -- bash -c 'echo run >>"$1.runs"' _ "$T/w1"
	pw w0 -t worker:0 --max-restarts 3 -- bash -c '
		echo run >>"$1.runs"
		until [ -e "$1.go" ]; do sleep 0.05; done
		exit 3' _ "$T/w0"
	pw_wait w1 20
	assert_equal "$STATUS" 0
	touch "$T/w0.go"
	# At once, not after --timeout (an hour) waiting for worker:1 in a
	# run it will never join: worker:0 ends with its command's status.
	pw_wait w0 20
	assert_equal "$STATUS" 3
	assert_equal "$(cat "$T/w0.runs")" run
	assert_equal "$(cat "$T/w1.runs")" run
	grep -q 'not running the command again: task worker:1 finished its work in run 0, and will not come to another' "$T/w0.err" ||
		fail "$(cat "$T/w0.err")"
	# coordd says so to anyone who waits past that run.
	run http GET '/v1/epoch?after=0'
	assert_line --index 0 200
	assert_equal "$(jq -c . "$T/http.body")" '{"epoch":1,"finished":["worker:1"]}'
}

@test "a task started again from outside while its run winds down, after another finished its work in it, exits 6 instead of waiting" {
	start_coordd --cluster worker=3 --heartbeat-timeout 5s
	pw w2 -t worker:2 -- true
	# worker:1's command takes its time to stop (--grace 10s): the run
	# winds down for a while after worker:0 fails.
	pw w1 -t worker:1 --grace 10s -- bash -c 'trap "" TERM; sleep 30'
	pw w0 -t worker:0 -- bash -c 'until [ -e "$1.go" ]; do sleep 0.05; done; exit 3' _ "$T/w0"
	pw_wait w2 20
	assert_equal "$STATUS" 0
	touch "$T/w0.go"
	pw_wait w0 20
	assert_equal "$STATUS" 3
	# The scheduler starts worker:0 again while worker:1 still stops.
	alive "${PW[w1]}"
	pw w0b -t worker:0 -- true
	pw_wait w0b 40
	assert_equal "$STATUS" 6
	grep -q 'waiting for the next run' "$T/w0b.err"
	grep -q 'preemptwatch: FAILED_PRECONDITION: task worker:2 finished its work in run 0, and will not come to another' "$T/w0b.err" ||
		fail "$(cat "$T/w0b.err")"
	pw_wait w1 20
	assert_equal "$STATUS" 43
}

@test "the command gets its rank, world size, epoch and restarts, and a run prefix whose keys the next run does not see" {
	start_coordd --cluster chief=1,worker=2 --heartbeat-timeout 5s
	local i
	script_env='
env | grep "^MUSTER_" | sort >"$1.env.$MUSTER_EPOCH"
kvctl tryget "$MUSTER_RUN_PREFIX/addr/$MUSTER_TASK" >"$1.seen.$MUSTER_EPOCH" 2>&1
echo "rc=$?" >>"$1.seen.$MUSTER_EPOCH"
kvctl put -f "$MUSTER_RUN_PREFIX/addr/$MUSTER_TASK" "$MUSTER_TASK@$MUSTER_EPOCH"'
	for run in 0 1; do
		pw c -t chief:0 -- bash -c "$script_env" _ "$T/c"
		pw w0 -t worker:0 -- bash -c "$script_env" _ "$T/w0"
		pw w1 -t worker:1 -- bash -c "$script_env" _ "$T/w1"
		for i in c w0 w1; do
			pw_wait "$i" 20
			assert_equal "$STATUS" 0
		done
	done
	# Ranks in the order of --cluster, the whole world, the run.
	grep -qx MUSTER_RANK=0 "$T/c.env.0"
	grep -qx MUSTER_RANK=2 "$T/w1.env.0"
	grep -qx MUSTER_WORLD_SIZE=3 "$T/w1.env.0"
	grep -qx MUSTER_JOB=worker "$T/w1.env.0"
	grep -qx MUSTER_TASK_INDEX=1 "$T/w1.env.0"
	grep -qx MUSTER_EPOCH=0 "$T/w0.env.0"
	grep -qx MUSTER_EPOCH=1 "$T/w0.env.1"
	grep -qx MUSTER_RESTARTS=0 "$T/w0.env.1"
	grep -qx MUSTER_RUN_PREFIX=muster/run/0 "$T/w0.env.0"
	grep -qx MUSTER_RUN_PREFIX=muster/run/1 "$T/w0.env.1"
	# The second run does not read what the first one put: its prefix is
	# its own, and the first run's keys went with the first run.
	grep -q "rc=1" "$T/w0.seen.1"
	run kvctl tryget muster/run/0/addr/worker:0
	assert_failure 1
	run kvctl tryget muster/run/1/addr/worker:0
	assert_failure 1
}

@test "a frozen preemptwatch (SIGSTOP): its guard stops the command and tells coordd whose agent it was" {
	start_coordd --cluster worker=2 --heartbeat-timeout 1s
	pw w0 -t worker:0 -- bash -c "$SLEEPER" _ "$T/w0"
	pw w1 -t worker:1 -- bash -c "$SLEEPER" _ "$T/w1"
	wait_file "$T/w0.cmd"
	wait_file "$T/w1.cmd"
	kill -STOP "${PW[w1]}"
	# Two heartbeat timeouts of silence, and room for a busy machine.
	wait_for 10 dead "$(cat "$T/w1.cmd")" ||
		fail "worker:1's command still runs with its agent stopped"
	pw_wait w0 10
	assert_equal "$STATUS" 43
	kill -CONT "${PW[w1]}"
	pw_wait w1 10
	[ "$STATUS" != running ]
}
