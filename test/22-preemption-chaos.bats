#!/usr/bin/env bats
# The preemption sync protocol at its edges: one sync step for the whole
# job whatever happens to connections and agents while it runs (a proxy
# that breaks them, agents stopped with SIGSTOP, coordd killed with -9 and
# started again on its state directory, a task restarted mid-protocol that
# reads the counters again). Every process is ours and stopped by PID;
# every wait is bounded.

load helper

bats_require_minimum_version 1.5.0

LOOP=$BATS_TEST_DIRNAME/../examples/train-loop.sh
PROXY=$BATS_TEST_DIRNAME/chaos-proxy.py
PY=$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)

# spw NAME ARGS...: pw NAME ARGS, with the socket syncpoint talks to under
# $T/NAME.tmp (preemptwatch makes it in TMPDIR), so that step_of can ask.
spw() {
	mkdir -p "$T/$1.tmp"
	TMPDIR=$T/$1.tmp pw "$@"
}

# step_of NAME: the last step the command of preemptwatch NAME reached, as
# it told syncpoint; -1 before its first step.
step_of() {
	local sock
	for sock in "$T/$1.tmp"/muster-sync.*/sock; do :; done
	MUSTER_SYNC_SOCKET=$sock syncpoint --status --json 2>/dev/null |
		jq -r '.step // -1'
}

# at_step NAME N: the command of preemptwatch NAME reached step N.
at_step() {
	local s
	s=$(step_of "$1") && [ "${s:--1}" -ge "$2" ]
}

# script NAME: a bash script from stdin, made executable, at $T/NAME.
script() {
	{ echo '#!/bin/bash'; cat; } >"$T/$1"
	chmod +x "$T/$1"
}

# proxy NAME ARGS...: chaos-proxy.py in front of coordd ($MUSTER_COORD),
# with ARGS; its address in PROXY_ADDR, its log in $T/NAME.port.log.
proxy() {
	local name=$1
	shift
	"$PY" "$PROXY" "$MUSTER_COORD" "$T/$name.port" --lifetime 90 "$@" \
		2>>"$T/$name.err" &
	BG_PIDS+=($!)
	wait_file "$T/$name.port" || return 1
	PROXY_ADDR=127.0.0.1:$(cat "$T/$name.port")
}

# notice SECONDS: the cluster's preemption notice, the death time SECONDS
# from now.
notice() {
	kvctl put muster/preemption/notice "$(date -u -d "+$1 seconds" +%FT%TZ)" >/dev/null
}

# synced_steps NAME...: the distinct steps the preemptwatch NAMEs logged
# as their sync point, one a line.
synced_steps() {
	local n
	for n in "$@"; do
		sed -n 's/^preemptwatch: sync point: step \([0-9]*\).*/\1/p' "$T/$n.err"
	done | sort -u
}

# has_key KEY: coordd holds KEY.
has_key() {
	kvctl tryget "$1" >/dev/null 2>&1
}

# two_arrived: coordd shows the preemption barrier with two arrivals.
two_arrived() {
	curl -s -m 5 "http://$MUSTER_COORD/v1/barriers" |
		jq -e '.barriers[] | select(.id == "muster.preemption" and .arrived == 2)' >/dev/null
}

# --- one step ----------------------------------------------------------------

@test "a task restarted mid-protocol and a stalled agent that reads the counters after it: every task has the one step agreed first" {
	# A recoverable job: a task may come back in the same run. worker:0
	# is far ahead; its new incarnation starts from step 0 and posts its
	# counter again after the others agreed.
	start_coordd --cluster worker=3 --recoverable worker --heartbeat-timeout 20s
	local i pids=() times=(0.01 0.1 0.1)
	for i in 0 1 2; do
		STEPS=100000 STEP_TIME=${times[i]} CKPT=$T/ckpt.$i \
			spw "w$i" -t "worker:$i" --grace 2s -- "$LOOP"
		pids+=("$PID")
	done
	wait_connected 3
	for i in 0 1 2; do
		wait_for 20 at_step "w$i" 1
	done
	wait_for 20 at_step w0 30

	# worker:1 holds the barrier back until worker:2 is stalled right
	# after it arrived: worker:2 then reads the counters last.
	kill -STOP "${pids[1]}"
	notice 60
	wait_for 20 two_arrived
	kill -STOP "${pids[2]}"
	kill -CONT "${pids[1]}"
	wait_for 20 has_key muster/preemption/sync_step
	local agreed
	agreed=$(kvctl get muster/preemption/sync_step)
	[ "$agreed" -gt 30 ] || fail "sync step $agreed"

	# Each task records the step once it knows it, right after it says so
	# (checked below).
	wait_grep 'sync point' "$T/w1.err" 20
	wait_for 2 has_key muster/preemption/synced/worker:1 || :
	local recorded
	recorded=$(kvctl tryget muster/preemption/synced/worker:1 2>&1) || :

	# worker:0, at the sync step at once, saves and exits 42; the
	# scheduler runs it again at once, from an empty checkpoint: its
	# counter is now its new command's first step. (--no-wait-all: the
	# others may be leaving already, each as it reaches the sync step.)
	wait_exit "${pids[0]}" 20
	assert_equal "$STATUS" 42
	STEPS=100000 STEP_TIME=0.01 CKPT=$T/ckpt.0b \
		spw w0b -t worker:0 --no-wait-all --grace 2s -- "$LOOP"
	local w0b=$PID
	wait_grep 'sync point' "$T/w0b.err" 30
	kill -CONT "${pids[2]}"

	for pid in "${pids[1]}" "${pids[2]}" "$w0b"; do
		wait_exit "$pid" 30
		assert_equal "$STATUS" 42
	done
	# One step, everywhere: the counters worker:2 read later (with
	# worker:0's new, low one) did not make another.
	assert_equal "$(synced_steps w1 w2 w0b)" "$agreed"
	for i in 0 1 2 0b; do
		assert_equal "$(cat "$T/ckpt.$i")" "$agreed"
	done
	grep -q "sync point: step $agreed, as first agreed" "$T/w2.err" ||
		fail "worker:2: $(cat "$T/w2.err")"
	assert_equal "$recorded" "$agreed"
}

@test "chaos: connections cut and refused, agents stopped and coordd killed with -9 during the protocol: one sync step, every task saves at it" {
	local port
	port=$(free_port)
	start_coordd -l "127.0.0.1:$port" --state-dir "$T/state" \
		--cluster worker=6 --heartbeat-timeout 10s
	local i pids=() addr
	# Half the tasks reach coordd through a proxy that cuts one request in
	# ten after sending it, and refuses one in ten.
	for i in 0 1 2; do
		proxy "p$i" --cut 0.1 --refuse 0.1 --seed "$((i + 1))"
		addr[i]=$PROXY_ADDR
	done
	for i in 0 1 2 3 4 5; do
		local c=$MUSTER_COORD
		[ "$i" -lt 3 ] && c=${addr[i]}
		STEPS=100000 STEP_TIME=0.0$((i + 2)) CKPT=$T/ckpt.$i \
			spw "w$i" -t "worker:$i" -c "$c" --grace 2s -- "$LOOP"
		pids+=("$PID")
	done
	wait_connected 6 20
	for i in 0 1 2 3 4 5; do
		wait_for 30 at_step "w$i" 2
	done

	# Two agents stall as the notice comes; coordd is killed while the
	# others are in the protocol, and started again on its state.
	kill -STOP "${pids[1]}" "${pids[4]}"
	notice 60
	nap 0.3
	kill9 "$COORD_PID"
	kill -CONT "${pids[1]}"
	start_coordd -l "127.0.0.1:$port" --state-dir "$T/state" \
		--cluster worker=6 --heartbeat-timeout 10s
	nap 0.5
	kill -CONT "${pids[4]}"

	local codes=()
	for i in 0 1 2 3 4 5; do
		wait_exit "${pids[i]}" 45
		codes+=("$STATUS")
	done
	assert_equal "${codes[*]}" "42 42 42 42 42 42"
	# (The job has left: coordd deleted the run's keys. The logs and the
	# checkpoints tell.)
	local step
	step=$(synced_steps w0 w1 w2 w3 w4 w5)
	[[ $step =~ ^[0-9]+$ ]] || fail "sync steps: $step"
	for i in 0 1 2 3 4 5; do
		assert_equal "$(cat "$T/ckpt.$i")" "$step"
	done
	# The proxies did break connections.
	grep -q '^cut ' "$T"/p*.port.log
	grep -q '^drop ' "$T"/p*.port.log
}
