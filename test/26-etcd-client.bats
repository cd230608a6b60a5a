#!/usr/bin/env bats
# The etcd client (lib/io/etcd*.h) against real etcd, through etcd-probe:
# keys and transactions, leases, the election API and fencing, the watch
# taken up on another member after a kill -9, failover of plain calls and
# of a change that cannot have been made (and no other change sent twice),
# a cluster without its quorum, TLS and authentication. Each cluster is
# started by test/etcd.bash and stopped by PID; without etcd installed the
# tests are skipped.

load helper
load etcd

bats_require_minimum_version 1.5.0

# probe ARGS...: etcd-probe against the cluster started last.
probe() {
	etcd-probe -e "$ETCD_ENDPOINTS" -t 20s "$@"
}

# probe_bg NAME ARGS...: etcd-probe ARGS in the background, stdout in
# $T/NAME.out and stderr in $T/NAME.err, stopped in teardown; its PID (its
# own, not a subshell's) in PID.
probe_bg() {
	local name=$1
	shift
	etcd-probe -e "$ETCD_ENDPOINTS" -t 60s "$@" >"$T/$name.out" 2>"$T/$name.err" &
	PID=$!
	BG_PIDS+=("$PID")
}

# lines FILE: the number of lines in FILE (0 when there is none).
lines() {
	local n=0 _l
	while IFS= read -r _l; do n=$((n + 1)); done <"$1" 2>/dev/null
	echo "$n"
}

# has_lines FILE N: FILE has at least N lines.
has_lines() {
	(($(lines "$1") >= $2))
}

# count_of KEY: how many keys the range of KEY holds now.
count_of() {
	probe get "$1" | sed -n 's/^count=\([0-9]*\) .*/\1/p'
}

# gone KEY: KEY does not exist.
gone() {
	[ "$(count_of "$1")" = 0 ]
}

@test "etcd-probe: no command, an unknown one, or bad endpoints is a usage error" {
	run -2 etcd-probe
	assert_output --partial "no command given"
	run -2 etcd-probe -e 127.0.0.1:2379 frobnicate
	assert_output --partial "frobnicate: unknown command"
	run -2 etcd-probe -e "127.0.0.1:2379,,x" get k
	assert_output --partial 'bad etcd endpoints'
	run -2 etcd-probe -e "127.0.0.1:99999" get k
	assert_output --partial 'bad address'
	run -2 etcd-probe -e 127.0.0.1:2379 --auth "$T/none" get k
	assert_output --partial "auth file $T/none: cannot be read"
}

@test "a stranger on the port (coordd): its error is no success, for a call or a watch" {
	start_coordd
	run -1 etcd-probe -e "$MUSTER_COORD" put k v
	assert_output --partial "NOT_FOUND: etcd $MUSTER_COORD: HTTP 404: no such resource"
	run -1 etcd-probe -e "$MUSTER_COORD" -t 5s watch k
	assert_output --partial "NOT_FOUND: etcd $MUSTER_COORD: HTTP 404"
}

@test "no member listening: UNAVAILABLE within the retry bound, naming the address" {
	local port t0
	port=$(free_port)
	t0=$(now_ms)
	run -9 etcd-probe -e "127.0.0.1:$port" --retry 1s put k v
	assert_output --partial "UNAVAILABLE: etcd: cannot reach 127.0.0.1:$port"
	assert_output --partial "every member tried"
	(($(now_ms) - t0 < 5000))
}

@test "keys: put, range of a key, a prefix, a limit, an old revision, keys only; delete" {
	start_etcd 1
	run -0 probe put a/1 one
	local r1=${output#revision=}
	run -0 probe put a/2 two
	run -0 probe put a/1 uno
	run -0 probe put b other
	run -0 probe get a/1
	assert_line --index 0 "a/1 uno create=$r1 mod=$((r1 + 2)) version=2 lease=0"
	run -0 probe get a/ prefix
	assert_line --index 0 --regexp '^a/1 uno '
	assert_line --index 1 --regexp '^a/2 two '
	assert_line --index 2 --regexp '^count=2 more=0 revision=[0-9]+$'
	run -0 probe get a/ prefix limit=1 keys
	assert_line --index 0 --regexp '^a/1  create='
	assert_line --index 1 --regexp '^count=2 more=1 '
	run -0 probe get a/1 rev="$r1"
	assert_line --index 0 --regexp '^a/1 one '
	run -0 probe get nothing
	assert_output --regexp '^count=0 more=0 revision=[0-9]+$'
	run -0 probe del a/ prefix
	assert_output --regexp '^deleted=2 revision='
	run -0 probe get "" prefix
	assert_line --index 0 --regexp '^b other '
	assert_line --index 1 --regexp '^count=1 '
}

@test "a transaction makes its then or its else; one guarded by a stale create revision changes nothing" {
	start_etcd 1
	run -0 probe put owner first
	local rev=${output#revision=}
	run -0 probe txn "create(owner)=$rev" "value(owner)=first" "version(owner)<2" \
		-- put:data=1 get:owner -- put:data=lost
	assert_line --index 0 --regexp '^succeeded revision='
	assert_line --index 1 put
	assert_line --index 2 --regexp "^owner first create=$rev "
	# The owner key made again: a holder of the old one is fenced off.
	run -0 probe del owner
	run -0 probe put owner second
	run -0 probe txn "create(owner)=$rev" -- put:data=2 -- get:data
	assert_line --index 0 --regexp '^failed revision='
	assert_line --index 1 --regexp '^data 1 '
	run -0 probe get data
	assert_line --index 0 --regexp '^data 1 '
	run -0 probe txn "mod(data)>0" "value(data)!=1" -- del:data -- del:data
	assert_line --index 0 --regexp '^failed '
	assert_line --index 1 deleted=1
	run -2 probe txn "size(x)=1"
	assert_output --partial "txn: bad size(x)=1"
}

@test "leases: a key lives while its lease is kept alive and goes when keep-alives stop; revoke" {
	start_etcd 1
	local id
	id=$(probe grant 2)
	run -0 probe put leased v "$id"
	run -0 probe ttl "$id"
	assert_output --regexp '^ttl=[12] granted=2$'
	probe_bg keepalive keepalive "$id" 300ms
	local ka=$PID
	# Past the TTL twice over, the key is still there.
	wait_for 20 has_lines "$T/keepalive.out" 14
	run -0 probe get leased
	assert_line --index 0 --regexp "^leased v .* lease=$id$"
	kill "$ka"
	wait_for 10 gone leased
	run -1 probe ttl "$id"
	assert_output --partial "NOT_FOUND: etcd lease $id has ended"
	run -1 probe keepalive "$id" 1s 1
	assert_output --partial "NOT_FOUND"
	id=$(probe grant 60)
	run -0 probe put leased w "$id"
	run -0 probe revoke "$id"
	run -0 count_of leased
	assert_output 0
	run -1 probe revoke "$id"
	assert_output --partial "NOT_FOUND: etcd 127.0.0.1:"
	assert_output --partial "requested lease not found"
}

@test "election: one campaigner leads, the other waits; the leader's lease ends and the other leads; the deposed leader's fenced write fails" {
	start_etcd 1
	local la lb ka kb key rev lease key2 rev2
	la=$(probe grant 2)
	lb=$(probe grant 2)
	probe_bg ka keepalive "$la" 300ms
	ka=$PID
	probe_bg kb keepalive "$lb" 300ms
	kb=$PID
	run -0 probe campaign el alpha "$la"
	read -r key rev lease <<<"$output"
	[ "$lease" = "$la" ]
	probe_bg observe observe el 2
	local obs=$PID
	probe_bg b campaign el beta "$lb"
	local b=$PID
	run -0 probe leader el
	assert_output --regexp "^$key alpha create=$rev "
	run -0 probe txn "create($key)=$rev" -- put:fence=alpha
	assert_line --index 0 --regexp '^succeeded '
	# beta waits while alpha's lease lives: a second of keep-alives.
	local n
	n=$(lines "$T/ka.out")
	wait_for 10 has_lines "$T/ka.out" $((n + 4))
	running "$b"
	[ ! -s "$T/b.out" ]
	kill "$ka"
	wait_exit "$b" 15
	[ "$STATUS" = 0 ]
	read -r key2 rev2 lease <<<"$(cat "$T/b.out")"
	[ "$lease" = "$lb" ] && [ "$key2" != "$key" ]
	run -0 probe txn "create($key)=$rev" -- put:fence=alpha-again
	assert_line --index 0 --regexp '^failed '
	run -0 probe txn "create($key2)=$rev2" -- put:fence=beta
	assert_line --index 0 --regexp '^succeeded '
	run -0 probe get fence
	assert_line --index 0 --regexp '^fence beta '
	wait_exit "$obs" 10
	[ "$STATUS" = 0 ]
	run -0 cat "$T/observe.out"
	assert_line --index 0 "$key alpha"
	assert_line --index 1 "$key2 beta"
	run -0 probe proclaim el "$key2" "$rev2" "$lb" gamma
	run -0 probe leader el
	assert_output --regexp "^$key2 gamma "
	run -0 probe resign el "$key2" "$rev2" "$lb"
	run -1 probe leader el
	assert_output --partial "NOT_FOUND: etcd 127.0.0.1:"
	assert_output --partial "election: no leader"
}

@test "watch: every change from a revision in order, a transaction's together; progress; a compacted start is FAILED_PRECONDITION" {
	start_etcd 1 --experimental-watch-progress-notify-interval 300ms
	run -0 probe put w/a 1
	local r=${output#revision=}
	run -0 probe txn -- put:w/b=2 put:w/c=3 del:w/a
	run -0 probe put other x
	run -0 probe put w/d 4
	run -0 --separate-stderr probe watch w/ prefix from="$r" count=5
	assert_output "PUT w/a 1 $r
PUT w/b 2 $((r + 1))
PUT w/c 3 $((r + 1))
DELETE w/a $((r + 1))
PUT w/d 4 $((r + 3))"
	run -0 --separate-stderr probe watch w/d from="$r" count=1
	assert_output "PUT w/d 4 $((r + 3))"
	probe_bg progress watch w/ prefix progress
	wait_grep '^PROGRESS [0-9]+$' "$T/progress.out"
	ETCDCTL_API=3 etcdctl --endpoints "$ETCD_ENDPOINTS" compaction $((r + 2)) >/dev/null
	run -6 --separate-stderr probe watch w/ prefix from="$r"
	assert_output "COMPACTED $((r + 2))"
	[[ $stderr == *"FAILED_PRECONDITION: etcd has compacted the changes from revision $r "* ]]
}

@test "a watch whose member is killed -9 goes on on another, from where it was, no change lost or repeated" {
	start_etcd 3
	local lead f o n r expect
	lead=$(etcd_leader)
	f=$(((lead + 1) % 3)) o=$(((lead + 2) % 3))
	# The watch starts on a follower, the one killed; writes go to the
	# leader, so that none is left in doubt by the kill.
	ETCD_ENDPOINTS=$(etcd_endpoints "$lead" "$f" "$o")
	run -0 probe put k/0 v0
	r=${output#revision=}
	ETCD_ENDPOINTS=$(etcd_endpoints "$f" "$o" "$lead") \
		probe_bg watch watch k/ prefix from="$r" count=26
	local w=$PID
	expect="PUT k/0 v0 $r"
	# (Not i: bats's run sets it.)
	for n in 1 2 3 4 5 6 7 8 9 10; do
		run -0 probe put "k/$n" "v$n"
		expect+=$'\n'"PUT k/$n v$n ${output#revision=}"
	done
	run -0 probe txn -- put:k/t1=a put:k/t2=b put:k/t3=c
	r=$(sed -n 's/^succeeded revision=//p' <<<"$output")
	expect+=$'\n'"PUT k/t1 a $r"$'\n'"PUT k/t2 b $r"$'\n'"PUT k/t3 c $r"
	wait_for 10 has_lines "$T/watch.out" 14
	grep -q "on ${ETCD_ADDRS[f]}" "$T/watch.err"
	etcd_kill9 "$f"
	for n in 11 12 13 14 15 16 17 18 19 20; do
		run -0 probe put "k/$n" "v$n"
		expect+=$'\n'"PUT k/$n v$n ${output#revision=}"
	done
	run -0 probe txn -- put:k/t4=d del:k/0
	r=$(sed -n 's/^succeeded revision=//p' <<<"$output")
	expect+=$'\n'"PUT k/t4 d $r"$'\n'"DELETE k/0 $r"
	wait_exit "$w" 30
	[ "$STATUS" = 0 ]
	run -0 cat "$T/watch.out"
	assert_output "$expect"
	run -0 cat "$T/watch.err"
	assert_line --index 1 "etcd-probe: on ${ETCD_ADDRS[o]}"
}

@test "one member of three killed -9: calls go on on the others at once; two killed: a write is UNAVAILABLE within a bound" {
	start_etcd 3
	local lead f o t0
	lead=$(etcd_leader)
	f=$(((lead + 1) % 3)) o=$(((lead + 2) % 3))
	ETCD_ENDPOINTS=$(etcd_endpoints "$f" "$lead" "$o")
	run -0 probe put before 1
	etcd_kill9 "$f"
	t0=$(now_ms)
	run -0 probe put after 2
	run -0 probe get before
	assert_line --index 0 --regexp '^before 1 '
	run -0 probe get after
	assert_line --index 0 --regexp '^after 2 '
	(($(now_ms) - t0 < 5000))
	# The leader too: the last member has no quorum.
	etcd_kill9 "$lead"
	t0=$(now_ms)
	run -9 etcd-probe -e "$ETCD_ENDPOINTS" --attempt 2s --retry 3s put lost 3
	assert_output --regexp "UNAVAILABLE: etcd.*${ETCD_ADDRS[o]}.*(no leader|did not answer)"
	(($(now_ms) - t0 < 12000))
	t0=$(now_ms)
	run -9 etcd-probe -e "$ETCD_ENDPOINTS" --attempt 2s --retry 3s get before
	assert_output --regexp "UNAVAILABLE: etcd.*${ETCD_ADDRS[o]}"
	(($(now_ms) - t0 < 12000))
}

@test "a change whose reply was cut on a kept-alive connection is not sent again: UNAVAILABLE, made once at most" {
	start_etcd 1
	# The proxy passes the first put and cuts the second once it has
	# gone to etcd (the draws of --seed 2).
	"$PYTHON" "$BATS_TEST_DIRNAME/chaos-proxy.py" "${ETCD_ADDRS[0]}" "$T/proxy.port" \
		--cut 0.5 --seed 2 --lifetime 60 2>>"$T/proxy.err" &
	BG_PIDS+=($!)
	wait_file "$T/proxy.port"
	run -9 etcd-probe -e "127.0.0.1:$(cat "$T/proxy.port")" -t 20s --again 200ms put once v
	assert_line --regexp '^revision=[0-9]+$'
	assert_output --partial "closed the connection; the change may have been made"
	run -0 cat "$T/proxy.port.log"
	assert_output "pass POST /v3/kv/put
cut POST /v3/kv/put"
	run -0 probe get once
	assert_line --index 0 --regexp '^once v .* version=[12] '
}

# put_past_lost_member SIGNAL [ARGS...]: two puts of one client (with
# ARGS), 3 s apart, the first to a follower, which is sent SIGNAL while
# the client's connection to it sits idle; the second goes to the next
# member, and each is made once.
put_past_lost_member() {
	local sig=$1 lead f o pid
	shift
	start_etcd 3
	lead=$(etcd_leader)
	f=$(((lead + 1) % 3)) o=$(((lead + 2) % 3))
	ETCD_ENDPOINTS=$(etcd_endpoints "$f" "$lead" "$o")
	probe_bg twice "$@" --again 3s put twice v
	pid=$PID
	wait_for 10 sh -c "etcd-probe -e '$ETCD_ENDPOINTS' $* get twice | grep -q '^twice v '"
	kill "-$sig" "${ETCD_PIDS[f]}"
	wait_exit "$pid" 20
	[ "$STATUS" = 0 ]
	run -0 cat "$T/twice.out"
	assert_line --index 1 --regexp '^revision=[0-9]+$'
	run -0 probe "$@" get twice
	assert_line --index 0 --regexp '^twice v .* version=2 '
}

@test "a change after its member was killed -9 while the client's connection sat idle goes to the next member, once" {
	put_past_lost_member KILL
}

@test "over TLS, a change after its member stopped (saying close_notify) while the connection sat idle goes to the next member, once" {
	etcd_tls
	put_past_lost_member TERM --ca "$T/tls/ca.pem" --cert "$T/tls/client.pem" \
		--key "$T/tls/client-key.pem"
}

@test "TLS: with the cluster's CA and a client certificate; without either, refused" {
	etcd_tls
	start_etcd 1
	local tls=(--ca "$T/tls/ca.pem" --cert "$T/tls/client.pem" --key "$T/tls/client-key.pem")
	run -0 probe "${tls[@]}" put secure yes
	run -0 probe "${tls[@]}" get secure
	assert_line --index 0 --regexp '^secure yes '
	# Its own CA is all it needs: the environment's TLS settings (a
	# coordd's, say) are not read.
	MUSTER_TLS_CA_FILE=$T/none run -0 probe "${tls[@]}" get secure
	assert_line --index 0 --regexp '^secure yes '
	run -9 probe --retry 1s --cert "$T/tls/client.pem" --key "$T/tls/client-key.pem" get secure
	assert_output --partial "certificate is not trusted"
	run -9 probe --retry 1s --ca "$T/tls/ca.pem" get secure
	assert_output --partial "UNAVAILABLE"
	run -2 probe --ca "$T/tls/ca.pem" --cert "$T/tls/client.pem" get secure
	assert_output --partial "the certificate file and the key file go together"
}

@test "auth: a user's password gets a token, renewed when it expires, for calls and a watch taken up; a wrong password, or a watch without permission, is UNAUTHENTICATED" {
	start_etcd 1 --auth-token-ttl 1
	ETCDCTL_API=3 etcdctl --endpoints "$ETCD_ENDPOINTS" user add root:s3cret \
		--interactive=false >/dev/null
	ETCDCTL_API=3 etcdctl --endpoints "$ETCD_ENDPOINTS" auth enable >/dev/null
	echo root:s3cret >"$T/auth"
	echo root:wrong >"$T/bad"
	run -0 probe --auth "$T/auth" put guarded 1
	run -0 probe --auth "$T/auth" get guarded
	assert_line --index 0 --regexp '^guarded 1 '
	run -11 probe --auth "$T/bad" get guarded
	assert_output --partial "UNAUTHENTICATED: etcd 127.0.0.1:"
	assert_output --partial "authentication failed"
	assert_output --partial "authenticating as root"
	run -11 probe get guarded
	assert_output --partial "UNAUTHENTICATED"
	# The token outlives its TTL unused: the client gets a new one.
	export ETCD_PROBE_DEBUG=1
	run -0 probe --auth "$T/auth" --again 2500ms put guarded 2
	unset ETCD_PROBE_DEBUG
	assert_output --partial "invalid auth token; authenticating again"
	assert_line --regexp '^revision=[0-9]+$'
	# A watch taken up after its token expired (quiet past its silence)
	# authenticates again too.
	ETCD_PROBE_DEBUG=1 probe_bg authwatch --auth "$T/auth" watch late silence=1500ms count=1
	local w=$PID
	wait_grep "invalid auth token; authenticating again" "$T/authwatch.err" 15
	run -0 probe --auth "$T/auth" put late 1
	wait_exit "$w" 15
	[ "$STATUS" = 0 ]
	run -0 cat "$T/authwatch.out"
	assert_output --regexp '^PUT late 1 [0-9]+$'
	# A user without a role may not watch: said at once, not retried.
	ETCDCTL_API=3 etcdctl --endpoints "$ETCD_ENDPOINTS" --user root:s3cret \
		user add bob:pw --interactive=false >/dev/null
	echo bob:pw >"$T/bob"
	run -11 probe --auth "$T/bob" watch late
	assert_output --partial "UNAUTHENTICATED: etcd 127.0.0.1:"
	assert_output --partial "etcdserver: permission denied"
}
