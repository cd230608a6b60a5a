#!/usr/bin/env bats
# coordd --store etcd://...: replicas over a real etcd on loopback ports,
# one leading and the others standing by. A standby's answer names its
# leader and clients given every replica find it; kill -9 of the leader
# under write load from four clients loses no acknowledged write and a
# blocking get started before it completes after; a leader stopped past
# its lease writes nothing once resumed and starts again as a standby on
# its port; etcd losing one member goes on, losing two refuses changes
# with UNAVAILABLE until it is back. Skipped without etcd.

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
	kvctl put before 1
	# Parked on the leader before it dies; answered by the next one.
	kvctl --timeout 120s get late >"$T/late.out" 2>"$T/late.err" &
	BG_PIDS+=($!)
	local late=$!
	write_load 80 60s
	wait_for 120 eval '[ "$(cat "$T"/acked.* 2>/dev/null | wc -l)" -ge 60 ]'
	kill9 "$PID_a"
	check_write_load 80 300
	is_role b leader
	kvctl put late here
	wait_exit "$late" 30
	assert_equal "$(cat "$T/late.out")" here
	assert_equal "$(kvctl get before)" 1
	# A replica started after holds the same.
	replica c
	wait_for 30 is_role c standby
	kill -TERM "$PID_b"
	wait_exit "$PID_b" 30
	wait_for 30 is_role c leader
	assert_equal "$(kvctl -c "$(addr c)" get w1/1)" "value-1-1-$(printf '%0200d' 1)"
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
