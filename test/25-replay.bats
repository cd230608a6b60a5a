#!/usr/bin/env bats
# State directories written by an earlier muster (test/data/state-v1, made
# by its make.sh): coordd and dispatchd read them back to the same state,
# and a job left part way in them goes on to its end, every element once.
# Each daemon and worker is ours, stopped by PID.

load helper

bats_require_minimum_version 1.5.0

V1=$BATS_TEST_DIRNAME/data/state-v1

# v1_up: coordd and dispatchd on copies of the v1 state directories.
v1_up() {
	cp -r "$V1/coord" "$V1/dispatch" "$T/"
	start_coordd --cluster worker=2 --heartbeat-timeout 1h --state-dir "$T/coord"
	start_dispatchd --state-dir "$T/dispatch"
}

@test "state directories written by v1 read back to the state they held" {
	v1_up
	"$V1/dump.sh" "$MUSTER_COORD" "$MUSTER_DISPATCHER" >"$T/state.json"
	run diff -u "$V1/state.json" "$T/state.json"
	assert_success
	grep -q 'state directory .*: 4 keys at revision 1795609.*, epoch 1, 1 ended barriers' "$T/coordd.log"
	grep -q 'state directory .*: 34 closures, 1 datasets, 3 jobs' "$T/dispatchd.log"
}

@test "a job left part way in a v1 state directory is read to its end, every element once" {
	v1_up
	local i
	for ((i = 1; i <= 6; i++)); do
		seq $((i * 1000000)) $((i * 1000000 + 49999)) >"part$i"
	done
	# What is left of job "half" (two passes over six splits, seed 0: seq
	# s is split s % 6), from its checkpoint as the v1 dispatchd served
	# it: each open seq's elements but the ranges delivered.
	jq -r 'select(.open and .repeat == 2) | .open[] |
		"\(.seq % 6 + 1) \([.skip[] | "\(.[0]):\(.[1])"] | join(","))"' \
		"$V1/state.json" >open
	[ "$(wc -l <open)" -ge 2 ]
	local seq skip
	while read -r seq skip; do
		awk -v skip="$skip" 'BEGIN {
			n = split(skip, r, ",")
			for (i = 1; i <= n; i++) { split(r[i], ab, ":"); a[i] = ab[1]; b[i] = ab[2] }
		} {
			for (i = 1; i <= n; i++) if (NR - 1 >= a[i] && NR - 1 < b[i]) next
			print
		}' "part$seq"
	done <open | sort >want
	# The worker that held them is gone; it comes back as a new
	# incarnation, which gives them back.
	start_worker w:1
	dispatchctl read parts --job half --repeat 2 --timeout 60s >got
	sort got >got.sorted
	assert_equal "$(wc -l <got)" "$(wc -l <want)"
	# The same elements, as many times each: none lost, none twice.
	cmp want got.sorted
}
