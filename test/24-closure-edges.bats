#!/usr/bin/env bats
# The edges of closures (issue 21): a queue's error stops what is in
# flight, a result outlives a full disk and a restart, a worker that cannot
# start a closure gives it back, values have a cap and lists come in
# pages, schedule reads no more than dispatchd takes, a signal stops a
# workerloop that waits for dispatchd, and closures never see muster's
# credentials. Every process is ours, stopped by PID.

load helper

bats_require_minimum_version 1.5.0

@test "SIGTERM or SIGINT stops a workerloop that waits to register, at once, with 128+signal" {
	port=$(free_port)
	for sig in TERM INT; do
		workerloop -v -d "127.0.0.1:$port" -t worker:0 2>"$T/w.$sig.log" &
		pid=$!
		BG_PIDS+=("$pid")
		# It is trying to reach the dispatchd that is not there.
		wait_grep 'retrying' "$T/w.$sig.log"
		kill -"$sig" "$pid"
		wait_exit "$pid" 10
		[ "$STATUS" = $((128 + $(kill -l "$sig"))) ] || { cat "$T/w.$sig.log"; false; }
		grep -q "stopped by .* before it could register with 127.0.0.1:$port" "$T/w.$sig.log"
	done
	# SIGHUP does not stop it: it registers once dispatchd comes.
	workerloop -v -d "127.0.0.1:$port" -t worker:1 2>"$T/w.hup.log" &
	pid=$!
	BG_PIDS+=("$pid")
	wait_grep 'retrying' "$T/w.hup.log"
	kill -HUP "$pid"
	start_dispatchd -l "127.0.0.1:$port"
	wait_for 30 worker_live worker:1
	running "$pid"
}

# creds_env: the environment of a worker that holds every credential
# muster knows of (the token dispatchd asks for, others made up).
creds_env() {
	export MUSTER_TOKEN_FILE=$T/token MUSTER_TASK_SECRET=task-secret-0123456789 \
		MUSTER_TOKEN=raw-token-0123456789 MUSTER_TLS_CERT_FILE=$T/client.pem \
		MUSTER_TLS_KEY_FILE=$T/client.key MUSTER_TLS_CA_FILE=$T/ca.pem \
		KEEP_ME=kept
}

# no_creds FILE: FILE (an environment, or several) holds none of them.
no_creds() {
	if grep -E '^MUSTER_(TOKEN|TOKEN_FILE|TASK_SECRET|TLS_CERT_FILE|TLS_KEY_FILE)=|the-cluster-token|task-secret|raw-token' "$1"; then
		echo "a credential in $1" >&2
		return 1
	fi
}

@test "closures, --serve processes, resources and readers never see muster's credentials; a closure given one on purpose has it" {
	printf 'the-cluster-token-0123456789\n' >token
	chmod 600 token
	start_dispatchd --token-file "$T/token"
	creds_env
	workerloop -t worker:0 2>>"$T/worker:0.log" &
	BG_PIDS+=($!)
	workerloop -t worker:1 --serve 'env >"$MUSTER_SLOT.serve-env"; exec /usr/bin/python3 '"$BATS_TEST_DIRNAME"'/../examples/serve.py' 2>>"$T/worker:1.log" &
	BG_PIDS+=($!)
	wait_for 10 eval '[ "$(dispatchctl --json status | jq "[.workers[] | select(.live)] | length")" = 2 ]'
	dispatchctl resource add envdump -- sh -c 'env >"$MUSTER_RESOURCE_DIR/env"'
	id=$(dispatchctl schedule --on worker:0 --needs envdump -- sh -c 'env; echo ==; cat "$MUSTER_RESOURCE_ENVDUMP/env"')
	dispatchctl fetch --timeout 30s "$id" >closure.env
	grep -qx 'KEEP_ME=kept' closure.env
	grep -qx "MUSTER_TLS_CA_FILE=$T/ca.pem" closure.env
	grep -qx "MUSTER_CLOSURE_ID=$id" closure.env
	no_creds closure.env
	# Given on purpose (--env), it is there: a closure may call dispatchctl.
	id=$(dispatchctl schedule --on worker:0 --env MUSTER_TOKEN_FILE="$T/token" -- dispatchctl status)
	run -0 dispatchctl fetch --timeout 30s "$id"
	# The --serve process and what it runs.
	id=$(dispatchctl schedule --on worker:1 -- sh -c env)
	dispatchctl fetch --timeout 30s "$id" >serve.env
	wait_file 0.serve-env
	cat serve.env 0.serve-env >both.env
	grep -qx 'KEEP_ME=kept' both.env
	no_creds both.env
	# A dataset's reader.
	echo one >splits
	ds=$(dispatchctl dataset add --splits splits --reader 'env')
	dispatchctl read --timeout 60s "$ds" >reader.env
	grep -qx 'KEEP_ME=kept' reader.env
	grep -qx 'MUSTER_SPLIT=one' reader.env
	no_creds reader.env
}

@test "schedule reads no more than dispatchd takes: --stdin /dev/zero and an endless line exit 12 at once, a large --stdin with --each goes in batches it takes" {
	start_dispatchd --max-closure-size 1M
	# Memory bounded well below what reading on would take (but under
	# AddressSanitizer, whose address space no such limit allows).
	limit='ulimit -v 400000;'
	[ -z "$ASAN" ] || limit=
	run -12 timeout 30 bash -c "$limit dispatchctl schedule --stdin /dev/zero -- cat"
	assert_output --partial "--stdin /dev/zero: the closure would be larger than 1048576 bytes"
	run -12 timeout 30 bash -c "$limit tr '\\0' x </dev/zero | dispatchctl schedule --each -- echo"
	assert_output --partial "a line of input is longer than 1048576 bytes"
	run -3 bash -c "printf 'a\\0b\\n' | dispatchctl schedule --each -- echo"
	assert_output --partial "holds a NUL byte"
	run -0 dispatchctl --json status
	jq -e '.closures == 0' <<<"$output"
	# Just under the limit goes; every closure carries it, in as many
	# requests as dispatchd's body limit needs (100 x 0.9 MiB is more
	# than one request may hold).
	head -c 700000 /dev/urandom >in.bin
	seq 100 | dispatchctl schedule --stdin in.bin --each -- cat >ids
	[ "$(wc -l <ids)" = 100 ]
	run -0 dispatchctl --json status
	jq -e '.closures == 100' <<<"$output"
	# dispatchd says what it takes.
	run -0 curl -sf "http://$MUSTER_DISPATCHER/v1/limits"
	jq -e '.max_closure_size == 1048576 and .max_request_bytes > 1048576' <<<"$output"
}

# full_disk DIR: fills the small disk at DIR, and has dispatchd fail a
# write on it (a schedule), so that it refuses changes from then on.
full_disk() {
	local i
	dd if=/dev/zero of="$1/fill" bs=4k 2>/dev/null || true
	head -c 60000 /dev/zero | tr '\0' x >"$T/big"
	# A write that does not fit in the journal's last page fails.
	for ((i = 0; i < 20; i++)); do
		dispatchctl -q probe schedule --no-block --stdin "$T/big" -- true >/dev/null 2>&1 || break
	done
	[ "$i" -lt 20 ]
	run curl -s -i -X POST "http://$MUSTER_DISPATCHER/v1/queues/probe/closures" \
		-d '{"closures":[{"argv":["true"]}]}'
	assert_output --partial 'Retry-After: 1'
}

# result_held LOG: until the worker whose log is LOG has had its results
# refused for longer than a request's retries last (30 s): it says it
# keeps them, or (before) that it gave up on them.
result_held() {
	wait_grep 'slot 0: (dispatchd did not take its results|.*(refuses changes|cannot reach))' "$1" 120
}

@test "a result refused on a full disk is kept until dispatchd takes it: space returns, fetch and join end" {
	small_disk "$T/small" 256k
	start_dispatchd --state-dir "$T/small/dstate"
	start_worker w:0 -v
	id=$(dispatchctl schedule -- sh -c 'until [ -e "'"$T"'/go" ]; do sleep 0.05; done; echo value')
	wait_for 30 eval '[ "$(closure_field "$id" phase)" = running ]'
	full_disk "$T/small"
	touch go
	result_held "$T/w:0.log"
	# Room again: the result arrives, the closure and the queue end.
	rm -f "$T/small/fill"
	run -0 dispatchctl fetch --timeout 60s "$id"
	assert_output value
	run -0 dispatchctl join --timeout 60s
}

@test "a result refused on a full disk is kept across kill -9 of dispatchd and a restart with room" {
	small_disk "$T/small" 256k
	DPORT=$(free_port)
	start_dispatchd -l "127.0.0.1:$DPORT" --state-dir "$T/small/dstate"
	start_worker w:0 -v
	id=$(dispatchctl schedule -- sh -c 'until [ -e "'"$T"'/go" ]; do sleep 0.05; done; echo value')
	wait_for 30 eval '[ "$(closure_field "$id" phase)" = running ]'
	full_disk "$T/small"
	touch go
	wait_grep 'closure '"$id"' attempt 1: exit 0' "$T/w:0.log"
	kill9 "$DISPATCH_PID"
	result_held "$T/w:0.log"
	rm -f "$T/small/fill"
	start_dispatchd -l "127.0.0.1:$DPORT" --state-dir "$T/small/dstate"
	run -0 dispatchctl fetch --timeout 60s "$id"
	assert_output value
	run -0 dispatchctl join --timeout 60s
	[ "$(closure_field "$id" attempts)" = 1 ]
}

@test "a queue's error cancels its closures in flight at once: join reports it without waiting for them, and their processes are stopped" {
	start_dispatchd
	start_worker w:0 --grace 2s
	start_worker w:1
	long=$(dispatchctl schedule --on w:0 -- sh -c 'echo $$ >"'"$T"'/long.pid"; trap "echo term >\"'"$T"'/long.term\"; exit 143" TERM; sleep 600 & wait')
	wait_file "$T/long.pid"
	# Queued behind it (w:0 runs one at a time).
	queued=$(dispatchctl schedule --on w:0 -- echo never)
	bad=$(dispatchctl schedule --on w:1 -- sh -c 'echo broken >&2; exit 3')
	t0=$(now_ms)
	run -3 dispatchctl join --timeout 30s
	assert_output --partial "closure $bad of queue default failed on w:1: exited with status 3"
	assert_output --partial broken
	[ $(($(now_ms) - t0)) -lt 20000 ]
	assert_equal "$(closure_field "$long" state)" CANCELLED
	[[ "$(closure_field "$long" message)" == *"closure $bad of queue default failed"* ]]
	assert_equal "$(closure_field "$queued" state)" CANCELLED
	run -8 dispatchctl fetch "$long"
	assert_output --partial "closure $long was cancelled (cancelled: closure $bad of queue default failed)"
	# Its worker stopped its process (TERM) and it ended.
	wait_file "$T/long.term" 30
	wait_for 30 eval '! running "$(cat "$T/long.pid")"'
	# Reported once: the queue goes on, on that worker too.
	run -0 dispatchctl join --timeout 30s
	id=$(dispatchctl schedule --on w:0 -- echo after)
	run -0 dispatchctl fetch --timeout 30s "$id"
	assert_output after
}

# lowest_free_fd PID: the file descriptor PID opens next.
lowest_free_fd() {
	local n=0
	while [ -e "/proc/$1/fd/$n" ]; do n=$((n + 1)); done
	echo "$n"
}

# w0_health: "live health" of worker w:0, as dispatchctl status prints it.
w0_health() {
	dispatchctl status | awk '$1 == "w:0" { print $2, $3 }'
}

@test "a worker that cannot start a closure (no file descriptor left) gives it back and says it is unhealthy: it runs elsewhere, and there again once it recovers" {
	command -v prlimit >/dev/null || skip "prlimit is missing"
	start_dispatchd
	start_worker w:0
	w0=$WORKER_PID
	# Its connections are open once it has run a closure.
	warm=$(dispatchctl schedule -- true)
	dispatchctl fetch --timeout 30s "$warm"
	# One more file it can open, and no more: a closure needs three.
	prlimit --pid "$w0" --nofile=$(($(lowest_free_fd "$w0") + 1)):
	id=$(dispatchctl schedule -- echo ran)
	wait_grep "cannot start closure $id on w:0: .*Too many open files: given back to dispatchd; this worker is unhealthy" "$T/w:0.log" 30
	# Given back, not failed: no queue error, and dispatchd rests the
	# worker (dispatchctl status says why).
	wait_for 20 eval '[ "$(w0_health)" = "yes unhealthy" ]'
	run -0 dispatchctl status
	assert_output --regexp "w:0 +yes +unhealthy .*Too many open files"
	run -4 --separate-stderr dispatchctl --json fetch --timeout 0 "$id"
	jq -e '.state == "NOT_READY" and .exit == null' <<<"$output"
	# (done: no error, only not done yet)
	run -1 dispatchctl done
	assert_output false
	grep -q "worker w:0 could not start closure $id" "$T/dispatchd.log"
	# Another worker runs it.
	start_worker w:1
	run -0 dispatchctl fetch --timeout 60s "$id"
	assert_output ran
	assert_equal "$(closure_field "$id" worker)" w:1
	# Files again: w:0 is handed work after its rest, runs it, and is
	# healthy.
	prlimit --pid "$w0" --nofile=1024:
	pinned=$(dispatchctl schedule --on w:0 -- echo back)
	run -0 dispatchctl fetch --timeout 90s "$pinned"
	assert_output back
	assert_equal "$(w0_health)" "yes ok"
	run -0 dispatchctl join --timeout 30s
	run -0 curl -sf "http://$MUSTER_DISPATCHER/metrics"
	assert_output --regexp "muster_dispatch_start_failures_total [1-9]"
}

# rss_kib PID: the resident set of PID, in KiB.
rss_kib() {
	awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status"
}

# values_held [DISPATCHD ARGS]: sets PER to dispatchd's memory per MiB of
# the values it holds of 64 closures of 1 MiB each, in hundredths.
values_held() {
	local before after
	start_dispatchd "$@"
	start_worker w:0 -j 4
	before=$(rss_kib "$DISPATCH_PID")
	seq 64 | dispatchctl schedule --each -- sh -c 'head -c 1048576 /dev/urandom' >/dev/null
	dispatchctl join --timeout 120s
	after=$(rss_kib "$DISPATCH_PID")
	PER=$(((after - before) * 100 / 1024 / 64))
}

@test "dispatchd holds a value once: 64 MiB of values take less than 1.5 times that, in memory and with a state directory it compacts" {
	[ -z "$ASAN" ] || skip "AddressSanitizer's own memory would be counted"
	values_held
	echo "# in memory: $PER hundredths of a MiB per MiB of values" >&3
	[ "$PER" -lt 150 ]
	kill "$WORKER_PID"
	values_held --state-dir "$T/dstate" --journal-max-bytes 512K
	echo "# --state-dir: $PER hundredths of a MiB per MiB of values" >&3
	[ "$PER" -lt 150 ]
	# The values are all there.
	[ "$(dispatchctl fetch 64 | wc -c)" = 1048576 ]
}

@test "dispatchd --max-store-bytes refuses schedules once closures and values fill it; forget makes room; a restart keeps the values" {
	DPORT=$(free_port)
	start_dispatchd -l "127.0.0.1:$DPORT" --state-dir "$T/dstate" --max-store-bytes 64K
	start_worker w:0
	local refused=0 ids=()
	for ((i = 0; i < 10; i++)); do
		if ! id=$(dispatchctl schedule --no-block -- head -c 20000 /dev/zero 2>"$T/sched.err"); then
			refused=1
			break
		fi
		ids+=("$id")
		dispatchctl fetch --timeout 30s "$id" >/dev/null
	done
	# Three values and four specs fit in 64 KiB; a value may take it past.
	[ "$refused" = 1 ] && [ "${#ids[@]}" -ge 3 ] && [ "${#ids[@]}" -le 4 ]
	grep -q 'RESOURCE_EXHAUSTED: dispatchd holds [0-9]* bytes of closures and values, --max-store-bytes 65536: forget some' "$T/sched.err" ||
		{ cat "$T/sched.err"; false; }
	run -12 dispatchctl schedule -- true
	run -0 curl -sf "http://$MUSTER_DISPATCHER/metrics"
	assert_output --regexp 'muster_dispatch_store_bytes (6[5-9]|[7-9][0-9])[0-9]{3}'
	# Forgetting makes room.
	dispatchctl forget "${ids[0]}" "${ids[1]}"
	again=$(dispatchctl schedule -- echo again)
	assert_equal "$(dispatchctl fetch --timeout 30s "$again")" again
	# Values are kept across a restart, and so is the cap's account.
	kill9 "$DISPATCH_PID"
	start_dispatchd -l "127.0.0.1:$DPORT" --state-dir "$T/dstate" --max-store-bytes 64K
	[ "$(dispatchctl fetch --timeout 10s "${ids[2]}" | wc -c)" = 20000 ]
	run -0 dispatchctl --json status
	jq -e '.max_store_bytes == 65536 and .store_bytes > 40000' <<<"$output"
}

@test "lists of closures come in pages; dispatchctl ls follows them" {
	start_dispatchd
	seq 2500 | dispatchctl schedule --each -- echo >/dev/null
	A="http://$MUSTER_DISPATCHER/v1/closures"
	run -0 curl -sf "$A?limit=10"
	jq -e '(.closures | length) == 10 and .more and .next == 10' <<<"$output"
	run -0 curl -sf "$A"
	jq -e '(.closures | length) == 1000 and .more and .next == 1000' <<<"$output"
	run -0 curl -sf "$A?after=2495"
	jq -e '[.closures[].id] == [2496,2497,2498,2499,2500] and (.more | not) and .next == null' <<<"$output"
	run -0 curl -s "$A?limit=0"
	assert_output --partial INVALID_ARGUMENT
	run -0 curl -s "$A?after=x"
	assert_output --partial "after=x is not a closure id"
	run -0 dispatchctl ls
	assert_equal "${#lines[@]}" 2501
	run -0 dispatchctl --json ls
	jq -e '[.closures[].id] == [range(1; 2501)]' <<<"$output"
	# A state across pages.
	dispatchctl cancel 5 1500 2400
	run -0 dispatchctl --json ls --state cancelled
	jq -e '[.closures[].id] == [5, 1500, 2400]' <<<"$output"
}
