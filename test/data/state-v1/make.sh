#!/bin/bash
# make.sh OUT: writes the state directories of test/25-replay.bats with the
# programs in build/bin: OUT/coord (coordd --state-dir) and OUT/dispatch
# (dispatchd --state-dir), each a snapshot and records after it, and
# OUT/state.json, what the daemons serve once restarted on them (dump.sh).
# Run once, with the code whose journal format the test keeps readable
# (v1: commit 527a303); its output is checked in as written.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "$here/../../../build/bin" && pwd)
PATH=$bin:$PATH
out=$(mkdir -p "$1" && cd "$1" && pwd)
tmp=$(mktemp -d)
pids=()
stop() {
	local p
	for p in "${pids[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap stop EXIT
rm -rf "$out/coord" "$out/dispatch"
cd "$tmp"

# up PROG ARGS...: PROG on a free loopback port; sets PID and ADDR.
up() {
	local prog=$1 pf=$tmp/$1.port
	shift
	rm -f "$pf"
	"$prog" -l 127.0.0.1:0 --port-file "$pf" "$@" 2>>"$tmp/$prog.log" &
	PID=$!
	pids+=("$PID")
	for ((i = 0; i < 200; i++)); do
		[ -s "$pf" ] && break
		sleep 0.05
	done
	ADDR=127.0.0.1:$(cat "$pf")
}

# post PATH [CURL ARGS]: a POST to coordd that must answer 200 (or
# $WANT).
post() {
	local code
	code=$(curl -sS -m 10 -o "$tmp/body" -w '%{http_code}' -X POST \
		"http://$MUSTER_COORD$1" "${@:2}")
	[ "$code" = "${WANT:-200}" ] || {
		echo "POST $1: $code $(cat "$tmp/body")" >&2
		return 1
	}
}

# --- coordd: keys, a blob, deletes, tasks, an error, barriers, epochs ---
up coordd --cluster worker=2 --heartbeat-timeout 1h --state-dir "$out/coord" \
	--journal-max-bytes 4K
export MUSTER_COORD=$ADDR
for ((k = 0; k < 40; k++)); do
	kvctl put "pad/$k" "$(printf '%0200d' "$k")"
done
kvctl rm pad
head -c 3000 /dev/urandom >"$tmp/blob"
kvctl put job/blob - <"$tmp/blob"
kvctl put a 1
kvctl update a 2
kvctl add n 5
kvctl cas a 2 'x y'
post '/v1/tasks/worker/0/register?incarnation=a0'
post '/v1/tasks/worker/1/register?incarnation=a1'
barrierwait -t worker:0 --timeout 10s b1 &
barrierwait -t worker:1 --timeout 10s b1
wait $!
post '/v1/tasks/worker/1/error?incarnation=a1' -d '{"code":"INTERNAL","message":"disk full"}'
# Restarted tasks: worker:0's old incarnation counts as failed (409);
# worker:1, in error, joins the next epoch.
WANT=409 post '/v1/tasks/worker/0/register?incarnation=b0'
post '/v1/tasks/worker/1/register?incarnation=b1'
post '/v1/tasks/worker/0/register?incarnation=b0'
barrierwait -t worker:0 --timeout 10s b2 &
barrierwait -t worker:1 --timeout 10s b2
wait $!
kvctl put after/reset yes
kill -KILL "$PID"
wait "$PID" 2>/dev/null || true

# --- dispatchd: closures, keys, a queue's error, resources, datasets, jobs ---
up dispatchd --state-dir "$out/dispatch" --journal-max-bytes 4K
export MUSTER_DISPATCHER=$ADDR
DPID=$PID
dispatchctl resource add venv -- true
a=$(dispatchctl schedule --key first -- sh -c 'echo one; echo err >&2')
dispatchctl -q bad schedule -- sh -c 'exit 3' >/dev/null
workerloop -t w:0 2>>"$tmp/w0.log" &
W0=$!
pids+=("$W0")
workerloop -t w:1 2>>"$tmp/w1.log" &
pids+=("$!")
dispatchctl fetch --timeout 30s "$a" >/dev/null
# Enough values for the journal to pass 4K and be compacted.
for ((i = 0; i < 30; i++)); do
	dispatchctl schedule --key "pad$i" -- printf '%0300d' "$i"
done | xargs dispatchctl fetch --timeout 30s >/dev/null
# The splits are relative names (the workers run in $tmp): the test makes
# the same files where its workers run.
for ((i = 1; i <= 6; i++)); do
	seq $((i * 1000000)) $((i * 1000000 + 49999)) >"part$i"
done
ls part* >splits
# shellcheck disable=SC2016 # the reader's shell expands it
dispatchctl dataset add --splits splits --reader 'cat "$MUSTER_SPLIT"' --name parts >/dev/null
# A job read to its end, and read again (its next iteration).
dispatchctl read parts --job whole >/dev/null
dispatchctl read parts --job whole | head -n 10 >/dev/null || true
# A job left part way, with open leases.
dispatchctl read parts --job half --repeat 2 | head -n 60000 >/dev/null || true
# Round robin by two consumers, each reading a few rounds.
rr=()
for c in 0 1; do
	dispatchctl read parts --job rr --mode off --consumers 2 \
		--consumer-index "$c" | head -n 70000 >/dev/null &
	rr+=("$!")
done
wait "${rr[@]}" || true
kill -TERM "$W0"
c=$(dispatchctl schedule --key third -- echo three)
dispatchctl cancel "$(dispatchctl schedule --on w:9 -- echo never)"
kill -KILL "$DPID"
wait "$DPID" 2>/dev/null || true



# What they hold, read back by today's code.
rm -f "$out/coord/LOCK" "$out/dispatch/LOCK"
cp -r "$out/coord" "$out/dispatch" "$tmp/"
up coordd --cluster worker=2 --heartbeat-timeout 1h --state-dir "$tmp/coord"
c=$ADDR
up dispatchd --state-dir "$tmp/dispatch"
"$here/dump.sh" "$c" "$ADDR" >"$out/state.json"
