#!/usr/bin/env bats
# A busy or stalled coordd fails no live task: a log reader that stops
# reading, coordd itself stopped for longer than the heartbeat timeout,
# and replies of many megabytes while tasks heartbeat.

load helper

bats_require_minimum_version 1.5.0

# agent NAME TASK: preemptwatch for TASK around a command that outlives
# the test, in the background; its output in NAME.err.
agent() {
	preemptwatch -t "$2" -- sleep 300 >"$T/$1.out" 2>"$T/$1.err" 3>&- &
	BG_PIDS+=($!)
	AGENT[$1]=$!
}
declare -gA AGENT=()

# no_failure: coordd reports no task error, and both agents still run.
no_failure() {
	run http GET "/v1/errors?wait=0s"
	assert_line --index 0 200
	run jq -c '.errors' <<<"${lines[1]}"
	assert_output '[]'
	running "${AGENT[a0]}" || fail "agent a0 exited: $(cat "$T/a0.err")"
	running "${AGENT[a1]}" || fail "agent a1 exited: $(cat "$T/a1.err")"
}

@test "a log reader that stops reading does not stop coordd" {
	local pf=$T/port urls=() i reader
	mkfifo "$T/log"
	cat "$T/log" >/dev/null &
	reader=$!
	BG_PIDS+=("$reader")
	coordd -l 127.0.0.1:0 --port-file "$pf" --cluster worker=2000 \
		--heartbeat-timeout 1h 2>"$T/log" &
	COORD_PID=$!
	DAEMON_PIDS+=("$COORD_PID")
	wait_file "$pf"
	MUSTER_COORD=127.0.0.1:$(cat "$pf")
	export MUSTER_COORD
	kill -STOP "$reader"
	# 2000 registrations log 2000 lines: far more than a pipe holds.
	for ((i = 0; i < 2000; i++)); do
		urls+=("http://$MUSTER_COORD/v1/tasks/worker/$i/register?incarnation=1")
	done
	curl -s -m 60 -X POST "${urls[@]}" >/dev/null
	run kvctl --timeout 10s put k v
	assert_success
	run http GET /healthz
	assert_line --index 0 200
	wait_connected 2000
	kill -CONT "$reader"
}

@test "coordd stopped for longer than the heartbeat timeout fails no task" {
	start_coordd --cluster worker=2 --heartbeat-timeout 2s
	agent a0 worker:0
	agent a1 worker:1
	wait_connected 2
	kill -STOP "$COORD_PID"
	nap 4
	kill -CONT "$COORD_PID"
	# Heartbeats missed while coordd itself stood still are not silence:
	# through three timeouts after it resumes, nobody is failed.
	local i
	for i in 1 2 3 4 5 6; do
		nap 1
		has_metric muster_tasks_connected 2 || fail "a task was failed: $(cat "$T/coordd.log")"
	done
	no_failure
}

@test "replies of many megabytes while tasks heartbeat fail no task" {
	start_coordd --cluster worker=2 --heartbeat-timeout 2s
	agent a0 worker:0
	agent a1 worker:1
	wait_connected 2
	local i pids=()
	head -c 8388608 /dev/zero | tr '\0' x >big
	for i in 1 2 3 4; do
		kvctl put "big/v$i" - <big
	done
	# Eight clients read every change, 32 MiB of values each, at once.
	for i in 1 2 3 4 5 6 7 8; do
		kvctl --timeout 120s watch --since 0 --count 4 big >/dev/null &
		pids+=($!)
	done
	BG_PIDS+=("${pids[@]}")
	for i in "${pids[@]}"; do
		wait "$i" || fail "a watch failed"
	done
	has_metric muster_tasks_connected 2 || fail "$(cat "$T/coordd.log")"
	no_failure
}
