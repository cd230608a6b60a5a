load helper
bats_require_minimum_version 1.5.0
shards() {
	mkdir -p "$T/shards"
	for ((s = 0; s < $1; s++)); do
		seq -f "shard-$s record %07g padding padding padding padding" 1 "$2" \
			>"$T/shards/$s"
	done
	sort "$T"/shards/* >"$T/expected"
	dispatchctl splits files "$T/shards/*" |
		dispatchctl dataset add --splits - --reader 'cat "$MUSTER_SPLIT"'
}
consume() {
	local d=$1 id=$2 from=()
	shift 2
	if [ -s "$d/ckpt" ] && jq -e '.data != null' "$d/ckpt" >/dev/null; then
		jq .data "$d/ckpt" >"$d/state"
		from=(--from-state "$d/state")
	fi
	start_pair "$d" dispatchctl read --positions "${from[@]}" "$@" "$id"
}
start_pair() {
	local d=$1
	shift
	rm -f "$d/pipe" "$d/started"
	mkfifo "$d/pipe"
	"$@" >"$d/pipe" 2>>"$d/read.err" &
	READ_PID=$!
	"$PYTHON" "$BATS_TEST_DIRNAME/data-consumer.py" "$d" "${DELAY:-0}" <"$d/pipe" 2>>"$d/eat.err" &
	EAT_PID=$!
	BG_PIDS+=("$READ_PID" "$EAT_PID")
	wait_file "$d/started" 60
}
@test "x" {
	start_dispatchd
	start_worker a:0 --buffer 256k --lease 2
	start_worker b:0 --buffer 256k --lease 2
	id=$(shards 16 2000)
	d=$T/t; mkdir $d
	for i in 1 2 3; do
	consume "$d" "$id"
	wait_exit "$EAT_PID" 120
	wait_exit "$READ_PID" 30
	echo "run $i: $STATUS $(cat $d/ckpt | head -c 300)" >&3
	cat $d/read.err >&3
	done
}
