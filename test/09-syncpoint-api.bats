#!/usr/bin/env bats
# The sync point from a program, without a process a step: the shared
# library of the C API (libmuster-syncpoint) and the Python module on top
# of it, under a real preemptwatch and outside one, and how `make install`
# lays them out.

load helper

bats_require_minimum_version 1.5.0

ROOT=$BATS_TEST_DIRNAME/..
export PYTHONPATH=$ROOT/python
LIB=$MUSTER_BIN/../lib/libmuster-syncpoint.so.0

# py NAME: a Python script from stdin at $T/NAME.
py() {
	cat >"$T/$1"
}

@test "outside preemptwatch the module says so: available() is false, reached() raises" {
	run --separate-stderr env -u MUSTER_SYNC_SOCKET "$PYTHON" -c '
import muster_syncpoint as sp
print(sp.available())
try:
    sp.reached(1)
except sp.SyncpointError as e:
    print("error:", e)'
	assert_success
	assert_line --index 0 False
	assert_line --index 1 "error: not running under preemptwatch (MUSTER_SYNC_SOCKET is not set)"
}

@test "the shared library exports the C API and nothing else" {
	[ -e "$LIB" ] || fail "no $LIB"
	run bash -c "nm -D --defined-only '$LIB' | awk '\$2 == \"T\" {print \$3}' | sed 's/@.*//' | sort"
	assert_success
	assert_output "syncpoint_close
syncpoint_open
syncpoint_reached
syncpoint_state_name
syncpoint_status
syncpoint_wait_notice"
	# It needs the C library alone.
	run bash -c "objdump -p '$LIB' | awk '/NEEDED/ {print \$2}'"
	assert_output libc.so.6
}

@test "a Python loop asks the module every step, waits for a notice, and checkpoints at the sync point" {
	start_coordd --cluster worker=2 --heartbeat-timeout 2s
	py loop.py <<'EOF'
import json, os, sys, time
import muster_syncpoint as sp

out = sys.argv[1]
assert sp.available()
idle = sp.status()
step = 0
while True:
    step += 1
    time.sleep(0.02)
    if step == 5 and os.environ["MUSTER_TASK"] == "worker:0":
        os.system("kvctl put muster/preemption/notice "
                  "$(date -u -d '+20 sec' +%FT%TZ)")
    r = sp.reached(step)
    if r:
        json.dump({"idle": idle, "answer": r, "step": step,
                   "status": sp.status()}, open(out, "w"))
        sys.exit(0)
EOF
	local i pids=()
	for i in 0 1; do
		pw "w$i" -t "worker:$i" -- "$PYTHON" "$T/loop.py" "$T/w$i.json"
		pids+=("$PID")
	done
	for i in 0 1; do
		wait_exit "${pids[i]}" 30
		assert_equal "$STATUS" 42
	done
	assert_equal "$(jq -c .idle "$T/w0.json")" \
		'{"state":"idle","notice":false,"death_time":null,"sync_step":null,"step":null,"answered":null}'
	assert_equal "$(jq .answer "$T/w0.json")" 1
	assert_equal "$(jq .step "$T/w0.json")" "$(jq .step "$T/w1.json")"
	assert_equal "$(jq -c '.status | [.state, .answered, .notice]' "$T/w1.json")" '["known","yes",true]'
	[ "$(jq '.status.sync_step' "$T/w1.json")" = "$(jq .step "$T/w1.json")" ]

	# wait_notice: None when the time runs out, the status once a notice came.
	start_coordd --cluster worker=1 --heartbeat-timeout 2s
	pw q -t worker:0 -- "$PYTHON" -c 'import muster_syncpoint as sp; print(sp.wait_notice(timeout=0.2))'
	wait_exit "$PID" 20
	assert_equal "$(cat "$T/q.out")" None
}

@test "examples/train.py, through the module, checkpoints at the sync point" {
	start_coordd --cluster worker=2 --heartbeat-timeout 2s
	local i pids=()
	for i in 0 1; do
		STEPS=2000 STEP_TIME=0.02 CKPT=$T/ckpt.$i \
			pw "w$i" -t "worker:$i" -- "$PYTHON" "$ROOT/examples/train.py"
		pids+=("$PID")
	done
	wait_connected 2
	kill -TERM "${pids[1]}"
	for i in 0 1; do
		wait_exit "${pids[i]}" 30
		assert_equal "$STATUS" 42
	done
	assert_equal "$(jq .step "$T/ckpt.0")" "$(jq .step "$T/ckpt.1")"
}

@test "make install puts the library, its header and the module where they are found" {
	local build
	build=$(basename "$(dirname "$MUSTER_BIN")")
	run make -s -C "$ROOT" install DESTDIR="$T/inst" PREFIX=/opt/m \
		PYTHONDIR=/opt/m/py BUILD="$build"
	assert_success
	[ -x "$T/inst/opt/m/lib/libmuster-syncpoint.so.0" ]
	[ -L "$T/inst/opt/m/lib/libmuster-syncpoint.so" ]
	[ -f "$T/inst/opt/m/include/muster/syncpoint.h" ]
	grep -qx 'LIBPATH = "/opt/m/lib/libmuster-syncpoint.so.0"' "$T/inst/opt/m/py/muster_syncpoint.py"
	[ -f "$T/inst/opt/m/py/muster_data.py" ]
	[ -f "$T/inst/opt/m/py/muster_kv.py" ]
	[ -f "$T/inst/opt/m/py/muster_closures.py" ]
	# The installed module finds a library where it was told to look.
	run env PYTHONPATH="$T/inst/opt/m/py" \
		MUSTER_SYNCPOINT_LIB="$T/inst/opt/m/lib/libmuster-syncpoint.so.0" \
		"$PYTHON" -c 'import muster_syncpoint as sp; print(sp.available())'
	assert_output False
	run make -s -C "$ROOT" uninstall DESTDIR="$T/inst" PREFIX=/opt/m \
		PYTHONDIR=/opt/m/py BUILD="$build"
	assert_success
	[ ! -e "$T/inst/opt/m/lib/libmuster-syncpoint.so.0" ]
	[ ! -e "$T/inst/opt/m/py/muster_syncpoint.py" ]
	[ ! -e "$T/inst/opt/m/py/muster_kv.py" ]
	[ ! -e "$T/inst/opt/m/py/muster_closures.py" ]
}
