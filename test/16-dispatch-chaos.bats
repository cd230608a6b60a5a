#!/usr/bin/env bats
# Chaos: closures over workers that are killed with -9 and restarted at
# random while they run. At-least-once: every closure's value arrives, none
# is lost, nothing hangs.

load helper

bats_require_minimum_version 1.5.0

@test "2,000 closures over 4 workers killed and restarted at random: every value fetched" {
	start_dispatchd --heartbeat-timeout 5s --max-worker-deaths 1000
	declare -A pids
	for i in 0 1 2 3; do
		start_worker "worker:$i" -j 2
		pids[$i]=$WORKER_PID
	done
	# Each closure takes a little while, so that kills land mid-closure.
	seq 1 2000 | dispatchctl schedule --each -- sh -c 'sleep 0.0$(( $1 % 5 )); echo "v$1"' sh {} >ids
	[ "$(wc -l <ids)" = 2000 ]
	dispatchctl join --timeout 300s >join.out 2>&1 &
	join=$!
	BG_PIDS+=("$join")
	kills=0
	while running "$join" && ((kills < 40)); do
		nap 0.$((RANDOM % 4 + 1))
		i=$((RANDOM % 4))
		kill -9 "${pids[$i]}" 2>/dev/null || true
		kills=$((kills + 1))
		workerloop -t "worker:$i" -j 2 2>>"$T/worker:$i.log" &
		pids[$i]=$!
		BG_PIDS+=("$!")
	done
	wait_exit "$join" 300
	[ "$STATUS" = 0 ]
	# Every value, in order, exactly the closure's own.
	dispatchctl fetch --timeout 60s $(cat ids) >values
	seq 1 2000 | sed 's/^/v/' | cmp - values
	run -0 dispatchctl --json status
	jq -e '.done == 2000 and .failed == 0 and .queued == 0 and .inflight == 0' <<<"$output"
	echo "# $kills kills; $(jq .worker_deaths <<<"$output") worker deaths seen; requeued: $(curl -s "http://$MUSTER_DISPATCHER/metrics" | awk '$1 == "muster_dispatch_requeued_total" {print $2}')" >&3
}
