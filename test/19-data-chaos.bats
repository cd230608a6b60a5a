#!/usr/bin/env bats
# Chaos: a DYNAMIC read of 10,000 splits while workers are killed with -9
# and restarted at random. With a deterministic reader every element comes
# out exactly once, and the read ends.

load helper

bats_require_minimum_version 1.5.0

@test "10,000 splits, 3 workers killed and restarted at random: every element exactly once" {
	start_dispatchd --heartbeat-timeout 5s
	declare -A pids
	for i in 0 1 2; do
		start_worker "w:$i" --lease 8
		pids[$i]=$WORKER_PID
	done
	seq 1 10000 >splits
	id=$(dispatchctl dataset add --splits splits --reader 'echo "$MUSTER_SPLIT a"; echo "$MUSTER_SPLIT b"')
	dispatchctl read "$id" >out 2>read.err &
	reader=$!
	BG_PIDS+=("$reader")
	kills=0
	while running "$reader" && ((kills < 20)); do
		nap 0.$((RANDOM % 5 + 3))
		i=$((RANDOM % 3))
		kill -9 "${pids[$i]}" 2>/dev/null || true
		kills=$((kills + 1))
		workerloop -t "w:$i" --lease 8 2>>"$T/w:$i.log" &
		pids[$i]=$!
		BG_PIDS+=("$!")
	done
	wait_exit "$reader" 600
	[ "$STATUS" = 0 ]
	[ "$(wc -l <out)" = 20000 ]
	[ -z "$(sort out | uniq -d | head -5)" ]
	[ "$(sort -u out | wc -l)" = 20000 ]
	echo "# $kills kills; $(dispatchctl job ls | head -3)" >&3
}

# named_read JOB N K: a dataset of N splits of K elements ("SPLIT.I", a
# little at a time) read by dispatchctl read --job JOB into $T/out in the
# background, its PID in READ_PID; once the job lists its task, the task's
# id in TASK and worker a:0's data address in ADDR.
named_read() {
	local id
	id=$(seq 1 "$2" | dispatchctl dataset add --splits - --reader \
		'for i in $(seq 1 '"$3"'); do echo "$MUSTER_SPLIT.$i"; sleep 0.01; done')
	dispatchctl read --job "$1" "$id" >"$T/out" &
	READ_PID=$!
	BG_PIDS+=("$READ_PID")
	wait_for 30 sh -c "dispatchctl --json job show $1 | jq -e '.tasks | length > 0'"
	TASK=$(dispatchctl --json job show "$1" | jq -r '.tasks[0].id')
	ADDR=$(sed -n 's/.*serving data on //p' "$T/a:0.log")
}

# proxy NAME UPSTREAM ARGS...: test/chaos-proxy.py in front of UPSTREAM,
# with ARGS; its address in PROXY_ADDR, its log in $T/NAME.port.log.
proxy() {
	local name=$1 upstream=$2
	shift 2
	"$PYTHON" "$BATS_TEST_DIRNAME/chaos-proxy.py" "$upstream" "$T/$name.port" \
		--lifetime 300 "$@" 2>>"$T/$name.err" &
	BG_PIDS+=($!)
	wait_file "$T/$name.port" || return 1
	PROXY_ADDR=127.0.0.1:$(cat "$T/$name.port")
}

@test "a named job read by two consumers, one behind a proxy that cuts its connection after replies: every element exactly once" {
	start_dispatchd
	start_worker a:0
	addr=$(sed -n 's/.*serving data on //p' "$T/a:0.log")
	# 300 splits of 4 elements, a little at a time, so that consumer B
	# waits at the worker when consumer A's connection is cut.
	id=$(seq 1 300 | dispatchctl dataset add --splits - --reader \
		'for i in 1 2 3 4; do echo "$MUSTER_SPLIT.$i"; done; sleep 0.01')
	# A reaches the worker through a proxy that closes the connection after
	# a third of the replies it relays, once the reply has arrived whole;
	# dispatchd tells A the proxy's address for the worker's.
	proxy data "$addr" --cut-reply 0.3 --seed 19
	data=$PROXY_ADDR
	proxy dispatchd "$MUSTER_DISPATCHER" --rewrite "$addr=$data"
	MUSTER_DISPATCHER=$PROXY_ADDR dispatchctl read --job cut --max-bytes 256 "$id" >a 2>a.err &
	pa=$!
	dispatchctl read --job cut --max-bytes 256 "$id" >b 2>b.err &
	pb=$!
	BG_PIDS+=("$pa" "$pb")
	wait_exit "$pa" 240
	[ "$STATUS" = 0 ] || { cat a.err; false; }
	wait_exit "$pb" 240
	[ "$STATUS" = 0 ] || { cat b.err; false; }
	cuts=$(grep -c '^cut-reply GET /v1/tasks/.*/elements' "$T/data.port.log" || true)
	echo "# A $(wc -l <a), B $(wc -l <b), $cuts of A's replies cut, $(sort a b | uniq -d | wc -l) twice" >&3
	[ "$(wc -l <a)" -gt 0 ]
	[ "$cuts" -ge 5 ]
	[ -z "$(sort a b | uniq -d | head -5)" ]
	[ "$(sort a b)" = "$(for s in $(seq 1 300); do for i in 1 2 3 4; do echo "$s.$i"; done; done | sort)" ]
}

@test "a consumer of a shared job stopped by SIGTERM while dispatchd is slow to hear from it reports what it wrote before it leaves its worker: the other consumer writes none of it again" {
	start_dispatchd
	start_worker a:0 --request-timeout 300s
	id=$(seq 1 2000 | dispatchctl dataset add --splits - --reader \
		'for i in 1 2 3 4; do echo "$MUSTER_SPLIT.$i"; done')
	# A reaches dispatchd through a proxy, stopped for a while: A's
	# replies are written, and dispatchd has not heard of them.
	proxy dispatchd "$MUSTER_DISPATCHER"
	pp=${BG_PIDS[-1]}
	MUSTER_DISPATCHER=$PROXY_ADDR dispatchctl read --job term "$id" >a 2>a.err &
	pa=$!
	dispatchctl read --job term "$id" >b 2>b.err &
	pb=$!
	BG_PIDS+=("$pa" "$pb")
	wait_for 30 sh -c '[ "$(wc -l <a 2>/dev/null)" -ge 8 ]'
	kill -STOP "$pp"
	nap 0.5
	kill -TERM "$pa"
	# It reports, through the proxy, before its last report gives up.
	nap 0.5
	kill -CONT "$pp"
	wait_exit "$pa" 30
	[ "$STATUS" = 143 ]
	wait_exit "$pb" 120
	[ "$STATUS" = 0 ] || { cat b.err; false; }
	[ -z "$(sort a b | uniq -d | head -5)" ]
	[ "$(sort a b)" = "$(for s in $(seq 1 2000); do for i in 1 2 3 4; do echo "$s.$i"; done; done | sort)" ]
}

@test "a stranger on a worker's data port takes nothing: without the job's secret it gets 401, and the reader gets every element" {
	start_dispatchd
	start_worker a:0
	named_read j 40 3
	p=$READ_PID task=$TASK addr=$ADDR
	strangers=0
	for k in 1 2 3 4 5 6; do
		code=$(curl -s -o stranger.$k -w '%{http_code}' "http://$addr/v1/tasks/$task/elements?max=65536")
		[ "$code" = 401 ]
		grep -q UNAUTHENTICATED stranger.$k
		curl -s -o /dev/null -H 'Authorization: Bearer 0123456789abcdef0123456789abcdef' \
			"http://$addr/v1/tasks/$task/rounds/0?consumer=0" -w '%{http_code}' | grep -qx 401
		strangers=$((strangers + 1))
	done
	# Bad arguments, other paths and other methods are refused, each
	# with its error, before anything is taken.
	code=$(curl -s -o bad.1 -w '%{http_code}' "http://$addr/v1/tasks/$task/elements?max=lots")
	[ "$code" = 400 ]
	grep -q 'max is not a number of bytes: max=lots' bad.1
	code=$(curl -s -o bad.2 -w '%{http_code}' "http://$addr/v1/tasks/$task/rounds/0?consumer=0&wait=soon")
	[ "$code" = 400 ]
	grep -q 'wait is not a number of milliseconds' bad.2
	# A value too long to hold is refused, not read as a shorter one
	# (64 zeros and a 5 is not 0).
	code=$(curl -s -o bad.5 -w '%{http_code}' "http://$addr/v1/tasks/$task/elements?max=0&wait=$(printf '0%.0s' {1..64})5")
	[ "$code" = 400 ]
	grep -q 'wait is not a number of milliseconds' bad.5
	for path in "/v1/tasks/$task" "/v1/tasks/$task/elements/x" /v1/tasks/x/elements /v1/jobs /; do
		code=$(curl -s -o bad.3 -w '%{http_code}' "http://$addr$path")
		[ "$code" = 404 ] || fail "$path: $code"
		grep -q NOT_FOUND bad.3
	done
	code=$(curl -s -o bad.4 -w '%{http_code}' -X POST "http://$addr/v1/tasks/$task/elements")
	[ "$code" = 400 ]
	grep -q 'only GET is served here' bad.4
	wait_exit "$p" 60
	[ "$STATUS" = 0 ]
	[ "$(sort out)" = "$(for s in $(seq 1 40); do for i in 1 2 3; do echo "$s.$i"; done; done | sort)" ]
	# The port is open for its health all the same.
	curl -sf "http://$addr/healthz"
}

@test "a consumer's identity does not stand for the job's secret: without it a request takes, acknowledges and gives back nothing (401); a malformed identity is refused (400)" {
	start_dispatchd
	start_worker a:0
	named_read named 30 2
	url=http://$ADDR/v1/tasks/$TASK
	who=consumer_id=0123456789abcdef0123456789abcdef
	for q in "elements?max=65536&$who&request=1" "elements?max=0&$who&request=9" "giveback?$who&request=1"; do
		code=$(curl -s -o body -w '%{http_code}' "$url/$q")
		[ "$code" = 401 ] || fail "$q: $code"
	done
	for q in "elements?max=1&consumer_id=a.b&request=1" "elements?max=1&$who" \
		"elements?max=1&$who&request=0" "giveback?request=1" "giveback?$who&request=x"; do
		code=$(curl -s -o body -w '%{http_code}' "$url/$q")
		[ "$code" = 400 ] || fail "$q: $code"
		grep -q 'consumer_id (1 to 64 letters, digits, - or _) and request' body
	done
	wait_exit "$READ_PID" 60
	[ "$STATUS" = 0 ]
	[ "$(sort out)" = "$(for s in $(seq 1 30); do echo "$s.1"; echo "$s.2"; done | sort)" ]
}

# elements FILE...: the elements in bodies of a worker's data server's
# replies (chunks: a 40-byte header, its payload's length at byte 28).
elements() {
	"$PYTHON" - "$@" <<'PY'
import struct, sys
for f in sys.argv[1:]:
    b = open(f, "rb").read()
    off = 0
    while off < len(b):
        n = struct.unpack_from("<I", b, off + 28)[0]
        sys.stdout.buffer.write(b[off + 40:off + 40 + n])
        off += 40 + n
PY
}

@test "a consumer that names itself, on the wire: a request sent again gets its reply again, one overtaken 412, one cut as its consumer left 412, a reply given back goes to the next consumer, past --max-connections holders 413 until they are gone for --request-timeout; a read then gets the rest once" {
	start_dispatchd
	start_worker a:0 --max-connections 4 --request-timeout 2s
	addr=$(sed -n 's/.*serving data on //p' "$T/a:0.log")
	id=$(seq 1 20 | dispatchctl dataset add --splits - --reader 'for i in 1 2 3; do echo "$MUSTER_SPLIT.$i"; done')
	# A job client of our own, for the job's secret.
	job=$(curl -sf -X POST "http://$MUSTER_DISPATCHER/v1/jobs" \
		-d "{\"dataset\":\"$id\",\"name\":\"wire\",\"mode\":\"dynamic\",\"repeat\":1,\"seed\":0}")
	secret=$(jq -r .secret <<<"$job")
	wait_for 30 sh -c "dispatchctl --json job show wire | jq -e '.tasks | length > 0'"
	url=http://$addr/v1/tasks/$(dispatchctl --json job show wire | jq -r '.tasks[0].id')
	# get OUT QUERY: a request on a connection of its own, its body into
	# OUT; prints its HTTP status.
	get() {
		curl -s -o "$1" -w '%{http_code}' -H "Authorization: Bearer $secret" "$url/$2"
	}
	one='elements?max=1&wait=5000'
	[ "$(get r1 "$one&consumer_id=a&request=1")" = 200 ]
	[ -s r1 ]
	[ "$(get r1.again "$one&consumer_id=a&request=1")" = 200 ]
	cmp r1 r1.again
	# The next request acknowledges reply 1 and takes more.
	[ "$(get r2 "$one&consumer_id=a&request=2")" = 200 ]
	[ -s r2 ]
	run ! cmp -s r1 r2
	[ "$(get late "$one&consumer_id=a&request=1")" = 412 ]
	grep -q 'overtaken by a later one' late
	[ "$(get back "giveback?consumer_id=a&request=2")" = 200 ]
	[ ! -s back ]
	# a left: its next request, had it been on its way as a left, takes
	# nothing; said again, the leave changes nothing.
	[ "$(get late3 "$one&consumer_id=a&request=3")" = 412 ]
	[ "$(get back "giveback?consumer_id=a&request=2")" = 200 ]
	[ "$(get rb "$one&consumer_id=b&request=1")" = 200 ]
	cmp r2 rb
	# b, c1, c2 and c3 hold chunks, their connections closed less than
	# 2s ago: no room for d.
	for c in c1 c2 c3; do
		[ "$(get "r$c" "$one&consumer_id=$c&request=1")" = 200 ]
	done
	[ "$(get full "$one&consumer_id=d&request=1")" = 413 ]
	grep -q '4 consumers hold its elements already' full
	nap 2.5
	[ "$(get rd "$one&consumer_id=d&request=1")" = 200 ]
	[ "$(get rd.ack "elements?max=0&consumer_id=d&request=2")" = 200 ]
	# A request of d's cut as it left, read only now: nothing for it.
	[ "$(get rd.late "$one&consumer_id=d&request=2")" = 412 ]
	# a acknowledged reply 1 and d its reply; what the others held went
	# back: a read of the job gets the rest, each element once.
	run -0 dispatchctl read --job wire "$id"
	[ "$(sort <<<"$output"$'\n'"$(elements r1 rd)")" = "$(for s in $(seq 1 20); do for i in 1 2 3; do echo "$s.$i"; done; done | sort)" ]
}

@test "a worker's data server holds --max-connections: half-sent requests are refused past it and closed after --request-timeout, and reads go on" {
	start_dispatchd
	start_worker a:0 --max-connections 8 --request-timeout 2s
	pid=$WORKER_PID
	addr=$(sed -n 's/.*serving data on //p' "$T/a:0.log")
	threads0=$(ls /proc/"$pid"/task | wc -l)
	# 200 connections that send half a request and hold it.
	"$PYTHON" - "$addr" 200 >held.log <<'PY' &
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
socks, refused = [], 0
for i in range(int(sys.argv[2])):
    s = socket.create_connection((host, int(port)))
    s.sendall(b"GET /v1/tasks/1/elem")
    socks.append(s)
print("connected", flush=True)
time.sleep(1)
for s in socks:
    s.settimeout(0.2)
    try:
        if b"503" in s.recv(200):
            refused += 1
    except OSError:
        pass
print("refused", refused, flush=True)
time.sleep(6)
closed = 0
for s in socks:
    s.settimeout(0.2)
    try:
        if s.recv(200) == b"":
            closed += 1
    except OSError:
        closed += 1
print("closed", closed, flush=True)
PY
	held=$!
	BG_PIDS+=("$held")
	wait_grep '^connected' held.log 30
	threads=$(ls /proc/"$pid"/task | wc -l)
	fds=$(ls /proc/"$pid"/fd | wc -l)
	wait_grep '^refused' held.log 30
	echo "200 connections held: threads $threads0 -> $threads, descriptors $fds, $(grep refused held.log)"
	[ "$threads" -le $((threads0 + 8)) ]
	[ "$fds" -le 40 ]
	[ "$(awk '/^refused/ {print $2}' held.log)" -ge 190 ]
	# Reads go on once the half-sent ones are closed.
	wait_grep '^closed 200' held.log 30
	id=$(seq 1 5 | dispatchctl dataset add --splits - --reader 'echo "$MUSTER_SPLIT"')
	run -0 dispatchctl read "$id"
	[ "$(sort <<<"$output")" = "$(seq 1 5 | sort)" ]
	grep -q 'refusing more' "$T/a:0.log"
}

@test "a reader killed by a signal (an OOM kill) is run again from the element after its last, up to --reader-retries; past that the job fails" {
	start_dispatchd
	start_worker a:0 --reader-retries 2
	# Each split's reader dies once, by SIGKILL, half-way into an element.
	id=$(seq 1 6 | dispatchctl dataset add --splits - --reader \
		'for i in 1 2 3 4 5; do echo "$MUSTER_SPLIT.$i"; if [ $i = 3 ] && mkdir "'"$T"'/died.$MUSTER_SPLIT.$MUSTER_JOB" 2>/dev/null; then printf half; kill -9 $$; fi; done')
	want=$(for s in 1 2 3 4 5 6; do for i in 1 2 3 4 5; do echo "$s.$i"; done; done | sort)
	run -0 dispatchctl read "$id"
	[ "$(sort <<<"$output")" = "$want" ]
	[ "$(grep -c 'reading it again from element 3 (1 of 2)' "$T/a:0.log")" = 6 ]
	# The static modes too.
	run -0 dispatchctl read --mode off "$id"
	[ "$(sort <<<"$output")" = "$want" ]
	# One killed every time fails the job after its tries, saying so.
	id=$(seq 1 2 | dispatchctl dataset add --splits - --reader 'echo "$MUSTER_SPLIT"; kill -9 $$')
	run -10 dispatchctl read "$id"
	[[ $output == *"killed by SIGKILL"* ]]
	grep -q '(2 of 2)' "$T/a:0.log"
}
