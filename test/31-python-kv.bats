#!/usr/bin/env bats
# The Python API of coordd's store (python/muster_kv.py), with Debian's
# python3: every call against a real coordd, binary values, the blocking
# get, the watch as an iterator, and errors as exceptions with kvctl's
# status and exit code.

load helper

bats_require_minimum_version 1.5.0

ROOT=$BATS_TEST_DIRNAME/..

# py CODE: CODE after "import muster_kv; kv = muster_kv.KV()".
py() {
	PYTHONPATH=$ROOT/python "$PYTHON" -c "import muster_kv, sys, threading, time
kv = muster_kv.KV()
$1"
}

@test "muster_kv: put, get, tryget, add, cas, ls and delete, binary values included" {
	start_coordd
	run -0 py '
r = kv.put("job/lr", "0.1")
assert isinstance(r, int) and r > 0, r
assert kv.get("job/lr") == b"0.1"
assert kv.tryget("job/none") is None
blob = bytes(range(256)) * 300
kv.put("job/blob", blob)
assert kv.get("job/blob") == blob
assert kv.add("job/n", 3) == 3 and kv.add("job/n") == 4
assert kv.cas("job/owner", None, "w3") is True
assert kv.cas("job/owner", None, "w4") is False
assert kv.cas("job/owner", "w4", "w5") is False
assert kv.cas("job/owner", "w3", b"w5\xff\x00") is True
assert kv.tryget("job/owner") == b"w5\xff\x00"
assert kv.ls("job/") == {"job/lr": b"0.1", "job/blob": blob, "job/n": b"4", "job/owner": b"w5\xff\x00"}, kv.ls("job/")
assert kv.delete("job/lr") is True and kv.delete("job/lr") is False
print("ok")'
	assert_output ok
	# What the shell sees is what Python wrote.
	run -0 kvctl get job/owner
	[ "$(kvctl get job/owner | od -An -tx1 | tr -d ' ')" = 7735ff00 ]
}

@test "muster_kv: get waits for a key another process sets, and gives up at its timeout with DEADLINE_EXCEEDED" {
	start_coordd
	(nap 1; kvctl put job/ready yes) &
	BG_PIDS+=($!)
	run -0 py '
t0 = time.time()
assert kv.get("job/ready", timeout=30) == b"yes"
assert time.time() - t0 >= 0.5
try:
    kv.get("job/never", timeout=0.5)
    print("no error")
except muster_kv.Error as e:
    print(e.status, e.code)'
	assert_output "DEADLINE_EXCEEDED 4"
}

@test "muster_kv: watch is an iterator of changes in order, from a revision, and leaving it stops kvctl" {
	start_coordd
	run -0 py '
r = kv.revision()
kv.put("w/a", "1"); kv.put("w/b", b"\x00"); kv.delete("w/a"); kv.put("other", "x")
got = [(c.type, c.key, c.value) for c in kv.watch("w/", since=r, count=3)]
assert got == [("put", "w/a", b"1"), ("put", "w/b", b"\x00"), ("delete", "w/a", None)], got
revs = [c.revision for c in kv.watch("w/", since=r, count=3)]
assert revs == sorted(revs) and revs[0] > r, revs
# From now: what another thread writes next.
def later():
    time.sleep(0.5); kv.put("w/c", "3")
threading.Thread(target=later).start()
for c in kv.watch("w/"):
    assert (c.key, c.value) == ("w/c", b"3"), c
    break
print("ok")'
	assert_output ok
	# Leaving the loop stopped its kvctl: none is left (looked for by its
	# address, this test's coordd's own).
	! pgrep -f -- "kvctl --json watch.* -- w/$" >/dev/null ||
		fail "$(pgrep -af 'kvctl.*watch')"
}

@test "muster_kv: a refused token and an unreachable coordd raise Error with kvctl's status, code and message" {
	printf 'tok-%s\n' "$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >"$T/token"
	start_coordd --token-file "$T/token"
	run -0 py '
try:
    kv.put("a", "b")
except muster_kv.Error as e:
    print(e.status, e.code)'
	assert_output "UNAUTHENTICATED 11"
	MUSTER_TOKEN_FILE=$T/token run -0 py 'print(kv.put("a", "b") > 0)' 
	assert_output True
	run -0 py '
try:
    muster_kv.KV("127.0.0.1:1", timeout=0.5).get("a")
except muster_kv.Error as e:
    print(e.status, e.code, e.message)'
	assert_output "UNAVAILABLE 9 cannot reach 127.0.0.1:1: Connection refused"
}

@test "muster_kv: keys that begin with a dash are keys, not options" {
	start_coordd
	run -0 py '
for k in ("-x", "--json", "-f", "--help"):
    kv.put(k, "v" + k)
    assert kv.get(k) == b"v" + k.encode(), k
    assert kv.tryget(k) == b"v" + k.encode(), k
assert kv.add("-n", 2) == 2
assert kv.cas("-x", "v-x", "w") is True and kv.cas("--new", None, "z") is True
assert kv.delete("--json") is True
print("ok")'
	assert_output ok
	run -0 kvctl get -- -x
	assert_output w
	run -0 kvctl get -- --new
	assert_output z
}
