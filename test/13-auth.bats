#!/usr/bin/env bats
# The cluster's token (--token-file, MUSTER_TOKEN_FILE), coordd's refusal
# to serve beyond loopback without one, and the secret each task proves
# itself with, so that one task cannot act as another.

load helper

bats_require_minimum_version 1.5.0

setup() {
	T=$BATS_TEST_TMPDIR
	cd "$T" || return 1
	printf 'tok-%s\n' "$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >token
	chmod 600 token
}

# code METHOD PATH [curl args]: the HTTP status alone.
code() {
	local method=$1 path=$2
	shift 2
	curl -s -o "$T/body" -w '%{http_code}' -X "$method" "http://$MUSTER_COORD$path" "$@"
}

bearer() {
	echo "Authorization: Bearer $(cat "$T/token")"
}

@test "coordd --token-file: a missing file or a short token exits 2, saying why" {
	run --separate-stderr coordd -n --token-file "$T/nope"
	assert_failure 2
	[[ $stderr == *"--token-file: cannot read $T/nope"* ]] || fail "$stderr"
	echo short >short
	run --separate-stderr coordd -n --token-file short
	assert_failure 2
	[[ $stderr == *"does not hold a token"* ]] || fail "$stderr"
	run coordd -n --token-file token
	assert_success
}

@test "listening beyond loopback needs a token, or --insecure" {
	run --separate-stderr coordd -n -l 0.0.0.0:7700
	assert_failure 2
	[[ $stderr == *"beyond this machine, needs --token-file"* ]] || fail "$stderr"
	run --separate-stderr coordd -n -l '[::]:7700'
	assert_failure 2
	run coordd -n -l 0.0.0.0:7700 --insecure
	assert_success
	run coordd -n -l 0.0.0.0:7700 --token-file token
	assert_success
	run coordd -n -l 127.0.0.2:7700
	assert_success
}

@test "with a token, a request without it or with another is 401 UNAUTHENTICATED" {
	start_coordd --token-file token
	run code GET /v1/kv/k
	assert_output 401
	grep -q '"code":"UNAUTHENTICATED"' "$T/body"
	grep -q 'MUSTER_TOKEN_FILE' "$T/body"
	run curl -s -D - -o /dev/null "http://$MUSTER_COORD/v1/kv/k"
	assert_line --partial 'WWW-Authenticate: Bearer realm="muster"'
	run code GET /v1/kv/k -H "Authorization: Bearer not-the-token-at-all"
	assert_output 401
	run code GET /metrics
	assert_output 401
	# A liveness probe holds no secret.
	run code GET /healthz
	assert_output 200
	run code GET /v1/kv/k -H "$(bearer)"
	assert_output 404
	run curl -s -H "$(bearer)" "http://$MUSTER_COORD/metrics"
	assert_line --regexp '^muster_http_unauthenticated_total [3-9]$'
}

@test "clients send the token MUSTER_TOKEN_FILE names; without it they exit 11" {
	start_coordd --token-file token
	run --separate-stderr kvctl put k v
	assert_failure 11
	[[ $stderr == "kvctl: UNAUTHENTICATED: "*"MUSTER_TOKEN_FILE"* ]] || fail "$stderr"
	MUSTER_TOKEN_FILE=$T/token kvctl put k v
	MUSTER_TOKEN_FILE=$T/token run kvctl get k
	assert_output v
	echo "another-token-of-enough-length" >other
	MUSTER_TOKEN_FILE=$T/other run --separate-stderr kvctl get k
	assert_failure 11
	MUSTER_TOKEN_FILE=$T/missing run --separate-stderr kvctl get k
	assert_failure 2
	[[ $stderr == *"MUSTER_TOKEN_FILE: cannot read $T/missing"* ]] || fail "$stderr"
}

@test "with a token a task registers with a secret, and only that secret acts for it" {
	start_coordd --token-file token --cluster worker=2 --heartbeat-timeout 60s
	local a=(-H "$(bearer)") s0=(-H "X-Muster-Task-Secret: secret-of-worker-0-abcdef")
	run code POST '/v1/tasks/worker/0/register?incarnation=a' "${a[@]}"
	assert_output 401
	grep -q 'registers with a secret of its own' "$T/body"
	run code POST '/v1/tasks/worker/0/register?incarnation=a' "${a[@]}" -H 'X-Muster-Task-Secret: x'
	assert_output 400
	run code POST '/v1/tasks/worker/0/register?incarnation=a' "${a[@]}" "${s0[@]}"
	assert_output 200
	# Another holder of the token cannot heartbeat, report or leave for it.
	run code POST '/v1/tasks/worker/0/heartbeat?incarnation=a' "${a[@]}"
	assert_output 401
	run code POST '/v1/tasks/worker/0/heartbeat?incarnation=a' "${a[@]}" \
		-H 'X-Muster-Task-Secret: someone-elses-secret-123'
	assert_output 401
	grep -q 'is another process using its name' "$T/body"
	run code POST '/v1/tasks/worker/0/error?incarnation=a' "${a[@]}" -d '{"code":"INTERNAL","message":"x"}'
	assert_output 401
	run code POST '/v1/tasks/worker/0/shutdown?incarnation=a' "${a[@]}"
	assert_output 401
	# Nor take its registration over with its (public) incarnation.
	run code POST '/v1/tasks/worker/0/register?incarnation=a' "${a[@]}" \
		-H 'X-Muster-Task-Secret: someone-elses-secret-123'
	assert_output 401
	# The task itself can.
	run code POST '/v1/tasks/worker/0/heartbeat?incarnation=a' "${a[@]}" "${s0[@]}"
	assert_output 200
	run code POST '/v1/tasks/worker/0/register?incarnation=a' "${a[@]}" "${s0[@]}"
	assert_output 200
	# The secret is never shown.
	run curl -s "${a[@]}" "http://$MUSTER_COORD/v1/tasks"
	refute_output --partial secret-of-worker-0
	# Barriers: an arrival for worker:0 needs its secret too.
	run code POST '/v1/barriers/b?wait=1s' "${a[@]}" -d '{"task":"worker:0"}'
	assert_output 401
	run code DELETE '/v1/barriers/b?task=worker:0' "${a[@]}"
	assert_output 401
	# An operator (the token, no task) may cancel and reset.
	run code DELETE '/v1/barriers/b' "${a[@]}"
	assert_output 200
	grep -q '"state":"cancelled"' "$T/body"
	run code POST '/v1/tasks/worker/0/reset' "${a[@]}"
	[ "$output" != 401 ] || fail "an operator's reset was refused"
}

@test "without a token, a task that registered with a secret still needs it" {
	start_coordd --cluster worker=1 --heartbeat-timeout 60s
	run code POST '/v1/tasks/worker/0/register?incarnation=a' -H 'X-Muster-Task-Secret: secret-of-worker-0-abcdef'
	assert_output 200
	run code POST '/v1/tasks/worker/0/heartbeat?incarnation=a'
	assert_output 401
	run --separate-stderr barrierwait -t worker:0 --timeout 2s b
	assert_failure 11
}

@test "a job under a token: preemptwatch and barrierwait carry the token and the task's secret" {
	start_coordd --token-file token --cluster worker=2 --heartbeat-timeout 5s
	export MUSTER_TOKEN_FILE=$T/token
	local i pids=()
	for i in 0 1; do
		pw "w$i" -t "worker:$i" -- bash -c \
			'env | grep -c "^MUSTER_TASK_SECRET=." >has_secret.$MUSTER_TASK_INDEX;
			 barrierwait --timeout 20s ready'
		pids+=("$PID")
	done
	for i in 0 1; do
		wait "${pids[i]}" || fail "worker:$i: $(cat "w$i.err")"
	done
	assert_equal "$(cat has_secret.0 has_secret.1)" "$(printf '1\n1')"
	# barrierwait outside the task's preemptwatch has no secret for it.
	start_coordd --token-file token --cluster worker=1 --heartbeat-timeout 5s
	pw w -t worker:0 -- sleep 30
	wait_connected 1
	run --separate-stderr barrierwait -t worker:0 --timeout 5s solo
	assert_failure 11
}

@test "under a token, the guard of a killed preemptwatch still reports whose agent died" {
	start_coordd --token-file token --cluster worker=2 --heartbeat-timeout 3s
	export MUSTER_TOKEN_FILE=$T/token
	pw w0 -t worker:0 -- sleep 60
	local p0=$PID
	pw w1 -t worker:1 -- sleep 60
	wait_connected 2
	kill -KILL "$PID"
	wait_for 30 exited "$p0" || fail "worker:0 did not stop: $(cat w0.err)"
	grep -q "the agent (preemptwatch) of worker:1 died" w0.err || fail "$(cat w0.err)"
}
