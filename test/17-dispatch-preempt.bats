#!/usr/bin/env bats
# workerloop under preemptwatch: a preemption that reaches the task stops
# its closures, and they are queued again at once.

load helper

bats_require_minimum_version 1.5.0

@test "under preemptwatch, SIGTERM reaches workerloop and its closure runs again elsewhere" {
	start_coordd --cluster worker=1 --heartbeat-timeout 5s
	start_dispatchd --heartbeat-timeout 120s
	# workerloop takes its name from preemptwatch's MUSTER_TASK.
	pw w0 -t worker:0 -- workerloop --grace 5s
	local p=$PID
	wait_for 20 worker_live worker:0
	id=$(dispatchctl schedule -- sh -c 'echo "$MUSTER_WORKER $MUSTER_ATTEMPT"; [ "$MUSTER_ATTEMPT" = 1 ] && { echo x >"'"$T"'/started"; exec sleep 60; }; exit 0')
	wait_file "$T/started"
	kill -TERM "$p"
	wait_exit "$p" 30
	# SIGTERM is a preemption notice to preemptwatch: 44, run me again.
	assert_equal "$STATUS" 44
	grep -q 'stopping' "$T/w0.err"
	# Queued again at once, long before dispatchd's heartbeat timeout.
	[ "$(closure_field "$id" phase)" = queued ]
	start_worker worker:1
	run -0 dispatchctl fetch --timeout 30s "$id"
	assert_output "worker:1 2"
}
