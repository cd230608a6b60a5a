#!/bin/sh
# run.sh DIR SECONDS: runs every fuzz harness in DIR for SECONDS each,
# starting from the seeds in fuzz/corpus/NAME and keeping what it finds in
# DIR/../corpus/NAME; prints one TAP line per harness ("ok", or "not ok"
# with the end of its log and the input that broke it).
# run.sh --can-build: exits 0 when clang can build a libFuzzer harness.
set -u
here=$(cd "$(dirname "$0")" && pwd)

if [ "${1:-}" = --can-build ]; then
	command -v clang >/dev/null 2>&1 || exit 1
	printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' |
		clang -x c -fsanitize=fuzzer,address,undefined -o /dev/null - >/dev/null 2>&1
	exit $?
fi

dir=${1:?usage: run.sh DIR SECONDS}
secs=${2:-60}
top=$(cd "$dir/.." && pwd)
status=0
n=0
for bin in "$dir"/fuzz_*; do
	[ -x "$bin" ] || continue
	name=$(basename "$bin")
	n=$((n + 1))
	mkdir -p "$top/corpus/$name" "$top/artifacts"
	log="$top/artifacts/$name.log"
	# One input may take a while on a busy machine (the HTTP harness
	# waits for loopback): 20 s before libFuzzer calls it a hang.
	"$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$top/artifacts/$name-" \
		"$top/corpus/$name" "$here/corpus/$name" >"$log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	if [ "$rc" -eq 0 ]; then
		echo "ok $n fuzz $name: ${runs:-?} inputs in ${secs}s, no crash, no broken invariant"
	else
		status=1
		echo "not ok $n fuzz $name (exit $rc)"
		grep -E 'broken:|ERROR: |SUMMARY: |runtime error|Test unit written' "$log" |
			head -20 | sed 's/^/# /'
	fi
done
[ "$n" -gt 0 ] || { echo "not ok 1 fuzz: no harness in $dir"; exit 1; }
exit "$status"
