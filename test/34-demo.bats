#!/usr/bin/env bats
# make demo's script, as a new user runs it: the whole control plane on
# loopback, every step's line, every record used once, nothing left
# running after it.

load helper

bats_require_minimum_version 1.5.0

ROOT=$BATS_TEST_DIRNAME/..

# The pids of processes whose working directory is under $T/tmp, where
# the demo makes its own.
left_running() {
	find /proc -maxdepth 2 -name cwd -lname "$T/tmp/*" -printf '%h\n' 2>/dev/null | cut -d/ -f3
}

@test "examples/demo.sh: the job survives a worker's kill -9 and a preemption with every record used once, then a sweep; nothing is left" {
	mkdir -p "$T/tmp"
	run env TMPDIR="$T/tmp" PYTHON="$PYTHON" timeout -k 5 120 "$ROOT/examples/demo.sh"
	echo "$output"
	[ "$status" = 0 ] || fail "exit status $status"
	for n in 1 2 3 4 5 6 7 8; do
		grep -q "^$n\. " <<<"$output" || fail "no step $n"
	done
	grep -q 'exit codes: 42 42 42 42 (42: preempted, restart me)' <<<"$output"
	grep -Eq 'each task saved its model and data position at step [0-9]+\.$' <<<"$output"
	grep -q 'exit codes: 0 0 0 0: 2400 records used, 2400 distinct, of 2400' <<<"$output"
	[ "$(grep -c 'ckpt.worker:[0-3].json step [0-9]* score' <<<"$output")" = 4 ]
	wait_for 15 eval '[ -z "$(left_running)" ]' ||
		fail "left running: $(left_running | xargs -r ps -o pid=,args= -p)"
	[ -z "$(ls "$T/tmp")" ] || fail "left in TMPDIR: $(ls "$T/tmp")"
}
