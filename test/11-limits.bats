#!/usr/bin/env bats
# What coordd holds is bounded: request bodies in flight, keys and bytes
# in the store, barrier ids, and what one reply carries (listings and
# watches come a page at a time).

load helper

bats_require_minimum_version 1.5.0

# metric NAME: its value now.
metric() {
	curl -s "http://$MUSTER_COORD/metrics" | sed -n "s/^$1 //p"
}

# metric_above NAME N: NAME is above N now.
metric_above() {
	local v
	v=$(metric "$1")
	[ -n "$v" ] && [ "$v" -gt "$2" ]
}

@test "request bodies held at once are bounded by --max-inflight-bytes" {
	# Bodies up to 2.7 MB (--max-value-size 1M), 3 MB of them at once.
	start_coordd --max-value-size 1M --max-inflight-bytes 3M
	local fd
	exec {fd}<>"/dev/tcp/127.0.0.1/$COORD_PORT"
	# A client that sends 2.6 MB of a 2.8 MB body, then nothing.
	printf 'PUT /v1/kv/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 2800000\r\n\r\n' >&"$fd"
	head -c 2600000 /dev/zero >&"$fd"
	wait_for 20 metric_above muster_http_body_bytes 2599999
	# 700 KB more would pass the 3 MB: refused, and the client told why.
	head -c 700000 /dev/zero | tr '\0' v >value
	run --separate-stderr kvctl put big - <value
	assert_failure 12
	[[ $stderr == *"RESOURCE_EXHAUSTED"*"request bodies"* ]] || fail "$stderr"
	[ "$(metric muster_http_body_refused_total)" -ge 1 ]
	# Once the stalled body is gone, the same put goes through.
	exec {fd}>&-
	wait_for 20 test "$(metric muster_http_body_bytes)" = 0
	run kvctl put big - <value
	assert_success
}

@test "coordd --max-keys: a key past the limit is refused, a change is not" {
	start_coordd --max-keys 3
	kvctl put a 1
	kvctl put b 1
	kvctl put c 1
	run --separate-stderr kvctl put d 1
	assert_failure 12
	[[ $stderr == *"the store holds 3 keys"*"--max-keys"* ]] || fail "$stderr"
	# Changing a key that exists needs no room.
	kvctl put -f a 2
	kvctl add c 5
	kvctl rm b
	kvctl put d 1
	run metric muster_kv_refused_total
	assert_output 1
	run metric muster_kv_keys_max
	assert_output 3
}

@test "coordd --max-store-bytes: a value past the limit is refused" {
	start_coordd --max-store-bytes 100
	kvctl put a "$(printf '%060d' 0)"
	run --separate-stderr kvctl put b "$(printf '%060d' 0)"
	assert_failure 12
	[[ $stderr == *"--max-store-bytes"* ]] || fail "$stderr"
	run kvctl tryget b
	assert_failure 1
	kvctl put b small
}

@test "coordd --max-keys and --max-store-bytes take numbers and sizes" {
	run --separate-stderr coordd -n --max-keys 0
	assert_failure 2
	run --separate-stderr coordd -n --max-store-bytes lots
	assert_failure 2
	[[ $stderr == *"--max-store-bytes lots is not a size"* ]]
	run coordd -n --max-keys 10 --max-store-bytes 1G --max-barriers 5
	assert_success
}

@test "coordd --max-barriers: ended barriers make room, pending ones do not" {
	start_coordd --cluster worker=2 --heartbeat-timeout 60s --max-barriers 2
	local i
	for i in 0 1; do
		curl -s -o /dev/null -X POST \
			"http://$MUSTER_COORD/v1/tasks/worker/$i/register?incarnation=a$i"
	done
	# Cancelling ids nobody reached records each; the oldest ended one
	# goes to make room.
	for i in 1 2 3 4 5; do
		run http DELETE "/v1/barriers/gone$i?task=worker:0"
		assert_line --index 0 200
	done
	run metric muster_barriers
	assert_output 2
	# Two pending barriers fill it: a third is refused.
	curl -s -m 30 -X POST -d '{"task":"worker:0","incarnation":"a0"}' \
		"http://$MUSTER_COORD/v1/barriers/p1?wait=20s" >/dev/null &
	BG_PIDS+=($!)
	curl -s -m 30 -X POST -d '{"task":"worker:0","incarnation":"a0"}' \
		"http://$MUSTER_COORD/v1/barriers/p2?wait=20s" >/dev/null &
	BG_PIDS+=($!)
	wait_metric muster_http_parked 2
	run http POST "/v1/barriers/p3?wait=1s" -d '{"task":"worker:0","incarnation":"a0"}'
	assert_line --index 0 413
	[[ ${lines[1]} == *"2 barriers are pending"*"--max-barriers"* ]] || fail "${lines[1]}"
	run metric muster_barriers_refused_total
	assert_output 1
}

@test "a listing comes a page at a time: limit, after and more" {
	start_coordd
	local i
	for i in 1 2 3 4 5; do
		kvctl put "d/k$i" "$i"
	done
	run http GET "/v1/kv/d?dir=1&limit=2"
	assert_line --index 0 200
	run jq -c '[[.entries[].key], .more]' <<<"${lines[1]}"
	assert_output '[["d/k1","d/k2"],true]'
	run http GET "/v1/kv/d?dir=1&limit=2&after=d/k4"
	run jq -c '[[.entries[].key], .more]' <<<"${lines[1]}"
	assert_output '[["d/k5"],false]'
	run http GET "/v1/kv/d?dir=1&limit=0"
	assert_line --index 0 400
	run http GET "/v1/kv/d?dir=1&limit=10001"
	assert_line --index 0 400
}

@test "kvctl ls and watch read every page of a store bigger than one reply" {
	start_coordd
	local i
	# 2 MiB values: two fill a 4 MiB page.
	head -c 2097152 /dev/zero | tr '\0' x >big
	for i in 1 2 3; do
		kvctl put "big/v$i" - <big
	done
	run --separate-stderr kvctl ls big
	assert_success
	assert_output "$(printf '%s\n' big/v1 big/v2 big/v3)"
	# The first watch reply stops at a page and says there is more.
	run http GET "/v1/watch/big?since=0&wait=0s"
	run jq -c '[(.events | length), .more, .revision - '"$REV0"']' <<<"${lines[1]}"
	assert_output '[2,true,2]'
	run --separate-stderr kvctl --timeout 20s watch --since 0 --count 3 big
	assert_success
	assert_equal "${#lines[@]}" 3
}
