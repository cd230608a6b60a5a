"""Dask peers for bench/dispatch.sh: N tasks on a LocalCluster of 2
single-threaded workers, either subprocess.run(["/bin/true"]) or a no-op.
Prints "dask_subprocess_per_s R" or "dask_noop_per_s R"."""
import subprocess
import sys
import time

from dask.distributed import Client, LocalCluster


def run_true(i):
    subprocess.run(["/bin/true"], check=True)
    return i


def noop(i):
    return i


def main():
    kind, n = sys.argv[1], int(sys.argv[2])
    fn = run_true if kind == "subprocess" else noop
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, host="127.0.0.1") as cluster, \
            Client(cluster) as client:
        client.gather(client.map(fn, range(20), pure=False))  # warm up
        t0 = time.monotonic()
        client.gather(client.map(fn, range(n), pure=False))
        dt = time.monotonic() - t0
    print(f"dask_{kind}_per_s {n / dt:.0f}")


if __name__ == "__main__":
    main()
