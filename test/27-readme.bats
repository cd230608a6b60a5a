#!/usr/bin/env bats
# The README's tour, as a new user pastes it: every block marked
# "<!-- tour -->" in README.md runs, in order, in one shell, in an empty
# directory, against daemons the tour starts on free loopback ports; each
# command must exit as the README says (0, or the "# exits N" after it)
# and each block must print what the README shows under its commands.
#
# What differs from run to run is compared as a pattern: both the README's
# lines and the output go through norm() before they are compared, which
# makes revisions and incarnations <id>, 127.0.0.1's ports <port>,
# RFC 3339 times <time>, durations before "ago" or "from now" <age>, and
# any run of white space one space (tables pad to what they hold). A
# block marked "<!-- tour: any order -->" is compared as a sorted set of
# lines (logs of several processes); "steps vary" makes the numbers after
# "step" and "at" <n> (where a preemption lands).
#
# test/readme-tour.sh makes the script and what each block is to show.

load helper

# norm FILE OPTS: FILE as compared, OPTS being the block's mark.
norm() {
	local steps=
	[[ $2 == *"steps vary"* ]] && steps='s/(step|at) [0-9]+/\1 <n>/g'
	sed -E -e 's/\b[0-9a-f]{16}\b/<id>/g' -e 's/[0-9]{13,}/<id>/g' \
		-e 's/127\.0\.0\.1:[0-9]+/127.0.0.1:<port>/g' \
		-e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z/<time>/g' \
		-e 's/([0-9]+(ms|h|m|s))+ (ago|from now)/<age> \3/g' \
		-e "$steps" -e 's/[[:space:]]+/ /g' -e 's/ $//' "$1" |
		if [[ $2 == *"any order"* ]]; then LC_ALL=C sort; else cat; fi
}

# check WANT GOT: every block of the extraction in WANT against the run in
# GOT; prints each block that differs, with its line in README.md.
check() {
	local want=$1 got=$2 n blocks bad=0 opts
	blocks=$(cat "$want/blocks")
	for ((n = 1; n <= blocks; n++)); do
		opts=$(cat "$want/$n.opts")
		if ! cmp -s "$want/$n.rcs" "$got/$n.rc"; then
			echo "README.md:$(cat "$want/$n.line"): exit statuses" \
				"$(tr '\n' ' ' <"$got/$n.rc" 2>/dev/null)where the README" \
				"says $(tr '\n' ' ' <"$want/$n.rcs")"
			bad=1
		fi
		if ! diff -u <(norm "$want/$n.want" "$opts") \
			<(norm "$got/$n.out" "$opts") >"$got/$n.diff" 2>&1; then
			echo "README.md:$(cat "$want/$n.line"): output differs (- README, + run):"
			tail -n +3 "$got/$n.diff"
			bad=1
		fi
	done
	return "$bad"
}

setup_file() {
	local top=$BATS_TEST_DIRNAME/.. tree=$BATS_FILE_TMPDIR/tree
	export TOUR=$BATS_FILE_TMPDIR/tour
	mkdir -p "$TOUR" "$tree" "$BATS_FILE_TMPDIR/tmp"
	"$top/test/readme-tour.sh" "$top/README.md" "$TOUR"
	# The tour starts at the top of a built tree: this one, with the
	# programs under test in build/bin.
	ln -s "$(cd "$MUSTER_BIN/.." && pwd)" "$tree/build"
	ln -s "$(cd "$top/examples" && pwd)" "$tree/examples"
	ln -s "$(cd "$top/python" && pwd)" "$tree/python"
	(
		cd "$tree" || exit 1
		# A new user's shell: no muster settings of the suite's own.
		unset PYTHONPATH $(compgen -e | grep '^MUSTER_' | grep -vx MUSTER_BIN)
		TMPDIR=$BATS_FILE_TMPDIR/tmp timeout -k 5 100 bash "$TOUR/tour.sh"
		echo "$?" >"$TOUR/status"
	) </dev/null >/dev/null 2>&1
}

# The pids of the processes that still run in the tour's directories:
# whatever the tour started runs there, its shell's jobs and what they
# started in turn alike.
left_running() {
	find /proc -maxdepth 2 -name cwd -lname "$BATS_FILE_TMPDIR/*" \
		-printf '%h\n' 2>/dev/null | cut -d/ -f3
}

nothing_left() {
	[ -z "$(left_running)" ]
}

teardown_file() {
	local pid
	for pid in $(left_running); do
		kill -KILL "$pid" 2>/dev/null || true
	done
}

@test "the README has a tour, and it runs to its end" {
	[ "$(cat "$TOUR/blocks")" -ge 20 ] || fail "only $(cat "$TOUR/blocks") tour blocks"
	assert_equal "$(cat "$TOUR/status")" 0
	[ -e "$TOUR/end.out" ] || fail "the tour stopped before its end"
	[ ! -s "$TOUR/end.out" ] || fail "after its end: $(cat "$TOUR/end.out")"
}

@test "every block of the tour exits and prints as README.md shows" {
	run check "$TOUR" "$TOUR"
	[ "$status" -eq 0 ] || fail "$output"
}

@test "the tour stops what it started, and no sanitizer report" {
	# Its last block sends SIGTERM, which daemons take a moment to obey.
	wait_for 10 nothing_left ||
		fail "still running after the tour: $(left_running | xargs ps -o pid=,args= -p)"
	sanitizer_reports "$BATS_FILE_TMPDIR"
}

@test "a README that no longer shows what the tour prints fails the check" {
	local top=$BATS_TEST_DIRNAME/.. drift=$BATS_TEST_TMPDIR/drift
	mkdir "$drift"
	# A shown output changed, and a command said to exit otherwise.
	sed -e 's/^    host-a (exit 6)$/    host-b (exit 6)/' \
		-e 's/^\(    \$ kvctl tryget job\/step .*# exits\) 1$/\1 0/' \
		"$top/README.md" >drift.md
	run cmp -s drift.md "$top/README.md"
	assert_failure
	"$top/test/readme-tour.sh" drift.md "$drift"
	run check "$drift" "$TOUR"
	assert_failure
	assert_output --partial "-host-b (exit 6)"
	assert_output --partial "+host-a (exit 6)"
	assert_output --regexp "README.md:[0-9]+: exit statuses 1 0 0 0 where the README says 0 0 0 0"
}
