#!/usr/bin/env bats
# Datasets, jobs and splits: dispatchd hands out the work, workerloop runs
# the reader per split and serves the elements, dispatchctl read prints
# them. Every mode's visitation, named and round-robin jobs, repetitions,
# collection, checkpoint and resume, and bad input.

load helper

bats_require_minimum_version 1.5.0

# dataset N LINES [READER]: a dataset of splits 1..N whose reader prints
# "SPLIT.I" for I in 1..LINES; prints its id.
dataset() {
	local reader=${3:-'i=1; while [ $i -le '$2' ]; do echo "$MUSTER_SPLIT.$i"; i=$((i+1)); done'}
	seq 1 "$1" | dispatchctl dataset add --splits - --reader "$reader"
}

# expected N LINES [TIMES]: every element of such a dataset, sorted, TIMES
# times each.
expected() {
	local k
	for ((k = 0; k < ${3:-1}; k++)); do
		for s in $(seq 1 "$1"); do seq 1 "$2" | sed "s/^/$s./"; done
	done | sort
}

@test "a dataset is registered once per definition; names; bad split lists" {
	start_dispatchd
	run -0 dataset 3 2
	id=$output
	run -0 dataset 3 2
	[ "$output" = "$id" ]
	seq 1 3 | dispatchctl dataset add --splits - --reader 'true' --name train
	run -0 dispatchctl dataset show train
	[[ $output == *'"splits":3'* || $output == *'splits'*3* ]]
	# The same name for another definition.
	run -5 sh -c "seq 1 4 | dispatchctl dataset add --splits - --reader true --name train"
	[[ $output == *train* ]]
	: >empty
	run -3 dispatchctl dataset add --splits empty --reader true
	[[ $output == *split* ]]
	run -2 dispatchctl dataset add --splits empty
	run -1 dispatchctl read nosuch
	[[ $output == *nosuch* ]]
}

@test "split helpers: files, numeric ranges, byte ranges on line boundaries; file names made absolute for workers elsewhere" {
	mkdir d
	touch d/b.txt d/a.txt d/c.bin
	run -0 dispatchctl splits files 'd/*.txt'
	[ "$output" = "$(printf '%s/d/a.txt\n%s/d/b.txt' "$PWD" "$PWD")" ]
	run -0 dispatchctl splits files './d/a*' "$PWD/d/b.txt" 'd/b.*'
	[ "$output" = "$(printf '%s/d/a.txt\n%s/d/b.txt' "$PWD" "$PWD")" ]
	run -0 bash -c 'cd d && dispatchctl splits files "*.bin"'
	[ "$output" = "$PWD/d/c.bin" ]
	run -0 dispatchctl splits range 0 10 4
	[ "$output" = "$(printf '0 4\n4 8\n8 10')" ]
	seq 1 1000 >big
	run -0 dispatchctl splits bytes big 1000
	# The ranges cover the file, end to end, each after a newline.
	off=0
	while read -r o l f; do
		[ "$o" = "$off" ]
		[ "$f" = "$PWD/big" ]
		[ "$(tail -c +$((o + l)) big | head -c 1)" = "$(printf '\n')" ] ||
			[ $((o + l)) = "$(wc -c <big)" ]
		off=$((o + l))
	done <<<"$output"
	[ "$off" = "$(wc -c <big)" ]
	run -2 dispatchctl splits range 5 x
}

@test "a split list whose reader left stops there: INTERNAL (10) at once, not after ten billion lines" {
	# head's line and dispatchctl's message reach us on two paths, in
	# either order: each is checked on its own.
	run --separate-stderr timeout 20 bash -c 'dispatchctl splits range 0 10000000000 | head -n 1; exit "${PIPESTATUS[0]}"'
	assert_failure 10
	assert_output "0 1"
	[ "$stderr" = "dispatchctl: INTERNAL: writing: Broken pipe" ] || fail "$stderr"
	run bash -c 'dispatchctl splits range 0 10 >/dev/full'
	assert_failure 10
	assert_output "dispatchctl: INTERNAL: writing: No space left on device"
}

@test "dynamic: two workers, every element exactly once" {
	start_dispatchd
	start_worker a:0
	start_worker b:0
	id=$(dataset 20 5)
	run -0 dispatchctl read "$id"
	[ "$(sort <<<"$output")" = "$(expected 20 5)" ]
}

@test "off: every worker reads every element" {
	start_dispatchd
	start_worker a:0
	start_worker b:0
	id=$(dataset 4 3)
	dispatchctl read --mode off "$id" >out
	[ "$(sort out)" = "$(expected 4 3 2)" ]
}

@test "static modes: file, data, file_or_data and hint shard by worker index" {
	start_dispatchd --static-workers a:0,b:0
	start_worker a:0
	start_worker b:0
	id=$(dataset 6 4)
	for mode in file data file_or_data; do
		dispatchctl read --mode "$mode" "$id" >out.$mode
		[ "$(sort out.$mode)" = "$(expected 6 4)" ]
	done
	# file: whole splits per worker; data: elements dealt out in turn.
	hint=$(seq 1 6 | dispatchctl dataset add --splits - --reader \
		'[ $((MUSTER_SPLIT % MUSTER_SHARD_COUNT)) = $MUSTER_SHARD_INDEX ] && echo "$MUSTER_SPLIT.1" || true')
	dispatchctl read --mode hint "$hint" >out.hint
	[ "$(sort out.hint)" = "$(expected 6 1)" ]
	# A worker not in the list may not register (as upstream), and takes
	# no shard.
	run -6 workerloop -t c:0
	[[ $output == *"not one of dispatchd's --static-workers (a:0,b:0)"* ]]
	dispatchctl read --mode file "$id" >out.again
	[ "$(sort out.again)" = "$(expected 6 4)" ]
	# Without --static-workers a static mode is refused.
	kill "$DISPATCH_PID"
	start_dispatchd
	id=$(dataset 6 4)
	run -6 dispatchctl read --mode file "$id"
	[[ $output == *static-workers* ]]
}

@test "repetitions: --repeat 3 reads every element three times" {
	start_dispatchd
	start_worker a:0
	id=$(dataset 5 2)
	dispatchctl read --repeat 3 --seed 7 "$id" >out
	[ "$(sort out)" = "$(expected 5 2 3)" ]
}

@test "a named job is shared: two consumers split the elements between them" {
	start_dispatchd
	start_worker a:0
	start_worker b:0
	id=$(dataset 30 4 'for i in 1 2 3 4; do echo "$MUSTER_SPLIT.$i"; sleep 0.01; done')
	dispatchctl read --job shared "$id" >out1 &
	p1=$!
	# Options after the dataset, as the synopsis shows them.
	dispatchctl read "$id" --job shared >out2 &
	p2=$!
	BG_PIDS+=("$p1" "$p2")
	wait_exit "$p1" 120
	[ "$STATUS" = 0 ]
	wait_exit "$p2" 120
	[ "$STATUS" = 0 ]
	[ "$(sort out1 out2)" = "$(expected 30 4)" ]
	# While a job runs, the same name with another mode is refused.
	slow=$(dataset 2 2 'echo "$MUSTER_SPLIT"; for i in $(seq 600); do [ -e '"$T"'/stop ] && break; sleep 0.05; done')
	dispatchctl read --job live "$slow" >/dev/null &
	BG_PIDS+=("$!")
	wait_for 30 sh -c "dispatchctl --json job show live | jq -e '.clients == 1'"
	run -3 dispatchctl read --job live --mode off "$slow"
	touch "$T/stop"
	[[ $output == *mode* ]]
}

@test "a name read again once its job has ended reads the next iteration: every epoch of a loop whole, never an empty success" {
	start_dispatchd
	start_worker a:0
	start_worker b:0
	id=$(dataset 6 5)
	for epoch in 1 2 3; do
		dispatchctl read --job epoch "$id" >"out$epoch"
		[ "$(sort "out$epoch")" = "$(expected 6 5)" ]
	done
	run -0 dispatchctl --json job show epoch
	[ "$(jq .iteration <<<"$output")" = 3 ]
	# Two readers of each epoch share it.
	for epoch in 4 5; do
		dispatchctl read --job epoch "$id" >"a$epoch" &
		pa=$!
		dispatchctl read --job epoch "$id" >"b$epoch" &
		pb=$!
		BG_PIDS+=("$pa" "$pb")
		wait_exit "$pa" 60
		[ "$STATUS" = 0 ]
		wait_exit "$pb" 60
		[ "$STATUS" = 0 ]
		[ "$(sort "a$epoch" "b$epoch")" = "$(expected 6 5)" ] ||
			[ "$(sort "a$epoch" "b$epoch")" = "$(expected 6 5 2)" ]
	done
}

@test "a worker that joins mid-job gets a task and serves part of it" {
	start_dispatchd
	start_worker a:0 --lease 1
	id=$(dataset 40 2 'echo "$MUSTER_SPLIT.1 $MUSTER_WORKER"; sleep 0.05; echo "$MUSTER_SPLIT.2 $MUSTER_WORKER"')
	dispatchctl read "$id" >out &
	p=$!
	BG_PIDS+=("$p")
	wait_grep 'a:0' out
	start_worker b:0 --lease 1
	wait_exit "$p" 120
	[ "$STATUS" = 0 ]
	[ "$(cut -d' ' -f1 out | sort)" = "$(expected 40 2)" ]
	grep -q ' b:0$' out
}

@test "round robin: two consumers read the same worker each round; a worker added mid-job joins at one round for both" {
	start_dispatchd
	start_worker a:0
	id=$(seq 1 60 | dispatchctl dataset add --splits - --reader 'echo "$MUSTER_WORKER $MUSTER_SPLIT"; sleep 0.02')
	dispatchctl read --job rr --mode off --consumers 2 --consumer-index 0 "$id" >c0 &
	p0=$!
	dispatchctl read --job rr --mode off --consumers 2 --consumer-index 1 "$id" >c1 &
	p1=$!
	BG_PIDS+=("$p0" "$p1")
	wait_grep 'a:0 1[0-9]$' c0
	start_worker b:0
	wait_exit "$p0" 120
	[ "$STATUS" = 0 ]
	wait_exit "$p1" 120
	[ "$STATUS" = 0 ]
	# Same rounds, same worker at each round.
	[ "$(wc -l <c0)" = "$(wc -l <c1)" ]
	[ "$(cut -d' ' -f1 c0)" = "$(cut -d' ' -f1 c1)" ]
	grep -q '^b:0 ' c0
	# Consumer 0 takes the first of each round's two elements.
	[ "$(paste -d' ' c0 c1 | awk '$1 == $3 && $2 + 0 >= $4 + 0' | wc -l)" = 0 ]
	# Round-robin reads need a name and a mode other than dynamic.
	run -3 dispatchctl read --consumers 2 --consumer-index 0 "$id"
}

@test "round robin through a small buffer: 4 MB of 2 KB elements through a worker buffering 64 KiB, every element once" {
	start_dispatchd
	start_worker a:0 --buffer 64k
	# Two splits of 1,000 elements of 2 KB each: 60 times the buffer.
	id=$(seq 1 2 | dispatchctl dataset add --splits - --reader \
		'i=0; while [ $i -lt 1000 ]; do printf "%s.%04d.%02000d\n" $MUSTER_SPLIT $i 0; i=$((i+1)); done')
	dispatchctl read --job rr --mode off --consumers 2 --consumer-index 0 "$id" >c0 &
	p0=$!
	dispatchctl read --job rr --mode off --consumers 2 --consumer-index 1 "$id" >c1 &
	p1=$!
	BG_PIDS+=("$p0" "$p1")
	wait_exit "$p0" 120
	[ "$STATUS" = 0 ]
	wait_exit "$p1" 120
	[ "$STATUS" = 0 ]
	echo "$(wc -c <c0) + $(wc -c <c1) bytes"
	[ "$(cat c0 c1 | cut -c1-6 | sort -u | wc -l)" = 2000 ]
	[ "$(cat c0 c1 | wc -l)" = 2000 ]
	[ "$(wc -l <c0)" = 1000 ]
}

@test "round robin: a late consumer reads from the first round; one that comes back after its rounds are over is refused (6), as upstream" {
	start_dispatchd
	start_worker a:0
	id=$(seq 1 400 | dispatchctl dataset add --splits - --reader 'echo "$MUSTER_SPLIT"; sleep 0.01')
	dispatchctl read --job rr --mode off --consumers 2 --consumer-index 0 "$id" >c0 &
	p0=$!
	BG_PIDS+=("$p0")
	wait_grep '^1$' c0
	# Consumer 1 starts late: it reads from round 0 all the same.
	dispatchctl read --job rr --mode off --consumers 2 --consumer-index 1 "$id" >c1 &
	p1=$!
	BG_PIDS+=("$p1")
	wait_for 30 sh -c '[ $(wc -l <c1) -ge 20 ]'
	[ "$(head -1 c1)" = 2 ]
	kill -9 "$p1"
	wait_for 30 sh -c '[ $(wc -l <c0) -ge 40 ]'
	# Its rounds are over for a consumer 1 that comes back.
	run -6 dispatchctl read --job rr --mode off --consumers 2 --consumer-index 1 "$id"
	[[ $output == *"round 0 is over for consumer 1"* ]]
}

@test "--local reads only the worker on this host" {
	start_dispatchd
	start_worker a:0 --host here
	start_worker b:0 --host there
	id=$(dataset 5 2 'echo "$MUSTER_SPLIT.1 $MUSTER_WORKER"; echo "$MUSTER_SPLIT.2 $MUSTER_WORKER"')
	dispatchctl read --mode off --local --host here "$id" >out
	[ "$(cut -d' ' -f1 out | sort)" = "$(expected 5 2)" ]
	! grep -q 'b:0' out
}

@test "checkpoint and resume: a job stopped half-way continues where it stopped" {
	start_dispatchd
	start_worker a:0
	id=$(dataset 30 3 'for i in 1 2 3; do echo "$MUSTER_SPLIT.$i"; sleep 0.02; done')
	dispatchctl read --job ck "$id" >part1 &
	p=$!
	BG_PIDS+=("$p")
	wait_for 30 sh -c '[ $(wc -l <part1) -ge 30 ]'
	kill -TERM "$p"
	wait_exit "$p" 30
	dispatchctl checkpoint --job ck >state
	jq -e '.next > 0' state
	dispatchctl read --from-state state "$id" >part2
	[ "$(sort part1 part2)" = "$(expected 30 3)" ]
	run -1 dispatchctl checkpoint --job nosuch
}

@test "an abandoned job: kept with its position if named and dynamic, collected otherwise, after the client and GC timeouts" {
	start_dispatchd --client-timeout 1s --job-gc-timeout 1s
	start_worker a:0
	id=$(dataset 100 1 'sleep 0.05; echo "$MUSTER_SPLIT"')
	dispatchctl read --job kept "$id" >out1 &
	p=$!
	BG_PIDS+=("$p")
	wait_for 30 sh -c '[ $(wc -l <out1) -ge 20 ]'
	kill -9 "$p"
	# Past the timeouts it is kept, without tasks: its position stays.
	wait_for 30 sh -c "dispatchctl job ls | grep -q ' kept\$'"
	run -0 dispatchctl --json job show kept
	[ "$(jq -c '[.kept, .iteration, (.tasks | length)]' <<<"$output")" = '[true,1,0]' ]
	jq -e '.done >= 15' <<<"$output"
	dispatchctl checkpoint --job kept | jq -e '.next > 0'
	# Read again, it goes on from there: every element at least once, and
	# not all of them again.
	dispatchctl read --job kept "$id" >out2
	[ "$(sort -u out1 out2)" = "$(seq 1 100 | sort)" ]
	[ "$(wc -l <out2)" -lt 90 ]
	run -0 dispatchctl --json job show kept
	[ "$(jq -c '[.kept, .iteration, .finished]' <<<"$output")" = '[false,1,true]' ]
	# A job of a reader's own, or in another mode, is collected.
	dispatchctl read --job gone --mode off "$id" >out3 &
	p=$!
	BG_PIDS+=("$p")
	wait_file out3
	kill -9 "$p"
	wait_for 30 sh -c '! dispatchctl job show gone >/dev/null 2>&1'
	run -1 dispatchctl job show gone
	# The name is free again.
	dispatchctl read --job gone --mode off "$id" >/dev/null &
	p=$!
	BG_PIDS+=("$p")
	wait_for 10 sh -c 'dispatchctl job show gone | grep -q off'
	kill "$p"
}

@test "a reader that fails or cannot be run fails the read with its message" {
	start_dispatchd
	start_worker a:0
	bad=$(seq 1 3 | dispatchctl dataset add --splits - --reader 'echo "$MUSTER_SPLIT"; [ "$MUSTER_SPLIT" != 2 ] || { echo broken >&2; exit 3; }')
	run -10 dispatchctl read "$bad"
	[[ $output == *"status 3"* ]]
	[[ $output == *broken* ]]
	missing=$(seq 1 3 | dispatchctl dataset add --splits - --reader 'no-such-reader-xyz')
	run -10 dispatchctl read "$missing"
	[[ $output == *127* || $output == *"not found"* ]]
	# dispatchd and the worker serve on.
	good=$(dataset 3 1)
	run -0 dispatchctl read "$good"
}

@test "a consumer that disappears: the other consumer of the job gets its elements" {
	start_dispatchd
	# The worker keeps the last reply of a consumer whose connection
	# closed for --request-timeout, for it to come back to.
	start_worker a:0 --request-timeout 5s
	id=$(dataset 40 2 'echo "$MUSTER_SPLIT.1"; sleep 0.03; echo "$MUSTER_SPLIT.2"')
	dispatchctl read --job two "$id" >gone &
	pg=$!
	dispatchctl read --job two "$id" >kept &
	pk=$!
	BG_PIDS+=("$pg" "$pk")
	wait_file gone
	kill -9 "$pg"
	wait_exit "$pk" 120
	[ "$STATUS" = 0 ]
	# At least once: nothing lost; what gone wrote may come again.
	[ "$(sort -u gone kept)" = "$(expected 40 2)" ]
}

@test "a consumer whose stdout closes gives its last reply back at once: the other consumer of the job reads it and the job ends" {
	start_dispatchd
	# A reply left to the worker would wait this long for its consumer.
	start_worker a:0 --request-timeout 300s
	id=$(dataset 40 2 'echo "$MUSTER_SPLIT.1"; sleep 0.03; echo "$MUSTER_SPLIT.2"')
	dispatchctl read --job back "$id" 2>gone.err > >(head -n 3 >gone) &
	pg=$!
	dispatchctl read --job back "$id" >kept &
	pk=$!
	BG_PIDS+=("$pg" "$pk")
	wait_exit "$pg" 60
	[ "$STATUS" = 8 ]
	grep -q 'the output was closed' gone.err
	wait_exit "$pk" 120
	[ "$STATUS" = 0 ]
	# What the closed pipe held is lost with it: the rest comes once.
	[ -z "$(sort gone kept | uniq -d)" ]
	[ "$(wc -l <kept)" -gt 40 ]
}

@test "a consumer whose stdout closes while it waits on two workers gives back at once what each answered: the other consumer ends the job, each element written once" {
	start_dispatchd
	# A reply left to a worker would wait this long for its consumer.
	start_worker a:0 --request-timeout 300s
	start_worker b:0 --request-timeout 300s
	# Elements come slowly, so that when one request's reply finds the
	# stdout closed, the request to the other worker is waiting for its
	# reply: the read's end cuts it short, and the worker may have
	# answered it.
	id=$(dataset 40 4 'for i in 1 2 3 4; do echo "$MUSTER_SPLIT.$i"; sleep 0.05; done')
	dispatchctl read --job cut "$id" 2>gone.err > >(head -n 3 >gone) &
	pg=$!
	dispatchctl read --job cut "$id" >kept &
	pk=$!
	BG_PIDS+=("$pg" "$pk")
	wait_exit "$pg" 60
	[ "$STATUS" = 8 ]
	written=$(sed -n 's/.*after \([0-9]*\) elements were written.*/\1/p' gone.err)
	wait_exit "$pk" 60
	[ "$STATUS" = 0 ]
	# What the closed pipe held is lost with it: the rest comes once.
	[ -z "$(sort gone kept | uniq -d)" ]
	[ "$(sort -u gone kept | wc -l)" = $((160 - written + 3)) ]
}

@test "dynamic, worker killed with -9 mid-split: every element exactly once" {
	start_dispatchd --heartbeat-timeout 30s
	start_worker a:0 --lease 2
	pa=$WORKER_PID
	start_worker b:0 --lease 2
	id=$(dataset 20 10 'i=1; while [ $i -le 10 ]; do echo "$MUSTER_SPLIT.$i"; i=$((i+1)); sleep 0.01; done')
	dispatchctl read "$id" >out &
	p=$!
	BG_PIDS+=("$p")
	wait_for 30 sh -c '[ $(wc -l <out) -ge 40 ]'
	kill -9 "$pa"
	wait_exit "$p" 120
	[ "$STATUS" = 0 ]
	[ "$(sort out)" = "$(expected 20 10)" ]
}

@test "--local readers of one job on two hosts: a worker killed with -9 loses nothing, and both reads end" {
	start_dispatchd --heartbeat-timeout 30s
	start_worker a:0 --host here --lease 2
	start_worker b:0 --host there --lease 2
	pb=$WORKER_PID
	id=$(dataset 30 3 'for i in 1 2 3; do echo "$MUSTER_SPLIT.$i"; sleep 0.01; done')
	dispatchctl read --job loc --local --host here "$id" >here &
	p1=$!
	dispatchctl read --job loc --local --host there "$id" >there &
	p2=$!
	BG_PIDS+=("$p1" "$p2")
	wait_for 30 sh -c '[ $(wc -l <there) -ge 6 ]'
	kill -9 "$pb"
	wait_exit "$p1" 120
	[ "$STATUS" = 0 ]
	wait_exit "$p2" 120
	[ "$STATUS" = 0 ]
	[ "$(sort here there)" = "$(expected 30 3)" ]
}

@test "framings: NUL-terminated and len32 elements arrive whole; a last one without its NUL gets one" {
	start_dispatchd
	start_worker a:0
	nul=$(seq 1 3 | dispatchctl dataset add --splits - --framing nul \
		--reader 'printf "%s-x\0%s-y" "$MUSTER_SPLIT" "$MUSTER_SPLIT"')
	dispatchctl read "$nul" >nul.out
	[ "$(tr '\0' '\n' <nul.out | sort)" = "$(printf '%s\n' 1-x 1-y 2-x 2-y 3-x 3-y)" ]
	[ "$(tr -cd '\0' <nul.out | wc -c)" = 6 ]
	# len32: a 4-byte big-endian length, then the bytes (here with a
	# newline inside, which is not a boundary).
	len=$(seq 1 2 | dispatchctl dataset add --splits - --framing len32 \
		--reader 'printf "\000\000\000\004a\nb$MUSTER_SPLIT"')
	dispatchctl read "$len" >len.out
	[ "$(wc -c <len.out)" = 16 ]
	[ "$(od -An -c len.out | tr -s ' ' | tr -d '\n')" = "$(printf '\000\000\000\004a\nb1\000\000\000\004a\nb2' | od -An -c | tr -s ' ' | tr -d '\n')" ]
	# A len32 reader that stops inside an element fails the read.
	cut=$(echo 1 | dispatchctl dataset add --splits - --framing len32 \
		--reader 'printf "\000\000\000\011abc"')
	run -10 dispatchctl read "$cut"
	[[ $output == *len32* ]]
}

@test "an element larger than the worker's --buffer arrives whole" {
	start_dispatchd
	start_worker a:0 --buffer 64k
	id=$(seq 1 2 | dispatchctl dataset add --splits - \
		--reader 'head -c 1000000 /dev/zero | tr "\0" "$MUSTER_SPLIT"; echo')
	dispatchctl read "$id" >out
	[ "$(wc -l <out)" = 2 ]
	[ "$(wc -c <out)" = 2000002 ]
	[ "$(sort -u out | wc -l)" = 2 ]
}

# records FILE [SKIP]: the count and a digest of the len32 records of FILE
# past its first SKIP bytes, in any order.
records() {
	"$PYTHON" -c '
import hashlib, struct, sys
d = open(sys.argv[1], "rb").read()[int(sys.argv[2]):]
recs, i = [], 0
while i < len(d):
    n = struct.unpack(">I", d[i:i + 4])[0]
    recs.append(d[i:i + 4 + n])
    i += 4 + n
print(len(recs), hashlib.sha256(b"".join(sorted(recs))).hexdigest())' "$1" "${2:-0}"
}

@test "the same bytes whatever the output: a file, a file opened to append, a pipe, a socket, a stage too small; 1 MiB len32 elements larger than a reply" {
	start_dispatchd
	start_worker a:0 --buffer 64M
	# 12 splits of 12 elements of 1 MiB. Replies go through the
	# consumer's stage, and out of it by splice into a file or a pipe; a
	# file opened to append refuses splice, and a socket is written from
	# memory.
	"$PYTHON" -c '
import struct
with open("big", "wb") as f:
    for i in range(12):
        rec = bytes([65 + i]) * (1 << 20)
        f.write(struct.pack(">I", len(rec)) + rec)'
	for i in $(seq 12); do cat big; done >all
	id=$(seq 1 12 | dispatchctl dataset add --splits - --framing len32 \
		--reader 'cat big')
	dispatchctl read "$id" >file
	printf 'head\n' >appended
	dispatchctl read "$id" >>appended
	dispatchctl read --max-bytes 1M "$id" | cat >piped
	# A stage of one pipe (a quarter of 12 descriptors): most of each
	# reply of up to 64 MiB goes through memory, after its staged pieces.
	(
		ulimit -n 12
		dispatchctl read --max-bytes 64M "$id" >tight
	)
	"$PYTHON" -c '
import socket, subprocess, sys
a, b = socket.socketpair()
p = subprocess.Popen(["dispatchctl", "read", sys.argv[1]], stdout=b)
b.close()
with open("socketed", "wb") as f:
    while True:
        d = a.recv(1 << 20)
        if not d:
            break
        f.write(d)
sys.exit(p.wait())' "$id"
	want=$(records all)
	[[ $want == "144 "* ]]
	for f in file piped socketed tight; do
		got=$(records "$f")
		[ "$got" = "$want" ] || { echo "$f: $got, want $want"; false; }
	done
	[ "$(head -c 5 appended)" = head ]
	[ "$(records appended 5)" = "$want" ]
}

@test "--reader-skips: a split read again starts at MUSTER_SPLIT_SKIP; every element once" {
	start_dispatchd --heartbeat-timeout 30s
	start_worker a:0 --lease 1
	pa=$WORKER_PID
	# The reader seeks: it begins at element MUSTER_SPLIT_SKIP, and says
	# so when that is not 0.
	id=$(echo 1 | dispatchctl dataset add --splits - --reader-skips --reader \
		"[ \$MUSTER_SPLIT_SKIP = 0 ] || echo \$MUSTER_SPLIT_SKIP >>$BATS_TEST_TMPDIR/skips
		i=\$((MUSTER_SPLIT_SKIP + 1)); while [ \$i -le 20 ]; do echo \"1.\$i\"; i=\$((i+1)); sleep 0.05; done")
	dispatchctl read "$id" >out &
	p=$!
	BG_PIDS+=("$p")
	wait_grep '^1\.3$' out
	start_worker b:0 --lease 1
	kill -9 "$pa"
	wait_exit "$p" 120
	[ "$STATUS" = 0 ]
	[ "$(sort out)" = "$(expected 1 20)" ]
	[ "$(cat "$BATS_TEST_TMPDIR/skips")" -ge 3 ]
}

@test "dataset ls and splits, workerloop --listen, and the data metrics" {
	start_dispatchd
	port=$(free_port)
	start_worker a:0 --listen "127.0.0.1:$port"
	[ "$(curl -s -m 5 "http://127.0.0.1:$port/healthz")" = ok ]
	seq 1 3 | dispatchctl dataset add --splits - --reader 'echo "$MUSTER_SPLIT"' --name three
	run -0 dispatchctl dataset ls
	[[ $output == *three* ]]
	run -0 dispatchctl dataset splits three
	[ "$output" = "$(seq 1 3)" ]
	[ "$(dispatchctl read three | sort)" = "$(seq 1 3)" ]
	metrics=$(curl -s -m 5 "http://$MUSTER_DISPATCHER/metrics")
	grep -qx 'muster_data_datasets 1' <<<"$metrics"
	grep -qx 'muster_data_leases_total 3' <<<"$metrics"
	grep -q '^muster_data_jobs 1$' <<<"$metrics"
}

@test "a shared dynamic job read by two consumers over two workers: every element exactly once, the last split's too" {
	start_dispatchd
	start_worker a:0
	start_worker b:0
	id=$(dataset 30 1)
	# The job ends with each consumer holding its last reply
	# unacknowledged: each must let its worker know before it leaves,
	# or the worker gives that reply to the other consumer.
	for k in 1 2 3 4 5 6 7 8; do
		dispatchctl read --job "dup$k" "$id" >"out$k.1" &
		p1=$!
		dispatchctl read --job "dup$k" "$id" >"out$k.2" &
		p2=$!
		BG_PIDS+=("$p1" "$p2")
		wait_exit "$p1" 60
		[ "$STATUS" = 0 ]
		wait_exit "$p2" 60
		[ "$STATUS" = 0 ]
		[ "$(sort "out$k.1" "out$k.2")" = "$(expected 30 1)" ]
	done
}

@test "dispatchctl read on a terminal shows elements, MiB, MiB/s and splits done of all on stderr; into a file it shows nothing" {
	start_dispatchd
	start_worker a:0
	# Slow enough for a line a second before the last.
	id=$(dataset 6 3 'sleep 0.5; i=1; while [ $i -le 3 ]; do echo "$MUSTER_SPLIT.$i"; i=$((i+1)); done')
	# stderr on a terminal (script's), stdout into a file.
	on_tty "dispatchctl read $id >out" >tty.out
	[ "$(sort out)" = "$(expected 6 3)" ]
	tr '\r' '\n' <tty.out | sed 's/\x1b\[K//g' | grep -v '^$' >lines
	cat lines
	# The last line: the whole read, and it ends the line.
	tail -n 1 lines | grep -Eq '^dispatchctl: read: 18 elements, [0-9.]+ MiB, [0-9.]+ MiB/s, 6/6 splits$'
	[ "$(wc -l <lines)" -ge 2 ]
	grep -Eq '^dispatchctl: read: [0-9]+ elements, .*, [0-5]/6 splits$' lines
	[[ $(tail -c 2 tty.out | od -An -c | tr -d ' ') == *'\n' ]]
	# Not a terminal: nothing on stderr.
	run -0 --separate-stderr dispatchctl read "$id"
	[ -z "$stderr" ] || fail "$stderr"
}
