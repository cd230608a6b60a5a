#!/usr/bin/env bats
# The edges of closures (issue 21): a queue's error stops what is in
# flight, a result outlives a full disk and a restart, a worker that cannot
# start a closure gives it back, values have a cap and lists come in
# pages, schedule reads no more than dispatchd takes, a signal stops a
# workerloop that waits for dispatchd, and closures never see muster's
# credentials. Every process is ours, stopped by PID.

load helper

bats_require_minimum_version 1.5.0

@test "SIGTERM or SIGINT stops a workerloop that waits to register, at once, with 128+signal" {
	port=$(free_port)
	for sig in TERM INT; do
		workerloop -v -d "127.0.0.1:$port" -t worker:0 2>"$T/w.$sig.log" &
		pid=$!
		BG_PIDS+=("$pid")
		# It is trying to reach the dispatchd that is not there.
		wait_grep 'retrying' "$T/w.$sig.log"
		kill -"$sig" "$pid"
		wait_exit "$pid" 10
		[ "$STATUS" = $((128 + $(kill -l "$sig"))) ] || { cat "$T/w.$sig.log"; false; }
		grep -q "stopped by .* before it could register with 127.0.0.1:$port" "$T/w.$sig.log"
	done
	# SIGHUP does not stop it: it registers once dispatchd comes.
	workerloop -v -d "127.0.0.1:$port" -t worker:1 2>"$T/w.hup.log" &
	pid=$!
	BG_PIDS+=("$pid")
	wait_grep 'retrying' "$T/w.hup.log"
	kill -HUP "$pid"
	start_dispatchd -l "127.0.0.1:$port"
	wait_for 30 worker_live worker:1
	running "$pid"
}
