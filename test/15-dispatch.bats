#!/usr/bin/env bats
# dispatchd, workerloop and dispatchctl: closures with at-least-once
# execution (ClusterCoordinator's semantics, for command lines).

load helper

bats_require_minimum_version 1.5.0

@test "a closure's value is its stdout's bytes, and fetch exits with its status" {
	start_dispatchd
	start_worker worker:0
	head -c 3000 /dev/urandom >in.bin
	id=$(dispatchctl schedule --stdin in.bin -- cat)
	dispatchctl fetch --timeout 30s "$id" >out.bin
	cmp in.bin out.bin
	id=$(dispatchctl schedule -- sh -c 'printf "%s %s %s %s" "$MUSTER_CLOSURE_ID" "$MUSTER_ATTEMPT" "$MUSTER_WORKER" "$MUSTER_QUEUE"; exit 3')
	run -3 dispatchctl fetch --timeout 30s "$id"
	assert_output "$id 1 worker:0 default"
	# The queue's error is that closure's: join reports it with its code.
	run -3 dispatchctl join --timeout 30s
	assert_output --partial "closure $id of queue default failed on worker:0: exited with status 3"
}

@test "fetch --json gives the state and every field" {
	start_dispatchd
	id=$(dispatchctl schedule --env GREETING=hi -- sh -c 'echo "$GREETING"; echo oops >&2; exit 2')
	run -4 dispatchctl --json fetch --timeout 0 "$id"
	[[ $output == *'"state":"NOT_READY"'* ]]
	[[ $output == *'"phase":"queued"'* ]]
	start_worker worker:0
	run -2 dispatchctl --json fetch --timeout 30s "$id"
	jq -e '.state == "READY" and .exit == 2 and .signal == null and .attempts == 1 and .worker == "worker:0" and .failed' <<<"$output"
	[ "$(jq -r .stdout <<<"$output" | base64 -d)" = hi ]
	[ "$(jq -r .stderr_tail <<<"$output" | base64 -d)" = oops ]
}

@test "kill -9 of a workerloop in the middle of a closure: it runs again elsewhere, attempt 2" {
	start_dispatchd --heartbeat-timeout 60s
	start_worker worker:0
	w0=$WORKER_PID
	id=$(dispatchctl schedule -- sh -c 'echo "$MUSTER_WORKER $MUSTER_ATTEMPT"; [ "$MUSTER_ATTEMPT" = 1 ] && { echo x >"'"$T"'/started"; sleep 60; }; exit 0')
	wait_file "$T/started"
	start_worker worker:1
	kill -9 "$w0"
	# Long before the heartbeat timeout: the worker's connection closed.
	run -0 dispatchctl fetch --timeout 30s "$id"
	assert_output "worker:1 2"
	[ "$(closure_field "$id" attempts)" = 2 ]
	[ "$(closure_field "$id" worker_deaths)" = 1 ]
	curl -s "http://$MUSTER_DISPATCHER/v1/workers" |
		jq -e '.workers[] | select(.name == "worker:0") | .last_failure == "its connection was lost"'
}

@test "SIGTERM of a workerloop: its closure is stopped and queued again before the heartbeat timeout" {
	start_dispatchd --heartbeat-timeout 120s
	start_worker worker:0 --grace 5s
	w0=$WORKER_PID
	id=$(dispatchctl schedule -- sh -c 'echo "$MUSTER_WORKER $MUSTER_ATTEMPT"; [ "$MUSTER_ATTEMPT" = 1 ] && { echo x >"'"$T"'/started"; exec sleep 60; }; exit 0')
	wait_file "$T/started"
	kill -TERM "$w0"
	wait_exit "$w0" 30
	[ "$STATUS" = 0 ]
	[ "$(closure_field "$id" phase)" = queued ]
	start_worker worker:1
	run -0 dispatchctl fetch --timeout 30s "$id"
	assert_output "worker:1 2"
	# Preempted, not dead: no death counted against it.
	[ "$(closure_field "$id" worker_deaths)" = 0 ]
	grep -q 'stopping' "$T/worker:0.log"
}

@test "the first error cancels the queued closures and is reported once" {
	start_dispatchd
	start_worker worker:0
	bad=$(dispatchctl schedule -- sh -c 'until [ -e "'"$T"'/go" ]; do sleep 0.05; done; echo broken >&2; exit 5')
	for i in 1 2 3; do dispatchctl schedule -- echo "$i" >>queued; done
	touch go
	run -5 dispatchctl join --timeout 30s
	assert_output --partial "closure $bad of queue default failed on worker:0: exited with status 5"
	assert_output --partial broken
	while read -r id; do
		run -8 dispatchctl fetch --timeout 10s "$id"
		[ "$(closure_field "$id" state)" = CANCELLED ]
	done <queued
	# Reported once: the queue goes on normally.
	run -0 dispatchctl join --timeout 30s
	id=$(dispatchctl schedule -- echo after)
	run -0 dispatchctl fetch --timeout 30s "$id"
	assert_output after
}

@test "a schedule that finds the queue's error reports it and enqueues nothing" {
	start_dispatchd
	start_worker worker:0
	bad=$(dispatchctl schedule -- false)
	run -1 dispatchctl fetch --timeout 30s "$bad"
	run -1 dispatchctl schedule -- echo never
	assert_output --partial "closure $bad of queue default failed"
	run -0 dispatchctl --json status
	jq -e '.closures == 1' <<<"$output"
	# done reports an error the same way, and is false/true afterwards.
	dispatchctl schedule -- false >bad2
	run -1 dispatchctl fetch --timeout 30s "$(cat bad2)"
	run -1 dispatchctl done
	assert_output --partial "closure $(cat bad2)"
	run -0 dispatchctl done
	assert_output true
}

@test "named queues keep their errors and joins apart" {
	start_dispatchd
	start_worker worker:0
	dispatchctl -q a schedule -- false >/dev/null
	dispatchctl -q b schedule -- true >/dev/null
	run -0 dispatchctl -q b join --timeout 30s
	run -1 dispatchctl -q a join --timeout 30s
	run -0 dispatchctl -q a join --timeout 30s
	run -2 dispatchctl -q 'no/such' status
	assert_output --partial "is not a queue name"
}

@test "--retry-exit and --max-retries retry a transient failure, then give up" {
	start_dispatchd
	start_worker worker:0
	id=$(dispatchctl schedule --retry-exit 75 --max-retries 3 -- sh -c '[ "$MUSTER_ATTEMPT" -lt 3 ] && exit 75; echo ok')
	run -0 dispatchctl fetch --timeout 30s "$id"
	assert_output ok
	jq -e '.attempts == 3 and .retries == 2' <<<"$(dispatchctl --json fetch "$id")"
	id=$(dispatchctl schedule --retry-exit 75 --max-retries 1 -- sh -c 'exit 75')
	run -75 dispatchctl fetch --timeout 30s "$id"
	[ "$(closure_field "$id" attempts)" = 2 ]
	run -75 dispatchctl join --timeout 30s
}

@test "a closure that kills its workers is failed after --max-worker-deaths" {
	start_dispatchd --max-worker-deaths 2
	start_worker worker:0
	id=$(dispatchctl schedule -- sh -c 'kill -9 $PPID; sleep 30')
	wait_for 20 bash -c '[ "$(curl -s "http://$MUSTER_DISPATCHER/v1/closures/'"$id"'" | jq .worker_deaths)" = 1 ]'
	workerloop -t worker:1 2>>"$T/worker:1.log" &
	BG_PIDS+=($!)
	run -7 dispatchctl fetch --timeout 30s "$id"
	assert_output --partial "was running on 2 workers that died"
	run -7 dispatchctl join --timeout 30s
}

@test "the bounded queue blocks schedule, and --no-block gets RESOURCE_EXHAUSTED" {
	start_dispatchd --queue-max 2
	dispatchctl schedule -- echo 1 >/dev/null
	dispatchctl schedule -- echo 2 >/dev/null
	run -12 dispatchctl schedule --no-block -- echo 3
	assert_output --partial "queue default is full"
	dispatchctl schedule -- echo 3 >third &
	pid=$!
	BG_PIDS+=("$pid")
	nap 0.5
	running "$pid"
	[ ! -s third ]
	start_worker worker:0
	wait_exit "$pid" 30
	[ "$STATUS" = 0 ]
	run -0 dispatchctl fetch --timeout 30s "$(cat third)"
	assert_output 3
}

@test "--key makes schedule idempotent" {
	start_dispatchd
	a=$(dispatchctl schedule --key eval-7 -- echo seven)
	b=$(dispatchctl schedule --key eval-7 -- echo seven)
	[ "$a" = "$b" ]
	c=$(dispatchctl -q other schedule --key eval-7 -- echo seven)
	[ "$c" != "$a" ]
	printf '%s\n' x y x | dispatchctl schedule --each --key 'k-{}' -- echo {} >ids
	[ "$(sed -n 1p ids)" = "$(sed -n 3p ids)" ]
	[ "$(sed -n 1p ids)" != "$(sed -n 2p ids)" ]
	run -2 dispatchctl schedule --each --key fixed -- echo {}
	assert_output --partial "must hold {}"
}

@test "schedule --each: one closure per line, {} replaced or the line appended" {
	start_dispatchd
	start_worker worker:0 -j 2
	seq 1 50 | dispatchctl schedule --each -- sh -c 'echo "n=$1"' sh {} >ids
	[ "$(wc -l <ids)" = 50 ]
	printf 'a b\n' | dispatchctl schedule --each -- echo >>ids
	dispatchctl join --timeout 60s
	run -0 dispatchctl fetch $(cat ids)
	[ "${lines[0]}" = "n=1" ]
	[ "${lines[49]}" = "n=50" ]
	[ "${lines[50]}" = "a b" ]
}

@test "cancel: a queued closure ends CANCELLED, a running one is stopped" {
	start_dispatchd
	q=$(dispatchctl schedule --on worker:9 -- echo never)
	run -0 dispatchctl cancel "$q"
	run -8 dispatchctl fetch "$q"
	assert_output --partial cancelled
	start_worker worker:0 --grace 1s
	r=$(dispatchctl schedule -- sh -c 'echo $$ >"'"$T"'/pid"; exec sleep 60')
	wait_file "$T/pid"
	run -0 dispatchctl cancel "$r"
	[ "$(closure_field "$r" state)" = CANCELLED ]
	wait_for 20 exited "$(cat pid)"
	run -6 dispatchctl cancel "$r"
	run -0 dispatchctl forget "$r"
	run -1 dispatchctl fetch "$r"
	assert_output --partial "no closure $r"
}

@test "--on pins a closure to one worker" {
	start_dispatchd
	start_worker worker:0
	start_worker worker:1
	for i in 1 2 3 4; do dispatchctl schedule --on worker:1 -- sh -c 'echo $MUSTER_WORKER'; done >ids
	dispatchctl join --timeout 30s
	run -0 dispatchctl fetch $(cat ids)
	[ "$(sort -u <<<"$output")" = worker:1 ]
}

@test "a resource is built once per worker incarnation, and again after the worker comes back" {
	start_dispatchd --heartbeat-timeout 60s
	run -3 dispatchctl schedule --needs table -- true
	assert_output --partial "no resource table"
	dispatchctl resource add table -- sh -c 'echo built >>"'"$T"'/builds"; echo "$MUSTER_WORKER" >data'
	start_worker worker:0 -j 2
	w0=$WORKER_PID
	for i in 1 2 3; do dispatchctl schedule --needs table -- sh -c 'cat "$MUSTER_RESOURCE_TABLE/data"'; done >ids
	dispatchctl join --timeout 30s
	run -0 dispatchctl fetch $(cat ids)
	[ "$output" = "$(printf 'worker:0\nworker:0\nworker:0')" ]
	[ "$(wc -l <builds)" = 1 ]
	run -0 dispatchctl resource status table
	assert_output --partial "worker:0         ready"
	kill -9 "$w0"
	# Its parked heartbeat's connection closes at once; killed between
	# two heartbeats (a busy machine), it is down at the timeout.
	wait_for 90 bash -c '! dispatchctl --json status | jq -e ".workers[] | select(.name == \"worker:0\" and .live)" >/dev/null'
	start_worker worker:0
	id=$(dispatchctl schedule --needs table -- sh -c 'cat "$MUSTER_RESOURCE_TABLE/data"')
	run -0 dispatchctl fetch --timeout 30s "$id"
	assert_output worker:0
	[ "$(wc -l <builds)" = 2 ]
}

@test "a resource that fails is the queue's error, with its reason" {
	start_dispatchd
	dispatchctl resource add broken -- sh -c 'echo no disk >&2; exit 4'
	run -5 dispatchctl resource add broken -- true
	assert_output --partial "exists with another command"
	start_worker worker:0
	id=$(dispatchctl schedule --needs broken -- true)
	run -4 dispatchctl fetch --timeout 30s "$id"
	run -4 dispatchctl join --timeout 30s
	assert_output --partial "resource broken failed on worker:0: exited with status 4: no disk"
	run -0 dispatchctl resource status broken
	assert_output --partial failed
}

@test "--serve: closures go to a persistent process as lines of JSON" {
	start_dispatchd
	start_worker worker:0 -j 2 --serve "echo started >>'$T/starts'; exec /usr/bin/python3 $BATS_TEST_DIRNAME/../examples/serve.py"
	seq 1 20 | dispatchctl schedule --each -- echo {} >ids
	run -0 dispatchctl fetch --timeout 60s $(cat ids)
	[ "$output" = "$(seq 1 20)" ]
	# A failure comes back as the closure's own (scheduled after the
	# others ended: a queue's error cancels the closures in flight).
	id=$(dispatchctl schedule -- sh -c 'exit 6')
	run -6 dispatchctl fetch --timeout 30s "$id"
	run -6 dispatchctl join --timeout 30s
	# One process per slot served them all.
	[ "$(wc -l <starts)" -le 2 ]
}

@test "--serve: a process that reads none of a request larger than a pipe still stops the closure at its --timeout, and its worker at SIGTERM" {
	start_dispatchd --heartbeat-timeout 120s
	start_worker worker:0 --grace 500ms --serve 'exec sleep 60'
	head -c 300000 /dev/zero >big
	id=$(dispatchctl schedule --timeout 1s --stdin big -- cat)
	run -137 dispatchctl fetch --timeout 20s "$id"
	jq -e '.message | test("timed out after 1s")' <<<"$(dispatchctl --json fetch "$id")"
	# Another queue: the first one's error is not this schedule's.
	id=$(dispatchctl -q leaving schedule --stdin big -- cat)
	wait_for 10 eval '[ "$(closure_field "$id" phase)" = running ]'
	kill -TERM "$WORKER_PID"
	wait_exit "$WORKER_PID" 20
	[ "$STATUS" = 0 ]
	[ "$(closure_field "$id" phase)" = queued ]
}

@test "a closure past its --timeout is stopped and fails" {
	start_dispatchd
	start_worker worker:0 --grace 500ms
	id=$(dispatchctl schedule --timeout 300ms -- sleep 60)
	run -143 dispatchctl fetch --timeout 30s "$id"
	jq -e '.signal == 15 and (.message | test("timed out after"))' <<<"$(dispatchctl --json fetch "$id")"
}

# escaping NAME: a closure's command that starts a process in a session
# of its own (out of reach of its group's KILL), which holds the closure's
# stdout and stderr for a minute and writes its pid to $T/NAME first.
escaping() {
	echo 'setsid sh -c "echo \$\$ >\"\$D/'"$1"'\"; exec sleep 60" &
		until [ -s "$D/'"$1"'" ]; do sleep 0.01; done; echo before; exec sleep 60'
}

@test "a closure stopped while a process it started in a session of its own holds its output ends at once: its timeout, its worker's SIGTERM" {
	start_dispatchd --heartbeat-timeout 120s
	start_worker worker:0 --grace 500ms
	id=$(dispatchctl schedule --timeout 1s --env "D=$T" -- sh -c "$(escaping escaped)")
	wait_file "$T/escaped"
	BG_PIDS+=("$(cat "$T/escaped")")
	run -143 dispatchctl fetch --timeout 20s "$id"
	assert_output before
	jq -e '.signal == 15 and (.message | test("timed out after 1s"))' <<<"$(dispatchctl --json fetch "$id")"
	# Another queue: the first one's error is not this schedule's.
	id=$(dispatchctl -q leaving schedule --env "D=$T" -- sh -c "$(escaping escaped2)")
	wait_file "$T/escaped2"
	BG_PIDS+=("$(cat "$T/escaped2")")
	kill -TERM "$WORKER_PID"
	wait_exit "$WORKER_PID" 20
	[ "$STATUS" = 0 ]
	[ "$(closure_field "$id" phase)" = queued ]
}

@test "a command that cannot run is told apart: 127 with the reason" {
	start_dispatchd
	start_worker worker:0
	id=$(dispatchctl schedule -- /no/such/program)
	run -127 dispatchctl fetch --timeout 30s "$id"
	[[ $(closure_field "$id" message) == *"No such file"* ]]
}

@test "with no worker for --worker-recovery, join fails UNAVAILABLE instead of hanging" {
	start_dispatchd --worker-recovery 1s
	dispatchctl schedule -- true >/dev/null
	run -9 dispatchctl join --timeout 60s
	assert_output --partial "no worker for"
}

@test "--watchdog logs the queue and every worker when nothing ends" {
	# Below its least, the flag's message says what that least is.
	run --separate-stderr dispatchd -l 127.0.0.1:0 --watchdog 5ms
	assert_failure 2
	[[ $stderr == *"--watchdog 5ms is not a duration of 10ms or more"* ]]
	start_dispatchd --watchdog 300ms
	start_worker worker:0
	dispatchctl schedule -- sleep 60 >/dev/null
	wait_grep 'watchdog: worker worker:0: live, 1 running' "$T/dispatchd.log" 20
	grep -q 'watchdog: queue default: 0 queued, 1 in flight' "$T/dispatchd.log"
}

@test "--max-output cuts a closure's stdout and says so" {
	start_dispatchd
	start_worker worker:0 --max-output 1K
	id=$(dispatchctl schedule -- head -c 5000 /dev/zero)
	run -0 dispatchctl fetch --timeout 30s "$id"
	[ "$(dispatchctl fetch "$id" 2>/dev/null | wc -c)" = 1024 ]
	assert_output --partial "cut at the worker's --max-output"
}

@test "workerloop --start-delay staggers workers by index" {
	start_dispatchd
	start_worker worker:3 --start-delay 1s --start-delay-max 2s
	id=$(dispatchctl schedule -- true)
	nap 1
	[ "$(closure_field "$id" phase)" = queued ]
	run -0 dispatchctl fetch --timeout 30s "$id"
}

@test "dispatchd serves /healthz and /metrics" {
	start_dispatchd
	start_worker worker:0
	dispatchctl schedule -- true >/dev/null
	dispatchctl join --timeout 30s
	run -0 curl -sf "http://$MUSTER_DISPATCHER/healthz"
	run -0 curl -sf "http://$MUSTER_DISPATCHER/metrics"
	assert_output --partial "muster_dispatch_done_total 1"
	assert_output --partial "muster_dispatch_workers_live 1"
	assert_output --partial "muster_dispatch_queued 0"
}

@test "bad input gets a clear error and its exit code; dispatchd keeps serving" {
	start_dispatchd
	run -2 dispatchctl
	run -2 dispatchctl frobnicate
	assert_output --partial "unknown verb frobnicate"
	run -2 dispatchctl schedule
	assert_output --partial "needs a command"
	run -2 dispatchctl fetch abc
	assert_output --partial "abc is not a closure id"
	run -2 dispatchctl schedule --env NOEQUALS -- true
	run -2 dispatchctl schedule --on nonsense -- true
	run -2 dispatchctl schedule --retry-exit 0 -- true
	run -1 dispatchctl fetch 999
	assert_output --partial "no closure 999"
	run -2 workerloop
	assert_output --partial "no worker name"
	run -2 workerloop -t notatask
	run -2 dispatchd --queue-max 0
	run -2 dispatchd --heartbeat-timeout soon
	A="http://$MUSTER_DISPATCHER"
	run -0 curl -s -XPOST "$A/v1/queues/default/closures" -d 'not json'
	assert_output --partial INVALID_ARGUMENT
	run -0 curl -s -XPOST "$A/v1/queues/default/closures" -d '{"closures":[{"argv":[]}]}'
	assert_output --partial "argv must be a non-empty array"
	run -0 curl -s -XPOST "$A/v1/queues/default/closures" -d '{"closures":[{"argv":["x"],"stdin":"!!"}]}'
	assert_output --partial "stdin must be base64"
	run -0 curl -s -XPOST "$A/v1/workers/w:0/take?incarnation=zz"
	assert_output --partial ABORTED
	run -0 curl -s -XPOST "$A/v1/workers/bad%20name" -d '{}'
	assert_output --partial "not a worker name"
	run -0 curl -sf "$A/healthz"
	run -9 env MUSTER_DISPATCHER=127.0.0.1:1 dispatchctl status
}

@test "each action of a worker, a queue and a closure is a route: others are 404, a wrong method 405 with Allow" {
	start_dispatchd
	A="http://$MUSTER_DISPATCHER"
	# code METHOD PATH: the HTTP status and the error code of the answer.
	code() {
		curl -s -o "$T/r.body" -D "$T/r.head" -w '%{http_code} ' -X "$1" "$A$2" -d '{}'
		jq -r .error.code <"$T/r.body"
	}
	local p
	for p in /v1/workers/w:0/dance /v1/workers/w:0/tasks /v1/workers/w:0/x/y \
		/v1/queues/default/fly /v1/closures/1/uncancel /v1/jobs/1/x; do
		run -0 code POST "$p"
		assert_output "404 NOT_FOUND"
	done
	run -0 code GET /v1/workers/w:0/heartbeat
	assert_output "405 INVALID_ARGUMENT"
	grep -qi '^Allow: POST' "$T/r.head"
	run -0 code POST /v1/queues/default/join
	assert_output "405 INVALID_ARGUMENT"
	grep -qi '^Allow: GET' "$T/r.head"
	run -0 code GET /v1/queues/default/closures
	assert_output "405 INVALID_ARGUMENT"
	run -0 code PUT /v1/closures/1
	assert_output "405 INVALID_ARGUMENT"
	grep -qi '^Allow: GET, DELETE' "$T/r.head"
	# The actions themselves reach their handlers.
	run -0 code POST /v1/workers/w:0/heartbeat
	assert_output "409 ABORTED"
	run -0 code GET /v1/closures/1
	assert_output "404 NOT_FOUND"
	grep -q 'no closure 1' "$T/r.body"
	run -0 code GET "/v1/queues/default/done?wait=0"
	assert_output "200 null"
	run -0 curl -sf "$A/healthz"
}

@test "ls lists a queue's closures, and --state picks the states it names, as ls prints them or finer" {
	start_dispatchd
	start_worker worker:0
	a=$(dispatchctl schedule -- true)
	dispatchctl join --timeout 30s
	b=$(dispatchctl schedule --on worker:9 -- true)
	run -0 dispatchctl ls
	assert_line --regexp "^$a +READY +ended +default +worker:0 +1 +exit 0$"
	assert_line --regexp "^$b +NOT_READY +queued +default +- +0 +-$"
	run -0 dispatchctl --json ls --state queued
	jq -e --argjson b "$b" '[.closures[].id] == [$b]' <<<"$output"
	# The names ls prints, in any case; NOT_READY is queued and running.
	run -0 dispatchctl ls --state READY
	assert_line --regexp "^$a +READY"
	refute_line --regexp "^$b "
	run -0 dispatchctl ls --state NOT_READY
	assert_line --regexp "^$b +NOT_READY"
	refute_line --regexp "^$a "
	run -0 dispatchctl --json ls --state ready
	jq -e --argjson a "$a" '[.closures[].id] == [$a]' <<<"$output"
	run -0 dispatchctl --json ls --state Running
	jq -e '.closures == []' <<<"$output"
	# Another name is a usage error, and dispatchd refuses it too.
	run --separate-stderr dispatchctl ls --state sideways
	assert_failure 2
	[[ $stderr == *"--state sideways is not NOT_READY, READY, ABORTED, CANCELLED, queued or running"* ]]
	run -0 curl -s "http://$MUSTER_DISPATCHER/v1/closures?state=sideways"
	assert_output --partial "one of NOT_READY, READY"
	run -0 curl -s "http://$MUSTER_DISPATCHER/v1/closures?state=not_ready"
	jq -e --argjson b "$b" '[.closures[].id] == [$b]' <<<"$output"
}

@test "resource ls lists the resources; workerloop --dir is where they are built" {
	start_dispatchd
	dispatchctl resource add alpha -- true
	dispatchctl resource add beta -- sh -c 'pwd >where'
	run -0 dispatchctl resource ls
	[ "$(sort <<<"$output")" = "$(printf 'alpha\nbeta')" ]
	start_worker worker:0 --dir "$T/work"
	id=$(dispatchctl schedule --needs beta -- sh -c 'cat "$MUSTER_RESOURCE_BETA/where"')
	run -0 dispatchctl fetch --timeout 30s "$id"
	[[ $output == "$T/work/"*"/beta" ]]
}

@test "dispatchd --max-closure-size refuses a larger closure, and the rest of its batch" {
	start_dispatchd --max-closure-size 2K
	head -c 4000 /dev/zero >big
	run -12 dispatchctl schedule --stdin big -- cat
	assert_output --partial "larger than 2048 bytes"
	printf 'a\nb\n' | dispatchctl schedule --each -- echo {} >/dev/null
	run -0 dispatchctl --json status
	jq -e '.closures == 2' <<<"$output"
}

@test "workerloop exits with the status dispatchd refused it with" {
	printf 'secret-token-0123456789\n' >token
	chmod 600 token
	start_dispatchd --token-file "$T/token"
	printf 'wrong-token-0123456789\n' >wrong
	chmod 600 wrong
	run -11 env MUSTER_TOKEN_FILE="$T/wrong" workerloop -t worker:0
	assert_output --partial UNAUTHENTICATED
}

@test "what a path or a closure cannot carry is refused, not dropped: a name with ?, a --state with &, an argument or a line that is not UTF-8" {
	start_dispatchd
	run --separate-stderr dispatchctl resource add 'gpu?x=1' -- true
	assert_failure 2
	[[ $stderr == *"gpu?x=1 is not a resource name"* ]]
	run --separate-stderr dispatchctl resource status 'x?y'
	assert_failure 2
	run --separate-stderr dispatchctl resource ls
	assert_success
	refute_output --partial gpu
	run --separate-stderr dispatchctl ls --state 'READY&queue=x'
	assert_failure 2
	[[ $stderr == *"is not NOT_READY, READY"* ]]
	# Nothing is scheduled with an argument left out.
	run --separate-stderr dispatchctl schedule -- printf '[%s][%s]\n' a $'\xff' b
	assert_failure 3
	[[ $stderr == *"not UTF-8"* ]]
	run --separate-stderr dispatchctl resource add gpu -- echo a $'\xff' b
	assert_failure 3
	[[ $stderr == *"the command is not UTF-8"* ]]
	run --separate-stderr dispatchctl resource ls
	refute_output --partial gpu
	run --separate-stderr dispatchctl schedule --needs $'\xff' -- true
	assert_failure 2
	run --separate-stderr dispatchctl schedule --env $'A=\xff' --env $'B=\xff' -- true
	assert_failure 2
	# With --each, the line that is not UTF-8 is named, and it stops there.
	run --separate-stderr bash -c "printf 'a\n\xff\nc\n' | dispatchctl schedule --each -- echo"
	assert_failure 3
	[[ $stderr == *"line 2 of input"* ]]
	# None of that went in (the lines before it were in the batch not
	# sent, as before a line holding a NUL): the next closure is id 1.
	run --separate-stderr dispatchctl schedule -- true
	assert_success
	assert_output 1
}

@test "dispatchctl says on stderr, once, what it waits for while dispatchd cannot be reached; a worker does not" {
	local port
	port=$(free_port)
	export MUSTER_DISPATCHER=127.0.0.1:$port
	# A worker waits for dispatchd in silence, as a daemon's log would.
	workerloop -t worker:0 2>worker.log &
	BG_PIDS+=($!)
	# Not a terminal: nothing is said in the first 3 s, then one line.
	run --separate-stderr dispatchctl fetch --timeout 4s 1
	assert_failure 9
	assert_equal "${#stderr_lines[@]}" 2
	[[ ${stderr_lines[0]} =~ ^"dispatchctl: waiting up to "[12]"s for dispatchd (cannot reach 127.0.0.1:$port: Connection refused)"$ ]] ||
		fail "${stderr_lines[0]}"
	assert_equal "${stderr_lines[1]}" "dispatchctl: UNAVAILABLE: cannot reach $MUSTER_DISPATCHER: Connection refused"
	! grep -q "waiting" worker.log || fail "$(cat worker.log)"
}

@test "what dispatchctl cannot write to stdout (a full disk) is an error, not exit 0, whatever the verb" {
	start_dispatchd
	start_worker worker:0
	local id v
	id=$(dispatchctl schedule -- true)
	dispatchctl join
	seq 1 3 >splits
	for v in status "done" "--json done" "ls" "--json fetch $id" \
		"--json forget $id" "dataset add --splits splits --reader cat" \
		"dataset ls" "job ls" "splits range 0 10" "splits files splits"; do
		# shellcheck disable=SC2086
		run bash -c "dispatchctl $v >/dev/full"
		[ "$status" -eq 10 ] || fail "dispatchctl $v: exit $status: $output"
		assert_output --partial "dispatchctl: INTERNAL: writing: "
	done
}

@test "dispatchctl join on a terminal shows done of all, failed, running and queued in one line written over; into a pipe it shows nothing" {
	start_dispatchd
	start_worker worker:0 -j 2
	seq 1 8 | dispatchctl schedule --each -- sh -c 'sleep 0.5' sh {} >ids
	on_tty "dispatchctl join --timeout 60s" >tty.out
	tr '\r' '\n' <tty.out | sed 's/\x1b\[K//g' | grep -v '^$' >lines
	cat lines
	tail -n 1 lines | grep -qx 'dispatchctl: queue default: 8/8 done, 0 failed, 0 running, 0 queued'
	grep -Eq '^dispatchctl: queue default: [0-7]/8 done, 0 failed, [0-2] running, [0-8] queued$' lines
	# One line, written over: a single newline, at the end.
	[ "$(tr -cd '\n' <tty.out | wc -c)" = 1 ]
	seq 1 2 | dispatchctl schedule --each -- sh -c 'sleep 0.5' sh {} >/dev/null
	run -0 --separate-stderr dispatchctl join --timeout 60s
	[ -z "$stderr" ] || fail "$stderr"
}

@test "schedule --independent: a closure's failure is its own value; its queue holds no error, the others run, join is 0" {
	start_dispatchd
	start_worker worker:0 -j 2
	a=$(dispatchctl schedule --independent -- sh -c 'echo partial; echo why >&2; exit 3')
	b=$(dispatchctl schedule --independent -- sh -c 'sleep 1; echo fine')
	wait_for 30 eval '[ "$(closure_field "$a" state)" = READY ]'
	# The next schedule does not report a's failure, nor cancel b.
	c=$(dispatchctl schedule -- echo next)
	run -0 dispatchctl join --timeout 30s
	run -3 dispatchctl fetch "$a"
	assert_output partial
	assert_equal "$(dispatchctl fetch "$b" "$c")" "$(printf 'fine\nnext')"
	run -3 dispatchctl --json fetch "$a"
	jq -e '.independent == true and .exit == 3 and .failed == true' <<<"$output"
	run -0 dispatchctl --json status
	jq -e '.failed == 1 and .done == 3 and .cancelled == 0 and .queues[0].error == null' <<<"$output"
	# Without it, the same failure is the queue's error, as upstream.
	d=$(dispatchctl -q q2 schedule -- sh -c 'exit 3')
	run -3 dispatchctl -q q2 join --timeout 30s
	run -2 dispatchctl schedule --independent=yes -- true
}
