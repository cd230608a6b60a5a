#!/usr/bin/env bats
# Blocking reads, watches, concurrency, big and binary values, and clients
# that outlive coordd: several kvctl processes at once, as a job would run
# them. Every background kvctl has a --timeout, and all of them are ours.

load helper

bats_require_minimum_version 1.5.0

# --- blocking get ----------------------------------------------------------------

@test "a blocked get in one process is released by a put from another" {
	start_coordd
	kvctl --timeout 10s get job/ready >get.out 2>get.err 3>&- &
	local get=$!
	wait_metric muster_http_parked 1
	sleep 0.2
	running "$get"
	[ ! -s get.out ]

	kvctl put job/ready go
	wait_exit "$get" 10
	assert_equal "$STATUS" 0
	printf 'go' | cmp - get.out
	[ ! -s get.err ]
}

@test "many blocked gets on one key are all released by one put" {
	start_coordd
	local i pids=()
	for i in 1 2 3 4 5; do
		kvctl --timeout 10s get k >"get.$i" 2>&1 3>&- &
		pids+=($!)
	done
	wait_metric muster_http_parked 5
	kvctl put k v
	for i in 1 2 3 4 5; do
		wait_exit "${pids[i - 1]}" 10
		assert_equal "$STATUS" 0
		assert_equal "$(cat "get.$i")" v
	done
}

# --- watch ------------------------------------------------------------------------

@test "watch sees put, update and delete in order" {
	start_coordd
	kvctl --timeout 10s watch --count 3 jobs >watch.out 2>watch.err 3>&- &
	local w=$!
	wait_metric muster_kv_watchers 1

	kvctl put jobs/a one
	kvctl put jobsx other     # not under jobs/
	kvctl put -f jobs/a two
	kvctl rm jobs/a
	wait_exit "$w" 10
	assert_equal "$STATUS" 0
	run cat watch.out
	assert_output "$(printf '%s\n' "$(rev 1) put jobs/a one" "$(rev 3) update jobs/a two" "$(rev 4) delete jobs/a")"
	[ ! -s watch.err ]
}

@test "watch --since REV resumes with the changes strictly after REV" {
	start_coordd
	kvctl put w/a 1           # revision REV0+1
	kvctl put w/b 2           # revision REV0+2
	kvctl update w/a 3        # revision REV0+3
	kvctl rm w/b              # revision REV0+4

	run --separate-stderr kvctl --timeout 2s watch --since "$(rev 2)" --count 2 w
	assert_success
	assert_output "$(printf '%s\n' "$(rev 3) update w/a 3" "$(rev 4) delete w/b")"

	run kvctl --timeout 2s watch --since 0 --count 4 w
	assert_success
	assert_line --index 0 "$(rev 1) put w/a 1"
	assert_line --index 3 "$(rev 4) delete w/b"

	# Nothing after the last revision: a bounded watch prints nothing.
	run --separate-stderr kvctl --timeout 300ms watch --since "$(rev 4)" w
	assert_success
	assert_output ""
}

@test "watch --since then waits for new changes" {
	start_coordd
	kvctl put w/a 1
	kvctl --timeout 10s watch --since "$(rev 1)" --count 1 w >watch.out 2>&1 3>&- &
	local w=$!
	wait_metric muster_kv_watchers 1
	running "$w"
	kvctl put w/b 2
	wait_exit "$w" 10
	assert_equal "$STATUS" 0
	run cat watch.out
	assert_output "$(rev 2) put w/b 2"
}

@test "watch --json prints one JSON object per change" {
	start_coordd
	kvctl put w/a 1
	printf 'b\0' | kvctl put w/b -
	kvctl rm w/a
	run --separate-stderr kvctl --json --timeout 2s watch --since 0 --count 3 w
	assert_success
	assert_equal "${#lines[@]}" 3
	run jq -c "[.revision - $REV0, .type, .key, .value, .value_base64]" <<<"$output"
	assert_output "$(printf '%s\n' '[1,"put","w/a","1",null]' '[2,"put","w/b",null,"YgA="]' '[3,"delete","w/a",null,null]')"
}

@test "watch --timeout with --count not reached exits 4 DEADLINE_EXCEEDED" {
	start_coordd
	kvctl put w/a 1
	run --separate-stderr kvctl --timeout 500ms watch --since 0 --count 2 w
	assert_failure 4
	assert_output "$(rev 1) put w/a 1"
	[[ $stderr == "kvctl: DEADLINE_EXCEEDED: "* ]]
}

@test "watch --timeout without --count exits 0 after the timeout" {
	start_coordd
	local t0 took
	t0=${EPOCHREALTIME/./}
	run --separate-stderr kvctl --timeout 500ms watch w
	took=$(((${EPOCHREALTIME/./} - t0) / 1000))
	assert_success
	assert_output ""
	# Until its deadline, and no longer than a busy machine adds to it.
	[ "$took" -ge 450 ] && [ "$took" -lt 5000 ] || fail "took ${took}ms"
}

# --- concurrency and values --------------------------------------------------------

@test "8 processes adding 1 twenty times each leave exactly 160" {
	start_coordd
	local i pids=()
	for i in 1 2 3 4 5 6 7 8; do
		(
			for ((j = 0; j < 20; j++)); do
				kvctl --timeout 30s add n >>"add.$i" || echo "add failed: $?" >&2
			done
		) 2>"add.$i.err" 3>&- &
		pids+=($!)
	done
	for i in 1 2 3 4 5 6 7 8; do
		wait_exit "${pids[i - 1]}" 60
		assert_equal "$STATUS" 0
		[ ! -s "add.$i.err" ] || fail "$(cat "add.$i.err")"
	done
	run kvctl get n
	assert_output 160
	# Each add saw its own value: 1..160, each once.
	run bash -c 'cat add.? | sort -n | uniq | wc -l'
	assert_output 160
	run bash -c 'cat add.? | sort -n | sed -n "1p;\$p"'
	assert_output $'1\n160'
}

@test "a random 1 MiB binary value round-trips" {
	start_coordd
	head -c 1048576 /dev/urandom >f
	kvctl put k - <f
	kvctl get k >g
	cmp f g
	kvctl --json get k >g.json
	jq -r .value_base64 g.json | base64 -d | cmp - f
}

@test "a value with NUL bytes and trailing newlines round-trips" {
	start_coordd
	printf 'a\0b\n\0\n\n' >f
	kvctl put k - <f
	kvctl get k >g
	cmp f g
	[ "$(wc -c <g)" -eq 7 ]
	kvctl tryget k >g2
	cmp f g2
}

# --- clients and coordd restarts ---------------------------------------------------

@test "a client started before coordd succeeds once coordd is up" {
	local port
	port=$(free_port)
	export MUSTER_COORD=127.0.0.1:$port
	kvctl --timeout 10s put early value >put.out 2>put.err 3>&- &
	local put=$!
	sleep 1
	running "$put"

	coordd -l "127.0.0.1:$port" 2>>coordd.log &
	DAEMON_PIDS+=($!)
	wait_exit "$put" 15
	assert_equal "$STATUS" 0
	[ ! -s put.err ] || fail "$(cat put.err)"
	run kvctl --timeout 2s get early
	assert_success
	assert_output value
}

@test "a blocked get survives a restart of coordd" {
	start_coordd
	local port=$COORD_PORT
	kvctl --timeout 10s get after/restart >get.out 2>get.err 3>&- &
	local get=$!
	wait_metric muster_http_parked 1

	kill "$COORD_PID"
	wait_exit "$COORD_PID" 10
	assert_equal "$STATUS" 0
	sleep 0.3
	running "$get"

	coordd -l "127.0.0.1:$port" 2>>coordd.log &
	DAEMON_PIDS+=($!)
	# The get comes back to the new coordd and parks there.
	wait_metric muster_http_parked 1
	kvctl put after/restart back
	wait_exit "$get" 10
	assert_equal "$STATUS" 0
	printf 'back' | cmp - get.out
	[ ! -s get.err ] || fail "$(cat get.err)"
}
