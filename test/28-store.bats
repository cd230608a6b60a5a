#!/usr/bin/env bats
# coordd --store etcd://...: replicas over a real etcd on loopback ports,
# one leading and the others standing by. A standby's answer names its
# leader and clients given every replica find it; kill -9 of the leader
# under write load from four clients loses no acknowledged write and a
# blocking get started before it completes after; a leader stopped past
# its lease writes nothing once resumed and starts again as a standby on
# its port; etcd losing one member goes on, losing two refuses changes
# with UNAVAILABLE until it is back; a preemptwatch job trains on through
# a takeover, and its preemption sync spans one; etcd with authentication
# on. Skipped without etcd.

load helper
load etcd

bats_require_minimum_version 1.5.0

@test "a standby answers with its leader's address; a client given every replica finds the leader" {
	start_etcd 1
	pair
	run curl -s -i "http://$(addr b)/v1/kv/x"
	assert_output --partial "503 Service Unavailable"
	assert_output --partial "X-Muster-Leader: http://$(addr a)"
	assert_output --partial "X-Muster-Standby: 1"
	# The standby first: the call goes on to the leader, even a create.
	export MUSTER_COORD=$(addr b),$(addr a)
	kvctl put k v1
	assert_equal "$(kvctl get k)" v1
	kvctl cas k v1 v2
	assert_equal "$(kvctl -c "$(addr a)" get k)" v2
	# Both replicas, where each stands; the standby catches up.
	wait_for 30 eval '[ "$(curl -s "http://$(addr b)/v1/replicas" | jq "[.replicas[] | select(.behind == 0)] | length")" = 2 ]'
	run curl -s "http://$(addr a)/v1/replicas"
	assert_output --partial "\"leader\":\"http://$(addr a)\""
	# kvctl status says which leads, since when, and how far each is
	# behind.
	run -0 kvctl status
	assert_output --partial "replicas under /muster/test, http://$(addr a) leads"
	assert_line --regexp "^http://$(addr a) +leader +[0-9]+ +0 +[0-9].* ago\$"
	assert_line --regexp "^http://$(addr b) +standby +[0-9]+ +0 +-\$"
	kvctl --json status | jq -en --arg a "http://$(addr a)" '[inputs] | .[0].replicas.leader == $a'
	# A coordd without --store has no replicas.
	start_coordd
	run curl -s "http://127.0.0.1:$COORD_PORT/v1/replicas"
	assert_output --partial FAILED_PRECONDITION
}

@test "kill -9 of the leader under write load from four clients: every acknowledged write is there after the takeover" {
	start_etcd 3
	pair
	export MUSTER_COORD=$(addr a),$(addr b)
	local since
	since=$(kvctl --json put before 1 | jq -en '[inputs][0].revision')
	# Parked on the leader before it dies; answered by the next one.
	kvctl --timeout 120s get late >"$T/late.out" 2>"$T/late.err" &
	BG_PIDS+=($!)
	local late=$!
	kvctl --timeout 120s watch --since "$since" --count 2 watched/ >"$T/watch.out" 2>"$T/watch.err" &
	BG_PIDS+=($!)
	local watch=$!
	kvctl put watched/one 1
	wait_for 30 eval '[ -s "$T/watch.out" ]'
	write_load 80 60s
	wait_for 120 eval '[ "$(cat "$T"/acked.* 2>/dev/null | wc -l)" -ge 60 ]'
	kill9 "$PID_a"
	check_write_load 80 300
	is_role b leader
	kvctl put late here
	wait_exit "$late" 30
	assert_equal "$(cat "$T/late.out")" here
	# The watch goes on from the revision it had seen, on the new leader.
	kvctl put watched/two 2
	wait_exit "$watch" 30
	assert_equal "$STATUS" 0
	assert_equal "$(wc -l <"$T/watch.out")" 2
	grep -q 'watched/one' "$T/watch.out"
	grep -q 'watched/two' "$T/watch.out"
	assert_equal "$(kvctl get before)" 1
	# A replica started after holds the same.
	replica c
	wait_for 30 is_role c standby
	kill -TERM "$PID_b"
	wait_exit "$PID_b" 30
	wait_for 30 is_role c leader
	assert_equal "$(kvctl -c "$(addr c)" get w1/1)" "value-1-1-$(printf '%0200d' 1)"
}

LOOP=$BATS_TEST_DIRNAME/../examples/train-loop.sh

# tasks_connected ADDR INCS: coordd at ADDR has the four tasks connected,
# with the incarnations INCS (a JSON array).
tasks_connected() {
	curl -s -m 5 "http://$1/v1/tasks" | jq -en --argjson inc "$2" \
		'[inputs] | length == 1 and (.[0] |
		 [.tasks[].state] == ["connected","connected","connected","connected"] and
		 [.tasks[].incarnation] == $inc)' >/dev/null
}

# at_barrier ADDR N: coordd at ADDR has N tasks or more at the
# preemption barrier.
at_barrier() {
	curl -s -m 5 "http://$1/v1/barriers" | jq -en --argjson n "$2" \
		'[inputs] | length == 1 and
		 (([.[0].barriers[] | select(.id == "muster.preemption") | .arrived][0] // 0) >= $n)' >/dev/null
}

@test "a 4-task preemptwatch job trains on through kill -9 of the leader: no task fails or exits 43; a notice after the takeover syncs it at one step" {
	start_etcd 1
	pair --cluster worker=4 --heartbeat-timeout 10s --store-lease 2s
	export MUSTER_COORD=$(addr a),$(addr b)
	local i n m pids=() before=() inc
	for i in 0 1 2 3; do
		STEPS=100000 STEP_TIME=0.05 CKPT=$T/ckpt.$i \
			spw "w$i" -t "worker:$i" --grace 3s -- "$LOOP"
		pids+=("$PID")
	done
	for i in 0 1 2 3; do
		wait_for 30 at_step "w$i" 1
	done
	inc=$(curl -s -m 5 "http://$(addr a)/v1/tasks" | jq -c '[.tasks[].incarnation]')
	tasks_connected "$(addr a)" "$inc"
	kill9 "$PID_a"
	for i in 0 1 2 3; do
		before+=("$(step_of "w$i")")
	done
	wait_for 60 is_role b leader
	# Every loop goes on well past where it was, under the same
	# preemptwatch: the new leader holds the four tasks as they were.
	for i in 0 1 2 3; do
		wait_for 60 at_step "w$i" $((before[i] + 40))
	done
	for i in 0 1 2 3; do
		running "${pids[i]}" || fail "worker:$i exited: $(cat "$T/w$i.err")"
	done
	tasks_connected "$(addr b)" "$inc"
	curl -s -m 5 "http://$(addr b)/v1/errors" >"$T/errors.json"
	jq -en '[inputs] | length == 1 and (.[0].errors | length == 0)' <"$T/errors.json" ||
		fail "errors on the new leader: $(cat "$T/errors.json")"

	# A notice now: the job syncs on the new leader, at one step.
	kill -TERM "${pids[1]}"
	for i in 0 1 2 3; do
		wait_exit "${pids[i]}" 60
		assert_equal "$STATUS" 42
	done
	line=$(grep 'sync point: step' "$T/w0.err")
	[[ $line =~ sync\ point:\ step\ ([0-9]+)\ \(the\ furthest\ of\ 4\ tasks\ was\ at\ ([0-9]+)\) ]] ||
		fail "no sync point line with 4 tasks: $line"
	n=${BASH_REMATCH[1]} m=${BASH_REMATCH[2]}
	for i in 0 1 2 3; do
		assert_equal "$(cat "$T/ckpt.$i")" "$n"
		refute grep -q 'failed\|lost' "$T/w$i.err"
	done
	[ "$m" -gt "${before[0]}" ]
}

@test "the preemption sync across a takeover: the leader killed while the job waits at the sync barrier, one sync step for the whole job" {
	start_etcd 1
	pair --cluster worker=4 --heartbeat-timeout 10s --store-lease 2s
	export MUSTER_COORD=$(addr a),$(addr b)
	local i n pids=() death
	# Task 3 is still starting (no step yet) when the notice comes: the
	# other three post their steps and wait for it at the barrier.
	for i in 0 1 2 3; do
		STEPS=100000 STEP_TIME=0.05 CKPT=$T/ckpt.$i \
			START_DELAY=$([ "$i" = 3 ] && echo 12 || echo 0) \
			spw "w$i" -t "worker:$i" --grace 3s --notice "file:$T/notice" \
			--notice-interval 100ms -- "$LOOP"
		pids+=("$PID")
	done
	for i in 0 1 2; do
		wait_for 30 at_step "w$i" 1
	done
	# A death time 40 s ahead, written whole, read by every task.
	death=$(date -u -d "@$(($(date +%s) + 40))" +%Y-%m-%dT%H:%M:%SZ)
	echo "$death" >"$T/notice.tmp"
	mv "$T/notice.tmp" "$T/notice"
	wait_for 30 at_barrier "$(addr a)" 3
	running "${pids[3]}"
	[ "$(step_of w3)" = -1 ]
	kill9 "$PID_a"
	wait_for 60 is_role b leader
	# The protocol is not over: the job waits at the barrier, and ends it
	# on the new leader.
	for i in 0 1 2 3; do
		running "${pids[i]}"
	done
	for i in 0 1 2 3; do
		wait_exit "${pids[i]}" 60
		assert_equal "$STATUS" 42
	done
	# One sync step, past the furthest of the four, and every checkpoint
	# at it.
	n=$(cat "$T/ckpt.0")
	for i in 0 1 2 3; do
		assert_equal "$(cat "$T/ckpt.$i")" "$n"
		grep -q "sync point: step $n (the furthest of 4 tasks was at $((n - 1)))" "$T/w$i.err" ||
			fail "worker:$i: $(cat "$T/w$i.err")"
	done
}

@test "a leader stopped past its lease writes nothing once resumed, and starts again as a standby on its port" {
	start_etcd 1
	pair --store-lease 2s
	kvctl -c "$(addr a)" put x 1
	kill -STOP "$PID_a"
	# A change sent to the stopped leader waits in its socket.
	curl -s -m 60 -X PUT --data-binary stale "http://$(addr a)/v1/kv/y" >"$T/stale.out" &
	local stale=$!
	BG_PIDS+=($stale)
	wait_for 30 is_role b leader
	kvctl -c "$(addr b)" put -f x 2
	kill -CONT "$PID_a"
	wait_grep "starting again as a standby" "$T/a.log" 30
	wait_exit "$stale" 60
	# Same process, same port, now a standby holding the new leader's x.
	running "$PID_a"
	wait_for 30 is_role a standby
	assert_equal "$(kvctl -c "$(addr a),$(addr b)" get x)" 2
	run kvctl -c "$(addr a),$(addr b)" tryget y
	assert_failure 1
	run cat "$T/stale.out"
	refute_output --partial '"revision"'
}

@test "past --journal-max-bytes the leader stores a snapshot and deletes the records it holds; a replica started after reads it and takes over with every key" {
	start_etcd 1
	pair --journal-max-bytes 4K
	export MUSTER_COORD=$(addr a),$(addr b)
	local i
	for ((i = 1; i <= 200; i++)); do
		kvctl put -f "k$i" "value-$i-$(printf '%0100d' "$i")"
	done
	run etcdctl get --print-value-only /muster/test/meta
	assert_output --regexp '^muster-store 1 [0-9a-f]+ [0-9]+ [0-9]+ [0-9]+ [0-9a-f]{8}$'
	# 200 records of 150-odd bytes; the stream left is under a snapshot's
	# worth of them.
	n=$(etcdctl get --prefix --keys-only /muster/test/log/ | grep -c .)
	[ "$n" -lt 60 ] || fail "$n keys of the stream left after the snapshots"
	[ "$(etcdctl get --prefix --keys-only /muster/test/snapshot/ | grep -c .)" -ge 1 ]
	replica c --journal-max-bytes 4K
	wait_for 30 is_role c standby
	kill9 "$PID_a"
	kill9 "$PID_b"
	wait_for 30 is_role c leader
	export MUSTER_COORD=$(addr c)
	for ((i = 1; i <= 200; i++)); do
		assert_equal "$(kvctl get "k$i")" "value-$i-$(printf '%0100d' "$i")"
	done
	kvctl put -f k1 again
	assert_equal "$(kvctl get k1)" again
}

@test "SIGUSR2 makes the leader give its lease back: a standby takes over well before the lease would end, and the old leader follows with its PID and port" {
	start_etcd 1
	pair --store-lease 60s
	kvctl -c "$(addr a)" put k 1
	kill -USR2 "$PID_a"
	# The lease is 60 s: only its return lets b lead this soon.
	wait_for 30 is_role b leader
	wait_grep "starting again as a standby" "$T/a.log"
	wait_for 30 is_role a standby
	running "$PID_a"
	assert_equal "$(kvctl -c "$(addr a),$(addr b)" get k)" 1
}

@test "over etcd with TLS and client certificates: --store-ca-file, --store-cert-file and --store-key-file; without them it waits for etcd and says why" {
	etcd_tls
	start_etcd 1
	STORE_SCHEME=etcds replica a --store-ca-file "$T/tls/ca.pem" \
		--store-cert-file "$T/tls/client.pem" \
		--store-key-file "$T/tls/client-key.pem"
	wait_for 30 is_role a leader
	kvctl -c "$(addr a)" put k 1
	assert_equal "$(kvctl -c "$(addr a)" get k)" 1
	STORE_SCHEME=etcds replica b
	wait_grep "store: waiting for etcd" "$T/b.log" 30
	run curl -s "http://$(addr b)/v1/kv/k"
	assert_output --partial UNAVAILABLE
}

@test "--store-auth-file: a user of etcd with read and write under the prefix only serves and takes over; a wrong password or another prefix waits for etcd and says why" {
	start_etcd 1
	etcdctl user add root:rootpw --interactive=false
	etcdctl user grant-role root root
	etcdctl role add muster
	etcdctl role grant-permission muster --prefix=true readwrite /muster/test
	etcdctl user add muster:pw --interactive=false
	etcdctl user grant-role muster muster
	etcdctl auth enable
	(umask 077 && echo muster:pw >"$T/auth" && echo muster:wrong >"$T/bad")
	pair --store-auth-file "$T/auth" --store-lease 2s
	export MUSTER_COORD=$(addr a),$(addr b)
	kvctl put x 1
	kill9 "$PID_a"
	wait_for 60 is_role b leader
	assert_equal "$(kvctl get x)" 1
	# A wrong password, or a prefix the user may not write, keeps a
	# replica waiting for etcd, saying why.
	run -124 timeout 8 coordd -l 127.0.0.1:0 \
		--store "etcd://$(etcd_store)/muster/test" --store-auth-file "$T/bad"
	assert_output --partial "authentication failed"
	assert_output --partial "authenticating as muster"
	run -124 timeout 8 coordd -l 127.0.0.1:0 \
		--store "etcd://$(etcd_store)/muster/other" --store-auth-file "$T/auth"
	assert_output --partial "permission denied"
	# The keys stay etcd's own business: etcdctl without a user is refused.
	run etcdctl get --prefix /muster/test
	assert_failure
	is_role b leader
}

@test "etcd losing one member goes on; losing two refuses changes with UNAVAILABLE; back to three, it goes on with every acknowledged write" {
	start_etcd 3
	pair
	export MUSTER_COORD=$(addr a),$(addr b)
	kvctl put one 1
	etcd_kill9 0
	kvctl --timeout 30s put two 2
	assert_equal "$(kvctl get one)" 1
	etcd_kill9 1
	run --separate-stderr kvctl --timeout 5s put three 3
	assert_failure
	[[ "$stderr" == *UNAVAILABLE* || "$stderr" == *DEADLINE_EXCEEDED* ]]
	etcd_restart 0
	etcd_restart 1
	kvctl --timeout 60s put four 4
	assert_equal "$(kvctl get one)" 1
	assert_equal "$(kvctl get two)" 2
	assert_equal "$(kvctl get four)" 4
}

@test "a replica of another cluster on the same prefix stops with INTERNAL (10), saying why, rather than start again and again" {
	start_etcd 1
	replica a --cluster worker=2
	wait_for 30 is_role a leader
	run -10 timeout 60 coordd -l 127.0.0.1:0 --cluster worker=3 \
		--store "etcd://$(etcd_store)/muster/test"
	assert_output --partial "the cluster given has 3"
	[ "$(grep -c 'listening on' <<<"$output")" = 1 ]
	is_role a leader
}

@test "examples/ha-cluster.sh: three etcd members, two coordd and two dispatchd; both leaders killed, the key and the closure's value kept" {
	etcd_require
	run -0 timeout 300 "$BATS_TEST_DIRNAME/../examples/ha-cluster.sh" "$T/ha"
	assert_line --regexp '^coordd .* leads, .* stands by$'
	assert_line --regexp '^kill +coordd .* \(-9\): .* took a write [0-9]+ ms later; job/config=lr=0.1$'
	assert_line --regexp '^kill +dispatchd .* while closure 1 ran: its value "trained" came from .*'
	assert_output --partial "leader    "
	# Everything it started (each ran in its directory) is stopped.
	local p
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/cwd" 2>/dev/null)" != "$T/ha" ] ||
			fail "${p#/proc/} is still running: $(tr '\0' ' ' <"$p/cmdline")"
	done
}

@test "--store: bad settings are usage errors, for coordd and dispatchd alike" {
	run coordd --store etcd://127.0.0.1:2379/p --state-dir "$T/s" -n
	assert_failure 2
	assert_output --partial "one or the other"
	run coordd --store http://127.0.0.1:2379/p -n
	assert_failure 2
	assert_output --partial "etcd://HOST:PORT"
	run coordd --store etcd://127.0.0.1:2379 -n
	assert_failure 2
	run coordd --store-lease 2s -n
	assert_failure 2
	assert_output --partial "go with --store"
	run coordd --store etcd://127.0.0.1:2379/p --store-lease 0s -n
	assert_failure 2
	run coordd --store etcd://127.0.0.1:2379,127.0.0.1:2380/p -n
	assert_success
	# dispatchd takes the same settings.
	run dispatchd --store etcd://127.0.0.1:2379/p --state-dir "$T/s" -n
	assert_failure 2
	assert_output --partial "one or the other"
	run dispatchd --store etcd://127.0.0.1:2379,127.0.0.1:2380/p --store-lease 3s -n
	assert_success
}
