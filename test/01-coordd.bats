#!/usr/bin/env bats
# coordd: its command line, /healthz and /metrics, and what it answers to bad
# requests over raw HTTP. After every bad request the daemon must still serve.

load helper

bats_require_minimum_version 1.5.0

# error_is HTTP CODE: the last `run http ...` answered with status HTTP and
# an error body {"error":{"code":CODE,"message":"..."}}.
error_is() {
	assert_equal "${lines[0]}" "$1"
	local got
	got=$(jq -e -r '.error | select((.message | type) == "string" and
		.message != "" and (.code | type) == "string") | .code' \
		"$T/http.body" 2>/dev/null) || {
		echo "error body is not {\"error\":{\"code\",\"message\"}}: $(cat "$T/http.body")" >&2
		return 1
	}
	assert_equal "$got" "$2"
}

# still_serving: coordd answers /healthz with 200 "ok".
still_serving() {
	run http GET /healthz
	assert_success
	assert_output $'200\nok'
}

# --- command line -----------------------------------------------------------

@test "coordd -h prints usage to stdout and exits 0" {
	run --separate-stderr coordd -h
	assert_success
	assert_line --index 0 --partial 'usage: coordd'
	assert_output --partial -- '--max-value-size'
	assert_equal "$stderr" ""

	run --separate-stderr coordd --help
	assert_success
	assert_line --index 0 --partial 'usage: coordd'
}

@test "coordd with an unknown flag exits 2 with usage on stderr" {
	run --separate-stderr coordd --no-such-flag
	assert_failure 2
	assert_output ""
	[[ $stderr == *"usage: coordd"* ]]
	[[ $stderr == *no-such-flag* ]]

	run --separate-stderr coordd -x
	assert_failure 2
	[[ $stderr == *"usage: coordd"* ]]
}

@test "coordd with a stray argument exits 2" {
	run --separate-stderr coordd extra
	assert_failure 2
	[[ $stderr == *"unexpected argument extra"* ]]
	[[ $stderr == *"usage: coordd"* ]]
}

@test "coordd --version prints its version" {
	run --separate-stderr coordd --version
	assert_success
	assert_output --regexp '^coordd [0-9]+\.[0-9]+\.[0-9]+$'
}

@test "coordd -n checks the configuration and exits without listening" {
	run --separate-stderr coordd -n -l 127.0.0.1:0 --max-value-size 64K
	assert_success
	assert_output 'coordd: configuration ok'
}

@test "coordd -n still rejects a bad configuration" {
	run --separate-stderr coordd -n --max-value-size lots
	assert_failure 2
	assert_output ""
}

@test "coordd -l without HOST:PORT exits 2" {
	local bad
	for bad in nope 127.0.0.1 :7700 127.0.0.1: 127.0.0.1:99999 127.0.0.1:-1 127.0.0.1:80x; do
		run --separate-stderr coordd -l "$bad"
		assert_failure 2
		[[ $stderr == *"-l $bad is not HOST:PORT"* ]]
		[[ $stderr == *"usage: coordd"* ]]
	done
}

@test "coordd --max-value-size that is not a size exits 2" {
	local bad
	for bad in abc 0 -5 1X 12KK ""; do
		run --separate-stderr coordd -n --max-value-size "$bad"
		assert_failure 2
		[[ $stderr == *"--max-value-size $bad is not a size"* ]]
		[[ $stderr == *"usage: coordd"* ]]
	done
	run coordd -n --max-value-size 16M
	assert_success
	run coordd -n --max-value-size 1048576
	assert_success
}

@test "coordd writes the bound port to --port-file and serves on it" {
	start_coordd
	[[ $COORD_PORT =~ ^[0-9]+$ ]]
	[ "$COORD_PORT" -gt 0 ]
	run curl -s "http://127.0.0.1:$COORD_PORT/healthz"
	assert_success
	assert_output ok
	grep -q "listening on 127.0.0.1:$COORD_PORT" "$T/coordd.log"
}

@test "a second coordd on a port in use exits 9 UNAVAILABLE" {
	start_coordd
	run --separate-stderr coordd -l "127.0.0.1:$COORD_PORT"
	assert_failure 9
	[[ $stderr == *"coordd: UNAVAILABLE: "*"$COORD_PORT"* ]]
	still_serving
}

@test "coordd exits 0 on SIGTERM and stops listening" {
	start_coordd
	still_serving
	kill -TERM "$COORD_PID"
	wait_exit "$COORD_PID" 10
	assert_equal "$STATUS" 0
	grep -q 'shutting down' "$T/coordd.log"
	run curl -s --max-time 2 "http://$MUSTER_COORD/healthz"
	assert_failure
}

@test "coordd exits 0 on SIGTERM while a request is parked" {
	start_coordd
	kvctl --timeout 5s get parked >"$T/get.out" 2>"$T/get.err" 3>&- &
	local get=$!
	wait_metric muster_http_parked 1
	kill -TERM "$COORD_PID"
	wait_exit "$COORD_PID" 10
	assert_equal "$STATUS" 0
	kill "$get" 2>/dev/null || true
	wait "$get" || true
}

# --- /healthz and /metrics --------------------------------------------------

@test "GET /healthz answers 200 ok, and HEAD works too" {
	start_coordd
	run http GET /healthz
	assert_output $'200\nok'
	run curl -s -o /dev/null -w '%{http_code}' --head "http://$MUSTER_COORD/healthz"
	assert_output 200
}

@test "GET /metrics is Prometheus text with muster_kv_keys" {
	start_coordd
	kvctl put m/a 1
	kvctl put m/b 2
	run http GET /metrics -D "$T/headers"
	assert_line --index 0 200
	assert_line '# TYPE muster_kv_keys gauge'
	assert_line 'muster_kv_keys 2'
	assert_line "muster_kv_revision $(rev 2)"
	grep -qi '^content-type: text/plain' "$T/headers"
	# Every line is a comment or "name value".
	run grep -Ev '^(# (HELP|TYPE) [a-z_]+ .+|[a-z_:][a-z0-9_:]* [0-9.e+-]+)$' "$T/http.body"
	assert_failure 1
	assert_output ""

	kvctl rm m
	run http GET /metrics
	assert_line 'muster_kv_keys 0'
}

@test "POST /metrics is 405" {
	start_coordd
	run http POST /metrics
	error_is 405 INVALID_ARGUMENT
	still_serving
}

# --- bad requests over raw HTTP -----------------------------------------------

@test "malformed JSON to POST ?op=add is 400 INVALID_ARGUMENT" {
	start_coordd
	run http POST '/v1/kv/n?op=add' -d '{"delta": '
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http POST '/v1/kv/n?op=add' -d '[1]'
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http POST '/v1/kv/n?op=add' -d '{"delta":"one"}'
	error_is 400 INVALID_ARGUMENT
	still_serving
	# Nothing was added by the bad requests.
	run kvctl tryget n
	assert_failure 1
}

@test "a well-formed POST ?op=add answers the new value" {
	start_coordd
	run http POST '/v1/kv/n?op=add' -d '{"delta":5}'
	assert_line --index 0 200
	run jq .value "$T/http.body"
	assert_output 5
}

@test "malformed JSON to POST ?op=cas is 400 INVALID_ARGUMENT" {
	start_coordd
	kvctl put c old
	run http POST '/v1/kv/c?op=cas' -d 'not json'
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http POST '/v1/kv/c?op=cas' -d '{"value":"bmV3","expected":'
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http POST '/v1/kv/c?op=cas' -d '{"value":"!!!","expected":"b2xk"}'
	error_is 400 INVALID_ARGUMENT
	still_serving
	run kvctl get c
	assert_output old
}

@test "POST without op= is 400 INVALID_ARGUMENT" {
	start_coordd
	run http POST /v1/kv/x -d '{}'
	error_is 400 INVALID_ARGUMENT
	still_serving
}

@test "an unknown route is 404 NOT_FOUND" {
	start_coordd
	run http GET /v1/nothing
	error_is 404 NOT_FOUND
	still_serving
	run http GET /v2/kv/x
	error_is 404 NOT_FOUND
	still_serving
}

@test "PATCH on /v1/kv/x is 405 with Allow" {
	start_coordd
	run http PATCH /v1/kv/x -D "$T/headers" -d 'v'
	error_is 405 INVALID_ARGUMENT
	grep -qi '^allow: .*PUT' "$T/headers"
	still_serving
}

@test "POST on /v1/watch/x is 405" {
	start_coordd
	run http POST /v1/watch/x -D "$T/headers"
	error_is 405 INVALID_ARGUMENT
	grep -qi '^allow: GET' "$T/headers"
	still_serving
}

@test "POST /healthz is 405" {
	start_coordd
	run http POST /healthz
	error_is 405 INVALID_ARGUMENT
	still_serving
}

@test "a key of 5000 bytes is 413 RESOURCE_EXHAUSTED" {
	start_coordd
	local key
	key=$(printf 'k%.0s' {1..5000})
	run http PUT "/v1/kv/$key" -d v
	error_is 413 RESOURCE_EXHAUSTED
	still_serving
	run http GET "/v1/kv/$key"
	error_is 413 RESOURCE_EXHAUSTED
	still_serving
}

@test "a key of 2048 bytes is accepted, 2049 is not" {
	start_coordd
	local key
	key=$(printf 'k%.0s' {1..2048})
	run http PUT "/v1/kv/$key" -d v
	assert_line --index 0 200
	run http PUT "/v1/kv/${key}k" -d v
	error_is 413 RESOURCE_EXHAUSTED
	still_serving
}

@test "a key of 2048 bytes of non-ASCII text is accepted" {
	start_coordd
	local key
	key=$(printf '\303\251%.0s' {1..1024})  # é, 2 bytes in UTF-8
	run kvctl put "$key" v
	assert_success
	run kvctl get "$key"
	assert_output v
	run kvctl put "${key}x" v
	assert_failure 12
}

@test "a 100K body with --max-value-size 1K is 413 RESOURCE_EXHAUSTED" {
	start_coordd --max-value-size 1K
	head -c 102400 /dev/urandom >big
	run http PUT /v1/kv/big --data-binary @big
	error_is 413 RESOURCE_EXHAUSTED
	still_serving
	# The same without Content-Length: chunked.
	run http PUT /v1/kv/big -H 'Transfer-Encoding: chunked' --data-binary @big
	error_is 413 RESOURCE_EXHAUSTED
	still_serving
	run kvctl tryget big
	assert_failure 1
}

@test "a 2K value with --max-value-size 1K is 413, a 1K value is fine" {
	start_coordd --max-value-size 1K
	head -c 2048 /dev/urandom >two
	run http PUT /v1/kv/two --data-binary @two
	error_is 413 RESOURCE_EXHAUSTED
	still_serving
	head -c 1024 /dev/urandom >one
	run http PUT /v1/kv/one --data-binary @one
	assert_line --index 0 200
	kvctl get one >got
	cmp one got
}

@test "invalid UTF-8 in the key (%ff) is 400 INVALID_ARGUMENT" {
	start_coordd
	run http PUT /v1/kv/a%ffb -d v
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http GET /v1/kv/%ff
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http GET /v1/watch/%c3
	error_is 400 INVALID_ARGUMENT
	still_serving
}

@test "an escaped NUL (%00) in the key is 400 INVALID_ARGUMENT" {
	start_coordd
	run http PUT /v1/kv/a%00b -d v
	error_is 400 INVALID_ARGUMENT
	still_serving
	# Not silently shortened to "a".
	run kvctl tryget a
	assert_failure 1
}

@test "a malformed %-escape in the key is 400 INVALID_ARGUMENT" {
	start_coordd
	run http GET /v1/kv/a%zz
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http GET /v1/kv/a%4
	error_is 400 INVALID_ARGUMENT
	still_serving
}

@test "an empty key (/v1/kv/ and /v1/kv///) is 400 INVALID_ARGUMENT" {
	start_coordd
	run http PUT /v1/kv/ -d v
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http GET /v1/kv/
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http PUT /v1/kv/// -d v
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http DELETE /v1/kv///
	error_is 400 INVALID_ARGUMENT
	still_serving
}

@test "a bad mode= is 400 INVALID_ARGUMENT" {
	start_coordd
	run http PUT '/v1/kv/x?mode=upsert' -d v
	error_is 400 INVALID_ARGUMENT
	still_serving
	run kvctl tryget x
	assert_failure 1
}

@test "a bad wait= duration is 400 INVALID_ARGUMENT" {
	start_coordd
	run http GET '/v1/kv/x?wait=soon'
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http GET '/v1/kv/x?wait=5parsecs'
	error_is 400 INVALID_ARGUMENT
	still_serving
	run http GET '/v1/watch/x?wait=-'
	error_is 400 INVALID_ARGUMENT
	still_serving
}

@test "a bad since= is 400 INVALID_ARGUMENT" {
	start_coordd
	local bad
	for bad in abc -1 1x ''; do
		run http GET "/v1/watch/x?since=$bad&wait=0s"
		error_is 400 INVALID_ARGUMENT
		still_serving
	done
}

@test "raw HTTP: PUT, GET with X-Muster-Revision, DELETE" {
	start_coordd
	run http PUT /v1/kv/raw -d hello
	assert_line --index 0 200
	run http GET /v1/kv/raw -D "$T/headers"
	assert_output $'200\nhello'
	grep -qi "^x-muster-revision: $(rev 1)" "$T/headers"
	run http GET /v1/kv/missing
	error_is 404 NOT_FOUND
	run http GET '/v1/kv/missing?wait=100ms'
	error_is 504 DEADLINE_EXCEEDED
	run http PUT /v1/kv/raw -d again
	error_is 409 ALREADY_EXISTS
	run http DELETE /v1/kv/raw
	assert_line --index 0 200
	run http GET /v1/kv/raw
	error_is 404 NOT_FOUND
	still_serving
}

@test "a sanitizer's report in a daemon's or a client's log fails the test" {
	mkdir planted
	echo "coordd: listening on 127.0.0.1:7700" >planted/coordd.log
	run sanitizer_reports planted
	assert_success
	printf '==42==ERROR: AddressSanitizer: heap-use-after-free on address 0x6\n' >>planted/coordd.log
	run sanitizer_reports planted
	assert_failure
	assert_output --partial "planted/coordd.log"
	rm planted/coordd.log
	printf 'lib/x.c:7:3: runtime error: signed integer overflow\n' >planted/w0.err
	run sanitizer_reports planted
	assert_failure
	rm -r planted
}
