#!/usr/bin/env bats
# muster_data beyond the positioned dynamic read (18-data, 23-data-resume):
# a job in another processing mode as a RawReader, in every framing, and
# the torch IterableDataset over a DataLoader when torch is installed.

load helper

bats_require_minimum_version 1.5.0

ROOT=$BATS_TEST_DIRNAME/..

py() {
	PYTHONPATH=$ROOT/python "$PYTHON" -c "import muster_data, sys
$1"
}

@test "muster_data.read(mode=\"off\"): every worker reads every element, split by the framing; no positions" {
	start_dispatchd
	start_worker a:0
	start_worker b:0
	seq 1 3 | dispatchctl dataset add --splits - --reader 'i=1; while [ $i -le 4 ]; do echo "$MUSTER_SPLIT.$i"; i=$((i+1)); done' >/dev/null
	run py '
r = muster_data.read(1, mode="off")
got = sorted(r)
want = sorted(b"%d.%d" % (s, i) for s in (1, 2, 3) for i in (1, 2, 3, 4)) * 1
assert got == sorted(want * 2), got
assert r.position() is None
try:
    muster_data.read(1, mode="off", from_state={"x": 1})
    raise SystemExit("from_state taken")
except ValueError:
    pass
print("ok")'
	echo "$output"
	assert_output ok
}

@test "muster_data.read(mode=\"off\") with len32 and nul framing: binary elements whole" {
	start_dispatchd
	start_worker a:0
	echo 1 | dispatchctl dataset add --splits - --framing len32 \
		--reader "$PYTHON -c 'import struct, sys; [sys.stdout.buffer.write(struct.pack(\">I\", len(e)) + e) for e in (b\"\", b\"a\\nb\", bytes(range(256)) * 300)]'" >/dev/null
	echo 1 | dispatchctl dataset add --splits - --framing nul --reader "printf 'x\\0y z\\0'" >/dev/null
	run -0 py '
assert list(muster_data.read(1, mode="off")) == [b"", b"a\nb", bytes(range(256)) * 300]
assert list(muster_data.read(2, mode="off")) == [b"x", b"y z"]
print("ok")'
	assert_output ok
}

@test "muster_data.IterableDataset feeds a torch DataLoader: every element once an epoch, its position saved" {
	"$PYTHON" -c 'import torch' 2>/dev/null || skip "torch is not installed (apt-get install python3-torch)"
	start_dispatchd
	start_worker a:0
	start_worker b:0
	seq 1 4 | dispatchctl dataset add --splits - --reader 'i=1; while [ $i -le 25 ]; do echo "$(( MUSTER_SPLIT * 100 + i ))"; i=$((i+1)); done' >/dev/null
	run -0 py '
import torch
ds = muster_data.IterableDataset(1, transform=lambda e: int(e))
for epoch in range(2):
    seen = []
    for batch in torch.utils.data.DataLoader(ds, batch_size=8):
        assert isinstance(batch, torch.Tensor) and len(batch) <= 8
        seen += batch.tolist()
    assert sorted(seen) == [s * 100 + i for s in range(1, 5) for i in range(1, 26)], seen
    pos = ds.position()
    assert isinstance(pos, dict), pos
print("ok")'
	assert_output ok
}

@test "muster_data.read(mode=\"off\"): a 64 MiB len32 element and 200,000 small ones come whole" {
	start_dispatchd
	start_worker a:0 --buffer 256M
	echo 1 | dispatchctl dataset add --splits - --framing len32 \
		--reader "$PYTHON -c 'import struct, sys; e = bytes(range(256)) * (1 << 18); sys.stdout.buffer.write(struct.pack(\">I\", len(e)) + e)'" >/dev/null
	echo 1 | dispatchctl dataset add --splits - --reader 'seq 1 200000' >/dev/null
	run -0 py '
got = list(muster_data.read(1, mode="off"))
assert len(got) == 1 and got[0] == bytes(range(256)) * (1 << 18)
n = sum(1 for _ in muster_data.read(2, mode="off"))
assert n == 200000, n
print("ok")'
	assert_output ok
}

@test "muster_data.IterableDataset with DataLoader workers: a shared job deals the elements once; without a job it refuses" {
	"$PYTHON" -c 'import torch' 2>/dev/null || skip "torch is not installed (apt-get install python3-torch)"
	start_dispatchd
	start_worker a:0
	seq 1 4 | dispatchctl dataset add --splits - --reader 'i=1; while [ $i -le 25 ]; do echo "$(( MUSTER_SPLIT * 100 + i ))"; i=$((i+1)); done' >/dev/null
	run -0 py '
import torch
ds = muster_data.IterableDataset(1, transform=lambda e: int(e), job="epoch")
seen = []
for batch in torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2):
    seen += batch.tolist()
assert sorted(seen) == [s * 100 + i for s in range(1, 5) for i in range(1, 26)], sorted(seen)
try:
    for _ in torch.utils.data.DataLoader(muster_data.IterableDataset(1), num_workers=2):
        pass
    print("no error")
except ValueError as e:
    print("refused:", "name a job" in str(e))'
	assert_output "refused: True"
}
