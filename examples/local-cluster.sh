#!/bin/sh
# local-cluster.sh: coordd and N wrapped tasks on this machine.
#
#   examples/local-cluster.sh [-n N] [-p PORT] -- COMMAND [ARG...]
#
# Starts coordd on 127.0.0.1:PORT (default: a free port, which it writes
# to coordd.port) for a cluster of N workers (default 4), then runs
# COMMAND under preemptwatch once per worker, each with
# MUSTER_TASK=worker:I, logging to worker-I.log in the current directory.
# It waits for every task and exits with the first non-zero status among
# them (42 means "preempted: run me again"). Ctrl-C stops it all. Any
# preemptwatch flags can be given in PREEMPTWATCH_FLAGS.
set -u

n=4
port=0
while [ $# -gt 0 ]; do
	case $1 in
	-n) n=$2; shift 2 ;;
	-p) port=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "usage: local-cluster.sh [-n N] [-p PORT] -- COMMAND [ARG...]" >&2
	   exit 2 ;;
	esac
done
[ $# -gt 0 ] || { echo "local-cluster.sh: no COMMAND" >&2; exit 2; }
for prog in coordd preemptwatch; do
	command -v "$prog" >/dev/null || { echo "local-cluster.sh: $prog: not found" \
	    "(PATH=\$PWD/build/bin:\$PATH after make, or make install)" >&2; exit 127; }
done

rm -f coordd.port
coordd -l "127.0.0.1:$port" --port-file coordd.port --cluster "worker=$n" \
	2>coordd.log &
coordd_pid=$!
pids=""
trap 'kill $pids $coordd_pid 2>/dev/null; wait 2>/dev/null' EXIT
trap 'exit 130' INT TERM
i=0
while [ ! -s coordd.port ] && kill -0 "$coordd_pid" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -s coordd.port ] || { echo "local-cluster.sh: coordd did not start:" >&2; cat coordd.log >&2; exit 1; }
MUSTER_COORD=127.0.0.1:$(cat coordd.port)
export MUSTER_COORD

i=0
while [ "$i" -lt "$n" ]; do
	# shellcheck disable=SC2086
	preemptwatch -t "worker:$i" ${PREEMPTWATCH_FLAGS:-} -- "$@" \
		>"worker-$i.log" 2>&1 &
	pids="$pids $!"
	i=$((i + 1))
done

rc=0
for pid in $pids; do
	wait "$pid"
	s=$?
	[ "$rc" -eq 0 ] && rc=$s
done
pids=""
exit "$rc"
