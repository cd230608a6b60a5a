#!/usr/bin/env bats
# The preemption sync protocol at its edges: one sync step for the whole
# job whatever happens to connections and agents while it runs (a proxy
# that breaks them, agents stopped with SIGSTOP, coordd killed with -9 and
# started again on its state directory, a task restarted mid-protocol that
# reads the counters again), and no sync step at all while a task is in
# error, whether or not that task still takes part. Every process is ours
# and stopped by PID; every wait is bounded.

load helper

bats_require_minimum_version 1.5.0

LOOP=$BATS_TEST_DIRNAME/../examples/train-loop.sh
PROXY=$BATS_TEST_DIRNAME/chaos-proxy.py

# proxy NAME ARGS...: chaos-proxy.py in front of coordd ($MUSTER_COORD),
# with ARGS; its address in PROXY_ADDR, its log in $T/NAME.port.log.
proxy() {
	local name=$1
	shift
	"$PYTHON" "$PROXY" "$MUSTER_COORD" "$T/$name.port" --lifetime 90 "$@" \
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

# in_error TASK: coordd shows TASK in error.
in_error() {
	curl -s -m 5 "http://$MUSTER_COORD/v1/tasks/${1%%:*}/${1#*:}" |
		jq -e '.state == "error"' >/dev/null
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
	# worker:2 has the step agreed first: read from the key when the
	# counters it read later give another (worker:0's new one lower than
	# the furthest), or the same step when the furthest was another
	# task's, as a busy machine's speeds may have it.
	grep -Eq "sync point: step $agreed(, as first agreed| \(the furthest)" "$T/w2.err" ||
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
	wait_for 20 has_key muster/preemption/counter/worker:3
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

# --- a task in error ---------------------------------------------------------

# error_run MODE [COORDD ARGS...]: two tasks; worker:1's command reports
# its own error (with its task secret, as any process of the task may)
# once worker:0's command ignores SIGTERM, and steps on through SIGTERM,
# so that its preemptwatch lives on (--grace 30s). worker:0's command
# catches SIGTERM too (the error sends it one), takes no step
# before $T/go, saves at the sync point if told one, and exits 5 once the
# protocol failed. worker:1 reaches coordd through a proxy that drops its
# barrier cancel, as a broken connection would. MODE posting: worker:1's
# preemptwatch takes part in the protocol and posts its counter before
# worker:0 reads the counters; silent: it is stopped (SIGSTOP) before the
# notice and posts nothing. Then a notice for the cluster.
error_run() {
	local mode=$1
	shift
	start_coordd --cluster worker=2 --heartbeat-timeout 5s "$@"
	proxy p1 --drop-method DELETE
	script w1.sh <<'EOF2'
trap '' TERM
# Once worker:0's command ignores SIGTERM too, which the error sends it.
for ((i = 0; i < 400; i++)); do
	[ -e "$1/w0.trapped" ] && break
	sleep 0.05
done
curl -s -m 5 -o /dev/null -X POST -H "X-Muster-Task-Secret: $MUSTER_TASK_SECRET" \
	-d '{"code":"INTERNAL","message":"worker:1 broke"}' \
	"http://$MUSTER_COORD/v1/tasks/worker/1/error?incarnation=$MUSTER_INCARNATION"
for ((s = 1; s <= 2000; s++)); do
	syncpoint "$s"
	sleep 0.05
done
EOF2
	script w0.sh <<'EOF2'
trap '' TERM
: >"$1/w0.trapped"
for ((i = 0; i < 600; i++)); do
	[ -e "$1/go" ] && break
	sleep 0.05
done
for ((s = 1; s <= 2000; s++)); do
	if syncpoint "$s"; then
		echo "$s" >"$1/ckpt.0"
		exit 0
	fi
	if [ "$(syncpoint --status --json | jq -r .state)" = failed ]; then
		# Whether a sync step was written, seen while this run lasts
		# (once every task has left, a new epoch clears muster/).
		kvctl tryget muster/preemption/sync_step >"$1/sync_key" 2>&1
		echo "exit $?" >>"$1/sync_key"
		exit 5
	fi
	sleep 0.05
done
EOF2
	spw w1 -t worker:1 -c "$PROXY_ADDR" --grace 30s -- "$T/w1.sh" "$T"
	W1=$PID
	spw w0 -t worker:0 --grace 30s -- "$T/w0.sh" "$T"
	W0=$PID
	wait_for 20 in_error worker:1
	wait_for 20 at_step w1 1
	[ "$mode" = posting ] || kill -STOP "$W1"
	notice 60
	if [ "$mode" = posting ]; then
		wait_for 20 has_key muster/preemption/counter/worker:1
	fi
	touch "$T/go"
	wait_exit "$W0" 30
}

# no_sync_point: worker:0 was given no sync point and stopped with 43,
# naming worker:1's error.
no_sync_point() {
	assert_equal "$STATUS" 43
	[ ! -e "$T/ckpt.0" ] || fail "worker:0 saved at step $(cat "$T/ckpt.0"): $(cat "$T/w0.err")"
	run ! grep -q 'sync point: step' "$T/w0.err"
	grep -qx 'exit 1' "$T/sync_key" ||
		fail "a sync step was written, or not asked: $(cat "$T/sync_key")"
	grep -q 'preemption sync failed: .*task worker:1 is in error: INTERNAL: worker:1 broke' "$T/w0.err" ||
		fail "worker:0: $(cat "$T/w0.err")"
}

@test "a task in error that still posts its step counter: no sync point, the other stops with 43" {
	error_run posting
	no_sync_point
	grep -q 'stopped because task worker:1 failed: INTERNAL: worker:1 broke' "$T/w0.err"
	# worker:1 did take part (error_run saw its counter), and its cancel
	# never reached coordd.
	grep -q '^drop DELETE /v1/barriers/muster.preemption' "$T/p1.port.log"
}

@test "a task in error whose agent posts nothing: no sync point, the other stops with 43" {
	error_run silent
	no_sync_point
	# worker:1's agent was stopped throughout: it posted no counter.
	run ! grep -q 'counter' "$T/p1.port.log"
}

@test "a recoverable task in error that still posts its counter: no sync point for the others, who stop with 43, not 42" {
	# Its error stops no other task; the sync point must still not be
	# agreed without it.
	error_run posting --recoverable worker
	no_sync_point
	grep -q 'stopped because no sync point was agreed: .*task worker:1 is in error' "$T/w0.err" ||
		fail "worker:0: $(cat "$T/w0.err")"
}

@test "a task that fails while another, whose command already ended after the notice, stays for the protocol: that one exits 43, not 44" {
	start_coordd --cluster worker=2 --heartbeat-timeout 2s
	local i pids=()
	for i in 0 1; do
		STEPS=100000 STEP_TIME=0.05 CKPT=$T/ckpt.$i \
			spw "w$i" -t "worker:$i" --grace 2s -- "$LOOP"
		pids+=("$PID")
	done
	wait_connected 2
	for i in 0 1; do
		wait_for 20 at_step "w$i" 1
	done
	# worker:0's agent freezes; worker:1 and its command get SIGTERM, as
	# Slurm sends it: the command dies, and worker:1 stays for the
	# protocol, which cannot end without worker:0.
	kill -STOP "${pids[0]}"
	local cmd
	cmd=$(pgrep -P "${pids[1]}" -f train-loop.sh | head -n 1)
	[ -n "$cmd" ] || fail "no command under worker:1"
	kill -TERM "${pids[1]}" "$cmd"
	wait_grep 'staying for the sync protocol' "$T/w1.err" 20
	# worker:0 misses its heartbeats and fails: that trumps the notice.
	wait_exit "${pids[1]}" 30
	assert_equal "$STATUS" 43
	grep -q 'the command had ended after a preemption notice; stopped because .*worker:0' "$T/w1.err" ||
		fail "worker:1: $(cat "$T/w1.err")"
	kill -CONT "${pids[0]}"
}
