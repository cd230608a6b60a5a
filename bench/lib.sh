# lib.sh: what the benchmark scripts share, sourced once they set here
# (their folder). bench_setup gives a script bin (the programs, first on
# PATH), T (a scratch directory) and pids (an array: what the exit trap
# stops); a script with a cleanup of its own sets those itself.

bench_setup() {
	bin=${MUSTER_BIN:-$here/../build/bin}
	PATH=$bin:$PATH
	T=$(mktemp -d)
	pids=()
	trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"' EXIT
}

note() { printf 'bench: %s\n' "$*" >&2; }

now_ms() { local t=$EPOCHREALTIME; echo $((${t%.*} * 1000 + 10#${t#*.} / 1000)); }

# ratio A B: A/B with two decimals, or "n/a".
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		if (a == "" || b == "" || a + 0 <= 0 || b + 0 <= 0) print "n/a";
		else printf "%.2f\n", a / b }'
}

# least A B: the smaller of two whole numbers, a time say, either of
# which may be missing (a run that failed).
least() {
	if [ -z "$2" ]; then echo "$1"
	elif [ -z "$1" ] || [ "$2" -lt "$1" ]; then echo "$2"
	else echo "$1"; fi
}

# verdict VALUE OP TARGET: "meets" or "MISSES" the target, "n/a" without
# a value. OP is >= or <=.
verdict() {
	awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN {
		if (v == "" || v == "n/a") { print "n/a"; exit }
		ok = op == ">=" ? v + 0 >= t + 0 : v + 0 <= t + 0
		print ok ? "meets" : "MISSES" }'
}

# cpu_ticks PID: user + system CPU time of PID so far, in clock ticks.
cpu_ticks() {
	awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null
}

# wait_file FILE SECONDS: until FILE exists and is not empty.
wait_file() {
	local i
	for ((i = 0; i < $2 * 100; i++)); do
		[ -s "$1" ] && return 0
		sleep 0.01
	done
	return 1
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# forget PID: takes a process that has ended, and was waited for, off the
# list the exit trap stops.
forget() {
	local p keep=()
	for p in "${pids[@]}"; do
		[ "$p" != "$1" ] && keep+=("$p")
	done
	pids=("${keep[@]}")
}

# stop PID: ends a process started here, waits for it and forgets it.
stop() {
	kill "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	forget "$1"
}

# start_daemon NAME PROG ARGS...: $bin/PROG on a free loopback port, its
# log in $T/NAME.log; sets daemon_pid and daemon_addr, or says why not and
# returns 1.
start_daemon() {
	local name=$1 prog=$2
	shift 2
	rm -f "$T/$name.port"
	"$bin/$prog" -l 127.0.0.1:0 --port-file "$T/$name.port" "$@" \
	    2>>"$T/$name.log" &
	daemon_pid=$!
	pids+=("$daemon_pid")
	if ! wait_file "$T/$name.port" 60; then
		note "$prog $* did not start:"
		tail -3 "$T/$name.log" >&2
		return 1
	fi
	daemon_addr=127.0.0.1:$(cat "$T/$name.port")
}

# put_rps URL METHOD BODY CTYPE: requests/s of wrk -t2 -c32 for
# WRK_DURATION (5s) with that request (bench/wrk-body.lua); its output is
# added to $T/wrk.out, and non-2xx replies or socket errors are noted.
put_rps() {
	local out
	out=$(WRK_METHOD=$2 WRK_BODY=$3 WRK_CTYPE=$4 wrk -t2 -c32 \
	    -d"${WRK_DURATION:-5s}" -s "$here/wrk-body.lua" "$1" 2>&1)
	echo "$out" >>"$T/wrk.out"
	if grep -q 'Non-2xx\|Socket errors' <<<"$out"; then
		note "wrk $1: $(grep 'Non-2xx\|Socket errors' <<<"$out")"
	fi
	awk '/^Requests\/sec:/ { printf "%d\n", $2 }' <<<"$out"
}
