#!/usr/bin/env bats
# kvctl: every verb, every exit code, and --json output, against a coordd on
# an ephemeral loopback port.

load helper

bats_require_minimum_version 1.5.0

# json FILTER: the jq FILTER over the JSON document in $output. Strings
# print bare, anything else as compact JSON.
json() {
	jq -c -r "$1" <<<"$output"
}

# --- put, update, get, tryget ---------------------------------------------------

@test "put inserts; a second put exits 5 ALREADY_EXISTS; put -f overwrites" {
	start_coordd
	run --separate-stderr kvctl put job/lr 0.1
	assert_success
	assert_output ""

	run --separate-stderr kvctl put job/lr 0.2
	assert_failure 5
	assert_output ""
	[[ $stderr == "kvctl: ALREADY_EXISTS: "* ]]
	[[ $stderr == *job/lr* ]]
	run kvctl get job/lr
	assert_output 0.1

	run kvctl put -f job/lr 0.3
	assert_success
	run kvctl get job/lr
	assert_output 0.3

	# -f also inserts a key that is not there yet.
	run kvctl put -f job/new x
	assert_success
	run kvctl get job/new
	assert_output x
}

@test "put reads the value from stdin with - or with no VALUE" {
	start_coordd
	echo from-dash | kvctl put a -
	echo no-operand | kvctl put b
	run kvctl get a
	assert_output from-dash
	run kvctl get b
	assert_output no-operand
}

@test "update exits 1 NOT_FOUND when the key is missing, replaces it when present" {
	start_coordd
	run --separate-stderr kvctl update step 1
	assert_failure 1
	[[ $stderr == "kvctl: NOT_FOUND: "* ]]
	run kvctl tryget step
	assert_failure 1

	kvctl put step 1
	run kvctl update step 2
	assert_success
	assert_output ""
	run kvctl get step
	assert_output 2
}

@test "get prints the value's bytes exactly, with no newline added" {
	start_coordd
	kvctl put word hello
	kvctl get word >out
	printf 'hello' | cmp - out

	printf 'two\nlines\n\n' | kvctl put text -
	kvctl get text >out
	printf 'two\nlines\n\n' | cmp - out

	kvctl put empty ''
	kvctl get empty >out
	[ -f out ] && [ ! -s out ]
}

@test "tryget prints the value, or exits 1 NOT_FOUND at once when missing" {
	start_coordd
	kvctl put here yes
	run kvctl tryget here
	assert_success
	assert_output yes

	local t0
	t0=$(now_ms)
	run --separate-stderr kvctl tryget missing
	assert_failure 1
	assert_output ""
	[[ $stderr == "kvctl: NOT_FOUND: "*missing* ]]
	# Not a blocking get, which would wait up to its default 30 s.
	[ $(($(now_ms) - t0)) -lt 5000 ]
}

@test "get --timeout 300ms on a missing key exits 4 DEADLINE_EXCEEDED" {
	start_coordd
	local t0 took
	t0=$(now_ms)
	run --separate-stderr kvctl --timeout 300ms get missing
	took=$(($(now_ms) - t0))
	assert_failure 4
	assert_output ""
	[[ $stderr == "kvctl: DEADLINE_EXCEEDED: "* ]]
	# It waited for the key, then gave up at its deadline (and not at
	# the default 30 s).
	[ "$took" -ge 250 ] && [ "$took" -lt 5000 ] || fail "took ${took}ms"
}

@test "put of an empty key exits 3 INVALID_ARGUMENT" {
	start_coordd
	run --separate-stderr kvctl put / v
	assert_failure 3
	[[ $stderr == "kvctl: INVALID_ARGUMENT: "* ]]
	run --separate-stderr kvctl put '' v
	assert_failure 3
}

@test "put of a value over --max-value-size exits 12 RESOURCE_EXHAUSTED" {
	start_coordd --max-value-size 1K
	head -c 2048 /dev/zero >two-k
	run --separate-stderr kvctl put big - <two-k
	assert_failure 12
	[[ $stderr == "kvctl: RESOURCE_EXHAUSTED: "* ]]
	run kvctl tryget big
	assert_failure 1
}

# --- keys -------------------------------------------------------------------

@test "keys are normalised: put //a///b/ then get a/b" {
	start_coordd
	kvctl put //a///b/ v
	run kvctl get a/b
	assert_success
	assert_output v
	run kvctl tryget /a/b/
	assert_output v
	run kvctl ls a
	assert_output a/b
	run kvctl put a/b again
	assert_failure 5
}

@test "keys may hold spaces, URL metacharacters and UTF-8" {
	start_coordd
	kvctl put 'dir/a b?c#d%e&f=+' one
	kvctl put 'dir/ü é' two
	kvctl put '%41' three
	run kvctl get 'dir/a b?c#d%e&f=+'
	assert_output one
	run kvctl get 'dir/ü é'
	assert_output two
	run kvctl tryget A
	assert_failure 1
	run kvctl get '%41'
	assert_output three
	run kvctl ls dir
	assert_output "$(printf '%s\n' 'dir/a b?c#d%e&f=+' 'dir/ü é')"
}

# --- ls and rm --------------------------------------------------------------------

@test "ls lists the keys under PREFIX/, sorted, one per line" {
	start_coordd
	kvctl put a top
	kvctl put a/c 3
	kvctl put a/b 2
	kvctl put a/b/deep 4
	kvctl put ab sibling
	kvctl put a-z sibling
	run --separate-stderr kvctl ls a
	assert_success
	assert_output "$(printf '%s\n' a/b a/b/deep a/c)"

	run kvctl ls a/
	assert_output "$(printf '%s\n' a/b a/b/deep a/c)"
	run kvctl ls a/b
	assert_output a/b/deep
	run kvctl ls nothing
	assert_success
	assert_output ""
}

@test "rm removes KEY and KEY/..., but not siblings like ab" {
	start_coordd
	kvctl put a 1
	kvctl put a/b 2
	kvctl put a/b/c 3
	kvctl put ab 4
	kvctl put a-b 5
	run --separate-stderr kvctl rm a
	assert_success
	assert_output ""
	run kvctl tryget a
	assert_failure 1
	run kvctl tryget a/b
	assert_failure 1
	run kvctl tryget a/b/c
	assert_failure 1
	run kvctl get ab
	assert_output 4
	run kvctl get a-b
	assert_output 5
}

@test "rm of a missing key succeeds and deletes nothing" {
	start_coordd
	kvctl put keep 1
	run kvctl --json rm gone
	assert_success
	run json .deleted
	assert_output 0
	run kvctl get keep
	assert_output 1
}

# --- add ------------------------------------------------------------------------

@test "add starts a missing key at 0, prints the new value, takes negative N" {
	start_coordd
	run kvctl add n
	assert_success
	assert_output 1
	run kvctl add n 10
	assert_output 11
	run kvctl add n -20
	assert_output -9
	run kvctl add fresh -3
	assert_output -3
	run kvctl get n
	assert_output -9
}

@test "add on a non-integer value exits 6 FAILED_PRECONDITION" {
	start_coordd
	kvctl put s hello
	run --separate-stderr kvctl add s
	assert_failure 6
	assert_output ""
	[[ $stderr == "kvctl: FAILED_PRECONDITION: "* ]]
	run kvctl get s
	assert_output hello
	kvctl put t '12abc'
	run kvctl add t
	assert_failure 6
}

@test "add past the int64 range exits 6 and leaves the value" {
	start_coordd
	kvctl add big 9223372036854775807
	run kvctl add big 1
	assert_failure 6
	run kvctl get big
	assert_output 9223372036854775807
}

@test "add with a non-integer N exits 2 and sends nothing" {
	start_coordd
	local bad
	for bad in x 1.5 1x '' 99999999999999999999; do
		run --separate-stderr kvctl add n "$bad"
		assert_failure 2
		[[ $stderr == *"usage: kvctl"* ]]
	done
	run kvctl tryget n
	assert_failure 1
}

# --- cas ------------------------------------------------------------------------

@test "cas swaps when the value matches" {
	start_coordd
	kvctl put leader w0
	run --separate-stderr kvctl cas leader w0 w1
	assert_success
	assert_output ""
	run kvctl get leader
	assert_output w1
}

@test "cas on a mismatch exits 6 and prints the current value on stdout" {
	start_coordd
	kvctl put leader w1
	run --separate-stderr kvctl cas leader w0 w2
	assert_failure 6
	assert_output w1
	[[ $stderr == "kvctl: FAILED_PRECONDITION: "* ]]
	run kvctl get leader
	assert_output w1
}

@test "cas --absent creates a missing key, and exits 6 on an existing one" {
	start_coordd
	run kvctl cas --absent leader w0
	assert_success
	run kvctl get leader
	assert_output w0

	run --separate-stderr kvctl cas --absent leader w9
	assert_failure 6
	assert_output w0
	run kvctl get leader
	assert_output w0
}

@test "cas on a missing key without --absent exits 6" {
	start_coordd
	run --separate-stderr kvctl cas leader w0 w1
	assert_failure 6
	assert_output ""
	[[ $stderr == "kvctl: FAILED_PRECONDITION: "* ]]
	run kvctl tryget leader
	assert_failure 1
}

@test "cas with the wrong number of operands exits 2" {
	start_coordd
	run kvctl cas leader w0
	assert_failure 2
	run kvctl cas --absent leader w0 w1
	assert_failure 2
}

# --- --json -----------------------------------------------------------------------

@test "put --json and update --json print key and revision" {
	start_coordd
	run kvctl --json put k v1
	assert_success
	run json "keys == [\"key\", \"revision\"] and .key == \"k\" and .revision == $(rev 1)"
	assert_output true
	run kvctl --json update k v2
	run json "keys == [\"key\", \"revision\"] and .key == \"k\" and .revision == $(rev 2)"
	assert_output true
	run kvctl --json put -f k v3
	run json .revision
	assert_output "$(rev 3)"
}

@test "get --json prints key, value and revision; value_base64 for binary" {
	start_coordd
	kvctl put a x
	kvctl put k 'héllo'
	run kvctl --json get k
	assert_success
	run json "keys == [\"key\", \"revision\", \"value\"] and .key == \"k\" and .value == \"héllo\" and .revision == $(rev 2)"
	assert_output true

	printf 'a\0b\377' | kvctl put bin -
	run kvctl --json tryget bin
	assert_success
	run json 'if keys == ["key", "revision", "value_base64"] then .value_base64 else keys end'
	assert_output YQBi/w==
}

@test "ls --json prints the revision and the entries with their values" {
	start_coordd
	kvctl put d/a 1
	kvctl put d/b 2
	printf '\0' | kvctl put d/c -
	kvctl put other 9
	kvctl update d/a 10
	run kvctl --json ls d
	assert_success
	run json 'if keys == ["entries", "revision"] then .revision else keys end'
	assert_output "$(rev 5)"
	run kvctl --json ls d
	run json "[.entries[] | [.key, .value // .value_base64, .revision - $REV0]]"
	assert_output '[["d/a","10",5],["d/b","2",2],["d/c","AA==",3]]'
}

@test "rm --json prints key, deleted and revision" {
	start_coordd
	kvctl put d/a 1
	kvctl put d/b 2
	kvctl put d 0
	run kvctl --json rm d
	assert_success
	run json "keys == [\"deleted\", \"key\", \"revision\"] and [.key, .deleted, .revision - $REV0] == [\"d\", 3, 4]"
	assert_output true
}

@test "add --json prints key, value and revision" {
	start_coordd
	kvctl add n 41
	run kvctl --json add n
	assert_success
	run json "keys == [\"key\", \"revision\", \"value\"] and [.key, .value, .revision - $REV0] == [\"n\", 42, 2]"
	assert_output true
}

@test "cas --json prints key and revision, or the current value on a mismatch" {
	start_coordd
	kvctl put k a
	run kvctl --json cas k a b
	assert_success
	run json "[.key, .revision - $REV0]"
	assert_output '["k",2]'
	run --separate-stderr kvctl --json cas k a c
	assert_failure 6
	[[ $stderr == "kvctl: FAILED_PRECONDITION: "* ]]
	run json '[.key, .value]'
	assert_output '["k","b"]'
}

# --- addresses and the command line -------------------------------------------------

@test "the address comes from -c or from MUSTER_COORD, -c first" {
	start_coordd
	local addr=$MUSTER_COORD dead
	dead=127.0.0.1:$(free_port)

	unset MUSTER_COORD
	run kvctl -c "$addr" put k from-flag
	assert_success

	MUSTER_COORD=$addr run kvctl get k
	assert_success
	assert_output from-flag

	# -c wins over the environment.
	MUSTER_COORD=$dead run kvctl --timeout 2s -c "$addr" get k
	assert_success
	assert_output from-flag
	# And the environment is really used.
	MUSTER_COORD=$dead run kvctl --timeout 300ms tryget k
	assert_failure 9
}

@test "-c with a bad address exits 2" {
	local bad
	for bad in 127.0.0.1:0 127.0.0.1:99999 127.0.0.1:port ::1:80 '[::1' ''; do
		run --separate-stderr kvctl -c "$bad" --timeout 1s put k v
		assert_failure 2
		assert_output ""
		[[ $stderr == *"usage: kvctl"* ]]
	done
}

@test "no command exits 2 with usage on stderr" {
	run --separate-stderr kvctl
	assert_failure 2
	assert_output ""
	[[ $stderr == *"no command given"* ]]
	[[ $stderr == *"usage: kvctl"* ]]
}

@test "an unknown command exits 2" {
	run --separate-stderr kvctl frob k
	assert_failure 2
	[[ $stderr == *"unknown command frob"* ]]
	[[ $stderr == *"usage: kvctl"* ]]
}

@test "bad operands and flags exit 2" {
	run kvctl get
	assert_failure 2
	run kvctl get a b
	assert_failure 2
	run kvctl ls
	assert_failure 2
	run kvctl rm
	assert_failure 2
	run kvctl --timeout soon get k
	assert_failure 2
	run kvctl update -f k v
	assert_failure 2
	run kvctl get --since 3 k
	assert_failure 2
	run kvctl --no-such-flag get k
	assert_failure 2
}

@test "kvctl -h prints usage to stdout and exits 0" {
	run --separate-stderr kvctl -h
	assert_success
	assert_equal "$stderr" ""
	assert_line --index 0 --partial 'usage: kvctl'
	local verb
	for verb in put update get tryget ls rm watch add cas; do
		assert_output --partial "] $verb "
	done
	run kvctl --help
	assert_success
	assert_line --index 0 --partial 'usage: kvctl'
}

@test "kvctl --version prints its version" {
	run kvctl --version
	assert_success
	assert_output --regexp '^kvctl [0-9]+\.[0-9]+\.[0-9]+$'
}

@test "a missing coordd with --timeout 1s exits 9 UNAVAILABLE" {
	export MUSTER_COORD=127.0.0.1:$(free_port)
	local t0 took
	t0=$(now_ms)
	run --separate-stderr kvctl --timeout 1s put k v
	took=$(($(now_ms) - t0))
	assert_failure 9
	[[ $stderr == "kvctl: UNAVAILABLE: "*"cannot reach $MUSTER_COORD"* ]]
	# It retried until its deadline, and not until the default 30 s.
	[ "$took" -ge 900 ] && [ "$took" -lt 6000 ] || fail "put took ${took}ms"
	run --separate-stderr kvctl --timeout 1s ls k
	assert_failure 9
	run --separate-stderr kvctl --timeout 1s tryget k
	assert_failure 9
}

@test "a blocking get honours --timeout 1s when coordd is missing" {
	export MUSTER_COORD=127.0.0.1:$(free_port)
	local t0 took
	t0=$(now_ms)
	run --separate-stderr kvctl --timeout 1s get k
	took=$(($(now_ms) - t0))
	assert_failure 9
	[[ $stderr == "kvctl: UNAVAILABLE: "* ]]
	# It may not wait much past its own deadline, nor the default 30 s.
	[ "$took" -lt 6000 ] || fail "get --timeout 1s took ${took}ms"
}

@test "tryget does not wait for a missing coordd: UNAVAILABLE (9) at once, under the default 30 s" {
	export MUSTER_COORD=127.0.0.1:$(free_port)
	local t0 took
	t0=$(now_ms)
	run --separate-stderr kvctl tryget k
	took=$(($(now_ms) - t0))
	assert_failure 9
	assert_equal "$stderr" "kvctl: UNAVAILABLE: cannot reach $MUSTER_COORD: Connection refused"
	[ "$took" -lt 2000 ] || fail "tryget took ${took}ms"
}

@test "kvctl says on stderr, once, what it waits for when coordd has not been reached for 3 s" {
	local port
	port=$(free_port)
	export MUSTER_COORD=127.0.0.1:$port
	# Not a terminal: nothing is said in the first 3 s, then one line.
	run --separate-stderr kvctl --timeout 4s get k
	assert_failure 9
	assert_equal "${#stderr_lines[@]}" 2
	[[ ${stderr_lines[0]} =~ ^"kvctl: waiting up to "[12]"s for coordd (cannot reach 127.0.0.1:$port: Connection refused)"$ ]] ||
		fail "${stderr_lines[0]}"
	assert_equal "${stderr_lines[1]}" "kvctl: UNAVAILABLE: cannot reach $MUSTER_COORD: Connection refused"

	# The wait goes on in silence until coordd comes.
	kvctl get k >get.out 2>get.err 3>&- &
	local get=$!
	BG_PIDS+=("$get")
	wait_grep "waiting up to 2[0-9]s for coordd" get.err
	coordd -l "127.0.0.1:$port" 2>>coordd.log &
	DAEMON_PIDS+=($!)
	kvctl --timeout 10s put k v
	wait_exit "$get" 10
	assert_equal "$STATUS" 0
	assert_equal "$(cat get.out)" v
	assert_equal "$(wc -l <get.err)" 1
}

@test "a kvctl run opens one connection to coordd: the one its call is sent on" {
	# A stand-in for coordd that counts the connections it accepts and
	# answers each request with the value "v".
	"$PYTHON" -c '
import os, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
with open("port.tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename("port.tmp", "port")
n = 0
while True:
    c, _ = s.accept()
    n += 1
    with open("conns.tmp", "w") as f:
        f.write(str(n))
    os.rename("conns.tmp", "conns")
    if c.recv(65536):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nv")
    c.close()
' 2>counter.log &
	BG_PIDS+=($!)
	wait_file port
	export MUSTER_COORD=127.0.0.1:$(cat port)
	run kvctl get k
	assert_success
	assert_output v
	assert_equal "$(cat conns)" 1
	run kvctl tryget k
	assert_success
	assert_equal "$(cat conns)" 2
}

@test "a stranger on coordd's port that never answers: DEADLINE_EXCEEDED (4) says no reply came, not that the key was not set" {
	# It takes connections and holds them, saying nothing.
	silent_peer
	export MUSTER_COORD=127.0.0.1:$(cat port)
	local verb
	for verb in get tryget; do
		run --separate-stderr kvctl --timeout 1s "$verb" k
		assert_failure 4
		assert_equal "$stderr" "kvctl: DEADLINE_EXCEEDED: no reply from $MUSTER_COORD before the deadline"
	done
}

@test "a value far over the limit is RESOURCE_EXHAUSTED (12), not a broken connection" {
	start_coordd --max-value-size 1K
	head -c 5000000 /dev/zero >big
	run --separate-stderr kvctl --timeout 10s put big - <big
	assert_failure 12
	[[ $stderr == "kvctl: RESOURCE_EXHAUSTED: "* ]]
	run --separate-stderr kvctl --timeout 10s put -f big - <big
	assert_failure 12
	run kvctl tryget big
	assert_failure 1
}

@test "MUSTER_TIMEOUT sets the default deadline; --timeout wins; a bad one is a usage error" {
	start_coordd
	local t0 took
	t0=$(now_ms)
	MUSTER_TIMEOUT=300ms run --separate-stderr kvctl get never
	took=$(($(now_ms) - t0))
	assert_failure 4
	# Its 300 ms, not the default 30 s, with room for a busy machine.
	[ "$took" -lt 6000 ] || fail "took ${took}ms"
	MUSTER_TIMEOUT=1h run --separate-stderr kvctl --timeout 200ms get never
	assert_failure 4
	MUSTER_TIMEOUT=soon run --separate-stderr kvctl get never
	assert_failure 2
	[[ $stderr == *"MUSTER_TIMEOUT=soon is not a duration"* ]]
	# A watch keeps its own default: none.
	MUSTER_TIMEOUT=100ms run --separate-stderr timeout 2 kvctl watch --count 1 x
	assert_failure 124
}

@test "what kvctl cannot write to stdout (a full disk) is an error, not exit 0" {
	start_coordd
	kvctl put a/x 1
	kvctl put a/y 2
	local v
	for v in "get a/x" "ls a/" "status" "--json get a/y"; do
		# shellcheck disable=SC2086
		run bash -c "kvctl $v >/dev/full"
		assert_failure 10
		assert_output --partial "kvctl: INTERNAL"
	done
}
