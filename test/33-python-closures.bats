#!/usr/bin/env bats
# The Python executor over dispatchd (python/muster_closures.py), with
# Debian's python3: a sweep whose failing run is its own future's error,
# map, stdin and environment, a worker killed -9 mid-sweep, and a
# shutdown that cancels what is left.

load helper

bats_require_minimum_version 1.5.0

ROOT=$BATS_TEST_DIRNAME/..

# py CODE: CODE after "import muster_closures as mc".
py() {
	PYTHONPATH=$ROOT/python "$PYTHON" -c "import muster_closures as mc, concurrent.futures as cf, sys, time
$1"
}

@test "muster_closures: a sweep's results in order, a failed run raising ClosureError with its status and stderr, map, stdin and env; nothing else stopped, values forgotten" {
	start_dispatchd
	start_worker worker:0 -j 2
	start_worker worker:1 -j 2
	run -0 py '
with mc.Executor() as ex:
    fs = [ex.submit(["sh", "-c", "sleep 0.2; echo \"run $1\"", "sh"], i) for i in range(12)]
    bad = ex.submit("echo partial; echo boom >&2; exit 4")
    late = ex.submit(["echo", "after the failure"])
    assert [f.result(timeout=60).stdout for f in fs] == [b"run %d\n" % i for i in range(12)]
    try:
        bad.result(timeout=60)
        raise SystemExit("no error")
    except mc.ClosureError as e:
        r = e.result
        assert (r.exit, r.signal, r.stdout, r.stderr_tail) == (4, None, b"partial\n", b"boom\n"), r
        assert "exited with status 4: boom" in str(e), str(e)
    assert late.result(timeout=60).stdout == b"after the failure\n"
    assert ex.submit(["cat"], stdin=bytes(range(256))).result(timeout=60).stdout == bytes(range(256))
    assert ex.submit("echo $FOO", env={"FOO": "bar"}).result(timeout=60).stdout == b"bar\n"
    assert [r.stdout for r in ex.map(["echo"], ["a", "b"])] == [b"a\n", b"b\n"]
    assert [r.stdout for r in ex.map(lambda x: "echo $((%d * 2))" % x, [1, 2])] == [b"2\n", b"4\n"]
    r = fs[0].result()
    assert r.worker in ("worker:0", "worker:1") and r.attempts == 1 and r.exit == 0, r
print("ok")'
	assert_output ok
	run -0 dispatchctl --json status
	jq -e '.closures == 0 and .failed == 1 and .cancelled == 0' <<<"$output"
}

@test "muster_closures: a worker killed -9 mid-sweep: every future still gets its value, some on a second attempt" {
	start_dispatchd
	start_worker worker:0 -j 2
	victim=$WORKER_PID
	start_worker worker:1 -j 2
	py '
with mc.Executor() as ex:
    fs = [ex.submit(["sh", "-c", "sleep 0.5; echo $1", "sh"], i) for i in range(16)]
    open("submitted", "w").close()
    out = [f.result(timeout=120) for f in fs]
assert [r.stdout for r in out] == [b"%d\n" % i for i in range(16)]
print(max(r.attempts for r in out))' >attempts &
	sweep=$!
	BG_PIDS+=("$sweep")
	wait_for 30 test -e submitted
	wait_for 10 eval '[ "$(dispatchctl --json status | jq .inflight)" -ge 2 ]'
	kill9 "$victim"
	wait_exit "$sweep" 120
	[ "$STATUS" = 0 ]
	[ "$(cat attempts)" = 2 ]
}

@test "muster_closures: shutdown(cancel_futures=True) cancels what has not ended; those futures raise CancelledError" {
	start_dispatchd
	start_worker worker:0
	run -0 py '
ex = mc.Executor()
done = ex.submit(["echo", "quick"])
assert done.result(timeout=60).stdout == b"quick\n"
slow = [ex.submit(["sleep", "30"]) for _ in range(3)]
time.sleep(0.5)
ex.shutdown(wait=True, cancel_futures=True)
for f in slow:
    try:
        f.result(timeout=30)
        raise SystemExit("not cancelled")
    except cf.CancelledError:
        pass
try:
    ex.submit(["true"])
    raise SystemExit("submitted after shutdown")
except RuntimeError:
    pass
print("ok")'
	assert_output ok
	run -0 dispatchctl --json status
	jq -e '.cancelled == 3 and .inflight == 0 and .queued == 0' <<<"$output"
}

@test "examples/sweep.py runs as written: twelve runs on a local cluster, one worker killed, three runs failed on their own, the best printed" {
	run -0 env PYTHONPATH="$ROOT/python" "$PYTHON" "$ROOT/examples/sweep.py"
	echo "$output"
	[ "$(grep -c '^lr .* loss [0-9]' <<<"$output")" = 9 ]
	[ "$(grep -c 'failed: closure [0-9]* exited with status 1: loss is nan' <<<"$output")" = 3 ]
	grep -q '^killed worker pid [0-9]* with -9' <<<"$output"
	assert_line "best: lr 0.01 seed 1, loss 0.0010"
}

@test "muster_closures: a dispatchd started again without its state numbers others' closures from 1 again: the futures fail, never taking another's result; a dispatchd gone fails them after unreachable" {
	local port
	port=$(free_port)
	start_dispatchd -l "127.0.0.1:$port"
	start_worker worker:0 -j 2
	py '
ex = mc.Executor(unreachable=600)
fs = [ex.submit(["sh", "-c", "sleep 30; echo mine"]) for _ in range(2)]
open("submitted", "w").close()
for f in fs:
    try:
        print("RESULT", f.result(timeout=120).stdout)
    except RuntimeError as e:
        print("ERROR", e)
ex.shutdown()' >out 2>&1 &
	sweep=$!
	BG_PIDS+=("$sweep")
	wait_for 30 test -e submitted
	wait_for 10 eval '[ "$(dispatchctl -q python --json status | jq .inflight)" = 2 ]'
	kill9 "$DISPATCH_PID"
	start_dispatchd -l "127.0.0.1:$port"
	# Another client's closures take the numbers 1 and 2.
	a=$(dispatchctl schedule -- echo other-1)
	b=$(dispatchctl schedule -- echo other-2)
	[ "$a $b" = "1 2" ]
	wait_exit "$sweep" 120
	[ "$STATUS" = 0 ]
	cat out
	[ "$(grep -c '^ERROR closure [12] is not in dispatchd any more' out)" = 2 ]
	! grep -q RESULT out
	# The other client's values are still there for it.
	assert_equal "$(dispatchctl fetch --timeout 30s 1 2)" "$(printf 'other-1\nother-2')"
	# dispatchd gone for good: the futures fail once unreachable is past.
	py '
ex = mc.Executor(unreachable=2)
f = ex.submit(["sleep", "60"])
open("submitted2", "w").close()
t0 = None
try:
    f.result(timeout=60)
    print("no error")
except RuntimeError as e:
    print(str(e).split(":")[0])' >out2 2>&1 &
	sweep=$!
	BG_PIDS+=("$sweep")
	wait_for 30 test -e submitted2
	kill9 "$DISPATCH_PID"
	wait_exit "$sweep" 60
	[ "$STATUS" = 0 ]
	assert_equal "$(cat out2)" "no answer from dispatchd for 2s"
}
