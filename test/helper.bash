# Loaded by every test/NN-*.bats: the programs under test from the build
# tree, a temporary directory per test, and daemons on ephemeral loopback
# ports that are stopped (by PID) when the test ends.

# bats-support and bats-assert, file by file: their load.bash starts a
# dirname process for each of its files, in every test.
for _f in /usr/lib/bats/bats-support/src/*.bash /usr/lib/bats/bats-assert/src/*.bash; do
	# shellcheck disable=SC1090
	source "$_f"
done
unset _f

: "${MUSTER_BIN:=$BATS_TEST_DIRNAME/../build/bin}"
PATH="$MUSTER_BIN:$PATH"
export PATH
unset MUSTER_COORD MUSTER_TASK

# ASAN=1 when the programs under test are built with AddressSanitizer
# (make asan): it reserves terabytes of address space and doubles memory,
# so limits on address space and memory figures do not hold there.
ASAN=
grep -qa __asan_init "$MUSTER_BIN/dispatchd" 2>/dev/null && ASAN=1

# The system's python3 when there is one (the one with Debian's modules;
# it starts faster than a shim).
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=python3

# Started daemons, to be killed in teardown.
DAEMON_PIDS=()
# File systems mounted by small_disk, unmounted in teardown.
MOUNTS=()
# Other background processes of a test (clients, wrapped tasks, loops):
# killed outright, and before the daemons they talk to.
BG_PIDS=()

setup() {
	T=$BATS_TEST_TMPDIR
	cd "$T" || return 1
}

teardown() {
	local pid
	for pid in "${BG_PIDS[@]}"; do
		kill -CONT "$pid" 2>/dev/null || true
		kill -KILL "$pid" 2>/dev/null || true
	done
	for pid in "${BG_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	# A daemon a test stopped (SIGSTOP) and did not resume takes its
	# SIGTERM only once resumed: waiting for it would hang the suite.
	for pid in "${DAEMON_PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
		kill -CONT "$pid" 2>/dev/null || true
	done
	for pid in "${DAEMON_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	for pid in "${MOUNTS[@]}"; do
		umount "$pid" 2>/dev/null || true
	done
	# A sanitizer's report in a daemon's or a client's stderr fails the
	# test, even when the program went on (UBSan) or the test passed.
	sanitizer_reports "$BATS_TEST_TMPDIR"
}

# sanitizer_reports DIR: fails, printing them, when the logs in DIR (any
# *.log, *.err or *.stderr) hold an AddressSanitizer, LeakSanitizer,
# ThreadSanitizer or UBSan report.
sanitizer_reports() {
	local files
	files=$(grep -rlE --include='*.log' --include='*.err' --include='*.stderr' \
		'ERROR: (AddressSanitizer|LeakSanitizer|ThreadSanitizer)|runtime error: ' \
		"$1" 2>/dev/null) || return 0
	echo "sanitizer reports in: $files" >&2
	# shellcheck disable=SC2086
	grep -hE -A12 'ERROR: (Address|Leak|Thread)Sanitizer|runtime error: ' $files | head -60 >&2
	return 1
}

# All waits below poll a condition until a deadline, on the wall clock:
# on a loaded machine a poll takes longer, never the wait. Their default
# deadlines are generous, as they cost nothing when the condition comes.

# nap SECONDS: sleeps without starting a process (a sleep(1) costs more
# than the nap itself on a busy machine): a read that times out on a pipe
# nothing writes to.
exec {NAP_FD}<> <(:)
nap() {
	read -r -t "$1" -u "$NAP_FD" _ || :
}

# wait_for SECONDS COMMAND [ARGS...]: until COMMAND succeeds, for at most
# SECONDS (a whole number); fails if it never did.
wait_for() {
	local end=$(( ${EPOCHREALTIME%.*} + $1 ))
	shift
	until "$@"; do
		((${EPOCHREALTIME%.*} < end)) || return 1
		nap 0.05
	done
}

# wait_file FILE [SECONDS]: until FILE exists and is not empty (10 s).
wait_file() {
	wait_for "${2:-10}" test -s "$1" && return 0
	echo "wait_file: $1 did not appear" >&2
	return 1
}

# wait_grep PATTERN FILE [SECONDS]: until FILE has a line matching the
# extended regex PATTERN (10 s by default).
wait_grep() {
	wait_for "${3:-10}" grep -Eq -- "$1" "$2" 2>/dev/null && return 0
	echo "wait_grep: no /$1/ in $2:" >&2
	cat "$2" >&2 2>/dev/null
	return 1
}

# start_daemon PROG [ARGS]: PROG on an ephemeral loopback port, logging to
# $T/PROG.log, stopped in teardown; its PID in DAEMON_PID, its port in
# DAEMON_PORT.
start_daemon() {
	local prog=$1 pf="$T/$1.port.$RANDOM"
	shift
	"$prog" -l 127.0.0.1:0 --port-file "$pf" "$@" 2>>"$T/$prog.log" &
	DAEMON_PID=$!
	DAEMON_PIDS+=("$DAEMON_PID")
	wait_file "$pf" || return 1
	DAEMON_PORT=$(cat "$pf")
}

# small_disk DIR SIZE: a tmpfs of SIZE (like 256k) at DIR, a disk to fill,
# unmounted in teardown; skips the test where none can be mounted.
small_disk() {
	[ "$(id -u)" = 0 ] || skip "mounting a tmpfs needs root"
	mkdir -p "$1"
	mount -t tmpfs -o "size=$2" tmpfs "$1" 2>/dev/null ||
		skip "cannot mount a tmpfs here"
	MOUNTS+=("$1")
}

# kill9 PID: kill -9 of a process of ours (a daemon, to test a crash),
# waited for.
kill9() {
	kill -KILL "$1"
	wait "$1" 2>/dev/null || true
	forget_pid "$1"
}

# forget_pid PID: off the lists teardown stops (BG_PIDS, DAEMON_PIDS),
# once our child PID has been waited for: its number may be reused.
forget_pid() {
	local p keep=()
	for p in "${BG_PIDS[@]}"; do
		[ "$p" != "$1" ] && keep+=("$p")
	done
	BG_PIDS=("${keep[@]}")
	keep=()
	for p in "${DAEMON_PIDS[@]}"; do
		[ "$p" != "$1" ] && keep+=("$p")
	done
	DAEMON_PIDS=("${keep[@]}")
}

# start_coordd [ARGS...]: coordd on 127.0.0.1 and a free port; sets
# COORD_PID, COORD_PORT and exports MUSTER_COORD.
start_coordd() {
	start_daemon coordd "$@" || return 1
	COORD_PID=$DAEMON_PID
	COORD_PORT=$DAEMON_PORT
	MUSTER_COORD=127.0.0.1:$COORD_PORT
	export MUSTER_COORD
	# An in-memory store's revisions start from the clock, so that they
	# never repeat those of a coordd before it: REV0 is where this one's
	# start (its first change is REV0+1).
	REV0=$(curl -s -m 10 "http://$MUSTER_COORD/metrics" |
		awk '$1 == "muster_kv_revision" {print $2}')
}

# rev N: the revision of this coordd's Nth change.
rev() {
	echo $((REV0 + $1))
}

# free_port: a port nothing listens on right now, below the kernel's
# ephemeral range, so that neither a daemon binding port 0 nor the local
# end of a client's connection takes it meanwhile. Pure bash: a connect to
# a port without a listener is refused at once.
free_port() {
	local lo port i
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
	((lo > 11000)) || lo=32768
	for ((i = 0; i < 100; i++)); do
		port=$((10000 + (RANDOM * 32768 + RANDOM) % (lo - 10000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	echo "free_port: no free port found" >&2
	return 1
}

# http METHOD PATH [curl args...]: prints the status code, then the body.
http() {
	local method=$1 path=$2
	shift 2
	curl -s -o "$T/http.body" -w '%{http_code}\n' -X "$method" \
		"http://$MUSTER_COORD$path" "$@"
	local body
	IFS= read -r -d '' body <"$T/http.body" || :
	printf '%s' "$body"
}

# has_metric NAME VALUE: coordd's /metrics shows NAME at VALUE now. Read
# with bash's /dev/tcp, not curl, so that a poll starts no process.
has_metric() {
	local fd line found=1
	{ exec {fd}<>"/dev/tcp/${MUSTER_COORD%:*}/${MUSTER_COORD##*:}"; } 2>/dev/null ||
		return 1
	local auth=
	[ -z "${MUSTER_TOKEN_FILE:-}" ] ||
		auth="Authorization: Bearer $(head -n 1 "$MUSTER_TOKEN_FILE")"$'\r\n'
	printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n%s\r\n' "$MUSTER_COORD" "$auth" >&"$fd"
	while IFS= read -r -t 5 -u "$fd" line; do
		[[ ${line%$'\r'} == "$1 $2" ]] && found=0 && break
	done
	exec {fd}>&-
	return "$found"
}

# wait_metric NAME VALUE [SECONDS]: until coordd's /metrics shows NAME at
# VALUE (10 s by default), e.g. muster_http_parked 2 for two parked
# requests.
wait_metric() {
	wait_for "${3:-10}" has_metric "$1" "$2" && return 0
	echo "wait_metric: $1 never reached $2" >&2
	return 1
}

# wait_connected N [SECONDS]: until coordd counts N tasks connected (10 s).
wait_connected() {
	wait_metric muster_tasks_connected "$1" "${2:-10}" && return 0
	echo "wait_connected: never $1 tasks connected" >&2
	return 1
}

# running PID: PID (ours or not) exists and is not a zombie. No process
# is started to tell: a poll of it stays cheap on a busy machine.
running() {
	local stat
	{ read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
	stat=${stat##*) }
	[[ $stat != Z* && $stat != X* ]]
}

# exited PID: PID is gone, or a zombie.
exited() {
	! running "$1"
}

# wait_exit PID SECONDS: waits for our child PID, for at most SECONDS, and
# sets STATUS to its exit status ("running" if it did not exit in time).
wait_exit() {
	STATUS=running
	wait_for "$2" exited "$1" || return 0
	STATUS=0
	wait "$1" || STATUS=$?
	forget_pid "$1"
}

# now_us: microseconds since the epoch.
now_us() {
	echo "${EPOCHREALTIME/./}"
}

# now_ms: milliseconds since the epoch.
now_ms() {
	local t=${EPOCHREALTIME/./}
	echo $((t / 1000))
}

# js FILTER FILE: the jq FILTER over the JSON in FILE. Strings print
# bare, anything else as compact JSON (["a",1,null]).
js() {
	jq -c -r "$1" "$2"
}

# pw NAME ARGS...: preemptwatch ARGS in the background, stdout in
# $T/NAME.out and stderr in $T/NAME.err; sets PID.
pw() {
	local name=$1
	shift
	preemptwatch "$@" >"$T/$name.out" 2>"$T/$name.err" 3>&- &
	PID=$!
	BG_PIDS+=("$PID")
}

# spw NAME ARGS...: pw NAME ARGS, with the socket syncpoint talks to under
# $T/NAME.tmp (preemptwatch makes it in TMPDIR), so that step_of can ask.
spw() {
	mkdir -p "$T/$1.tmp"
	TMPDIR=$T/$1.tmp pw "$@"
}

# step_of NAME: the last step the command of preemptwatch NAME (started
# with spw) reached, as it told syncpoint; -1 before its first step.
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

# on_tty CMD: the shell command CMD with a terminal for its stdin, stdout
# and stderr (a pseudo-terminal of util-linux's script), what it writes
# there on our stdout; skips the test where script is missing.
on_tty() {
	type -P script >/dev/null || skip "script (util-linux) is not installed"
	command script -qec "$1" /dev/null
}

# start_dispatchd [ARGS]: dispatchd on an ephemeral port; exports
# MUSTER_DISPATCHER.
start_dispatchd() {
	start_daemon dispatchd "$@" || return 1
	DISPATCH_PID=$DAEMON_PID
	DISPATCH_PORT=$DAEMON_PORT
	MUSTER_DISPATCHER=127.0.0.1:$DISPATCH_PORT
	export MUSTER_DISPATCHER
}

# start_worker NAME [ARGS]: a workerloop in the background (its PID in
# WORKER_PID, its log in $T/NAME.log), once dispatchd lists it live.
start_worker() {
	local name=$1
	shift
	workerloop -t "$name" "$@" 2>>"$T/$name.log" &
	WORKER_PID=$!
	BG_PIDS+=("$WORKER_PID")
	wait_for 10 worker_live "$name"
}

# worker_live NAME: dispatchd (its leader, MUSTER_DISPATCHER naming
# replicas) lists NAME as live.
worker_live() {
	dispatchctl --json status 2>/dev/null |
		jq -en --arg n "$1" '[inputs | .workers[] | select(.name == $n and .live)] | length > 0' >/dev/null
}

# closure_field ID FIELD: one field of a closure's value, now.
closure_field() {
	curl -s -m 5 "http://$MUSTER_DISPATCHER/v1/closures/$1" | jq -r ".$2"
}

# write_load COUNT TIMEOUT: four clients in the background, client I
# putting COUNT keys wI/J (values of 200-odd bytes that name them) with
# kvctl, each followed by an add of 1 to count/I, each call with
# --timeout TIMEOUT. Acknowledged ones are listed in $T/acked.I and
# $T/added.I; $T/finished.I appears once client I is done.
write_load() {
	local count=$1 timeout=$2 i
	for i in 1 2 3 4; do
		(
			for ((j = 1; j <= count; j++)); do
				if kvctl --timeout "$timeout" put "w$i/$j" "value-$i-$j-$(printf '%0200d' "$j")" 2>/dev/null; then
					echo "$j" >>"$T/acked.$i"
				fi
				if kvctl --timeout "$timeout" add "count/$i" 1 >/dev/null 2>&1; then
					echo "$j" >>"$T/added.$i"
				fi
			done
			echo done >"$T/finished.$i"
		) &
		BG_PIDS+=($!)
	done
}

# check_write_load COUNT WAIT: once the clients of write_load COUNT are
# done (within WAIT seconds), every acknowledged put is there, every key
# there is whole (a write without an answer is there whole or not at all),
# and each counter holds at least its acknowledged adds and at most COUNT.
check_write_load() {
	local count=$1 i j k n
	for i in 1 2 3 4; do
		wait_file "$T/finished.$i" "$2"
	done
	for i in 1 2 3 4; do
		while read -r j; do
			assert_equal "$(kvctl get "w$i/$j")" "value-$i-$j-$(printf '%0200d' "$j")"
		done <"$T/acked.$i"
		kvctl ls "w$i" >"$T/keys.$i"
		while read -r k; do
			j=${k#w"$i"/}
			assert_equal "$(kvctl get "$k")" "value-$i-$j-$(printf '%0200d' "$j")"
		done <"$T/keys.$i"
		n=$(kvctl get "count/$i")
		[ "$n" -ge "$(wc -l <"$T/added.$i")" ]
		[ "$n" -le "$count" ]
	done
}

# silent_peer: a stranger on a loopback port that takes connections and
# holds them, saying nothing (not even a TLS handshake); its port in
# $T/port, its log $T/stranger.log.
silent_peer() {
	"$PYTHON" -c '
import os, socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
with open("port.tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename("port.tmp", "port")
held = []
while True:
    held.append(s.accept()[0])
' 2>"$T/stranger.log" &
	BG_PIDS+=($!)
	wait_file "$T/port"
}
