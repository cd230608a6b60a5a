#!/usr/bin/env bats
# dispatchd --store etcd://...: replicas over a real etcd on loopback
# ports. A standby names its leader; kill -9 of the leader with closures
# queued and in flight, a DYNAMIC read and a round-robin read going on:
# the standby takes over, every closure runs to its value, every element
# is read once, and a checkpoint taken after the takeover resumes.
# Workers and readers are given both replicas; a Python trainer reading
# through muster_data is killed -9 three times around a takeover.
# Skipped without etcd.

load helper
load etcd

bats_require_minimum_version 1.5.0

# The replicas (etcd.bash) are dispatchd's.
REPLICA=dispatchd

# both: MUSTER_DISPATCHER naming replicas a and b.
both() {
	MUSTER_DISPATCHER=$(addr a),$(addr b)
	export MUSTER_DISPATCHER
}

# two_element_splits N PAUSE: a pair of replicas (lease 2 s) both clients
# are given, workers w:0 and w:1, and a dataset of N splits, each read in
# PAUSE seconds as two elements ("S a", "S b"); its ID in id.
two_element_splits() {
	start_etcd 1
	pair --heartbeat-timeout 10s --store-lease 2s
	both
	start_worker w:0 --lease 4
	start_worker w:1 --lease 4
	seq 1 "$1" >splits
	id=$(dispatchctl dataset add --splits splits --reader "sleep $2; "'echo "$MUSTER_SPLIT a"; echo "$MUSTER_SPLIT b"')
}

@test "dispatchd --store: a standby names its leader; closures queued and in flight when the leader is killed with -9 all run to their values on the new one" {
	start_etcd 1
	pair --heartbeat-timeout 30s --store-lease 2s
	run curl -s -i "http://$(addr b)/v1/queues"
	assert_output --partial "503 Service Unavailable"
	assert_output --partial "X-Muster-Leader: http://$(addr a)"
	both
	start_worker w:0 --slots 2
	# Two in flight (they wait for the go file), the rest queued.
	local ids=() i
	for i in $(seq 1 12); do
		ids+=("$(dispatchctl schedule --key "k$i" -- sh -c 'while [ ! -e "'"$T"'/go" ]; do sleep 0.1; done; echo "v'"$i"'"')")
	done
	wait_for 30 eval '[ "$(dispatchctl --json ls | jq "[.closures[] | select(.phase == \"running\")] | length")" = 2 ]'
	kill9 "$PID_a"
	wait_for 60 is_role b leader
	touch "$T/go"
	for i in $(seq 1 12); do
		assert_equal "$(dispatchctl fetch --timeout 120s "${ids[$((i - 1))]}")" "v$i"
	done
	# Each ran once: the new leader took the results of the two that
	# were in flight from the worker that ran them.
	for i in $(seq 0 11); do
		assert_equal "$(dispatchctl --json fetch "${ids[$i]}" | jq -c '[.attempts, .worker]')" '[1,"w:0"]'
	done
	# Keys made before the takeover still name their closures.
	assert_equal "$(dispatchctl schedule --key k3 -- echo other)" "${ids[2]}"
	run dispatchctl join --timeout 60s
	assert_success
	grep -q 'leading: 12 closures' "$T/b.log"
	# dispatchctl status names the new leader.
	run -0 dispatchctl status
	assert_output --partial "replicas under /muster/test, http://$(addr b) leads"
	dispatchctl --json status | jq -en --arg b "http://$(addr b)" '[inputs] | .[0].replicas.leader == $b'
}

@test "dispatchd --store: a DYNAMIC read goes on through kill -9 of the leader, every element once; a checkpoint taken after the takeover resumes where the read stopped" {
	two_element_splits 300 0.02
	dispatchctl read "$id" >out 2>read.err &
	local reader=$!
	BG_PIDS+=("$reader")
	wait_for 60 eval '[ "$(wc -l <out)" -ge 100 ]'
	# Killed mid-read, not after it.
	running "$reader"
	kill9 "$PID_a"
	wait_exit "$reader" 300
	[ "$STATUS" = 0 ] || { cat read.err; false; }
	is_role b leader
	assert_equal "$(wc -l <out)" 600
	assert_equal "$(sort -u out | wc -l)" 600
	# A named job read part-way on the new leader, stopped, checkpointed
	# and resumed: every element once.
	dispatchctl read --job ck "$id" >part1 2>part1.err &
	reader=$!
	BG_PIDS+=("$reader")
	wait_for 60 eval '[ "$(wc -l <part1)" -ge 60 ]'
	kill -TERM "$reader"
	wait_exit "$reader" 60
	dispatchctl checkpoint --job ck >state
	jq -en '[inputs] | length == 1 and (.[0].next > 0)' <state
	dispatchctl read --from-state state "$id" >part2
	assert_equal "$(sort part1 part2 | uniq -d | wc -l)" 0
	assert_equal "$(sort -u part1 part2 | wc -l)" 600
}

@test "dispatchd --store: a round-robin read by two consumers goes on through kill -9 of the leader: the same worker each round for both, every round whole" {
	start_etcd 1
	pair --heartbeat-timeout 10s --store-lease 2s
	both
	start_worker a:0
	id=$(seq 1 80 | dispatchctl dataset add --splits - --reader 'echo "$MUSTER_WORKER $MUSTER_SPLIT"; sleep 0.05')
	dispatchctl read --job rr --mode off --consumers 2 --consumer-index 0 "$id" >c0 2>c0.err &
	local p0=$!
	dispatchctl read --job rr --mode off --consumers 2 --consumer-index 1 "$id" >c1 2>c1.err &
	local p1=$!
	BG_PIDS+=("$p0" "$p1")
	wait_for 60 eval '[ "$(wc -l <c0)" -ge 10 ]'
	running "$p0"
	running "$p1"
	kill9 "$PID_a"
	wait_exit "$p0" 180
	[ "$STATUS" = 0 ] || { cat c0.err; false; }
	wait_exit "$p1" 180
	[ "$STATUS" = 0 ] || { cat c1.err; false; }
	is_role b leader
	# Each of the 80 splits once, split between the two consumers round
	# by round.
	assert_equal "$(cat c0 c1 | sort -u | wc -l)" 80
	assert_equal "$(cat c0 c1 | wc -l)" 80
	assert_equal "$(wc -l <c0)" 40
}

@test "dispatchd --store: a Python trainer reading through muster_data.read(dispatcher=[A, B]), killed -9 at random moments three times, the leader killed in the second run: every element once" {
	two_element_splits 400 0.01
	# The trainer is given the replicas, not the environment.
	cat >trainer.py <<'PY'
import json, os, random, sys, time
sys.path.insert(0, sys.argv[1])
import muster_data
d, dataset, replicas = sys.argv[2], sys.argv[3], sys.argv[4:]
ckpt = {"len": 0, "data": None, "done": False}
if os.path.exists(d + "/ckpt"):
    with open(d + "/ckpt") as f:
        ckpt = json.load(f)
out = open(d + "/records", "ab")
out.truncate(ckpt["len"])
out.seek(ckpt["len"])
def save(pos, done=False):
    out.flush()
    with open(d + "/ckpt.tmp", "w") as f:
        json.dump({"len": out.tell(), "data": pos, "done": done}, f)
    os.replace(d + "/ckpt.tmp", d + "/ckpt")
with open(d + "/started", "w") as f:
    f.write("%d\n" % os.getpid())
with muster_data.read(dataset, from_state=ckpt["data"],
                      dispatcher=replicas) as r:
    with open(d + "/reader", "w") as f:
        f.write("%d\n" % r._proc.pid)
    every, n = random.randint(1, 60), 0
    for element in r:
        out.write(element + b"\n")
        n += 1
        time.sleep(0.004)
        if n % every == 0:
            save(r.position())
            every = random.randint(1, 60)
    save(r.position(), done=True)
PY
	local run pid stops=
	mkdir tr
	for run in 1 2 3; do
		rm -f tr/started tr/reader
		env -u MUSTER_DISPATCHER "$PYTHON" trainer.py "$BATS_TEST_DIRNAME/../python" \
			"$T/tr" "$id" "$(addr a)" "$(addr b)" 2>>tr.err &
		pid=$!
		BG_PIDS+=("$pid")
		wait_file tr/started 60
		wait_file tr/reader 60
		BG_PIDS+=("$(cat tr/reader)")
		nap "0.$((RANDOM % 8 + 2))"
		if [ "$run" = 2 ]; then
			kill9 "$PID_a"
			wait_for 60 is_role b leader
			nap "0.$((RANDOM % 5 + 3))"
		fi
		running "$pid" || fail "the trainer ended before its kill: $(cat tr.err)"
		kill9 "$pid"
		# Its dispatchctl read too, as a machine's loss would: not left
		# to find its broken pipe later.
		kill -KILL "$(cat tr/reader)" 2>/dev/null || true
		forget_pid "$(cat tr/reader)"
		stops+=" $(wc -l <tr/records)"
	done
	env -u MUSTER_DISPATCHER "$PYTHON" trainer.py "$BATS_TEST_DIRNAME/../python" \
		"$T/tr" "$id" "$(addr a)" "$(addr b)" 2>>tr.err &
	pid=$!
	BG_PIDS+=("$pid")
	wait_exit "$pid" 300
	[ "$STATUS" = 0 ] || fail "the trainer exited $STATUS (stopped at records:$stops): $(cat tr.err)"
	jq -e .done tr/ckpt
	assert_equal "$(wc -l <tr/records)" 800
	assert_equal "$(sort -u tr/records | wc -l)" 800
}
