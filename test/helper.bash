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

# free_port: a port nothing listens on right now.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
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

# js EXPR FILE: the Python expression EXPR over the JSON in FILE, bound to
# j. Strings print bare, anything else as JSON.
js() {
	python3 - "$1" "$2" <<'EOF'
import json, sys
j = json.load(open(sys.argv[2]))
v = eval(sys.argv[1])
print(v if isinstance(v, str) else json.dumps(v))
EOF
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
