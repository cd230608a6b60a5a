#!/bin/bash
# dump.sh COORD DISPATCHER: what coordd at COORD and dispatchd at
# DISPATCHER hold, as JSON on stdout, without what depends on the clock
# (heartbeat ages, liveness), what is counted since the daemon started
# rather than kept (a job's elements, from its readers' heartbeats) or on
# a map's order (lists of named things are sorted by name): keys with their revisions and the history
# watches resume from, tasks, the epoch, barriers; closures with their
# values, queues, workers, resources, datasets and their splits, jobs and
# the positions of the dynamic ones. Used by make.sh and test/25-replay.
set -euo pipefail
get() {
	curl -fsS -m 30 "http://$1"
}
{
	get "$1/v1/watch/?since=0&wait=0"
	get "$1/v1/tasks"
	get "$1/v1/epoch"
	get "$1/v1/barriers"
	get "$2/v1/status"
	get "$2/v1/resources"
	get "$2/v1/datasets"
	get "$2/v1/jobs"
	ids=$(get "$2/v1/closures" | jq -r '.closures[].id')
	for id in $ids; do
		get "$2/v1/closures/$id"
	done
	for d in $(get "$2/v1/datasets" | jq -r '.datasets[].id'); do
		get "$2/v1/datasets/$d/splits" | jq -R . | jq -s '{splits: .}'
	done
	for j in $(get "$2/v1/jobs" | jq -r '.jobs[] | select(.mode == "dynamic") | .id'); do
		get "$2/v1/jobs/$j/checkpoint"
	done
} | jq -S 'walk(
	if type == "object" then del(.heartbeat_age_ms, .live, .connected, .workers_live, .elements)
	elif type == "array" and length > 0 and all(.[]; type == "object" and has("name"))
	then sort_by(.name)
	else . end)'
