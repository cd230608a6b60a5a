# Loaded by every test/NN-*.bats: the programs under test from the build
# tree, a temporary directory per test, and daemons on ephemeral loopback
# ports that are stopped (by PID) when the test ends.

load '/usr/lib/bats/bats-support/load'
load '/usr/lib/bats/bats-assert/load'

: "${MUSTER_BIN:=$BATS_TEST_DIRNAME/../build/bin}"
PATH="$MUSTER_BIN:$PATH"
export PATH
unset MUSTER_COORD MUSTER_TASK

# Started daemons, to be killed in teardown.
DAEMON_PIDS=()
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
	for pid in "${DAEMON_PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${DAEMON_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
}

# wait_file FILE [SECONDS]: until FILE exists and is not empty.
wait_file() {
	local i n=$(( ${2:-5} * 20 ))
	for ((i = 0; i < n; i++)); do
		[ -s "$1" ] && return 0
		sleep 0.05
	done
	echo "wait_file: $1 did not appear" >&2
	return 1
}

# start_coordd [ARGS...]: coordd on 127.0.0.1 and a free port; sets
# COORD_PID, COORD_PORT and exports MUSTER_COORD.
start_coordd() {
	local pf="$T/coordd.port.$RANDOM"
	coordd -l 127.0.0.1:0 --port-file "$pf" "$@" 2>>"$T/coordd.log" &
	COORD_PID=$!
	DAEMON_PIDS+=("$COORD_PID")
	wait_file "$pf" || return 1
	COORD_PORT=$(cat "$pf")
	MUSTER_COORD=127.0.0.1:$COORD_PORT
	export MUSTER_COORD
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
	cat "$T/http.body"
}

# wait_metric NAME VALUE: until coordd's /metrics shows NAME at VALUE (5s).
wait_metric() {
	local i
	for ((i = 0; i < 100; i++)); do
		curl -s "http://$MUSTER_COORD/metrics" | grep -qx "$1 $2" && return 0
		sleep 0.05
	done
	echo "wait_metric: $1 never reached $2" >&2
	return 1
}

# wait_exit PID SECONDS: waits for our child PID, for at most SECONDS, and
# sets STATUS to its exit status ("running" if it did not exit in time).
wait_exit() {
	local i state
	STATUS=running
	for ((i = 0; i < $2 * 20; i++)); do
		state=$(ps -o stat= -p "$1" 2>/dev/null) || true
		if [[ -z $state || $state == Z* ]]; then
			STATUS=0
			wait "$1" || STATUS=$?
			return 0
		fi
		sleep 0.05
	done
}

# running PID: our child PID has not exited yet.
running() {
	local state
	state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ $state != Z* ]]
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
