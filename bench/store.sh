#!/bin/bash
# store.sh: coordd and dispatchd replicated over etcd (--store), against a
# cluster of three etcd members on loopback ports started here:
#  1. Failover: from kill -9 of the leader replica to the first write the
#     next one acknowledges (bench/failover.py writes every 10 ms), p50 and
#     max over FAILOVERS (10) takeovers with a lease of STORE_LEASE (2s),
#     for coordd and for dispatchd. Each round starts a new standby in
#     place of the one killed and waits until it has caught up.
#  2. PUT of one key with wrk, 32 connections: on the coordd leader
#     (--store, a new standby following) and on etcd's own JSON gateway
#     (/v3/kv/put) of the same cluster; best of two interleaved runs.
#  3. Heartbeats of HB_TASKS (1,000) tasks at 1 Hz for HB_DURATION (10s)
#     with bench-loadgen tasks: coordd's CPU time per heartbeat with
#     --store against a coordd in memory, in the same run.
# Prints figures and ratios next to their targets; never fails on one.
# Without etcd (Debian's etcd-server) it says so and prints nothing else.
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
rounds=${FAILOVERS:-10}
lease=${STORE_LEASE:-2s}
hb_tasks=${HB_TASKS:-1000}
hb_duration=${HB_DURATION:-10s}

# shellcheck source=bench/lib.sh
. "$here/lib.sh"
bench_setup

if ! command -v etcd >/dev/null; then
	note "etcd is not installed (apt-get install etcd-server): store figures skipped"
	exit 0
fi

# The etcd cluster: three members, data under $T.
etcd_eps=
cluster=
cports=() pports=()
for i in 0 1 2; do
	cports+=("$(free_port)")
	pports+=("$(free_port)")
	cluster+=${cluster:+,}m$i=http://127.0.0.1:${pports[i]}
	etcd_eps+=${etcd_eps:+,}127.0.0.1:${cports[i]}
done
for i in 0 1 2; do
	etcd --name "m$i" --data-dir "$T/etcd/m$i" \
	    --listen-client-urls "http://127.0.0.1:${cports[i]}" \
	    --advertise-client-urls "http://127.0.0.1:${cports[i]}" \
	    --listen-peer-urls "http://127.0.0.1:${pports[i]}" \
	    --initial-advertise-peer-urls "http://127.0.0.1:${pports[i]}" \
	    --initial-cluster "$cluster" --initial-cluster-state new \
	    --initial-cluster-token "muster-bench-$$" \
	    --log-level error >"$T/etcd-m$i.log" 2>&1 &
	pids+=("$!")
done
etcd_healthy() {
	curl -s -m 2 "http://$1/health" 2>/dev/null | grep -q '"health":"true"'
}
for i in 0 1 2; do
	for ((j = 0; j < 300; j++)); do
		etcd_healthy "127.0.0.1:${cports[i]}" && break
		sleep 0.1
	done
	if ((j == 300)); then
		note "etcd member m$i never became healthy; store figures skipped:"
		tail -5 "$T/etcd-m$i.log" >&2
		exit 0
	fi
done
etcd_addr=127.0.0.1:${cports[0]}

# replica NAME PROG PREFIX ARGS...: a replica of PROG on /bench/PREFIX;
# sets rep_pid and rep_addr.
replica() {
	local name=$1 prog=$2 prefix=$3
	shift 3
	start_daemon "$name" "$prog" --store "etcd://$etcd_eps/bench/$prefix" \
	    --store-lease "$lease" "$@" || return 1
	rep_pid=$daemon_pid rep_addr=$daemon_addr
}

# role ADDR: leader, standby or starting, as the replica at ADDR says;
# "standby-behind" for a standby that has records left to apply.
role() {
	curl -s -m 5 "http://$1/v1/replicas" 2>/dev/null | jq -r --arg a "http://$1" \
	    '.role + (if .role == "standby" and
		any(.replicas[]; .address == $a and .behind > 0)
	    then "-behind" else "" end)' 2>/dev/null
}

# wait_role ADDR ROLE: until the replica at ADDR says ROLE, 60 s at most.
wait_role() {
	local i
	for ((i = 0; i < 600; i++)); do
		[ "$(role "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	note "the replica at $1 is $(role "$1"), not $2, after 60 s"
	return 1
}

# failovers PROG ARGS...: FAILOVERS takeovers between replicas of PROG;
# sets fo_p50 and fo_max in ms, left empty when a round failed, and
# last_leader and last_pid.
failovers() {
	local prog=$1 i lpid laddr spid saddr out rc
	local -a ms=()
	shift
	fo_p50='' fo_max='' last_leader='' last_pid=''
	replica "$prog-0" "$prog" "$prog" "$@" || return 0
	lpid=$rep_pid laddr=$rep_addr
	if ! wait_role "$laddr" leader; then
		stop "$lpid"
		return 0
	fi
	for ((i = 1; i <= rounds; i++)); do
		rep_pid=
		if ! replica "$prog-$i" "$prog" "$prog" "$@" ||
		    ! wait_role "$rep_addr" standby; then
			stop "$lpid"
			[ -n "${rep_pid:-}" ] && stop "$rep_pid"
			return 0
		fi
		spid=$rep_pid saddr=$rep_addr
		"$py" "$here/failover.py" "$prog" --pid "$lpid" \
		    --addrs "$laddr,$saddr" >"$T/failover.last" 2>>"$T/failover.err"
		rc=$?
		out=$(cat "$T/failover.last")
		if [ "$rc" = 0 ] || [ "$rc" = 3 ]; then
			# Killed: waited for here, off the list.
			wait "$lpid" 2>/dev/null
			forget "$lpid"
		fi
		if [ "$rc" != 0 ]; then
			note "$prog failover $i: $(tail -1 "$T/failover.err")"
			[ "$rc" != 3 ] && stop "$lpid"
			stop "$spid"
			return 0
		fi
		echo "$prog $i $out" >>"$T/failover.out"
		ms+=("$(awk '{ print $2 }' <<<"$out")")
		lpid=$spid laddr=$saddr
	done
	# The last leader stays up: the PUT figure uses coordd's.
	last_leader=$laddr last_pid=$lpid
	read -r fo_p50 fo_max < <(printf '%s\n' "${ms[@]}" | sort -n |
	    awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)], v[NR] }')
}

echo "  etcd: 3 members on loopback; replicas with --store-lease $lease"
echo "  Failover, kill -9 of the leader to the first write acknowledged," \
    "$rounds takeovers"
for prog in coordd dispatchd; do
	# The shell says "Killed" of each leader it reaps: not a finding.
	failovers "$prog" --heartbeat-timeout 30s 2>"$T/failovers.stderr"
	grep -v ' Killed ' "$T/failovers.stderr" >&2
	printf '    %-40s p50 %6s ms  max %6s ms  target <= 3000 ms  %s\n' \
	    "$prog" "${fo_p50:-n/a}" "${fo_max:-n/a}" \
	    "$(verdict "${fo_max:-n/a}" '<=' 3000)"
	if [ "$prog" = coordd ]; then
		put_leader=$last_leader put_pid=$last_pid
	elif [ -n "$last_pid" ]; then
		stop "$last_pid"
	fi
done
# The coordd leader left from the takeovers gets a standby again.
put_standby=
if [ -n "${put_leader:-}" ] &&
    replica coordd-sb coordd coordd --heartbeat-timeout 30s; then
	put_standby=$rep_pid
	wait_role "$rep_addr" standby || put_leader=
fi

# 2. PUT throughput, same etcd.
max_of() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { print (a + 0 > b + 0 ? a : b) + 0 }'; }
put_store=0 put_etcd=0
key_b64=$(printf bench | base64) value_b64=$(printf 0123456789abcdef | base64)
for r in 1 2; do
	[ -n "${put_leader:-}" ] && put_store=$(max_of "$put_store" \
	    "$(put_rps "http://$put_leader/v1/kv/bench?mode=overwrite" PUT \
	    0123456789abcdef application/octet-stream)")
	put_etcd=$(max_of "$put_etcd" "$(put_rps "http://$etcd_addr/v3/kv/put" \
	    POST "{\"key\":\"$key_b64\",\"value\":\"$value_b64\"}" application/json)")
done
[ "$put_store" = 0 ] && put_store=
echo "  PUT of one key, wrk -t2 -c32 -d${WRK_DURATION:-5s}, best of 2 interleaved runs"
printf '    %-40s %8s req/s\n' "coordd --store (leader, one standby)" \
    "${put_store:-n/a}" "etcd /v3/kv/put, same cluster" "$put_etcd"
r=$(ratio "${put_store:-}" "$put_etcd")
printf '    %-40s %8sx      target >= 1.0x  %s\n' "coordd --store / etcd" "$r" \
    "$(verdict "$r" '>=' 1.0)"
[ -n "${put_pid:-}" ] && stop "$put_pid"
[ -n "$put_standby" ] && stop "$put_standby"

# 3. Heartbeats: bench-loadgen tasks against coordd in memory and with
# --store, one after the other.
hb_cpu() {
	local name=$1 pid=$2 addr=$3
	if ! "$bin/bench-loadgen" tasks -c "$addr" --pid "$pid" -n "$hb_tasks" \
	    --duration "$hb_duration" --timeout 180s >"$T/$name.out" \
	    2>"$T/$name.err"; then
		note "bench-loadgen tasks ($name) failed: $(tail -1 "$T/$name.err")"
		return 0
	fi
	awk '$1 == "hb_failures" && $2 > 0 { print "bench: " $2 " failed heartbeats" > "/dev/stderr" }
	    $1 == "hb_cpu" { print $2 }' "$T/$name.out"
}
hb_mem='' hb_store=''
if start_daemon hb-mem coordd --cluster "worker=$hb_tasks" \
    --heartbeat-timeout 30s; then
	hb_mem=$(hb_cpu hb-mem "$daemon_pid" "$daemon_addr")
	stop "$daemon_pid"
fi
if replica hb-store coordd hb --cluster "worker=$hb_tasks" \
    --heartbeat-timeout 30s && wait_role "$rep_addr" leader; then
	hb_store=$(hb_cpu hb-store "$rep_pid" "$rep_addr")
	stop "$rep_pid"
fi
echo "  Heartbeats: bench-loadgen tasks -n $hb_tasks --duration $hb_duration"
printf '    %-40s %8s us of coordd CPU per heartbeat\n' "in memory" \
    "${hb_mem:-n/a}" "--store" "${hb_store:-n/a}"
r=$(ratio "${hb_store:-}" "${hb_mem:-}")
printf '    %-40s %8sx      target <= 1.5x  %s\n' "--store / in memory" "$r" \
    "$(verdict "$r" '<=' 1.5)"
exit 0
