#!/bin/sh
# circles.sh ARCHIVE: fails, naming them, when objects of the archive call
# each other in a circle (a.o calls b.o, which calls a.o back, directly or
# through others). A module split over several files keeps them in layers,
# as the library keeps its folders (lib/README); `make layers` runs this on
# every layer's archive.
set -eu
export LC_ALL=C # sort and join must agree on the order
a=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
# "symbol object" for what each object defines and what it leaves undefined.
nm -g --defined-only "$a" 2>/dev/null |
	awk '/:$/ { o = substr($0, 1, length($0) - 1); next }
	     NF == 3 { print $3, o }' | sort >"$tmp/defs"
nm -u "$a" 2>/dev/null |
	awk '/:$/ { o = substr($0, 1, length($0) - 1); next }
	     NF == 2 { print $2, o }' | sort >"$tmp/uses"
join "$tmp/uses" "$tmp/defs" | awk '$2 != $3 { print $2, $3 }' |
	sort -u >"$tmp/edges"
if ! tsort "$tmp/edges" >/dev/null 2>"$tmp/err"; then
	echo "$a: objects that call each other in a circle:" >&2
	grep -v 'input contains a loop' "$tmp/err" | sed 's/^tsort: /  /' >&2
	exit 1
fi
