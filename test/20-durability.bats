#!/usr/bin/env bats
# coordd --state-dir: what a restart keeps, kill -9 under load with a
# checker of acknowledged writes, a torn tail, a flipped byte, a full disk
# (a small tmpfs, when this runs as root), and a second coordd on the same
# directory. Each coordd is ours, stopped by PID; restarts reuse the port.

load helper

bats_require_minimum_version 1.5.0

# up [ARGS...]: coordd on port $PORT (chosen once per test) with the state
# directory $T/state.
up() {
	: "${PORT:=$(free_port)}"
	start_coordd -l "127.0.0.1:$PORT" --state-dir "$T/state" "$@"
}

# crash: kill -9 of the running coordd.
crash() {
	kill9 "$COORD_PID"
}

# reg TASK INC: registers TASK (JOB:INDEX) with incarnation INC.
reg() {
	local code
	code=$(curl -s -m 10 -o "$T/reg.body" -w '%{http_code}' -X POST \
		"http://$MUSTER_COORD/v1/tasks/${1%%:*}/${1#*:}/register?incarnation=$2")
	[ "$code" = 200 ] || {
		echo "register $1 $2: HTTP $code $(cat "$T/reg.body")" >&2
		return 1
	}
}

# task_json TASK: the task's state as coordd shows it.
task_json() {
	curl -s -m 10 "http://$MUSTER_COORD/v1/tasks/${1%%:*}/${1#*:}"
}

@test "keys, revisions and the service incarnation survive kill -9; a watch resumes with --since" {
	up
	kvctl put a 1
	kvctl put d/x 2
	kvctl put d/y 3
	kvctl update a 4
	kvctl add n 5
	kvctl rm d
	kvctl cas a 4 'ab c'
	svc=$(curl -s "http://$MUSTER_COORD/v1/watch/?since=0&wait=0" | jq -r .service)
	first=$REV0
	crash
	up
	# The revisions go on from the first coordd's.
	assert_equal "$REV0" "$((first + 7))"
	REV0=$first
	assert_equal "$(kvctl get a)" 'ab c'
	assert_equal "$(kvctl get n)" 5
	run kvctl tryget d/x
	assert_failure 1
	# The next change takes the next revision.
	kvctl put b 1
	assert_equal "$(curl -s "http://$MUSTER_COORD/metrics" | awk '$1 == "muster_kv_revision" {print $2}')" "$(rev 8)"
	assert_equal "$(curl -s "http://$MUSTER_COORD/v1/watch/?since=0&wait=0" | jq -r .service)" "$svc"
	run --separate-stderr kvctl --timeout 5s watch --since "$(rev 3)" --count 5 ''
	assert_success
	assert_output "$(printf '%s\n' "$(rev 4) update a 4" "$(rev 5) put n 5" \
		"$(rev 6) delete d/x" "$(rev 6) delete d/y" "$(rev 7) update a ab c")"
	grep -q "state directory $T/state: 2 keys" "$T/coordd.log"
}

@test "every acknowledged write survives kill -9 under load from four clients; none is half there" {
	up
	write_load 150 30s
	wait_for 60 eval '[ "$(cat "$T"/acked.* 2>/dev/null | wc -l)" -ge 100 ]'
	crash
	up
	check_write_load 150 240
}

@test "tasks keep their incarnation, errors and epoch; passed barriers answer again after a restart" {
	up --cluster worker=2 --heartbeat-timeout 60s
	reg worker:0 a0
	reg worker:1 a1
	barrierwait -t worker:0 --timeout 20s b1 >/dev/null &
	BG_PIDS+=($!)
	barrierwait -t worker:1 --timeout 20s b1
	crash
	up --cluster worker=2 --heartbeat-timeout 60s
	assert_equal "$(task_json worker:0 | jq -r '.state + " " + .incarnation')" "connected 00000000000000a0"
	# Heartbeats of the same incarnation go on; the barrier passed.
	run curl -s -f -X POST "http://$MUSTER_COORD/v1/tasks/worker/1/heartbeat?incarnation=a1"
	assert_success
	run barrierwait -t worker:0 --timeout 5s b1
	assert_success
	# An error is kept too.
	curl -s -f -X POST "http://$MUSTER_COORD/v1/tasks/worker/1/error?incarnation=a1" \
		-d '{"code":"INTERNAL","message":"disk on fire"}' >/dev/null
	crash
	up --cluster worker=2 --heartbeat-timeout 60s
	run curl -s "http://$MUSTER_COORD/v1/errors"
	assert_output --partial 'disk on fire'
	# And so is its reset, which changes the task without an event.
	curl -s -f -X POST "http://$MUSTER_COORD/v1/tasks/worker/1/reset" >/dev/null
	reset_state=$(task_json worker:1 | jq -r .state)
	crash
	up --cluster worker=2 --heartbeat-timeout 60s
	assert_equal "$(task_json worker:1 | jq -r .state)" "$reset_state"
	[ "$reset_state" != error ]
	# Another cluster on this directory is refused.
	crash
	run --separate-stderr coordd -l 127.0.0.1:0 --state-dir "$T/state" --cluster worker=3
	assert_failure 10
	[[ "$stderr" == *"a state directory belongs to one cluster"* ]]
}

@test "a task that does not come back within the heartbeat timeout after a restart fails as usual" {
	up --cluster worker=1 --heartbeat-timeout 1s
	reg worker:0 a0
	crash
	up --cluster worker=1 --heartbeat-timeout 1s
	wait_for 30 eval '[ "$(task_json worker:0 | jq -r .state)" = error ]'
	task_json worker:0 | jq -r .error.message | grep -q heartbeat
}

@test "a torn tail is cut at the last whole record, and coordd says so" {
	up
	kvctl put a 1
	kvctl put b 2
	kvctl put c 3
	crash
	size=$(stat -c %s "$T/state/journal")
	truncate -s $((size - 5)) "$T/state/journal"
	up
	assert_equal "$(kvctl get a)" 1
	assert_equal "$(kvctl get b)" 2
	run kvctl tryget c
	assert_failure 1
	grep -Eq 'journal: cut [0-9]+ bytes of a torn record at offset [0-9]+' "$T/coordd.log"
	# And it goes on from there.
	kvctl put c 4
	crash
	up
	assert_equal "$(kvctl get c)" 4
}

@test "a flipped byte in the middle of the journal stops start-up with the offset, and nothing is served" {
	up
	for k in a b c d e; do kvctl put "$k" "value-$k"; done
	crash
	size=$(stat -c %s "$T/state/journal")
	off=$((size / 2))
	byte=$(od -An -tu1 -j "$off" -N1 "$T/state/journal" | tr -d ' ')
	printf "$(printf '\\%03o' $(((byte + 1) % 256)))" |
		dd of="$T/state/journal" bs=1 seek="$off" conv=notrunc status=none
	run --separate-stderr coordd -l 127.0.0.1:0 --state-dir "$T/state"
	assert_failure 10
	[[ "$stderr" == *"offset"* ]]
	[[ "$stderr" == *"$T/state"* ]]
}

@test "a second coordd on the same state directory is refused, naming the first" {
	up
	run --separate-stderr coordd -l 127.0.0.1:0 --state-dir "$T/state"
	assert_failure 6
	[[ "$stderr" == *"is in use by process $COORD_PID"* ]]
	kvctl put still here
}

@test "bad --fsync and --journal-max-bytes are usage errors" {
	run --separate-stderr coordd --state-dir "$T/s" --fsync sometimes
	assert_failure 2
	[[ "$stderr" == *"--fsync sometimes is not one of always, batch, none"* ]]
	run --separate-stderr coordd --state-dir "$T/s" --journal-max-bytes 12
	assert_failure 2
}

@test "the journal is compacted into a snapshot, and the snapshot and later records read back" {
	up --journal-max-bytes 64K --fsync batch
	for ((i = 0; i < 120; i++)); do
		kvctl put -f "k/$((i % 10))" "$(printf 'v%04d-%01000d' "$i" 0)"
	done
	wait_for 30 test -s "$T/state/snapshot"
	kvctl put after-snapshot yes
	crash
	up --journal-max-bytes 64K
	assert_equal "$(kvctl ls k | wc -l)" 10
	assert_equal "$(kvctl get k/9 | cut -c1-5)" v0119
	assert_equal "$(kvctl get after-snapshot)" yes
	[ "$(stat -c %s "$T/state/journal")" -lt 200000 ]
}

@test "a full disk refuses changes with RESOURCE_EXHAUSTED, reads go on, and writes work again once there is room" {
	small_disk "$T/small" 256k
	PORT=$(free_port)
	start_coordd -l "127.0.0.1:$PORT" --state-dir "$T/small/state"
	kvctl put first 1
	big=$(printf '%060000d' 0)
	local refused=0
	for ((i = 0; i < 10; i++)); do
		if ! kvctl --timeout 10s put "big/$i" "$big" 2>"$T/put.err"; then
			refused=1
			break
		fi
	done
	[ "$refused" = 1 ]
	grep -q 'RESOURCE_EXHAUSTED' "$T/put.err" || { cat "$T/put.err"; false; }
	# Reads are served; changes are refused.
	assert_equal "$(kvctl get first)" 1
	run kvctl put more 1
	assert_failure 12
	# Room again: the file system grows, and writes come back.
	mount -o remount,size=4m "$T/small"
	wait_for 30 kvctl put again 1
	crash
	start_coordd -l "127.0.0.1:$PORT" --state-dir "$T/small/state"
	assert_equal "$(kvctl get again)" 1
	assert_equal "$(kvctl get first)" 1
}
