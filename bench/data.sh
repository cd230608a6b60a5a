#!/bin/bash
# data.sh: dispatchd's datasets and splits, in one run on this machine:
#  - get-split per second, one split per request and leased in batches,
#    against the bare libmicrohttpd ceiling (bench-bare, same settings);
#  - `dispatchctl read` of 100-byte records against `cat` of the same
#    records through a pipe, and of 1 MiB records against raw loopback TCP,
#    each the best of DATA_ROUNDS (3) runs taken in turn with its peer's;
#  - the data port's server library: libmicrohttpd against a plain socket
#    sending 1 MiB bodies from memory;
#  - time from a worker's kill -9 to its splits being read again.
# Prints figures and ratios next to their targets; never fails on one.
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
dur=${WRK_DURATION:-4s}
batch=${LEASE_BATCH:-256}
small_mb=${SMALL_MB:-200}
big_n=${BIG_RECORDS:-256}
rounds=${DATA_ROUNDS:-3}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_setup
mbps() { awk -v b="$1" -v ms="$2" 'BEGIN { if (ms > 0) printf "%.0f\n", b / 1048576 * 1000 / ms; else print "n/a" }'; }

start_dispatchd() {
	start_daemon dispatchd dispatchd "$@"
	dpid=$daemon_pid
	export MUSTER_DISPATCHER=$daemon_addr
}

# wrk_rps URL [METHOD BODY]: requests per second, 0 on failure.
wrk_rps() {
	local out
	out=$(WRK_METHOD=${2:-GET} WRK_BODY=${3:-} WRK_CTYPE=application/json \
	    wrk -t2 -c32 -d"$dur" -s "$here/wrk-body.lua" "$1" 2>&1)
	echo "$out" >>"$T/wrk.out"
	if grep -q 'Non-2xx' <<<"$out"; then
		echo "wrk: $(grep Non-2xx <<<"$out")" >&2
		echo 0
		return
	fi
	awk '/^Requests\/sec:/ { printf "%d\n", $2 }' <<<"$out"
}

echo "get-split: requests of one split, and of $batch, by 32 connections for $dur"
"$bin/bench-bare" -l 127.0.0.1:0 --port-file "$T/bare.port" 2>/dev/null &
bare=$!
pids+=("$bare")
wait_file "$T/bare.port" 10
bare_rps=$(wrk_rps "http://127.0.0.1:$(cat "$T/bare.port")/")
stop "$bare"
start_dispatchd --heartbeat-timeout 10m
seq 1000 | dispatchctl dataset add --splits - --reader true >/dev/null
inc=$(curl -s -XPOST "http://$MUSTER_DISPATCHER/v1/workers/bench:0" \
    -d '{"slots":1,"address":"127.0.0.1:9","host":"bench"}' |
    $py -c 'import json,sys; print(json.load(sys.stdin)["incarnation"])')
curl -s -XPOST "http://$MUSTER_DISPATCHER/v1/jobs" \
    -d '{"dataset":"1","mode":"dynamic","repeat":0}' >/dev/null
url="http://$MUSTER_DISPATCHER/v1/workers/bench:0/splits?incarnation=$inc"
one=$(wrk_rps "$url" POST '{"task":1,"want":1}')
many=$(wrk_rps "$url" POST "{\"task\":1,\"want\":$batch}")
many_splits=$((many * batch))
stop "$dpid"
printf '  %-44s %10s req/s\n' "bare libmicrohttpd (the ceiling)" "${bare_rps:-n/a}"
printf '  %-44s %10s splits/s  %sx bare  (target >= 50000/s: %s)\n' \
    "get-split, one per request" "$one" "$(ratio "$one" "$bare_rps")" \
    "$(verdict "$one" '>=' 50000)"
printf '  %-44s %10s splits/s  (%s req/s; target >= 500000/s: %s)\n' \
    "get-split, $batch per request" "$many_splits" "$many" \
    "$(verdict "$many_splits" '>=' 500000)"

# read_time DATASET-ID: ms for one dispatchctl read of it to /dev/null
# through a pipe (as a training program would take it).
read_time() {
	local t0 t1
	t0=$(now_ms)
	dispatchctl read "$1" | cat >/dev/null || echo "read $1 failed" >&2
	t1=$(now_ms)
	echo $((t1 - t0))
}

echo
echo "read: one workerloop serving, dispatchctl read | cat >/dev/null, best of $rounds each"
mkdir -p "$T/small"
$py - "$T/small" "$small_mb" <<'EOF'
import os, sys
d, mb = sys.argv[1], int(sys.argv[2])
line = (b"x" * 99) + b"\n"
per = 1 << 20
block = line * (per // 100)
files = 16
for i in range(files):
    with open(os.path.join(d, "part-%02d" % i), "wb") as f:
        for _ in range(mb // files):
            f.write(block)
EOF
small_bytes=$(cat "$T"/small/part-* | wc -c)
start_dispatchd
workerloop -t reader:0 --buffer 64M 2>>"$T/worker.log" &
wpid=$!
pids+=("$wpid")
until dispatchctl status 2>/dev/null | grep -q 'reader:0 *yes'; do sleep 0.05; done
sid=$(dispatchctl splits files "$T/small/part-*" |
    dispatchctl dataset add --splits - --reader 'cat "$MUSTER_SPLIT"')
cat "$T"/small/part-* >/dev/null # the page cache, for both
cat_ms='' read_ms=''
for ((i = 0; i < rounds; i++)); do
	t0=$(now_ms)
	cat "$T"/small/part-* | cat >/dev/null
	t1=$(now_ms)
	cat_ms=$(least "$cat_ms" $((t1 - t0)))
	read_ms=$(least "$read_ms" "$(read_time "$sid")")
done
cat_mbps=$(mbps "$small_bytes" "$cat_ms")
read_mbps=$(mbps "$small_bytes" "$read_ms")
printf '  %-44s %10s MiB/s\n' "cat, 100-byte records" "$cat_mbps"
printf '  %-44s %10s MiB/s  %sx cat  (target >= 0.5x: %s)\n' \
    "dispatchctl read, 100-byte records" "$read_mbps" \
    "$(ratio "$read_mbps" "$cat_mbps")" \
    "$(verdict "$(ratio "$read_mbps" "$cat_mbps")" '>=' 0.5)"

$py - "$T/big" "$big_n" <<'EOF'
import struct, sys
path, n = sys.argv[1], int(sys.argv[2])
rec = b"y" * (1 << 20)
with open(path, "wb") as f:
    for _ in range(n):
        f.write(struct.pack(">I", len(rec)))
        f.write(rec)
EOF
big_bytes=$(wc -c <"$T/big")
bid=$(echo "$T/big" | dispatchctl dataset add --splits - --framing len32 \
    --reader 'cat "$MUSTER_SPLIT"')
# tcp_time BYTES: ms to send BYTES over loopback TCP in 1 MiB sends.
tcp_time() {
	$py - "$1" <<'EOF'
import socket, sys, threading, time
total = int(sys.argv[1])
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
def sink():
    c, _ = srv.accept()
    buf = bytearray(1 << 20)
    n = 0
    while n < total:
        k = c.recv_into(buf)
        if k == 0:
            break
        n += k
th = threading.Thread(target=sink)
th.start()
out = socket.create_connection(srv.getsockname())
chunk = b"z" * (1 << 20)
t0 = time.monotonic()
sent = 0
while sent < total:
    out.sendall(chunk)
    sent += len(chunk)
th.join()
print(int((time.monotonic() - t0) * 1000))
EOF
}
read_big_ms='' tcp_ms=''
for ((i = 0; i < rounds; i++)); do
	read_big_ms=$(least "$read_big_ms" "$(read_time "$bid")")
	tcp_ms=$(least "$tcp_ms" "$(tcp_time "$big_bytes")")
done
stop "$wpid"
stop "$dpid"
tcp_mbps=$(mbps "$big_bytes" "$tcp_ms")
read_big_mbps=$(mbps "$big_bytes" "$read_big_ms")
printf '  %-44s %10s MiB/s\n' "raw loopback TCP (Python, 1 MiB sends)" "$tcp_mbps"
printf '  %-44s %10s MiB/s  %sx TCP  (target >= 0.6x: %s)\n' \
    "dispatchctl read, 1 MiB records" "$read_big_mbps" \
    "$(ratio "$read_big_mbps" "$tcp_mbps")" \
    "$(verdict "$(ratio "$read_big_mbps" "$tcp_mbps")" '>=' 0.6)"

# The data port's server: libmicrohttpd against a plain socket, both
# answering 1 MiB bodies held in memory to one wrk connection (lib/README,
# "The data port's server").
echo "data port server: 1 MiB bodies from memory to one connection (wrk -c1)"
for kind in mhd raw; do
	flag=()
	[ "$kind" = raw ] && flag=(--raw)
	rm -f "$T/bb.port"
	"$bin/bench-bare" -l 127.0.0.1:0 --port-file "$T/bb.port" \
	    --body-bytes 1048576 "${flag[@]}" 2>/dev/null &
	bb=$!
	pids+=("$bb")
	wait_file "$T/bb.port" 10
	out=$(wrk -t1 -c1 -d"$dur" "http://127.0.0.1:$(cat "$T/bb.port")/" 2>&1)
	echo "$out" >>"$T/wrk.out"
	stop "$bb"
	declare "bb_$kind=$(awk '/^Requests\/sec:/ { printf "%d\n", $2 }' <<<"$out")"
done
printf '  %-44s %10s MiB/s\n' "libmicrohttpd (as coordd's)" "${bb_mhd:-n/a}"
printf '  %-44s %10s MiB/s  %sx libmicrohttpd\n' "plain socket, one writev" \
    "${bb_raw:-n/a}" "$(ratio "${bb_raw:-}" "${bb_mhd:-}")"

echo
hb_ms=${HB_MS:-2000}
echo "worker death: two workers, kill -9 of one mid-read; heartbeat timeout ${hb_ms} ms"
start_dispatchd --heartbeat-timeout "${hb_ms}ms"
workerloop -t a:0 --lease 2 2>>"$T/worker.log" &
wa=$!
workerloop -t b:0 --lease 2 2>>"$T/worker.log" &
wb=$!
pids+=("$wa" "$wb")
until [ "$(dispatchctl status 2>/dev/null | grep -c ' yes')" -ge 2 ]; do sleep 0.05; done
# Each split: 20 lines, 50 ms apart; the reader logs when it starts.
did=$(dispatchctl splits range 0 40 |
    dispatchctl dataset add --splits - --reader "echo \"\$(date +%s.%N) \$MUSTER_WORKER \$MUSTER_SEQ\" >>$T/starts; for i in \$(seq 20); do echo \"\$MUSTER_SPLIT \$i\"; sleep 0.05; done")
dispatchctl read "$did" >"$T/read.out" 2>>"$T/read.err" &
rpid=$!
pids+=("$rpid")
until [ "$(grep -c ' a:0 ' "$T/starts" 2>/dev/null || true)" -ge 2 ] 2>/dev/null; do sleep 0.02; done
t_kill=$EPOCHREALTIME
kill -9 "$wa"
wait "$rpid"
lost_seqs=$(awk -v t="$t_kill" '$2 == "a:0" && $1 < t { print $3 }' "$T/starts" | sort -u)
reread=$(awk -v t="$t_kill" 'NR == FNR { s[$1] = 1; next }
    $2 == "b:0" && $1 >= t && ($3 in s) { if (m == "" || $1 < m) m = $1 }
    END { print m }' <(echo "$lost_seqs") "$T/starts")
delay=$(awk -v a="$t_kill" -v b="$reread" 'BEGIN { if (b == "") print "n/a"; else printf "%d\n", (b - a) * 1000 }')
uniq_lines=$(sort -u "$T/read.out" | wc -l)
stop "$wb"
stop "$dpid"
printf '  %-44s %10s ms  (target <= %d ms: %s)\n' \
    "kill -9 to its split read again" "$delay" $((hb_ms + 1000)) \
    "$(verdict "$delay" '<=' $((hb_ms + 1000)))"
printf '  %-44s %10s of 800 distinct, %s lines\n' "elements read" \
    "$uniq_lines" "$(wc -l <"$T/read.out")"
exit 0
