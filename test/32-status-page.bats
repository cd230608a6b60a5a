#!/usr/bin/env bats
# The status page every daemon serves at /: plain HTML and a little
# JavaScript over the daemon's own JSON API, loaded in headless Chromium
# (Debian's chromium; the tests that need it skip without it) and checked
# by what it shows; served without the token, which the browser gives it
# in the address's #token= fragment.

load helper

bats_require_minimum_version 1.5.0

# page URL: the DOM Chromium holds after the page's script has run, one
# element per line, in $T/page.dom.
page() {
	type -P chromium >/dev/null || skip "chromium is not installed (apt-get install chromium)"
	timeout -k 5 60 chromium --headless --no-sandbox --disable-gpu \
		--user-data-dir="$T/chromium" --virtual-time-budget=8000 \
		--dump-dom "$1" 2>"$T/chromium.log" >"$T/page.raw"
	sed 's/></>\n</g' "$T/page.raw" >"$T/page.dom"
	grep -q 'data-shown="1"\|id="auth"' "$T/page.dom" ||
		fail "no page: $(head -c 2000 "$T/page.raw") $(tail -5 "$T/chromium.log")"
}

# row TABLE TEXT...: a row of table TABLE holds each TEXT in a cell, in
# that order.
row() {
	local id=$1 re=""
	shift
	for c in "$@"; do re+="<td[^>]*>$c</td>.*"; done
	awk -v id="$id" '/<table id="/ { on = index($0, "id=\"" id "\"") > 0 } on' "$T/page.dom" |
		tr -d '\n' | sed 's/<tr>/\n<tr>/g' | grep -Eq "^<tr>$re" ||
		fail "table $id has no row $*: $(grep -A30 "id=\"$id\"" "$T/page.dom" | head -40)"
}

@test "GET / is the status page, served without the token and with nothing from elsewhere allowed; /v1/daemon needs the token" {
	printf 'tok-%s\n' "$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >"$T/token"
	start_coordd --token-file "$T/token"
	run -0 curl -sS -D "$T/h" "http://$MUSTER_COORD/"
	[[ $output == "<!doctype html>"* ]]
	grep -qi '^content-type: text/html; charset=utf-8' "$T/h"
	grep -qi "^content-security-policy: default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'" "$T/h"
	run -0 curl -sS -o /dev/null -w '%{http_code}' -I "http://$MUSTER_COORD/"
	assert_output 200
	run -0 curl -sS -o /dev/null -w '%{http_code}' -X POST "http://$MUSTER_COORD/"
	assert_output 405
	run -0 curl -sS -o /dev/null -w '%{http_code}' "http://$MUSTER_COORD/v1/daemon"
	assert_output 401
	# The icon a browser asks for: none, and no refusal counted.
	run -0 curl -sS -o /dev/null -w '%{http_code}' "http://$MUSTER_COORD/favicon.ico"
	assert_output 204
	run -0 curl -sS -o /dev/null -w '%{http_code}' "http://$MUSTER_COORD/favicon.ico/x"
	assert_output 401
	run -0 curl -sS -H "Authorization: Bearer $(cat "$T/token")" "http://$MUSTER_COORD/v1/daemon"
	jq -e '.daemon == "coordd" and .state == "memory" and (.version | length > 0)' <<<"$output"
}

@test "coordd's page in Chromium: its tasks with state, incarnation and heartbeat, a barrier in flight, the preemption notice" {
	start_coordd --cluster worker=3
	# A task's command starts once all three are there.
	for i in 0 2; do
		preemptwatch -t "worker:$i" -- sleep 60 2>/dev/null &
		BG_PIDS+=($!)
	done
	preemptwatch -t worker:1 -- barrierwait --timeout 60s b7 2>/dev/null &
	BG_PIDS+=($!)
	wait_for 20 eval '[ "$(curl -s "http://$MUSTER_COORD/v1/tasks" | jq ".barriers | length")" = 1 ]'
	inc=$(curl -s "http://$MUSTER_COORD/v1/tasks" | jq -r '.tasks[0].incarnation')
	page "http://$MUSTER_COORD/"
	grep -q '<h1 id="title">coordd</h1>' "$T/page.dom"
	row tasks worker:0 connected "$inc" '[0-9.]+ (ms|s) ago'
	row tasks worker:2 connected
	row barriers b7 1/3 'worker:0, worker:2'
	row preemption none
	grep -q 'in memory' "$T/page.dom"
	# A notice (which the tasks act on: their preemptwatch stop them).
	kvctl put muster/preemption/notice "$(date -u -d '+1 hour' +%FT%TZ)"
	page "http://$MUSTER_COORD/"
	row preemption '[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z'
}

@test "dispatchd's page in Chromium: queues, workers, a dataset, a job with its splits done, the journal" {
	start_dispatchd --state-dir "$T/state"
	start_worker worker:0 -j 2
	seq 1 3 | dispatchctl dataset add --splits - --reader 'seq 1 5' >/dev/null
	dispatchctl read 1 >/dev/null
	seq 1 4 | dispatchctl schedule --each -- sleep 30 >/dev/null
	wait_for 10 eval '[ "$(dispatchctl --json status | jq .inflight)" = 2 ]'
	page "http://$MUSTER_DISPATCHER/"
	grep -q '<h1 id="title">dispatchd</h1>' "$T/page.dom"
	row queues default 2 2 4 0 0 0
	row workers worker:0 live 2 2
	row datasets 1 '' 3 lines 'seq 1 5'
	row jobs 1 '' 1 dynamic 3/3 0 15 0 finished
	grep -q "journal in $T/state (fsync always)" "$T/page.dom"
}

@test "with a token: the page asks for it, and shows everything once the address gives it in #token=" {
	printf 'tok-%s\n' "$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >"$T/token"
	start_coordd --token-file "$T/token" --cluster worker=1
	page "http://$MUSTER_COORD/"
	grep -q '<p id="error">UNAUTHENTICATED: this coordd needs a token' "$T/page.dom"
	grep -q '<form id="auth">' "$T/page.dom" # shown: not hidden
	page "http://$MUSTER_COORD/#token=$(cat "$T/token")"
	grep -q '<form id="auth" hidden="">' "$T/page.dom"
	row tasks worker:0 disconnected
	# A fragment that is not percent-encoding is taken as typed: a wrong
	# token, and the form again, not a page that stopped.
	page "http://$MUSTER_COORD/#token=%"
	grep -q '<p id="error">UNAUTHENTICATED: the token is not this coordd' "$T/page.dom"
	grep -q '<form id="auth">' "$T/page.dom"
}
