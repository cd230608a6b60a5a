#!/bin/sh
# run.sh: the whole suite, C unit tests then every bats file, as TAP, and a
# last line "N passed, N failed" counted from the results. Exits non-zero
# when anything failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${MUSTER_BIN:-$here/../build/bin}
export MUSTER_BIN=$bin
out=$(mktemp)
trap 'rm -f "$out"' EXIT INT TERM

status=0
echo "# unit tests"
"$bin/unit" | tee -a "$out" || status=1
echo "# bats tests"
bats --tap "$here"/[0-9]*.bats | tee -a "$out" || status=1
# The fuzz harnesses, when built (make check builds them when clang can).
fuzz=${MUSTER_FUZZ:-}
if [ -n "$fuzz" ] && [ -d "$fuzz" ]; then
	echo "# fuzz harnesses, ${MUSTER_FUZZ_TIME:-4}s each"
	"$here/../fuzz/run.sh" "$fuzz" "${MUSTER_FUZZ_TIME:-4}" | tee -a "$out" || status=1
fi

passed=$(grep -c '^ok ' "$out")
failed=$(grep -c '^not ok ' "$out")
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ] && [ "$status" -eq 0 ]
