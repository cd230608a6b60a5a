#!/usr/bin/env bats
# Workers that come back: workerloop --supervise starts its worker again
# when it dies (kill -9, a crash), as Dask's nanny does, and dispatchd
# --local-workers N is a whole cluster on one machine, stopped by Ctrl-C.

load helper

bats_require_minimum_version 1.5.0

# supervised NAME [ARGS]: workerloop --supervise in the background (the
# parent's PID in SUP_PID, its log in $T/NAME.log), once its worker is live.
supervised() {
	local name=$1
	shift
	workerloop --supervise -t "$name" "$@" 2>>"$T/$name.log" &
	SUP_PID=$!
	BG_PIDS+=("$SUP_PID")
	wait_for 10 worker_live "$name"
}

# child_of PID: the one child of PID (the supervised worker), or nothing.
child_of() {
	ps -o pid= --ppid "$1" | tr -d ' '
}

# incarnation NAME: the worker's incarnation in dispatchd's status.
incarnation() {
	dispatchctl --json status 2>/dev/null |
		jq -enr --arg n "$1" '[inputs | .workers[] | select(.name == $n and .live) | .incarnation] | first // empty'
}

# back NAME INC: NAME is live with another incarnation than INC.
back() {
	local now
	now=$(incarnation "$1")
	[ -n "$now" ] && [ "$now" != "$2" ]
}

@test "workerloop --supervise: a worker killed -9 is back, registered anew, within 2 s" {
	start_dispatchd --heartbeat-timeout 60s
	supervised worker:0
	child=$(child_of "$SUP_PID")
	[ -n "$child" ]
	inc=$(incarnation worker:0)
	[ -n "$inc" ]
	t0=${EPOCHREALTIME/./}
	kill -KILL "$child"
	wait_for 10 back worker:0 "$inc"
	took=$(((${EPOCHREALTIME/./} - t0) / 1000))
	echo "# back in ${took} ms" >&3
	((took < 2000)) || fail "back after ${took} ms"
	running "$SUP_PID"
	new=$(child_of "$SUP_PID")
	[ -n "$new" ] && [ "$new" != "$child" ]
	grep -q "pid $child was killed by SIGKILL after .*; starting it again in 100ms" "$T/worker:0.log"
	grep -q "started again as pid $new (restart 1)" "$T/worker:0.log"
}

@test "workerloop --supervise: the closures of a killed worker run again at once on its next incarnation, not after the heartbeat timeout" {
	start_dispatchd --heartbeat-timeout 120s
	supervised worker:0 -j 2
	seq 1 6 | dispatchctl schedule --each -- sh -c 'sleep 1; echo "v$1"' sh {} >ids
	wait_for 10 eval '[ "$(dispatchctl --json status | jq .inflight)" = 2 ]'
	kill -KILL "$(child_of "$SUP_PID")"
	# Well within the 120 s a dead worker would be waited for.
	run -0 dispatchctl join --timeout 30s
	dispatchctl fetch --timeout 10s $(cat ids) >values
	seq 1 6 | sed 's/^/v/' | cmp - values
	run -0 dispatchctl --json status
	jq -e '.done == 6 and .failed == 0' <<<"$output"
}

@test "workerloop --supervise: SIGTERM stops the worker, which gives its closures back, and nothing starts again" {
	start_dispatchd
	supervised worker:0
	child=$(child_of "$SUP_PID")
	id=$(dispatchctl schedule -- sleep 30)
	wait_for 10 eval '[ "$(closure_field "$id" phase)" = running ]'
	kill -TERM "$SUP_PID"
	wait_exit "$SUP_PID" 30
	[ "$STATUS" = 0 ]
	! running "$child"
	! grep -q "started again" "$T/worker:0.log"
	grep -q "its closures go back to the queue" "$T/worker:0.log"
	wait_for 10 eval '[ "$(closure_field "$id" phase)" = queued ]'
}

@test "workerloop --supervise: a second SIGTERM kills the worker at once, its closure's grace not waited out" {
	start_dispatchd
	supervised worker:0 --grace 60s
	child=$(child_of "$SUP_PID")
	id=$(dispatchctl schedule -- sh -c 'trap "" TERM; sleep 120')
	wait_for 10 eval '[ "$(closure_field "$id" phase)" = running ]'
	kill -TERM "$SUP_PID"
	# The worker waits out the closure's grace (60 s) for the first one.
	wait_grep "stopping \\(Terminated\\)" "$T/worker:0.log" 10
	running "$child"
	kill -TERM "$SUP_PID"
	wait_exit "$SUP_PID" 10
	[ "$STATUS" = 137 ]
	! running "$child"
	! grep -q "started again" "$T/worker:0.log"
}

@test "workerloop --supervise: a refused token is not started again; it exits 11 saying so" {
	printf 'tok-%s\n' "$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >"$T/token"
	start_dispatchd --token-file "$T/token"
	run -11 workerloop --supervise -t worker:0
	[[ $output == *"UNAUTHENTICATED"* ]]
	[[ $output == *"exited with 11: not started again"* ]]
}

@test "workerloop --supervise: a worker that keeps dying is started again after longer and longer pauses" {
	start_dispatchd
	# Its --listen address is taken: each child exits 9 (UNAVAILABLE).
	silent_peer
	workerloop --supervise -t worker:0 --listen "127.0.0.1:$(cat port)" 2>"$T/w.log" &
	sup=$!
	BG_PIDS+=("$sup")
	wait_for 20 grep -q "starting it again in 800ms" "$T/w.log"
	grep -q "exited with 9 after .*; starting it again in 100ms" "$T/w.log"
	grep -q "starting it again in 200ms" "$T/w.log"
	grep -q "starting it again in 400ms" "$T/w.log"
	kill -TERM "$sup"
	wait_exit "$sup" 10
	[ "$STATUS" = 143 ] || [ "$STATUS" = 0 ]
}

@test "workerloop --supervise: a supervisor killed -9 takes its worker with it" {
	start_dispatchd
	supervised worker:0
	child=$(child_of "$SUP_PID")
	kill9 "$SUP_PID"
	wait_for 20 eval '! running '"$child"
	wait_for 10 eval '! worker_live worker:0'
	grep -q "stopping (Terminated)" "$T/worker:0.log"
}

@test "workerloop --supervise: what a killed worker's closure started is killed with it, not left running beside the closure's next attempt" {
	start_dispatchd --heartbeat-timeout 60s
	supervised worker:0
	# The closure's shell starts a sleep of its own, in its process group.
	id=$(dispatchctl schedule -- sh -c 'sleep 77.31; echo done')
	wait_for 10 eval 'pgrep -f "^sleep 77.31$" >/dev/null'
	first=$(pgrep -f '^sleep 77.31$')
	kill -KILL "$(child_of "$SUP_PID")"
	# The next attempt's sleep, and only it.
	wait_for 10 eval '[ "$(pgrep -f "^sleep 77.31$")" != "$first" ] && [ "$(pgrep -fc "^sleep 77.31$")" = 1 ]' ||
		fail "$(pgrep -af 'sleep 77.31')"
	! running "$first"
	[ "$(closure_field "$id" attempts)" = 2 ]
}

@test "workerloop --supervise: the directory of a worker killed -9 is removed with its supervisor's when it stops" {
	start_dispatchd
	mkdir -p "$T/tmp"
	TMPDIR=$T/tmp supervised worker:0
	[ "$(find "$T/tmp" -mindepth 2 -maxdepth 2 -name 'worker.*' | wc -l)" = 1 ]
	inc=$(incarnation worker:0)
	kill -KILL "$(child_of "$SUP_PID")"
	wait_for 10 back worker:0 "$inc"
	# The dead worker's and the new one's, in the supervisor's.
	[ "$(find "$T/tmp" -mindepth 2 -maxdepth 2 -name 'worker.*' | wc -l)" = 2 ]
	kill -TERM "$SUP_PID"
	wait_exit "$SUP_PID" 30
	[ "$STATUS" = 0 ]
	[ -z "$(ls -A "$T/tmp")" ] || fail "left: $(find "$T/tmp")"
}

@test "workerloop --supervise: a supervisor whose stderr was closed still starts its worker again" {
	start_dispatchd
	# Its stderr's reader takes one line and goes.
	workerloop --supervise -t worker:0 2> >(head -n 1 >/dev/null) &
	SUP_PID=$!
	BG_PIDS+=("$SUP_PID")
	wait_for 10 worker_live worker:0
	inc=$(incarnation worker:0)
	nap 0.5
	kill -KILL "$(child_of "$SUP_PID")"
	wait_for 10 back worker:0 "$inc"
	running "$SUP_PID"
}

@test "dispatchd --local-workers 3: a sweep runs on its workers, a killed one comes back, and SIGINT stops them all, exit 0" {
	start_dispatchd --local-workers 3 --heartbeat-timeout 60s
	for i in 0 1 2; do
		wait_for 10 worker_live "local:$i"
	done
	sups=$(ps -o pid= --ppid "$DISPATCH_PID" | tr -d ' ' | sort)
	[ "$(wc -w <<<"$sups")" = 3 ]
	# In groups of their own: Ctrl-C at a terminal reaches dispatchd only.
	for s in $sups; do
		[ "$(ps -o pgid= -p "$s" | tr -d ' ')" = "$s" ]
	done
	seq 1 12 | dispatchctl schedule --each -- sh -c 'sleep 0.3; echo "v$1"' sh {} >ids
	inc=$(incarnation local:1)
	s=$(ps -o pid=,args= --ppid "$DISPATCH_PID" | awk '/local:1$/ {print $1}')
	kill -KILL "$(child_of "$s")"
	wait_for 10 back local:1 "$inc"
	run -0 dispatchctl join --timeout 60s
	dispatchctl fetch --timeout 10s $(cat ids) >values
	seq 1 12 | sed 's/^/v/' | cmp - values
	workers=$(for s in $sups; do child_of "$s"; done)
	kill -INT "$DISPATCH_PID"
	wait_exit "$DISPATCH_PID" 30
	[ "$STATUS" = 0 ]
	for p in $sups $workers; do
		! running "$p" || fail "$p still runs: $(ps -o args= -p "$p")"
	done
	grep -q "3 local workers" "$T/dispatchd.log"
	[ "$(grep -c 'stopping (Interrupt)\|stopping (Terminated)' "$T/dispatchd.log")" = 3 ]
}

@test "dispatchd --local-workers: a supervisor killed -9 is started again; one that ends by itself is not, and says why" {
	start_dispatchd --local-workers 2
	wait_for 10 worker_live local:0
	wait_for 10 worker_live local:1
	s=$(ps -o pid=,args= --ppid "$DISPATCH_PID" | awk '/local:0$/ {print $1}')
	inc=$(incarnation local:0)
	kill -KILL "$s"
	wait_for 15 back local:0 "$inc"
	grep -q "local:0: its supervisor (pid $s) killed by SIGKILL: starting it again in 1s" "$T/dispatchd.log"
	# local:1's worker stopped on purpose (TERM straight to it): its
	# supervisor ends with it, and that is that.
	s=$(ps -o pid=,args= --ppid "$DISPATCH_PID" | awk '/local:1$/ {print $1}')
	kill -TERM "$(child_of "$s")"
	wait_for 15 grep -q "local:1: its supervisor (pid $s) exited with status 0: not started again" "$T/dispatchd.log"
	! running "$s"
	kill -INT "$DISPATCH_PID"
	wait_exit "$DISPATCH_PID" 30
	[ "$STATUS" = 0 ]
}

@test "dispatchd --local-workers without a workerloop beside it or on the PATH is a usage error" {
	mkdir -p "$T/alone"
	cp "$(type -P dispatchd)" "$T/alone/"
	run -2 env PATH=/usr/bin:/bin "$T/alone/dispatchd" -n --local-workers 2
	[[ $output == *"--local-workers: no workerloop beside dispatchd, nor on the PATH"* ]]
}

@test "dispatchd --local-workers with --store is a usage error" {
	run -2 dispatchd -n --local-workers 2 --store etcd://127.0.0.1:2379/x
	[[ $output == *"--local-workers is for one dispatchd"* ]]
	run -2 dispatchd -n --local-workers 0
}
