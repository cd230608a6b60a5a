#!/usr/bin/env bats
# Where preemption notices come from: the GCE, AWS and Azure metadata
# services (through test/fake-metadata.py, a fake on 127.0.0.1 that checks
# the headers the real ones insist on and whose answers the tests switch by
# writing files in $T/meta), a file appearing, and a chosen signal. Each
# test runs a one-task cluster whose command waits for the notice with
# `syncpoint --wait-notice` and records what the page and coordd say. A
# metadata server that fails or is down is logged and retried, never fatal.
# Every process started here is ours and stopped by PID: preemptwatch with
# SIGKILL (SIGTERM may be a notice), the fake server and coordd by the
# helper's teardown.

load helper

bats_require_minimum_version 1.5.0

FAKE=$BATS_TEST_DIRNAME/fake-metadata.py

# count PATTERN FILE: lines of FILE matching the extended regex PATTERN.
count() {
	local n
	n=$(grep -Ec -- "$1" "$2" 2>/dev/null)
	echo "${n:-0}"
}

# has_count PATTERN FILE N: FILE has N or more lines matching PATTERN.
has_count() {
	[ "$(count "$1" "$2")" -ge "$3" ]
}

# wait_count PATTERN FILE N [SECONDS]: until FILE has N lines matching
# PATTERN (10 s by default).
wait_count() {
	wait_for "${4:-10}" has_count "$1" "$2" "$3" && return 0
	echo "wait_count: fewer than $3 lines /$1/ in $2:" >&2
	cat "$2" >&2 2>/dev/null
	return 1
}

# ms_of RFC3339: that time in Unix milliseconds.
ms_of() {
	date -u -d "$1" +%s%3N
}

# start_meta [PORT]: the fake metadata server on 127.0.0.1:PORT (default:
# any free port), answering from $T/meta; sets META_PID, META_PORT,
# META_URL. Stopped by the helper's teardown.
start_meta() {
	mkdir -p "$T/meta"
	rm -f "$T/meta.port"
	"$PYTHON" "$FAKE" "$T/meta" "$T/meta.port" ${1:+"$1"} 2>>"$T/meta.log" 3>&- &
	META_PID=$!
	DAEMON_PIDS+=("$META_PID")
	wait_file "$T/meta.port" || return 1
	META_PORT=$(cat "$T/meta.port")
	META_URL=http://127.0.0.1:$META_PORT
}

# The command of every cloud test: waits for the notice (SECS seconds),
# then saves what the page says and what coordd holds as the notice.
waiter() {
	cat >"$T/waiter.sh" <<'EOF'
#!/bin/bash
cd "$1" || exit 9
syncpoint --wait-notice --timeout "$2" >/dev/null 2>wait.err || exit 3
syncpoint --status --json >status.json
kvctl --timeout 10s get muster/preemption/notice >notice.key
EOF
	chmod +x "$T/waiter.sh"
}

# watch_cloud SRC [SECS [ARGS...]]: a one-task cluster whose preemptwatch
# polls SRC at META_URL every 200 ms and runs the waiter; sets PID.
watch_cloud() {
	local src=$1 secs=${2:-5}
	shift 2 || shift $#
	start_coordd --cluster worker=1 --heartbeat-timeout 2s
	waiter
	pw w0 -t worker:0 --notice "$src" --metadata-url "$META_URL" \
		--notice-interval 200ms "$@" -- "$T/waiter.sh" "$T" "$secs"
}

# noticed_at WHEN: the notice came through with death time WHEN ("-":
# any): the command saw it on its page, coordd holds the same time, and
# preemptwatch exited once the command was done with the code for a
# preemption without a checkpoint at the sync point (44): the waiter
# never asks for one.
noticed_at() {
	wait_exit "$PID" 30
	[ -s "$T/status.json" ] || fail "no notice on the page: $(cat "$T/wait.err" "$T/w0.err")"
	assert_equal "$(js .notice "$T/status.json")" true
	local when
	when=$(js .death_time "$T/status.json")
	[ "$1" = - ] || assert_equal "$when" "$1"
	assert_equal "$(cat "$T/notice.key")" "$when"
	assert_equal "$STATUS" 44
}

# in_grace T0 T1 GRACE_MS: the death time on the page is the moment of the
# notice (between T0 and T1) plus GRACE_MS.
in_grace() {
	local d
	d=$(ms_of "$(js .death_time "$T/status.json")")
	[ "$d" -ge $(( $1 + $3 - 5 )) ] && [ "$d" -le $(( $2 + $3 + 5 )) ] ||
		fail "death time $d is not notice time ($1..$2) + $3 ms"
}

# --- GCE ------------------------------------------------------------------------

@test "gce: instance/preempted TRUE is a notice, the death time notice-grace ahead" {
	start_meta
	watch_cloud gce 20 --notice-grace 45s
	# Polled, with its header, and FALSE is no notice.
	wait_count 'GET /computeMetadata/v1/instance/preempted 200' "$T/meta/requests.log" 3
	[ ! -e "$T/status.json" ]
	running "$PID"

	local t0 t1
	t0=$(now_ms)
	echo TRUE >"$T/meta/preempted"
	wait_file "$T/status.json" 20 || true
	t1=$(now_ms)
	noticed_at -
	in_grace "$t0" "$t1" 45000
	[ "$(count ' 400$' "$T/meta/requests.log")" -eq 0 ]
}

@test "gce: maintenance-event TERMINATE_ON_HOST_MAINTENANCE is a notice, MIGRATE is not" {
	start_meta
	echo MIGRATE_ON_HOST_MAINTENANCE >"$T/meta/maintenance-event"
	watch_cloud gce 20 --notice-grace 45s
	wait_count 'GET /computeMetadata/v1/instance/maintenance-event 200' "$T/meta/requests.log" 3
	[ ! -e "$T/status.json" ]
	running "$PID"

	local t0 t1
	t0=$(now_ms)
	echo TERMINATE_ON_HOST_MAINTENANCE >"$T/meta/maintenance-event.tmp"
	mv "$T/meta/maintenance-event.tmp" "$T/meta/maintenance-event"
	wait_file "$T/status.json" 20 || true
	t1=$(now_ms)
	noticed_at -
	in_grace "$t0" "$t1" 45000
}

# --- AWS ------------------------------------------------------------------------

@test "aws: spot/instance-action is a notice with its time, through an IMDSv2 token" {
	start_meta
	watch_cloud aws 20
	# Nothing planned: 404, which is no notice.
	wait_count 'GET /latest/meta-data/spot/instance-action 404' "$T/meta/requests.log" 3
	[ ! -e "$T/status.json" ]
	running "$PID"

	local when
	when=$(date -u -d "@$(( $(date +%s) + 60 ))" +%Y-%m-%dT%H:%M:%SZ)
	echo "{\"action\": \"terminate\", \"time\": \"$when\"}" >"$T/meta/instance-action.tmp"
	mv "$T/meta/instance-action.tmp" "$T/meta/instance-action"
	noticed_at "$when"
	# One token, taken with its TTL header; every read carried it.
	grep -q '^PUT /latest/api/token 200$' "$T/meta/requests.log"
	[ "$(count ' 40[01]$' "$T/meta/requests.log")" -eq 0 ]
	grep -q '^GET /latest/meta-data/spot/instance-action 200$' "$T/meta/requests.log"
}

@test "aws: a token the server no longer knows is replaced, and the notice still comes" {
	local port
	port=$(free_port)
	start_meta "$port"
	watch_cloud aws 20
	wait_count 'GET /latest/meta-data/spot/instance-action 404' "$T/meta/requests.log" 2

	# A new metadata server on the same port: the old token is refused.
	kill "$META_PID"
	wait "$META_PID" 2>/dev/null || true
	local when
	when=$(date -u -d "@$(( $(date +%s) + 90 ))" +%Y-%m-%dT%H:%M:%SZ)
	echo "{\"action\": \"stop\", \"time\": \"$when\"}" >"$T/meta/instance-action"
	start_meta "$port"
	noticed_at "$when"
	grep -q '^GET /latest/meta-data/spot/instance-action 401$' "$T/meta/requests.log"
	[ "$(count '^PUT /latest/api/token 200$' "$T/meta/requests.log")" -ge 2 ]
}

# --- Azure ----------------------------------------------------------------------

@test "azure: a Preempt event is a notice at its NotBefore; a Freeze is not" {
	start_meta
	local nb_freeze nb when
	nb_freeze=$(date -u -d "@$(( $(date +%s) + 30 ))" '+%a, %d %b %Y %H:%M:%S GMT')
	cat >"$T/meta/scheduledevents" <<EOF
{"DocumentIncarnation": 1, "Events": [{"EventId": "A", "EventType": "Freeze", "ResourceType": "VirtualMachine", "Resources": ["vm0"], "EventStatus": "Scheduled", "NotBefore": "$nb_freeze", "Description": "", "EventSource": "Platform", "DurationInSeconds": 5}]}
EOF
	watch_cloud azure 20
	wait_count '^GET /metadata/scheduledevents\?api-version=[^ ]* 200$' "$T/meta/requests.log" 3
	[ ! -e "$T/status.json" ]
	running "$PID"

	local s=$(( $(date +%s) + 75 ))
	nb=$(date -u -d "@$s" '+%a, %d %b %Y %H:%M:%S GMT')
	when=$(date -u -d "@$s" +%Y-%m-%dT%H:%M:%SZ)
	cat >"$T/meta/scheduledevents.tmp" <<EOF
{"DocumentIncarnation": 2, "Events": [{"EventId": "A", "EventType": "Freeze", "ResourceType": "VirtualMachine", "Resources": ["vm0"], "EventStatus": "Scheduled", "NotBefore": "$nb_freeze", "Description": "", "EventSource": "Platform", "DurationInSeconds": 5}, {"EventId": "B", "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["vm0"], "EventStatus": "Scheduled", "NotBefore": "$nb", "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}]}
EOF
	mv "$T/meta/scheduledevents.tmp" "$T/meta/scheduledevents"
	noticed_at "$when"
	[ "$(count ' 400$' "$T/meta/requests.log")" -eq 0 ]
}

# --- file and signal ------------------------------------------------------------

@test "file: the file appearing is a notice, the death time notice-grace ahead" {
	start_coordd --cluster worker=1 --heartbeat-timeout 2s
	waiter
	pw w0 -t worker:0 --notice "file:$T/preempt-me" --notice-interval 100ms \
		--notice-grace 40s -- "$T/waiter.sh" "$T" 20
	# Up and polling, and a few polls go by without a notice.
	wait_connected 1
	sleep 0.3
	[ ! -e "$T/status.json" ]
	running "$PID"

	local t0 t1
	t0=$(now_ms)
	: >"$T/preempt-me"
	wait_file "$T/status.json" 20 || true
	t1=$(now_ms)
	noticed_at -
	in_grace "$t0" "$t1" 40000
}

@test "file: an RFC 3339 time in the file is the death time" {
	start_coordd --cluster worker=1 --heartbeat-timeout 2s
	waiter
	pw w0 -t worker:0 --notice "file:$T/preempt-me" --notice-interval 100ms \
		-- "$T/waiter.sh" "$T" 20
	wait_connected 1
	# With an offset, and milliseconds: 2 minutes ahead, given in +02:00.
	local s=$(( $(date +%s) + 120 )) when
	when=$(date -u -d "@$s" +%Y-%m-%dT%H:%M:%S.250Z)
	TZ=Etc/GMT-2 date -d "@$s" '+%Y-%m-%dT%H:%M:%S.250%:z' >"$T/preempt-me.tmp"
	grep -q '+02:00$' "$T/preempt-me.tmp"
	mv "$T/preempt-me.tmp" "$T/preempt-me"
	noticed_at "$when"
}

# The command of the signal tests: waits for a notice, then idles; on
# SIGTERM it records the page and exits 0.
sleeper() {
	cat >"$T/sleeper.sh" <<'EOF'
#!/bin/bash
cd "$1" || exit 9
trap 'syncpoint --status --json >term.json; exit 0' TERM
echo go >started
syncpoint --wait-notice --timeout 10s --json >notice.json 2>/dev/null
for ((i = 0; i < 200; i++)); do sleep 0.05; done
exit 7
EOF
	chmod +x "$T/sleeper.sh"
}

@test "signal:USR1: SIGUSR1 is the notice, and SIGTERM then goes to the command" {
	start_coordd --cluster worker=1 --heartbeat-timeout 2s
	sleeper
	pw w0 -t worker:0 --notice signal:USR1 --notice-grace 40s -- "$T/sleeper.sh" "$T"
	local p=$PID t0 t1
	wait_file "$T/started"
	t0=$(now_ms)
	kill -USR1 "$p"
	wait_file "$T/notice.json"
	t1=$(now_ms)
	assert_equal "$(js .notice "$T/notice.json")" true
	kvctl --timeout 10s get muster/preemption/notice >"$T/notice.key"
	assert_equal "$(cat "$T/notice.key")" "$(js .death_time "$T/notice.json")"
	cp "$T/notice.json" "$T/status.json"
	in_grace "$t0" "$t1" 40000
	grep -Eq 'preemption notice \((SIG)?USR1\)' "$T/w0.err"
	running "$p"

	# SIGUSR1 did not reach the command; SIGTERM does, and its trap runs.
	sleep 0.2
	[ ! -e "$T/term.json" ]
	kill -TERM "$p"
	wait_exit "$p" 15
	[ -s "$T/term.json" ] || fail "the command never saw SIGTERM: $(cat "$T/w0.err")"
	assert_equal "$(js .notice "$T/term.json")" true
	# Preempted, and stopped by the forwarded signal before any sync point.
	assert_equal "$STATUS" 44
}

@test "signal:USR1: SIGTERM alone is no notice, only forwarded" {
	start_coordd --cluster worker=1 --heartbeat-timeout 2s
	sleeper
	pw w0 -t worker:0 --notice signal:USR1 -- "$T/sleeper.sh" "$T"
	local p=$PID
	wait_file "$T/started"
	sleep 0.2
	kill -TERM "$p"
	wait_exit "$p" 15
	[ -s "$T/term.json" ] || fail "the command never saw SIGTERM: $(cat "$T/w0.err")"
	assert_equal "$(js .state "$T/term.json")" idle
	# The command's trap exited 0 and no notice came: a normal end.
	assert_equal "$STATUS" 0
	run ! grep -q 'preemption notice' "$T/w0.err"
}

# --- a failing metadata server --------------------------------------------------

@test "a metadata server answering 500 is logged and retried, and the notice comes once it recovers" {
	start_meta
	echo 500 >"$T/meta/status"
	watch_cloud aws 20
	wait_count ' 500$' "$T/meta/requests.log" 4
	grep -q 'notice source aws: .*500' "$T/w0.err" ||
		fail "not logged: $(cat "$T/w0.err")"
	[ ! -e "$T/status.json" ]
	running "$PID"

	local when
	when=$(date -u -d "@$(( $(date +%s) + 60 ))" +%Y-%m-%dT%H:%M:%SZ)
	echo "{\"action\": \"terminate\", \"time\": \"$when\"}" >"$T/meta/instance-action"
	rm "$T/meta/status"
	noticed_at "$when"
}

@test "a metadata server that is down is logged and retried, and the notice comes once it is up" {
	local port
	port=$(free_port)
	META_URL=http://127.0.0.1:$port
	watch_cloud aws 20
	# Nothing listens: the poll fails (each try has 2 s), is logged, and
	# the task keeps running.
	wait_grep 'notice source aws: ' "$T/w0.err" ||
		fail "not logged: $(cat "$T/w0.err")"
	sleep 0.5
	running "$PID"
	[ ! -e "$T/status.json" ]

	local when
	when=$(date -u -d "@$(( $(date +%s) + 60 ))" +%Y-%m-%dT%H:%M:%SZ)
	mkdir -p "$T/meta"
	echo "{\"action\": \"terminate\", \"time\": \"$when\"}" >"$T/meta/instance-action"
	start_meta "$port"
	noticed_at "$when"
}
