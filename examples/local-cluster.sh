#!/bin/sh
# local-cluster.sh: coordd and N wrapped tasks on this machine.
#
#   examples/local-cluster.sh [-n N] [-p PORT] -- COMMAND [ARG...]
#
# Starts coordd on 127.0.0.1:PORT (default 7700) for a cluster of N workers
# (default 4), then runs COMMAND under preemptwatch once per worker, each
# with MUSTER_TASK=worker:I, logging to worker-I.log in the current
# directory. It waits for every task and exits with the first non-zero
# status among them (42 means "preempted: run me again"). Ctrl-C stops it
# all. Any preemptwatch flags can be given in PREEMPTWATCH_FLAGS.
set -u

n=4
port=7700
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

MUSTER_COORD=127.0.0.1:$port
export MUSTER_COORD
coordd -l "$MUSTER_COORD" --cluster "worker=$n" 2>coordd.log &
coordd_pid=$!
pids=""
trap 'kill $pids $coordd_pid 2>/dev/null; wait 2>/dev/null' EXIT
trap 'exit 130' INT TERM

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
