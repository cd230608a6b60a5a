#!/usr/bin/env bats
# The task registry of coordd over raw HTTP: coordd's cluster flags,
# register, heartbeat, report-error, reset, shutdown (with and without the
# shutdown barrier), wait-all, the error poll, failure detection, recoverable
# jobs, epochs, and `kvctl status`. Every error case of the reference's
# Connect, WaitForAllTasks, ReportError, Shutdown and Reset has a test here.
# Background requests are bounded (curl -m), and all of them are ours.

load helper

bats_require_minimum_version 1.5.0

# tp TASK [VERB]: the path of TASK (JOB:INDEX), /v1/tasks/JOB/INDEX[/VERB].
tp() {
	echo "/v1/tasks/${1%%:*}/${1#*:}${2:+/$2}"
}

# error_is HTTP CODE: the last `run http ...` answered with status HTTP and
# an error body {"error":{"code":CODE,"message":"..."}} with a message.
error_is() {
	assert_equal "${lines[0]}" "$1"
	local body
	body=$(<"$T/http.body")
	[[ $body == "{\"error\":{\"code\":\"$2\",\"message\":\""[!\"]* ]] ||
		fail "expected a $2 error body, got: $body"
}

# jv FILTER [FILE]: the jq FILTER over the JSON document in FILE (default:
# the body of the last `http`), as js prints it: strings bare, anything
# else as compact JSON.
jv() {
	js "$1" "${2:-$T/http.body}"
}

# msg: the error message of the last `http`.
msg() {
	jv .error.message
}

# reg TASK INC: registers TASK with incarnation INC, which must work.
reg() {
	local code
	code=$(curl -s -m 5 -o "$T/reg.body" -w '%{http_code}' -X POST \
		"http://$MUSTER_COORD$(tp "$1" register)?incarnation=$2")
	[ "$code" = 200 ] || {
		echo "register $1 $2: HTTP $code $(cat "$T/reg.body")" >&2
		return 1
	}
}

# report TASK INC [CODE MESSAGE]: TASK reports an error, which must work.
report() {
	local code
	code=$(curl -s -m 5 -o "$T/report.body" -w '%{http_code}' -X POST \
		"http://$MUSTER_COORD$(tp "$1" error)?incarnation=$2" \
		-d "{\"code\":\"${3:-INTERNAL}\",\"message\":\"${4:-boom}\"}")
	[ "$code" = 200 ] || {
		echo "report $1 $2: HTTP $code $(cat "$T/report.body")" >&2
		return 1
	}
}

# task TASK FILTER: FILTER over GET /v1/tasks/JOB/INDEX, as jv prints it.
task() {
	curl -s -m 5 -o "$T/task.json" "http://$MUSTER_COORD$(tp "$1")"
	jv "$2" "$T/task.json"
}

# cluster FILTER: FILTER over GET /v1/tasks.
cluster() {
	curl -s -m 5 -o "$T/cluster.json" "http://$MUSTER_COORD/v1/tasks"
	jv "$1" "$T/cluster.json"
}

# bg_http NAME METHOD PATH [curl args...]: the request in the background
# (30 s at most). When it ends, NAME.body holds the body, NAME.t the time
# (µs since the epoch) and then NAME.code the HTTP status.
bg_http() {
	local name=$1 method=$2 path=$3
	shift 3
	(
		code=$(curl -s -m 30 -o "$T/$name.body" -w '%{http_code}' \
			-X "$method" "http://$MUSTER_COORD$path" "$@")
		echo "${EPOCHREALTIME/./}" >"$T/$name.t"
		echo "$code" >"$T/$name.code.tmp"
		mv "$T/$name.code.tmp" "$T/$name.code"
	) >/dev/null 2>&1 3>&- &
	BG_PIDS+=($!)
}

# bg_code NAME [SECONDS]: waits for the background request NAME to end
# (10 s by default) and prints its HTTP status.
bg_code() {
	wait_file "$T/$1.code" "${2:-10}" || return 1
	cat "$T/$1.code"
}

# task_is TASK STATE: coordd has TASK in STATE now.
task_is() {
	[ "$(task "$1" .state)" = "$2" ]
}

# beat TASK INC: heartbeats TASK every 200 ms in the background, 60 times
# at most (12 s).
beat() {
	local url="http://$MUSTER_COORD$(tp "$1" heartbeat)?incarnation=$2"
	(
		for ((i = 0; i < 60; i++)); do
			curl -s -m 2 -o /dev/null -X POST "$url"
			sleep 0.2
		done
	) >/dev/null 2>&1 3>&- &
	BG_PIDS+=($!)
}

# --- coordd's cluster flags -------------------------------------------------

@test "coordd --cluster with a bad spec exits 2 with the reason and usage" {
	local bad
	for bad in "" worker "worker=" "worker=0" "worker=-1" "worker=x" \
		"worker=3x" "=3" "wor ker=1" "work/er=1" "worker=3," ",worker=3" \
		"worker=1000001" "worker=2;ps=1"; do
		run --separate-stderr coordd -n --cluster "$bad"
		assert_failure 2
		assert_output ""
		[[ $stderr == *"--cluster: "* ]] || fail "--cluster '$bad': $stderr"
		[[ $stderr == *"usage: coordd"* ]]
	done
	run coordd -n --cluster worker=3,ps=1,chief=1
	assert_success
	run coordd -n --cluster worker=1000000
	assert_success
}

@test "coordd --cluster with a job given twice exits 2" {
	run --separate-stderr coordd -n --cluster worker=2,ps=1,worker=1
	assert_failure 2
	[[ $stderr == *"job worker given twice"* ]]
	[[ $stderr == *"usage: coordd"* ]]
}

@test "coordd --recoverable naming a job not in --cluster exits 2" {
	run --separate-stderr coordd -n --cluster worker=2 --recoverable ps
	assert_failure 2
	[[ $stderr == *"--recoverable: job ps is not in --cluster"* ]]
	[[ $stderr == *"usage: coordd"* ]]

	run --separate-stderr coordd -n --cluster worker=2 --recoverable worker,ps
	assert_failure 2
	[[ $stderr == *"job ps is not in --cluster"* ]]

	# No --cluster at all: no job can be recoverable.
	run --separate-stderr coordd -n --recoverable worker
	assert_failure 2
	[[ $stderr == *"job worker is not in --cluster"* ]]

	# The order of the flags does not matter.
	run coordd -n --recoverable worker --cluster worker=2,ps=1
	assert_success
	run coordd -n --cluster worker=2,ps=1 --recoverable ps,worker
	assert_success
}

@test "coordd with a bad duration for the cluster flags exits 2" {
	local flag bad
	for flag in heartbeat-timeout register-timeout shutdown-barrier-timeout; do
		for bad in abc -1s 5x "" 1.5.5s s 10q; do
			run --separate-stderr coordd -n --cluster worker=1 "--$flag" "$bad"
			assert_failure 2
			assert_output ""
			[[ $stderr == *"--$flag $bad is not a duration"* ]] ||
				fail "--$flag '$bad': $stderr"
			[[ $stderr == *"usage: coordd"* ]]
		done
		run coordd -n --cluster worker=1 "--$flag" 1500ms
		assert_success
		run coordd -n --cluster worker=1 "--$flag" 2m
		assert_success
	done
	# A zero timeout makes no sense for heartbeats or registration; a zero
	# shutdown barrier timeout turns the barrier off.
	run --separate-stderr coordd -n --cluster worker=1 --heartbeat-timeout 0
	assert_failure 2
	[[ $stderr == *"--heartbeat-timeout 0 is not a duration above zero"* ]]
	run --separate-stderr coordd -n --cluster worker=1 --register-timeout 0s
	assert_failure 2
	[[ $stderr == *"--register-timeout 0s is not a duration above zero"* ]]
	run coordd -n --cluster worker=1 --shutdown-barrier-timeout 0
	assert_success
}

@test "GET /v1/tasks lists every task of --cluster, in order, disconnected" {
	start_coordd --cluster worker=2,ps=1 --heartbeat-timeout 7s
	run http GET /v1/tasks
	assert_line --index 0 200
	assert_equal "$(jv '[.tasks[].task]')" '["worker:0","worker:1","ps:0"]'
	assert_equal "$(jv '[.tasks[].state]')" '["disconnected","disconnected","disconnected"]'
	assert_equal "$(jv '[.tasks[].incarnation]')" '[null,null,null]'
	assert_equal "$(jv '[.connected, .total, .epoch, .heartbeat_timeout_ms]')" '[0,3,0,7000]'
	[[ $(jv .service_incarnation) =~ ^[0-9a-f]{16}$ ]]

	# /job:J/task:I works as a name too, and GET of one task.
	run http GET /v1/tasks/ps/0
	assert_line --index 0 200
	assert_equal "$(jv .task)" ps:0
	run http POST /v1/tasks/ps/0
	error_is 405 INVALID_ARGUMENT
}

# --- register ---------------------------------------------------------------

@test "every task call for a task outside the cluster is 400 INVALID_ARGUMENT" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	local path verb
	for path in /v1/tasks/worker/2 /v1/tasks/ps/0 /v1/tasks/worker/x \
		/v1/tasks/worker/-1 /v1/tasks/worker/1x; do
		for verb in register heartbeat error wait-all shutdown reset; do
			run http POST "$path/$verb?incarnation=1" -d '{}'
			error_is 400 INVALID_ARGUMENT
			[[ $output == *'"message":"unknown task '*'not in the cluster'* ]] ||
				fail "$path/$verb: $output"
		done
		run http GET "$path"
		error_is 400 INVALID_ARGUMENT
	done
	assert_equal "$(cluster .connected)" 0
}

@test "without --cluster every task is unknown, and coordd says why" {
	start_coordd
	run http POST /v1/tasks/worker/0/register?incarnation=1
	error_is 400 INVALID_ARGUMENT
	[[ $(msg) == *"coordd runs without --cluster"* ]]
	run http GET /v1/tasks
	assert_line --index 0 200
	assert_equal "$(jv '[.total, .tasks]')" '[0,[]]'
}

@test "register: a missing, malformed or zero incarnation is 400" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	run http POST /v1/tasks/worker/0/register
	error_is 400 INVALID_ARGUMENT
	[[ $(msg) == *"incarnation"* ]]
	local bad
	for bad in "" xyz 0 0000 12345678901234567 -1 0x10 "1%20"; do
		run http POST "/v1/tasks/worker/0/register?incarnation=$bad"
		error_is 400 INVALID_ARGUMENT
	done
	assert_equal "$(task worker:0 .state)" disconnected
}

@test "register: the same incarnation again is OK, and the reply tells the heartbeat" {
	start_coordd --cluster worker=2 --heartbeat-timeout 4s
	local svc
	svc=$(cluster .service_incarnation)
	run http POST /v1/tasks/worker/0/register?incarnation=00ABC
	assert_line --index 0 200
	assert_equal "$(jv '[.task, .incarnation, .heartbeat_timeout_ms, .heartbeat_interval_ms, .tasks]')" \
		'["worker:0","0000000000000abc",4000,2000,2]'
	assert_equal "$(jv .service_incarnation)" "$svc"

	# Again, and in another spelling of the same number.
	run http POST /v1/tasks/worker/0/register?incarnation=00ABC
	assert_line --index 0 200
	run http POST /v1/tasks/worker/0/register?incarnation=abc
	assert_line --index 0 200
	assert_equal "$(task worker:0 '[.state, .incarnation, .error]')" '["connected","0000000000000abc",null]'
	assert_equal "$(cluster .connected)" 1
}

@test "register: a new incarnation while connected is 409 ABORTED, and the task's error is propagated" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	bg_http errs GET '/v1/errors?wait=5s'
	wait_metric muster_http_parked 1

	run http POST /v1/tasks/worker/1/register?incarnation=c
	error_is 409 ABORTED
	[[ $(msg) == *"worker:1"*"registered again"* ]]
	# The new incarnation is told to join the next run, as a task that
	# failed in this one is.
	assert_equal "$(jv '[.reason, .epoch]')" '["failed_in_epoch",0]'

	assert_equal "$(task worker:1 '[.state, .incarnation, .error.code]')" '["error","000000000000000b","ABORTED"]'
	assert_equal "$(bg_code errs)" 200
	assert_equal "$(jv '[.errors[] | [.task, .code]]' "$T/errs.body")" '[["worker:1","ABORTED"]]'
	# The other task is not touched.
	assert_equal "$(task worker:0 .state)" connected
	# And the error stays for everyone who asks.
	run http GET /v1/errors
	assert_line --index 0 200
	assert_equal "$(jv '[.errors[].task]')" '["worker:1"]'
}

@test "register: a task in error is ABORTED until it is reset, then registers again" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	report worker:1 b INTERNAL "out of memory"

	run http POST /v1/tasks/worker/1/register?incarnation=b
	error_is 409 ABORTED
	[[ $(msg) == *"must be reset"* ]]
	run http POST /v1/tasks/worker/1/register?incarnation=c
	error_is 409 ABORTED
	assert_equal "$(task worker:1 .state)" error

	run http POST /v1/tasks/worker/1/reset
	assert_line --index 0 200
	assert_equal "$(task worker:1 .state)" disconnected
	run http POST /v1/tasks/worker/1/register?incarnation=c
	assert_line --index 0 200
	assert_equal "$(task worker:1 '[.state, .incarnation]')" '["connected","000000000000000c"]'
	assert_equal "$(cluster .connected)" 2
}

@test "register: a task that left the run is refused (412 run_over) until every task has left" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a'
	assert_line --index 0 200
	run http POST /v1/tasks/worker/0/register?incarnation=c
	error_is 412 FAILED_PRECONDITION
	assert_equal "$(jv '[.reason, .epoch]')" '["run_over",0]'
	assert_equal "$(task worker:0 .state)" disconnected

	# The run is over once worker:1 leaves too: worker:0 joins the next.
	run http POST '/v1/tasks/worker/1/shutdown?incarnation=b'
	assert_line --index 0 200
	run http POST /v1/tasks/worker/0/register?incarnation=c
	assert_line --index 0 200
	assert_equal "$(jv .epoch)" 1
}

@test "register: a task that failed and then left stays failed for the run until it is reset" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	report worker:1 b INTERNAL "bad node"
	run http POST '/v1/tasks/worker/1/shutdown?incarnation=b'
	error_is 412 FAILED_PRECONDITION
	assert_equal "$(task worker:1 .state)" disconnected
	# Its error still reaches a poller that looks only now.
	run http GET /v1/errors
	assert_equal "$(jv '[.errors[].task]')" '["worker:1"]'
	run http POST /v1/tasks/worker/1/register?incarnation=c
	error_is 409 ABORTED
	assert_equal "$(jv .reason)" failed_in_epoch

	run http POST /v1/tasks/worker/1/reset
	assert_line --index 0 200
	run http GET /v1/errors
	assert_equal "$(jv .)" '{"errors":[]}'
	run http POST /v1/tasks/worker/1/register?incarnation=c
	assert_line --index 0 200
	assert_equal "$(cluster .connected)" 2
}

@test "unknown task verbs are 404, and task verbs want POST" {
	start_coordd --cluster worker=1 --heartbeat-timeout 60s
	run http POST /v1/tasks/worker/0/dance?incarnation=1
	error_is 404 NOT_FOUND
	run http GET /v1/tasks/worker/0/register?incarnation=1
	error_is 405 INVALID_ARGUMENT
	run http DELETE /v1/tasks
	error_is 405 INVALID_ARGUMENT
	assert_equal "$(task worker:0 .state)" disconnected
}

# --- heartbeat --------------------------------------------------------------

@test "heartbeat: an unregistered task is 400 with reason not_registered and the service incarnation" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	local svc
	svc=$(cluster .service_incarnation)
	run http POST /v1/tasks/worker/0/heartbeat?incarnation=a
	error_is 400 INVALID_ARGUMENT
	assert_equal "$(jv '[.reason, .service_incarnation]')" "[\"not_registered\",\"$svc\"]"
	[[ $(msg) == *"worker:0 is not registered"* ]]
}

@test "heartbeat: a wrong incarnation is 409 ABORTED, a missing one 400; the task stays connected" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	reg worker:0 a
	run http POST /v1/tasks/worker/0/heartbeat?incarnation=b
	error_is 409 ABORTED
	[[ $(msg) == *"incarnation mismatch"* ]]
	run http POST /v1/tasks/worker/0/heartbeat
	error_is 400 INVALID_ARGUMENT
	run http POST /v1/tasks/worker/0/heartbeat?incarnation=zz
	error_is 400 INVALID_ARGUMENT
	assert_equal "$(task worker:0 '[.state, .error]')" '["connected",null]'

	# The right one is fine and resets the heartbeat age: 350 ms or more
	# before, and after it no more than the time since it was sent.
	sleep 0.4
	[ "$(task worker:0 .heartbeat_age_ms)" -ge 350 ]
	local t_hb age took
	t_hb=$(now_us)
	run http POST /v1/tasks/worker/0/heartbeat?incarnation=a
	assert_line --index 0 200
	assert_equal "$(jv .)" '{}'
	age=$(task worker:0 .heartbeat_age_ms)
	took=$((($(now_us) - t_hb) / 1000))
	[ "$age" -le $((took + 50)) ] ||
		fail "heartbeat age ${age}ms, ${took}ms after the heartbeat was sent"
}

@test "heartbeat: a task in error gets its own error back" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	reg worker:2 c
	report worker:1 b DEADLINE_EXCEEDED "step took too long"
	run http POST /v1/tasks/worker/1/heartbeat?incarnation=b
	error_is 504 DEADLINE_EXCEEDED
	[[ $(msg) == *"step took too long"* ]]

	# An ABORTED from a second incarnation comes back the same way.
	run http POST /v1/tasks/worker/2/register?incarnation=d
	error_is 409 ABORTED
	run http POST /v1/tasks/worker/2/heartbeat?incarnation=c
	error_is 409 ABORTED
	[[ $(msg) == *"worker:2 is in error"* ]]
}

@test "heartbeat after a shutdown is not_registered" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a'
	assert_line --index 0 200
	run http POST /v1/tasks/worker/0/heartbeat?incarnation=a
	error_is 400 INVALID_ARGUMENT
	assert_equal "$(jv .reason)" not_registered
}

# --- report error -----------------------------------------------------------

@test "report error: the task goes to error with its code and message, and the error is propagated" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	bg_http errs GET '/v1/errors?wait=5s'
	wait_metric muster_http_parked 1

	run http POST /v1/tasks/worker/1/error?incarnation=b -d '{"code":"UNAVAILABLE","message":"disk full"}'
	assert_line --index 0 200
	assert_equal "$(jv .)" '{}'
	assert_equal "$(task worker:1 '[.state, .error]')" \
		'["error",{"task":"worker:1","code":"UNAVAILABLE","message":"disk full","reported":true}]'
	assert_equal "$(bg_code errs)" 200
	assert_equal "$(jv .errors "$T/errs.body")" \
		'[{"task":"worker:1","code":"UNAVAILABLE","message":"disk full","reported":true}]'
	assert_equal "$(cluster .connected)" 1
}

@test "report error: no code is INTERNAL, and so are OK and unknown codes" {
	start_coordd --cluster worker=4 --heartbeat-timeout 60s
	local i
	for i in 0 1 2 3; do reg "worker:$i" "a$i"; done
	run http POST /v1/tasks/worker/0/error?incarnation=a0 -d '{"message":"no code"}'
	assert_line --index 0 200
	run http POST /v1/tasks/worker/1/error?incarnation=a1 -d '{"code":"OK","message":"fine?"}'
	assert_line --index 0 200
	run http POST /v1/tasks/worker/2/error?incarnation=a2 -d '{"code":"NO_SUCH_CODE"}'
	assert_line --index 0 200
	assert_equal "$(task worker:0 '[.error.code, .error.message]')" '["INTERNAL","no code"]'
	assert_equal "$(task worker:1 .error.code)" INTERNAL
	assert_equal "$(task worker:2 '[.error.code, .error.message != ""]')" '["INTERNAL",true]'
	assert_equal "$(task worker:3 .state)" connected
}

@test "report error: 412 unless connected, 409 for a wrong incarnation, 400 for a bad body" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	run http POST /v1/tasks/worker/0/error?incarnation=a -d '{"message":"x"}'
	error_is 412 FAILED_PRECONDITION
	[[ $(msg) == *"worker:0 is disconnected"* ]]

	reg worker:0 a
	reg worker:1 b
	run http POST /v1/tasks/worker/0/error?incarnation=b -d '{"message":"x"}'
	error_is 409 ABORTED
	run http POST /v1/tasks/worker/0/error -d '{"message":"x"}'
	error_is 400 INVALID_ARGUMENT
	local body
	for body in 'not json' '' '[1]' '{"code":5}' '{"message":["x"]}'; do
		run http POST /v1/tasks/worker/0/error?incarnation=a -d "$body"
		error_is 400 INVALID_ARGUMENT
	done
	# None of these changed anything.
	assert_equal "$(task worker:0 '[.state, .error]')" '["connected",null]'
	run http GET /v1/errors
	assert_equal "$(jv .errors)" '[]'

	# Already in error: 412.
	report worker:0 a INTERNAL first
	run http POST /v1/tasks/worker/0/error?incarnation=a -d '{"message":"second"}'
	error_is 412 FAILED_PRECONDITION
	[[ $(msg) == *"worker:0 is "*"not connected"* ]]
	assert_equal "$(task worker:0 .error.message)" first
}

# --- reset ------------------------------------------------------------------

@test "reset: 412 unless the task is in error; then it is disconnected and keeps its last error" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	run http POST /v1/tasks/worker/0/reset
	error_is 412 FAILED_PRECONDITION
	[[ $(msg) == *"not in error"* ]]
	reg worker:0 a
	reg worker:1 b
	run http POST /v1/tasks/worker/0/reset
	error_is 412 FAILED_PRECONDITION
	assert_equal "$(task worker:0 .state)" connected

	report worker:0 a INTERNAL "bad batch"
	run http POST /v1/tasks/worker/0/reset
	assert_line --index 0 200
	assert_equal "$(task worker:0 '[.state, .error.message]')" '["disconnected","bad batch"]'
	# No longer an error to propagate.
	run http GET /v1/errors
	assert_equal "$(jv .errors)" '[]'
	run http POST /v1/tasks/worker/0/reset
	error_is 412 FAILED_PRECONDITION
	run http GET /v1/tasks/worker/0/reset
	error_is 405 INVALID_ARGUMENT
}

# --- shutdown ---------------------------------------------------------------

@test "shutdown without a shutdown barrier disconnects at once; again is 412" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	local t0 took
	t0=$(now_us)
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=10s'
	took=$((($(now_us) - t0) / 1000))
	assert_line --index 0 200
	# Well before the 10 s it was allowed to wait.
	[ "$took" -lt 5000 ] || fail "shutdown took ${took}ms"
	assert_equal "$(task worker:0 .state)" disconnected
	assert_equal "$(task worker:1 .state)" connected

	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a'
	error_is 412 FAILED_PRECONDITION
	[[ $(msg) == *"already disconnected"* ]]
}

@test "shutdown: 409 for a wrong incarnation, 400 for a bad wait=, 412 for a task in error (disconnected anyway)" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	reg worker:2 c
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=b'
	error_is 409 ABORTED
	run http POST '/v1/tasks/worker/0/shutdown'
	error_is 400 INVALID_ARGUMENT
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=soon'
	error_is 400 INVALID_ARGUMENT
	assert_equal "$(task worker:0 .state)" connected

	report worker:1 b INTERNAL crashed
	run http POST '/v1/tasks/worker/1/shutdown?incarnation=b'
	error_is 412 FAILED_PRECONDITION
	[[ $(msg) == *"was in error"*crashed* ]]
	assert_equal "$(task worker:1 .state)" disconnected
}

@test "with --shutdown-barrier-timeout the tasks wait for each other and pass together" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s --shutdown-barrier-timeout 20s
	reg worker:0 a
	reg worker:1 b
	reg worker:2 c
	bg_http s0 POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=10s'
	bg_http s1 POST '/v1/tasks/worker/1/shutdown?incarnation=b&wait=10s'
	wait_metric muster_http_parked 2
	# Waiting at the barrier, they are still connected.
	assert_equal "$(task worker:0 .state)" connected
	[ ! -e "$T/s0.code" ]
	# A poll that ends early says how far the barrier is.
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=200ms'
	assert_line --index 0 202
	assert_equal "$(jv '[.barrier, .state, .arrived, .total]')" '["shutdown","waiting",2,3]'

	run http POST '/v1/tasks/worker/2/shutdown?incarnation=c&wait=10s'
	assert_line --index 0 200
	assert_equal "$(jv '[.barrier, .state]')" '["shutdown","passed"]'
	assert_equal "$(bg_code s0)" 200
	assert_equal "$(bg_code s1)" 200
	assert_equal "$(jv .state "$T/s0.body")" passed
	assert_equal "$(cluster '[.tasks[].state]')" '["disconnected","disconnected","disconnected"]'
}

@test "shutdown barrier with a straggler: the others get DEADLINE_EXCEEDED naming it, and it is put in error" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s --shutdown-barrier-timeout 1s
	reg worker:0 a
	reg worker:1 b
	reg worker:2 c
	local t0
	t0=$(now_us)
	bg_http s0 POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=10s'
	bg_http s1 POST '/v1/tasks/worker/1/shutdown?incarnation=b&wait=10s'
	assert_equal "$(bg_code s0)" 504
	assert_equal "$(bg_code s1)" 504
	# At the barrier's 1 s timeout, long before the 10 s the requests
	# were allowed to wait.
	local took=$((($(cat "$T/s0.t") - t0) / 1000))
	[ "$took" -ge 900 ] && [ "$took" -lt 5000 ] || fail "the barrier failed after ${took}ms"
	assert_equal "$(jv .error.code "$T/s0.body")" DEADLINE_EXCEEDED
	[[ $(jv .error.message "$T/s0.body") == *"not arrived: worker:2" ]]

	# Those who came are disconnected all the same.
	assert_equal "$(task worker:0 .state)" disconnected
	assert_equal "$(task worker:1 .state)" disconnected
	# The straggler is in error, and its next heartbeat tells it so.
	assert_equal "$(task worker:2 '[.state, .error.code]')" '["error","INTERNAL"]'
	run http POST /v1/tasks/worker/2/heartbeat?incarnation=c
	error_is 500 INTERNAL
	[[ $(msg) == *"shutdown barrier"* ]]
}

@test "shutdown barrier: a task that failed before it does not hold it up until the timeout" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s --shutdown-barrier-timeout 20s
	reg worker:0 a
	reg worker:1 b
	reg worker:2 c
	report worker:2 c INTERNAL crashed
	local t0 took
	t0=$(now_us)
	bg_http s0 POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=10s'
	run http POST '/v1/tasks/worker/1/shutdown?incarnation=b&wait=10s'
	took=$((($(now_us) - t0) / 1000))
	# worker:2 can never arrive: waiting the 20 s out for it helps no
	# one. The barrier passed (a poll that ended first would be 202).
	assert_line --index 0 200
	assert_equal "$(jv .state)" passed
	[ "$took" -lt 5000 ] || fail "shutdown waited ${took}ms for a failed task: $(cat "$T/http.body")"
	assert_equal "$(bg_code s0)" 200
	assert_equal "$(task worker:0 .state)" disconnected
	assert_equal "$(task worker:1 .state)" disconnected
}

@test "shutdown barrier: a member that fails while others wait fails it for them, INTERNAL naming it" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s --shutdown-barrier-timeout 20s
	reg worker:0 a
	reg worker:1 b
	reg worker:2 c
	bg_http s0 POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=15s'
	bg_http s1 POST '/v1/tasks/worker/1/shutdown?incarnation=b&wait=15s'
	wait_metric muster_http_parked 2
	report worker:2 c INTERNAL crashed
	assert_equal "$(bg_code s0)" 500
	assert_equal "$(bg_code s1)" 500
	[[ $(jv .error.message "$T/s0.body") == *"worker:2"*"crashed"* ]] ||
		fail "$(cat "$T/s0.body")"
	# They leave all the same.
	assert_equal "$(task worker:0 .state)" disconnected
	assert_equal "$(task worker:1 .state)" disconnected
}

@test "the shutdown barrier works again for the next run of the job" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s --shutdown-barrier-timeout 20s
	local run
	for run in 1 2; do
		reg worker:0 "a$run"
		reg worker:1 "b$run"
		bg_http "s0.$run" POST "/v1/tasks/worker/0/shutdown?incarnation=a$run&wait=10s"
		wait_metric muster_http_parked 1
		# worker:0 waits for worker:1 in every run.
		[ ! -e "$T/s0.$run.code" ] || fail "run $run: worker:0 passed the shutdown barrier alone: $(cat "$T/s0.$run.body")"
		assert_equal "$(task worker:0 .state)" connected
		run http POST "/v1/tasks/worker/1/shutdown?incarnation=b$run&wait=10s"
		assert_line --index 0 200
		assert_equal "$(bg_code "s0.$run")" 200
		assert_equal "$(cluster '[.tasks[].state]')" '["disconnected","disconnected"]'
	done
}

@test "shutdown with barrier=0 skips the shutdown barrier, which then does not wait for that task" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s --shutdown-barrier-timeout 20s
	reg worker:0 a
	reg worker:1 b
	reg worker:2 c
	local t0 took
	t0=$(now_us)
	run http POST '/v1/tasks/worker/2/shutdown?incarnation=c&wait=10s&barrier=0'
	took=$((($(now_us) - t0) / 1000))
	assert_line --index 0 200
	# Well before the 10 s it would wait at the barrier.
	[ "$took" -lt 5000 ] || fail "worker:2 waited ${took}ms"
	assert_equal "$(task worker:2 .state)" disconnected

	bg_http s0 POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=10s'
	wait_metric muster_http_parked 1
	run http POST '/v1/tasks/worker/1/shutdown?incarnation=b&wait=10s'
	assert_line --index 0 200
	assert_equal "$(jv .state)" passed
	assert_equal "$(bg_code s0)" 200
}

@test "a recoverable task shuts down at once, and the shutdown barrier does not wait for it" {
	start_coordd --cluster worker=2,ps=1 --recoverable ps --heartbeat-timeout 60s --shutdown-barrier-timeout 20s
	reg worker:0 a
	reg worker:1 b
	reg ps:0 c
	local t0 took
	t0=$(now_us)
	run http POST '/v1/tasks/ps/0/shutdown?incarnation=c&wait=10s'
	took=$((($(now_us) - t0) / 1000))
	assert_line --index 0 200
	# Well before the 10 s it would wait at the barrier.
	[ "$took" -lt 5000 ] || fail "ps:0 waited ${took}ms"
	assert_equal "$(task ps:0 .state)" disconnected

	bg_http s0 POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=10s'
	wait_metric muster_http_parked 1
	run http POST '/v1/tasks/worker/1/shutdown?incarnation=b&wait=10s'
	assert_line --index 0 200
	assert_equal "$(jv .state)" passed
	assert_equal "$(bg_code s0)" 200
}

# --- wait-all ---------------------------------------------------------------

@test "wait-all: 412 for a task not connected, 409 for a wrong incarnation, 400 for a bad wait=" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	run http POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=1s'
	error_is 412 FAILED_PRECONDITION
	[[ $(msg) == *"not connected"* ]]
	reg worker:0 a
	reg worker:1 b
	run http POST '/v1/tasks/worker/0/wait-all?incarnation=b&wait=1s'
	error_is 409 ABORTED
	run http POST '/v1/tasks/worker/0/wait-all?wait=1s'
	error_is 400 INVALID_ARGUMENT
	run http POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=forever'
	error_is 400 INVALID_ARGUMENT
	# A task in error is not connected either.
	report worker:1 b INTERNAL down
	run http POST '/v1/tasks/worker/1/wait-all?incarnation=b&wait=1s'
	error_is 412 FAILED_PRECONDITION
}

@test "wait-all: an early end of the poll is 202 with progress; the last registration releases everyone" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	local t0 took
	t0=$(now_us)
	run http POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=300ms'
	took=$((($(now_us) - t0) / 1000))
	assert_line --index 0 202
	assert_equal "$(jv .)" '{"state":"waiting","connected":2,"total":3}'
	# The poll's 300 ms, and what a busy machine adds to a request.
	[ "$took" -ge 250 ] && [ "$took" -lt 5000 ] || fail "the poll took ${took}ms"

	bg_http w0 POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=10s'
	bg_http w1 POST '/v1/tasks/worker/1/wait-all?incarnation=b&wait=10s'
	wait_metric muster_http_parked 2
	[ ! -e "$T/w0.code" ]
	reg worker:2 c
	assert_equal "$(bg_code w0)" 200
	assert_equal "$(bg_code w1)" 200
	assert_equal "$(jv . "$T/w0.body")" '{"tasks":3}'
	# Everyone is here: the last one does not wait at all.
	run http POST '/v1/tasks/worker/2/wait-all?incarnation=c&wait=10s'
	assert_line --index 0 200
	assert_equal "$(jv .)" '{"tasks":3}'
}

@test "wait-all: a task that came and already left, its work done, is not waited for" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	reg worker:2 c
	# worker:2 was quick: it finished and left before worker:0 asked.
	run http POST '/v1/tasks/worker/2/shutdown?incarnation=c'
	assert_line --index 0 200
	run http POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=5s'
	assert_line --index 0 200
	assert_equal "$(jv .)" '{"tasks":3}'
}

@test "wait-all: DEADLINE_EXCEEDED after --register-timeout from the first call, naming the missing tasks" {
	start_coordd --cluster worker=4 --heartbeat-timeout 60s --register-timeout 2s
	reg worker:0 a
	reg worker:1 b
	local t0 t1 took
	t0=$(now_us)
	bg_http w0 POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=10s'
	wait_metric muster_http_parked 1
	sleep 1
	# A later caller gets the deadline of the first call (2 s after it),
	# not its own (2 s after its own call, a second later).
	t1=$(now_us)
	run http POST '/v1/tasks/worker/1/wait-all?incarnation=b&wait=10s'
	error_is 504 DEADLINE_EXCEEDED
	took=$((($(now_us) - t0) / 1000))
	[ "$took" -ge 1900 ] || fail "wait-all ended ${took}ms after the first call"
	took=$((($(now_us) - t1) / 1000))
	[ "$took" -lt 2000 ] || fail "the later wait-all ended ${took}ms after its call"
	[[ $(msg) == *"worker:2, worker:3"*"register timeout of 2s"* ]] || fail "$(msg)"
	[[ $(msg) != *"worker:0"* && $(msg) != *"worker:1"* ]]
	assert_equal "$(bg_code w0)" 504
	assert_equal "$(jv .error.code "$T/w0.body")" DEADLINE_EXCEEDED

	# Past the deadline a call fails at once, until everyone is there.
	run http POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=10s'
	error_is 504 DEADLINE_EXCEEDED
	reg worker:2 c
	reg worker:3 d
	run http POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=10s'
	assert_line --index 0 200
}

@test "wait-all: INTERNAL when a task fails meanwhile, and at once when one is in error" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	bg_http w0 POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=10s'
	wait_metric muster_http_parked 1
	report worker:1 b UNAVAILABLE "lost the GPU"
	assert_equal "$(bg_code w0)" 500
	assert_equal "$(jv .error.code "$T/w0.body")" INTERNAL
	[[ $(jv .error.message "$T/w0.body") == *"worker:1"*"UNAVAILABLE"*"lost the GPU"* ]]

	run http POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=10s'
	error_is 500 INTERNAL
	[[ $(msg) == *"worker:1"* ]]
}

# --- the error poll and failure detection -----------------------------------

@test "GET /v1/errors: empty at once without wait=, after the wait with one; 400 for a bad wait=; 405 for POST" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	run http GET /v1/errors
	assert_line --index 0 200
	assert_equal "$(jv .)" '{"errors":[]}'
	local t0 took
	t0=$(now_us)
	run http GET '/v1/errors?wait=300ms'
	took=$((($(now_us) - t0) / 1000))
	assert_line --index 0 200
	assert_equal "$(jv .)" '{"errors":[]}'
	# The poll's 300 ms, and what a busy machine adds to a request.
	[ "$took" -ge 250 ] && [ "$took" -lt 5000 ] || fail "the poll took ${took}ms"
	run http GET '/v1/errors?wait=awhile'
	error_is 400 INVALID_ARGUMENT
	run http POST /v1/errors
	error_is 405 INVALID_ARGUMENT

	# With an error present, a long poll answers at once.
	reg worker:0 a
	reg worker:1 b
	report worker:1 b
	t0=$(now_us)
	run http GET '/v1/errors?wait=30s'
	took=$((($(now_us) - t0) / 1000))
	assert_equal "$(jv '[.errors[].task]')" '["worker:1"]'
	[ "$took" -lt 5000 ] || fail "the poll took ${took}ms"
}

@test "a silent task goes to error with UNAVAILABLE within 1.25 heartbeat timeouts, and a parked error poll names it" {
	start_coordd --cluster worker=5 --heartbeat-timeout 1s
	reg worker:4 e
	beat worker:4 e
	bg_http errs GET '/v1/errors?wait=5s'
	wait_metric muster_http_parked 1
	local t0 took i
	t0=$(now_us)
	reg worker:0 a
	# Three more silent tasks, registered at other phases of coordd's scan.
	for i in 1 2 3; do
		sleep 0.13
		reg "worker:$i" "b$i"
	done
	wait_for 10 task_is worker:0 error
	took=$((($(now_us) - t0) / 1000))
	assert_equal "$(task worker:0 .state)" error
	# Seen from here: not before the timeout, and soon after it, with our
	# polling and a busy machine on top (coordd's own measure of the
	# silence, below, is the exact one).
	[ "$took" -ge 1000 ] && [ "$took" -le 5000 ] || fail "detected after ${took}ms"

	# The parked poll was released by the first failure, naming it.
	assert_equal "$(bg_code errs)" 200
	assert_equal "$(jv '[.errors[0].task, .errors[0].code, .errors[0].reported]' "$T/errs.body")" '["worker:0","UNAVAILABLE",false]'
	took=$((($(cat "$T/errs.t") - t0) / 1000))
	[ "$took" -le 5000 ] || fail "the error poll was released after ${took}ms"

	# Each was declared failed after 1 s to 1.25 s of silence (coordd's
	# own measure, in the message).
	wait_for 10 task_is worker:3 error
	for i in 0 1 2 3; do
		run task "worker:$i" '[.state, .error.code, .error.message]'
		[[ $output == '["error","UNAVAILABLE","no heartbeat for '*'(timeout 1s): '* ]] || fail "worker:$i: $output"
		[[ $output =~ no\ heartbeat\ for\ (([0-9]+)s)?(([0-9]+)ms)?\  ]] ||
			fail "worker:$i: $output"
		took=$((10#${BASH_REMATCH[2]:-0} * 1000 + 10#${BASH_REMATCH[4]:-0}))
		[ "$took" -gt 1000 ] && [ "$took" -le 1300 ] || fail "worker:$i declared failed after ${took}ms of silence"
	done

	# The task that kept beating is fine; a silent one hears its error.
	assert_equal "$(task worker:4 .state)" connected
	run http POST /v1/tasks/worker/0/heartbeat?incarnation=a
	error_is 503 UNAVAILABLE
}

# --- recoverable jobs and epochs --------------------------------------------

@test "a recoverable task's error is not propagated, and it rejoins with a new incarnation while the others stay connected" {
	start_coordd --cluster chief=1,worker=2 --recoverable worker --heartbeat-timeout 60s
	reg chief:0 c
	reg worker:0 a
	reg worker:1 b
	assert_equal "$(task worker:1 .recoverable)" true
	assert_equal "$(task chief:0 .recoverable)" false
	local t0 took
	t0=$(now_us)
	bg_http errs GET '/v1/errors?wait=1s'
	wait_metric muster_http_parked 1
	report worker:1 b INTERNAL preempted
	assert_equal "$(task worker:1 '[.state, .error.message]')" '["error","preempted"]'

	# Nobody hears of it: the parked poll runs its full second, empty.
	assert_equal "$(bg_code errs)" 200
	assert_equal "$(jv . "$T/errs.body")" '{"errors":[]}'
	took=$((($(cat "$T/errs.t") - t0) / 1000))
	[ "$took" -ge 900 ] || fail "the error poll was released after ${took}ms"
	run http GET /v1/errors
	assert_equal "$(jv .)" '{"errors":[]}'
	# wait-all waits for it instead of failing.
	run http POST '/v1/tasks/chief/0/wait-all?incarnation=c&wait=200ms'
	assert_line --index 0 202

	# It registers again at once, with no reset.
	run http POST /v1/tasks/worker/1/register?incarnation=d
	assert_line --index 0 200
	assert_equal "$(task worker:1 '[.state, .incarnation]')" '["connected","000000000000000d"]'
	# A restart while still connected is no error either.
	run http POST /v1/tasks/worker/0/register?incarnation=e
	assert_line --index 0 200
	assert_equal "$(task worker:0 '[.state, .incarnation, .error]')" '["connected","000000000000000e",null]'
	run http POST /v1/tasks/worker/0/heartbeat?incarnation=a
	error_is 409 ABORTED

	assert_equal "$(task chief:0 '[.state, .incarnation]')" '["connected","000000000000000c"]'
	assert_equal "$(cluster .connected)" 3
	run http POST '/v1/tasks/chief/0/wait-all?incarnation=c&wait=1s'
	assert_line --index 0 200
}

@test "when no task is connected a new epoch begins, and a task that had failed registers again" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	report worker:1 b INTERNAL "job crashed"
	run http POST /v1/tasks/worker/1/register?incarnation=c
	error_is 409 ABORTED
	assert_equal "$(cluster .epoch)" 0

	# The last connected task leaves: the job is over.
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a'
	assert_line --index 0 200
	assert_equal "$(cluster '[.epoch, .connected]')" '[1,0]'
	# It stays in error, for all to see, until it registers again.
	assert_equal "$(task worker:1 '[.state, .error.message]')" '["error","job crashed"]'
	run http GET /v1/errors
	assert_equal "$(jv .)" '{"errors":[]}'

	# The restarted job registers without anyone resetting anything.
	run http POST /v1/tasks/worker/1/register?incarnation=c
	assert_line --index 0 200
	reg worker:0 d
	assert_equal "$(cluster '[.epoch, .connected]')" '[1,2]'
}

@test "a new epoch restarts the register clock of wait-all" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s --register-timeout 1s
	reg worker:0 a
	run http POST '/v1/tasks/worker/0/wait-all?incarnation=a&wait=5s'
	error_is 504 DEADLINE_EXCEEDED
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a'
	assert_line --index 0 200
	assert_equal "$(cluster .epoch)" 1

	reg worker:0 b
	run http POST '/v1/tasks/worker/0/wait-all?incarnation=b&wait=300ms'
	assert_line --index 0 202
	bg_http w0 POST '/v1/tasks/worker/0/wait-all?incarnation=b&wait=5s'
	wait_metric muster_http_parked 1
	reg worker:1 c
	assert_equal "$(bg_code w0)" 200
}

# --- kvctl status -----------------------------------------------------------

@test "kvctl status shows tasks, states, incarnations, errors and the barriers in flight" {
	start_coordd --cluster worker=3,ps=1 --recoverable ps --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	reg ps:0 c
	report worker:1 b INTERNAL "disk full"
	kvctl put some/key v
	bg_http bar POST '/v1/barriers/sync1?wait=10s' -d '{"task":"worker:0","timeout_ms":20000}'
	wait_metric muster_http_parked 1

	run --separate-stderr kvctl status
	assert_success
	assert_line --index 0 "2/4 tasks connected, epoch 0, heartbeat timeout 1m, 1 keys at revision $(rev 1)"
	assert_line --index 1 --regexp '^TASK +STATE +INCARNATION +HEARTBEAT +ERROR$'
	assert_line --index 2 --regexp '^worker:0 +connected +000000000000000a +([0-9]+(h|m|s|ms))+ ago *$'
	assert_line --index 3 --regexp '^worker:1 +error +000000000000000b +- +INTERNAL: disk full$'
	assert_line --index 4 --regexp '^worker:2 +disconnected +- +- *$'
	assert_line --index 5 --regexp '^ps:0 +connected\* +000000000000000c +([0-9]+(h|m|s|ms))+ ago *$'
	assert_line --index 6 --regexp '^barrier sync1: 1/2 arrived, deadline in (1[0-9]|20)s[0-9ms]*; waiting for ps:0$'
	assert_equal "${#lines[@]}" 7

	run --separate-stderr kvctl --json status
	assert_success
	echo "$output" >"$T/status.json"
	assert_equal "$(jv '[.connected, .total, .epoch, .keys]' "$T/status.json")" '[2,4,0,1]'
	assert_equal "$(jv '[.tasks[] | [.task, .state, .incarnation, .recoverable]]' "$T/status.json")" \
		'[["worker:0","connected","000000000000000a",false],["worker:1","error","000000000000000b",false],["worker:2","disconnected",null,false],["ps:0","connected","000000000000000c",true]]'
	assert_equal "$(jv '.tasks[1].error' "$T/status.json")" \
		'{"task":"worker:1","code":"INTERNAL","message":"disk full","reported":true}'
	assert_equal "$(jv '[.barriers[] | [.id, .arrived, .total, .tasks_arrived, .tasks_waiting]]' "$T/status.json")" \
		'[["sync1",1,2,["worker:0"],["ps:0"]]]'
	[ "$(jv '.barriers[0].deadline_in_ms' "$T/status.json")" -gt 15000 ]

	run --separate-stderr kvctl status extra
	assert_failure 2
	[[ $stderr == *"status takes no arguments"* ]]
}

@test "kvctl status exits 9 when coordd is not there" {
	local port
	port=$(free_port)
	run --separate-stderr kvctl -c "127.0.0.1:$port" --timeout 500ms status
	assert_failure 9
	[[ $stderr == "kvctl: UNAVAILABLE: "* ]]
}

# --- semantics of the reference's service -----------------------------------

@test "a task that shuts down while waiting at a barrier fails it for every member (INTERNAL)" {
	start_coordd --cluster worker=3 --heartbeat-timeout 60s
	reg worker:0 a
	reg worker:1 b
	reg worker:2 c
	bg_http w0 POST '/v1/barriers/b1?wait=20s' -d '{"task":"worker:0","incarnation":"a"}'
	wait_metric muster_http_parked 1
	# worker:0 leaves while it waits there.
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a&barrier=0'
	assert_line --index 0 200
	assert_equal "$(bg_code w0)" 500
	[[ $(jq -r .error.message "$T/w0.body") == *"worker:0 left"* ]]
	# The others are told, not let through.
	run http POST '/v1/barriers/b1?wait=5s' -d '{"task":"worker:1","incarnation":"b"}'
	error_is 500 INTERNAL
	run http POST '/v1/barriers/b1?wait=5s' -d '{"task":"worker:2","incarnation":"c"}'
	error_is 500 INTERNAL
}

@test "the shutdown barrier's timeout reaches the task shutting down as DEADLINE_EXCEEDED, and asking again gets it again" {
	start_coordd --cluster worker=2 --heartbeat-timeout 2s --shutdown-barrier-timeout 1s
	reg worker:0 a
	reg worker:1 b
	beat worker:0 a
	beat worker:1 b
	# worker:1 never comes to the barrier; worker:0's poll outlasts it.
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=20s'
	error_is 504 DEADLINE_EXCEEDED
	[[ $(msg) == *"not arrived: worker:1"* ]]
	run http POST '/v1/tasks/worker/0/shutdown?incarnation=a&wait=20s'
	error_is 504 DEADLINE_EXCEEDED
}
