#!/usr/bin/env bats
# Connections coordd must not keep for nothing: parked requests whose
# client went away, waits longer than --max-wait, more clients than the
# limit on open files allows, clients too slow to send a request, and
# requests whose client left while they were queued.

load helper

bats_require_minimum_version 1.5.0

# close_wait PORT: our sockets on local PORT in CLOSE-WAIT now (the client
# closed, coordd did not).
close_wait() {
	local hex
	hex=$(printf ':%04X' "$1")
	awk -v p="$hex" '$2 ~ p"$" && $4 == "08"' /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		wc -l
}

no_close_wait() {
	[ "$(close_wait "$COORD_PORT")" -eq 0 ]
}

# connect: opens a connection to coordd on a new descriptor, in CONN.
connect() {
	exec {CONN}<>"/dev/tcp/127.0.0.1/$COORD_PORT"
}

# eof_within SECONDS FD: the peer closes FD within SECONDS (reading and
# dropping whatever comes before).
eof_within() {
	local end=$((${EPOCHREALTIME%.*} + $1)) line rc
	while ((${EPOCHREALTIME%.*} < end)); do
		rc=0
		IFS= read -r -t 1 -u "$2" line || rc=$?
		# 1: end of input; above 128: nothing within the second.
		[ "$rc" -eq 1 ] && [ -z "$line" ] && return 0
	done
	return 1
}

@test "parked requests whose clients went away are dropped and their sockets closed" {
	start_coordd
	local i pids=()
	for i in $(seq 1 40); do
		curl -s -m 120 "http://$MUSTER_COORD/v1/kv/never?wait=8760h" >/dev/null &
		pids+=($!)
		disown
	done
	BG_PIDS+=("${pids[@]}")
	wait_metric muster_http_parked 40 30
	# The clients vanish, as a job killed by its scheduler does.
	kill -KILL "${pids[@]}"
	wait_metric muster_http_parked 0 20
	wait_metric muster_http_abandoned_total 40
	wait_for 10 no_close_wait
	# The key's waiters that stay are served as before.
	kvctl --timeout 20s get never >get.out &
	BG_PIDS+=($!)
	wait_metric muster_http_parked 1
	kvctl put never 1
	wait_grep '^1$' get.out
}

# park_twice MODE: on one kept-alive connection, a GET of kv/again?wait=
# parks and is answered by a put; a GET of a key never put parks on the
# same connection; then the client goes away
# (MODE close) or shuts its sending side right after the second request
# (MODE half), perhaps before it parks. Prints each reply's status line.
park_twice() {
	"$PYTHON" - "$COORD_PORT" "$1" <<'PY'
import socket, sys, time
port, mode = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
get = b"GET /v1/kv/%s?wait=8760h HTTP/1.1\r\nHost: x\r\n\r\n"
s.sendall(get % b"again")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(4096)
print(head.split(b"\r\n")[0].decode(), flush=True)
s.sendall(get % b"never")
if mode == "half":
    s.shutdown(socket.SHUT_WR)
    s.settimeout(60)
    while s.recv(4096):
        pass
else:
    time.sleep(1.5)
s.close()
PY
}

@test "a kept-alive connection parked again is watched again: its client going away is noticed, even right after its request" {
	start_coordd
	local mode n=0
	for mode in close half close half; do
		park_twice "$mode" >park.out &
		BG_PIDS+=($!)
		wait_metric muster_http_parked 1 30
		kvctl put again "$mode"
		wait_grep '^HTTP/1.1 200' park.out
		kvctl rm again
		n=$((n + 1))
		# The second wait parks, or is seen gone before it does; either
		# way it leaves no parked request and no socket behind.
		wait_metric muster_http_abandoned_total "$n" 30
		wait_metric muster_http_parked 0 30
	done
	wait_for 10 no_close_wait
	kvctl --timeout 20s get again >get.out &
	BG_PIDS+=($!)
	wait_metric muster_http_parked 1
	kvctl put again last
	wait_grep '^last$' get.out
}

@test "a barrier arrival stays when its waiting client goes away" {
	start_coordd --cluster worker=2
	curl -s -X POST "http://$MUSTER_COORD/v1/tasks/worker/0/register?incarnation=1" >/dev/null
	curl -s -X POST "http://$MUSTER_COORD/v1/tasks/worker/1/register?incarnation=1" >/dev/null
	curl -s -m 60 -X POST -d '{"task":"worker:0"}' \
		"http://$MUSTER_COORD/v1/barriers/b?wait=60s" >/dev/null &
	local pid=$!
	BG_PIDS+=("$pid")
	disown
	wait_metric muster_http_parked 1
	kill -KILL "$pid"
	wait_metric muster_http_parked 0
	# worker:0 arrived: worker:1 passes.
	run http POST "/v1/barriers/b?wait=10s" -d '{"task":"worker:1"}'
	assert_line --index 0 200
}

@test "a wait longer than --max-wait ends at --max-wait" {
	start_coordd --max-wait 1s
	local t0=${EPOCHREALTIME/./} took
	run http GET "/v1/kv/never?wait=8760h"
	took=$(((${EPOCHREALTIME/./} - t0) / 1000))
	assert_line --index 0 504
	[ "$took" -ge 900 ] && [ "$took" -lt 20000 ] || fail "took ${took}ms"
	# A watch: an empty answer at --max-wait, not an error.
	run http GET "/v1/watch/w?wait=8760h"
	assert_line --index 0 200
	[[ ${lines[1]} == *'"events":[]'* ]]
}

@test "coordd --max-wait must be a duration of 24h at most" {
	run --separate-stderr coordd -n --max-wait 25h
	assert_failure 2
	[[ $stderr == *"--max-wait 25h is over 24h"* ]]
	run --separate-stderr coordd -n --max-wait soon
	assert_failure 2
	run coordd -n --max-wait 24h
	assert_success
}

@test "at the connection limit new clients are refused at once, counted and logged" {
	start_coordd --max-connections 16
	local i fds=()
	for i in $(seq 1 16); do
		connect
		fds+=("$CONN")
	done
	# Once coordd holds all 16, a new client is refused, not queued.
	refused() {
		local t0=${EPOCHREALTIME/./} rc=0
		curl -s -m 10 "http://$MUSTER_COORD/healthz" >/dev/null || rc=$?
		[ "$rc" -ne 0 ] && [ $(((${EPOCHREALTIME/./} - t0) / 1000)) -lt 5000 ]
	}
	wait_for 20 refused
	wait_grep 'refused [0-9]+ connections: at the limit of 16 open connections' "$T/coordd.log"
	for i in "${fds[@]}"; do
		exec {i}>&-
	done
	wait_for 20 curl -sf -m 5 -o /dev/null "http://$MUSTER_COORD/healthz"
	run curl -s "http://$MUSTER_COORD/metrics"
	assert_line 'muster_http_connections_max 16'
	assert_line --regexp '^muster_http_refused_total [1-9][0-9]*$'
}

@test "the connection limit follows the limit on open files, less a reserve" {
	ulimit -n 300
	start_coordd
	run curl -s "http://$MUSTER_COORD/metrics"
	local max
	max=$(awk '$1 == "muster_http_connections_max" {print $2}' <<<"$output")
	[ "$max" -gt 100 ] && [ "$max" -lt 300 ] || fail "limit $max"
}

@test "coordd --max-connections must be a number from 16" {
	run --separate-stderr coordd -n --max-connections 3
	assert_failure 2
	[[ $stderr == *"--max-connections 3 is not a number"* ]]
}

@test "an idle connection is closed after --request-timeout" {
	start_coordd --request-timeout 1s
	connect
	eof_within 15 "$CONN"
	wait_metric muster_http_timed_out_total 1
}

@test "a client trickling its headers is closed after --request-timeout" {
	start_coordd --request-timeout 1s
	connect
	printf 'GET /healthz HTTP/1.1\r\nHost: x\r\n' >&"$CONN"
	local i closed=1 line
	# A header byte every quarter of a second: activity, never a request.
	for ((i = 0; i < 60; i++)); do
		printf 'X' >&"$CONN" 2>/dev/null || { closed=0; break; }
		if IFS= read -r -t 0.25 -u "$CONN" line; then :; elif [ $? -eq 1 ]; then
			closed=0
			break
		fi
	done
	[ "$closed" -eq 0 ] || fail "still open after 15 s of trickling"
	wait_metric muster_http_timed_out_total 1
	# Everyone else is served.
	run http GET /healthz
	assert_line --index 0 200
}

@test "a body that stops coming is dropped after --request-timeout" {
	start_coordd --request-timeout 1s
	connect
	printf 'PUT /v1/kv/k HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc' >&"$CONN"
	eof_within 15 "$CONN"
	run kvctl tryget k
	assert_failure 1
}

@test "a request whose client left while it was queued is not run" {
	start_coordd --cluster worker=1
	# coordd stopped: the connection and the request wait in the kernel.
	kill -STOP "$COORD_PID"
	# From a process of its own, which closes the connection for sure
	# when it exits: a copy of a descriptor of the test's shell held by
	# any other process would keep it open, and the request would run.
	"$PYTHON" -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/tasks/worker/0/register?incarnation=1 HTTP/1.1\r\n"
          b"Host: x\r\nContent-Length: 0\r\n\r\n")
s.close()' "$COORD_PORT"
	kill -CONT "$COORD_PID"
	wait_metric muster_http_abandoned_total 1
	# The register never ran: the task is not connected, and so is not
	# failed a heartbeat timeout later for the heartbeats that never come.
	run http GET /v1/tasks/worker/0
	assert_line --index 0 200
	run jq -r .state <<<"${lines[1]}"
	assert_output disconnected
}

@test "a request line too long is answered 414, not reset" {
	start_coordd
	local long i
	long=$(head -c 20000 /dev/zero | tr '\0' a)
	for i in 1 2 3 4 5; do
		run curl -s -o /dev/null -w '%{http_code}' "http://$MUSTER_COORD/v1/kv/$long"
		assert_success
		assert_output 414
	done
	# Headers too big: 431.
	run curl -s -o /dev/null -w '%{http_code}' -H "X-Big: $long" "http://$MUSTER_COORD/healthz"
	assert_success
	assert_output 431
}
