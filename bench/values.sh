#!/bin/bash
# values.sh: dispatchd's memory per MiB of closure values it holds. N
# closures (200 by default) each print 1 MiB of random bytes on one
# workerloop; once they have all ended, and again once each value has been
# fetched, dispatchd's resident set (VmRSS) less what it was before is
# divided by the MiB of values held, and its peak (VmHWM) is given too:
# in memory, and with --state-dir (a journal on this machine's /tmp,
# compacted often: --journal-max-bytes 512K).
# Bounded: N closures, one run each, a deadline on every wait.
# Prints figures; never fails on one.
set -u
here=$(cd "$(dirname "$0")" && pwd)
N=${VALUES:-200}
SLOTS=${SLOTS:-8}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_setup

# kib PID FIELD: a field of /proc/PID/status, in KiB.
kib() {
	awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"
}

# per_mib KIB: KiB of memory per MiB of values, two decimals.
per_mib() {
	awk -v k="$1" -v n="$N" 'BEGIN { printf "%.2f\n", k / 1024 / n }'
}

# measure NAME [DISPATCHD ARGS...]: one run; prints its figures.
measure() {
	local name=$1 w rss0 rss1 rss2 hwm
	shift
	start_daemon "$name" dispatchd "$@" || return 1
	local dpid=$daemon_pid
	export MUSTER_DISPATCHER=$daemon_addr
	workerloop -t w:0 -j "$SLOTS" 2>>"$T/$name.worker.log" &
	w=$!
	pids+=("$w")
	rss0=$(kib "$dpid" VmRSS)
	seq "$N" | dispatchctl schedule --each -- \
	    sh -c 'head -c 1048576 /dev/urandom' >"$T/$name.ids" || return 1
	dispatchctl join --timeout 600s || return 1
	rss1=$(kib "$dpid" VmRSS)
	while read -r id; do
		dispatchctl fetch --timeout 60s "$id" >/dev/null || return 1
	done <"$T/$name.ids"
	rss2=$(kib "$dpid" VmRSS)
	hwm=$(kib "$dpid" VmHWM)
	printf '%-10s %4d MiB of values: RSS +%d KiB held (%s per MiB), +%d KiB after fetching each (%s per MiB), peak %d KiB (%s per MiB)\n' \
	    "$name" "$N" $((rss1 - rss0)) "$(per_mib $((rss1 - rss0)))" \
	    $((rss2 - rss0)) "$(per_mib $((rss2 - rss0)))" \
	    "$hwm" "$(per_mib "$hwm")"
	stop "$w"
	stop "$dpid"
}

note "dispatchd memory per MiB of values, $N closures of 1 MiB each"
measure memory
measure state-dir --state-dir "$T/dstate" --fsync batch --journal-max-bytes 512K
exit 0
