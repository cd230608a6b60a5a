#!/usr/bin/env bats
# barrierwait against coordd's barriers: every outcome of the reference's
# WaitAtBarrier and CancelBarrier, as exit codes. Tasks are registered with
# curl and coordd runs with a long heartbeat timeout, so that no heartbeats
# are needed. Every barrierwait has a --timeout, and all of them are ours.

load helper

bats_require_minimum_version 1.5.0

declare -gA BW=()

# metric NAME: its value now.
metric() {
	curl -s "http://$MUSTER_COORD/metrics" | sed -n "s/^$1 //p"
}

# reg TASK INC: registers TASK (JOB:INDEX) with incarnation INC over HTTP.
reg() {
	local code
	code=$(curl -s -m 5 -o "$T/reg.body" -w '%{http_code}' -X POST \
		"http://$MUSTER_COORD/v1/tasks/${1%%:*}/${1#*:}/register?incarnation=$2")
	[ "$code" = 200 ] || {
		echo "register $1 $2: HTTP $code $(cat "$T/reg.body")" >&2
		return 1
	}
}

# report TASK INC: TASK reports an error ("disk full") over HTTP.
report() {
	local code
	code=$(curl -s -m 5 -o "$T/report.body" -w '%{http_code}' -X POST \
		"http://$MUSTER_COORD/v1/tasks/${1%%:*}/${1#*:}/error?incarnation=$2" \
		-d '{"code":"INTERNAL","message":"disk full"}')
	[ "$code" = 200 ] || {
		echo "report $1 $2: HTTP $code $(cat "$T/report.body")" >&2
		return 1
	}
}

# cluster N: coordd with worker=N (3 by default) and the tasks registered
# as worker:I with incarnation aI.
cluster() {
	local i
	start_coordd --cluster "worker=${1:-3}" --heartbeat-timeout 60s
	for ((i = 0; i < ${1:-3}; i++)); do
		reg "worker:$i" "a$i"
	done
}

# bw NAME ARGS...: barrierwait ARGS in the background; stdout in NAME.out,
# stderr in NAME.err, its PID in BW[NAME].
bw() {
	local name=$1
	shift
	barrierwait "$@" >"$T/$name.out" 2>"$T/$name.err" 3>&- &
	BW[$name]=$!
	BG_PIDS+=($!)
}

# bw_status NAME [SECONDS]: waits for barrierwait NAME (10 s by default)
# and sets STATUS.
bw_status() {
	wait_exit "${BW[$1]}" "${2:-10}"
}

# barriers: the ids of the barriers in flight.
barriers() {
	curl -s "http://$MUSTER_COORD/v1/barriers" |
		jq -r '[.barriers[].id] | join(" ")'
}

# --- the command line -------------------------------------------------------

@test "barrierwait -h prints usage to stdout and exits 0" {
	run --separate-stderr barrierwait -h
	assert_success
	assert_line --index 0 --partial 'usage: barrierwait'
	assert_output --partial -- '--cancel ID'
	assert_equal "$stderr" ""
	run --separate-stderr barrierwait --help
	assert_success
	assert_line --index 0 --partial 'usage: barrierwait'
	run --separate-stderr barrierwait --version
	assert_success
	assert_output --regexp '^barrierwait [0-9]+\.[0-9]+\.[0-9]+$'
}

@test "barrierwait usage errors exit 2 with the reason and send nothing" {
	cluster 3
	local before after
	before=$(metric muster_http_requests_total)

	run --separate-stderr barrierwait -t worker:0
	assert_failure 2
	[[ $stderr == *"no barrier ID given"*"usage: barrierwait"* ]]
	run --separate-stderr barrierwait -t worker:0 b1 b2
	assert_failure 2
	[[ $stderr == *"more than one barrier ID given"* ]]
	run --separate-stderr barrierwait b1
	assert_failure 2
	[[ $stderr == *"no task: use -t TASK or set MUSTER_TASK"* ]]
	MUSTER_TASK= run --separate-stderr barrierwait b1
	assert_failure 2
	[[ $stderr == *"no task"* ]]
	local bad
	for bad in worker w:x :1 worker:-1 "wor ker:1" /job:worker; do
		run --separate-stderr barrierwait -t "$bad" b1
		assert_failure 2
		[[ $stderr == *"$bad is not a task (want JOB:INDEX)"* ]] || fail "-t '$bad': $stderr"
	done
	MUSTER_TASK=worker run --separate-stderr barrierwait b1
	assert_failure 2
	run --separate-stderr barrierwait -t worker:0 --tasks worker:0,worker b1
	assert_failure 2
	[[ $stderr == *"--tasks: worker is not a task"* ]]
	run --separate-stderr barrierwait -t worker:0 --tasks , b1
	assert_failure 2
	[[ $stderr == *"--tasks: empty list"* ]]
	run --separate-stderr barrierwait -t worker:0 --tasks worker:0 --cancel b1
	assert_failure 2
	[[ $stderr == *"--tasks makes no sense with --cancel"* ]]
	for bad in 0 abc -1s 5x ""; do
		run --separate-stderr barrierwait -t worker:0 --timeout "$bad" b1
		assert_failure 2
		[[ $stderr == *"--timeout $bad is not a duration above zero"* ]] || fail "--timeout '$bad': $stderr"
	done
	MUSTER_INCARNATION=xyz run --separate-stderr barrierwait -t worker:0 b1
	assert_failure 2
	[[ $stderr == *"MUSTER_INCARNATION=xyz is not an incarnation"* ]]
	run --separate-stderr barrierwait -t worker:0 --no-such-flag b1
	assert_failure 2
	[[ $stderr == *"usage: barrierwait"* ]]

	# None of these reached coordd: only our two /metrics reads did.
	after=$(metric muster_http_requests_total)
	assert_equal "$after" "$((before + 1))"
	assert_equal "$(barriers)" ""
}

# --- passing ----------------------------------------------------------------

@test "a barrier of all tasks passes when the last one arrives, for everyone" {
	cluster 3
	bw b0 -t worker:0 --timeout 5s step1
	MUSTER_TASK=worker:1 bw b1 --timeout 5s step1
	wait_metric muster_http_parked 2
	sleep 0.2
	running "${BW[b0]}"
	running "${BW[b1]}"
	assert_equal "$(barriers)" step1

	run --separate-stderr barrierwait -t /job:worker/task:2 --timeout 5s step1
	assert_success
	assert_output ""
	assert_equal "$stderr" ""
	bw_status b0
	assert_equal "$STATUS" 0
	bw_status b1
	assert_equal "$STATUS" 0
	[ ! -s "$T/b0.err" ] || fail "$(cat "$T/b0.err")"
	[ ! -s "$T/b0.out" ]
	assert_equal "$(barriers)" ""
}

@test "a barrier over a subset passes while a task outside it is not connected, or dead" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	reg worker:0 a0
	reg worker:1 a1
	# worker:2 has not registered.
	bw b0 -t worker:0 --timeout 5s --tasks worker:0,worker:1 sub1
	wait_metric muster_http_parked 1
	run --separate-stderr barrierwait -t worker:1 --timeout 5s --tasks worker:1,worker:0 sub1
	assert_success
	bw_status b0
	assert_equal "$STATUS" 0

	# worker:2 comes, then fails: a subset without it still passes.
	reg worker:2 a2
	report worker:2 a2
	bw b0 -t worker:0 --timeout 5s --tasks worker:0,worker:1 sub2
	wait_metric muster_http_parked 1
	run --separate-stderr barrierwait -t worker:1 --timeout 5s --tasks worker:0,worker:1 sub2
	assert_success
	bw_status b0
	assert_equal "$STATUS" 0

	# So does a barrier of all connected tasks, which worker:2 is not.
	bw b0 -t worker:0 --timeout 5s all
	wait_metric muster_http_parked 1
	run --separate-stderr barrierwait -t worker:1 --timeout 5s all
	assert_success
	bw_status b0
	assert_equal "$STATUS" 0
}

@test "MUSTER_INCARNATION is sent: the right one passes, another is 7 ABORTED" {
	cluster 1
	MUSTER_INCARNATION=00000000000000a0 run --separate-stderr barrierwait -t worker:0 --timeout 5s solo
	assert_success
	MUSTER_INCARNATION=b0 run --separate-stderr barrierwait -t worker:0 --timeout 5s solo2
	assert_failure 7
	[[ $stderr == "barrierwait: ABORTED: "*"incarnation mismatch"* ]]
}

# --- invalid arguments ------------------------------------------------------

@test "conflicting subsets fail the barrier: both callers exit 3" {
	cluster 3
	bw b0 -t worker:0 --timeout 5s --tasks worker:0,worker:1 c1
	wait_metric muster_http_parked 1
	run --separate-stderr barrierwait -t worker:1 --timeout 5s --tasks worker:1,worker:2 c1
	assert_failure 3
	[[ $stderr == "barrierwait: INVALID_ARGUMENT: "*"different set of tasks"* ]]
	bw_status b0
	assert_equal "$STATUS" 3
	grep -q "INVALID_ARGUMENT: .*different set of tasks" "$T/b0.err"

	# All connected tasks (no --tasks) against an explicit list conflicts too.
	bw b0 -t worker:0 --timeout 5s c2
	wait_metric muster_http_parked 1
	run --separate-stderr barrierwait -t worker:1 --timeout 5s --tasks worker:0,worker:1,worker:2 c2
	assert_failure 3
	bw_status b0
	assert_equal "$STATUS" 3
}

@test "a caller outside the barrier's tasks exits 3, and so does a member waiting there" {
	cluster 3
	bw b1 -t worker:1 --timeout 5s --tasks worker:1,worker:2 o1
	wait_metric muster_http_parked 1
	run --separate-stderr barrierwait -t worker:0 --timeout 5s --tasks worker:1,worker:2 o1
	assert_failure 3
	[[ $stderr == *"worker:0 is not a member of barrier o1"* ]]
	bw_status b1
	assert_equal "$STATUS" 3

	# Also as the first caller: nobody can pass it.
	run --separate-stderr barrierwait -t worker:0 --timeout 5s --tasks worker:1 o2
	assert_failure 3
	run --separate-stderr barrierwait -t worker:1 --timeout 5s --tasks worker:1 o2
	assert_failure 3
}

@test "an unknown task in --tasks exits 3, and fails the barrier for those waiting" {
	cluster 3
	run --separate-stderr barrierwait -t worker:0 --timeout 5s --tasks worker:0,worker:7 u1
	assert_failure 3
	[[ $stderr == "barrierwait: INVALID_ARGUMENT: "*"worker:7 is not in the cluster"* ]]
	run --separate-stderr barrierwait -t worker:0 --timeout 5s --tasks ps:0 u1
	assert_failure 3

	bw b1 -t worker:1 --timeout 5s --tasks worker:0,worker:1 u2
	wait_metric muster_http_parked 1
	run --separate-stderr barrierwait -t worker:0 --timeout 5s --tasks worker:0,worker:1,chief:0 u2
	assert_failure 3
	bw_status b1
	assert_equal "$STATUS" 3
	grep -q "chief:0 is not in the cluster" "$T/b1.err"

	# The caller itself must be in the cluster.
	run --separate-stderr barrierwait -t worker:9 --timeout 5s u3
	assert_failure 3
	# And the id must be a barrier id.
	run --separate-stderr barrierwait -t worker:0 --timeout 5s 'bad id'
	assert_failure 3
}

# --- timeouts ---------------------------------------------------------------

@test "a barrier times out with exit 4 naming the missing tasks; the first caller's timeout counts" {
	cluster 3
	local t0 took
	t0=$(now_us)
	bw b0 -t worker:0 --timeout 1s t1
	wait_metric muster_http_parked 1
	sleep 0.4
	# A later caller with a longer timeout still ends at the first deadline.
	run --separate-stderr barrierwait -t worker:1 --timeout 30s t1
	took=$((($(now_us) - t0) / 1000))
	assert_failure 4
	[[ $stderr == "barrierwait: DEADLINE_EXCEEDED: barrier t1 timed out; not arrived: worker:2" ]] || fail "$stderr"
	# At the first caller's 1 s, far from the later caller's 30 s.
	[ "$took" -ge 900 ] && [ "$took" -lt 10000 ] || fail "timed out after ${took}ms"
	bw_status b0
	assert_equal "$STATUS" 4
	assert_equal "$(cat "$T/b0.err")" "barrierwait: DEADLINE_EXCEEDED: barrier t1 timed out; not arrived: worker:2"

	# A member asking again gets the same answer at once, not after the
	# 30 s it would wait.
	t0=$(now_us)
	run --separate-stderr barrierwait -t worker:0 --timeout 30s t1
	assert_failure 4
	[ $((($(now_us) - t0) / 1000)) -lt 5000 ]
}

# --- cancel -----------------------------------------------------------------

@test "cancel: the waiters exit 8, and so does everyone who comes later" {
	cluster 3
	bw b0 -t worker:0 --timeout 5s x1
	bw b1 -t worker:1 --timeout 5s x1
	wait_metric muster_http_parked 2
	run --separate-stderr barrierwait -t worker:2 --cancel x1
	assert_success
	bw_status b0
	assert_equal "$STATUS" 8
	bw_status b1
	assert_equal "$STATUS" 8
	grep -q "^barrierwait: CANCELLED: barrier x1 was cancelled by task worker:2" "$T/b0.err"

	run --separate-stderr barrierwait -t worker:2 --timeout 5s x1
	assert_failure 8
	# Cancelling again is fine.
	run --separate-stderr barrierwait -t worker:0 --cancel x1
	assert_success
}

@test "cancel before anyone arrives: the later arrivals exit 8" {
	cluster 2
	run --separate-stderr barrierwait -t worker:0 --cancel x2
	assert_success
	local t0
	t0=$(now_us)
	run --separate-stderr barrierwait -t worker:1 --timeout 30s x2
	assert_failure 8
	[[ $stderr == "barrierwait: CANCELLED: "* ]]
	# At once, not after the 30 s it would wait for worker:0.
	[ $((($(now_us) - t0) / 1000)) -lt 5000 ]
}

@test "cancel after the barrier passed, or failed otherwise, exits 6" {
	cluster 2
	bw b0 -t worker:0 --timeout 5s p1
	run --separate-stderr barrierwait -t worker:1 --timeout 5s p1
	assert_success
	bw_status b0
	assert_equal "$STATUS" 0
	run --separate-stderr barrierwait -t worker:0 --cancel p1
	assert_failure 6
	[[ $stderr == "barrierwait: FAILED_PRECONDITION: barrier p1 has already passed"* ]]
	# It still counts as passed for its members.
	run --separate-stderr barrierwait -t worker:1 --timeout 5s p1
	assert_success

	run --separate-stderr barrierwait -t worker:0 --timeout 300ms p2
	assert_failure 4
	run --separate-stderr barrierwait -t worker:0 --cancel p2
	assert_failure 6
	[[ $stderr == *"already failed"* ]]
}

# --- reuse ------------------------------------------------------------------

@test "a passed id: a member gets 0 again, a task that was not a member exits 6" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	reg worker:0 a0
	reg worker:1 a1
	bw b0 -t worker:0 --timeout 5s r1
	run --separate-stderr barrierwait -t worker:1 --timeout 5s r1
	assert_success
	bw_status b0
	assert_equal "$STATUS" 0

	reg worker:2 a2
	run --separate-stderr barrierwait -t worker:2 --timeout 5s r1
	assert_failure 6
	[[ $stderr == "barrierwait: FAILED_PRECONDITION: barrier r1 has already passed"* ]]
	run --separate-stderr barrierwait -t worker:0 --timeout 5s r1
	assert_success
	run --separate-stderr barrierwait -t worker:1 --timeout 5s r1
	assert_success
}

@test "after the job leaves, a new epoch frees the barrier ids" {
	cluster 2
	bw b0 -t worker:0 --timeout 5s e1
	run --separate-stderr barrierwait -t worker:1 --timeout 5s e1
	assert_success
	bw_status b0
	assert_equal "$STATUS" 0
	local i
	for i in 0 1; do
		curl -s -m 5 -o /dev/null -X POST "http://$MUSTER_COORD/v1/tasks/worker/$i/shutdown?incarnation=a$i"
	done
	reg worker:0 c0
	reg worker:1 c1
	# e1 is a new barrier: worker:0 waits for worker:1 again.
	bw b0 -t worker:0 --timeout 5s e1
	wait_metric muster_http_parked 1
	sleep 0.2
	running "${BW[b0]}"
	run --separate-stderr barrierwait -t worker:1 --timeout 5s e1
	assert_success
	bw_status b0
	assert_equal "$STATUS" 0
}

# --- failures of tasks and of coordd ----------------------------------------

@test "a member in error fails the barrier: exit 10, naming it" {
	cluster 3
	bw b0 -t worker:0 --timeout 5s f1
	wait_metric muster_http_parked 1
	report worker:1 a1
	bw_status b0
	assert_equal "$STATUS" 10
	grep -q "^barrierwait: INTERNAL: task worker:1 is in error: INTERNAL: disk full" "$T/b0.err"

	# A new barrier with it among the tasks fails at once, not after the
	# 30 s it would wait.
	local t0
	t0=$(now_us)
	run --separate-stderr barrierwait -t worker:0 --timeout 30s --tasks worker:0,worker:1 f2
	assert_failure 10
	[[ $stderr == *"worker:1 is in error"* ]]
	[ $((($(now_us) - t0) / 1000)) -lt 5000 ]
	# The task in error cannot wait at a barrier.
	run --separate-stderr barrierwait -t worker:1 --timeout 5s f3
	assert_failure 6
}

# wait_all_tasks ID TASK INC: POST /v1/barriers/ID with "tasks":"all" for
# TASK, a 2 s long poll; the status and body in $T/ID.TASK.
wait_all_tasks() {
	curl -s -m 10 -o "$T/$1.$2.body" -w '%{http_code}\n' -X POST \
		"http://$MUSTER_COORD/v1/barriers/$1?wait=2s" \
		-d "{\"task\":\"$2\",\"incarnation\":\"$3\",\"timeout_ms\":20000,\"tasks\":\"all\"}" \
		>"$T/$1.$2.code"
}

@test "\"tasks\":\"all\": every task of the cluster is a member, one not registered yet is waited for, one in error fails it at once" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	reg worker:0 a0
	reg worker:1 a1
	# worker:2 has not registered: the barrier is still everyone's.
	wait_all_tasks all1 worker:0 a0
	assert_equal "$(cat "$T/all1.worker:0.code")" 202
	assert_equal "$(jq -c '[.arrived, .total]' "$T/all1.worker:0.body")" '[1,3]'
	wait_all_tasks all1 worker:1 a1 &
	local w1=$!
	reg worker:2 a2
	wait_all_tasks all1 worker:2 a2
	wait "$w1"
	assert_equal "$(cat "$T/all1.worker:1.code" "$T/all1.worker:2.code")" "$(printf '200\n200')"
	# worker:1 in error: the next barrier of every task fails as the
	# first arrives, although worker:1 is not connected.
	report worker:1 a1
	wait_all_tasks all2 worker:0 a0
	assert_equal "$(cat "$T/all2.worker:0.code")" 500
	assert_equal "$(jq -r .error.message "$T/all2.worker:0.body")" "task worker:1 is in error: INTERNAL: disk full"
	# A task that left this run will not come either.
	curl -s -m 5 -o /dev/null -X POST "http://$MUSTER_COORD/v1/tasks/worker/2/shutdown?incarnation=a2"
	run curl -s -m 5 -X POST "http://$MUSTER_COORD/v1/barriers/all3?wait=1s" \
		-d '{"task":"worker:0","incarnation":"a0","tasks":["worker:0","worker:2"]}'
	assert_output '{"error":{"code":"FAILED_PRECONDITION","message":"task worker:2 already left this run (shut down): it will not come to barrier all3"}}'
	# Anything but a list or "all" is refused.
	run curl -s -m 5 -o /dev/null -w '%{http_code}' -X POST "http://$MUSTER_COORD/v1/barriers/all4" \
		-d '{"task":"worker:0","tasks":"some"}'
	assert_output 400
}

@test "coordd shutting down while barrierwaits wait: each exits 7 ABORTED" {
	cluster 6
	local i
	for i in 0 1 2 3 4 5; do
		bw "b$i" -t "worker:$i" --timeout 10s "s$i"
	done
	wait_metric muster_http_parked 6
	kill -TERM "$COORD_PID"
	# Without the ABORTED reply barrierwait would retry until its own
	# deadline (10 s + 5 s) and exit 9: wait long enough to see which.
	local failed=()
	for i in 0 1 2 3 4 5; do
		bw_status "b$i" 20
		[ "$STATUS" = 7 ] || failed+=("worker:$i exited $STATUS: $(cat "$T/b$i.err")")
	done
	[ "${#failed[@]}" = 0 ] || fail "$(printf '%s\n' "${failed[@]}")"
	grep -q "^barrierwait: ABORTED: coordd is shutting down" "$T/b0.err"
	wait_exit "$COORD_PID" 10
	assert_equal "$STATUS" 0
}

@test "a caller that is not registered exits 6" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	reg worker:1 a1
	run --separate-stderr barrierwait -t worker:0 --timeout 5s n1
	assert_failure 6
	[[ $stderr == "barrierwait: FAILED_PRECONDITION: task worker:0 is not registered, not connected" ]] || fail "$stderr"
	# It did not start the barrier either.
	assert_equal "$(barriers)" ""
}

# --- a restart of coordd -----------------------------------------------------

# one_arrived: coordd shows a barrier that one task arrived at.
one_arrived() {
	curl -s -m 5 "http://$MUSTER_COORD/v1/barriers" | grep -q '"arrived":1'
}

@test "a barrierwait parked when coordd is killed and started again carries on, and the barrier waits for every task to come back" {
	local port
	port=$(free_port)
	export MUSTER_COORD=127.0.0.1:$port
	coordd -l "$MUSTER_COORD" --cluster worker=2 --heartbeat-timeout 3s \
		2>>"$T/coordd.log" &
	local cpid=$!
	DAEMON_PIDS+=("$cpid")
	wait_for 10 curl -sf -o /dev/null "http://$MUSTER_COORD/healthz"
	# Two tasks under preemptwatch; each command waits at barrier b1,
	# worker:1 only once told to.
	local i pids=()
	for i in 0 1; do
		preemptwatch -t "worker:$i" -- bash -c '
			[ "$MUSTER_TASK" = worker:1 ] && until [ -e "$1/go" ]; do sleep 0.05; done
			barrierwait --timeout 60s b1 && touch "$1/passed.$MUSTER_TASK"' _ "$T" \
			>"$T/w$i.out" 2>"$T/w$i.err" 3>&- &
		pids+=($!)
		BG_PIDS+=($!)
	done
	wait_for 20 one_arrived
	# coordd dies with worker:0 parked at b1, and comes back at once.
	kill -9 "$cpid"
	wait "$cpid" 2>/dev/null || true
	coordd -l "$MUSTER_COORD" --cluster worker=2 --heartbeat-timeout 3s \
		2>>"$T/coordd.log" &
	DAEMON_PIDS+=($!)
	wait_for 10 curl -sf -o /dev/null "http://$MUSTER_COORD/healthz"
	# Whichever of worker:0's barrierwait and its preemptwatch reaches the
	# new coordd first, the wait goes on; and the barrier's members are
	# not just those registered so far.
	touch "$T/go"
	for i in 0 1; do
		wait_exit "${pids[i]}" 30
		assert_equal "$STATUS" 0
	done
	[ -e "$T/passed.worker:0" ] || fail "worker:0: $(cat "$T/w0.err")"
	[ -e "$T/passed.worker:1" ] || fail "worker:1: $(cat "$T/w1.err")"
}
