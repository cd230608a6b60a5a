#!/bin/sh
# readme-tour.sh README OUT: the README's tour as a script, and what each
# of its blocks is to show.
#
# A tour block is an indented block right after a line "<!-- tour -->" or
# "<!-- tour: OPTIONS -->" in README. In it a line "$ CMD" begins a
# command, a line "> MORE" (or ">") goes on with it, and any other line is
# output the commands print. A command is to exit 0, or N when a line of
# it ends in a comment "# exits N".
#
# It writes OUT/tour.sh, which runs every block in order in the shell
# that runs it, with each block's stdout and stderr in OUT/N.out and each
# command's exit status on a line of OUT/N.rc; OUT/N.want, N.rcs, N.opts
# and N.line are what block N is to print, its commands' exit statuses,
# the mark's OPTIONS and the mark's line in README. OUT/blocks counts the
# blocks.
set -eu

[ $# -eq 2 ] || { echo "usage: readme-tour.sh README OUT" >&2; exit 2; }
readme=$1
out=$(cd "$2" && pwd)

awk -v out="$out" '
function flush_cmd() {
	if (cmd == "")
		return
	print cmd > script
	print "__rc=$?; echo \"$__rc\" >>\"" out "/" n ".rc\"; " \
	    "(exit \"$__rc\")" > script
	print rc > (out "/" n ".rcs")
	cmd = ""
}
function end_block() {
	flush_cmd()
	if (inblock) {
		close(out "/" n ".want")
		close(out "/" n ".rcs")
	}
	inblock = 0
}
BEGIN {
	script = out "/tour.sh"
	print "# made by readme-tour.sh from the README; do not edit" > script
	n = 0
}
/^<!-- tour(: .*)? -->$/ {
	end_block()
	n++
	opts = $0
	sub(/^<!-- tour:? */, "", opts)
	sub(/ *-->$/, "", opts)
	print opts > (out "/" n ".opts")
	close(out "/" n ".opts")
	print NR > (out "/" n ".line")
	close(out "/" n ".line")
	printf "" > (out "/" n ".want")
	printf "" > (out "/" n ".rcs")
	print "exec >\"" out "/" n ".out\" 2>&1" > script
	print ": >\"" out "/" n ".rc\"" > script
	marked = 1
	next
}
marked && /^    / {
	inblock = 1
	line = substr($0, 5)
	if (line ~ /^\$ /) {
		flush_cmd()
		cmd = substr(line, 3)
		rc = 0
	} else if (line ~ /^>( |$)/ && cmd != "") {
		cmd = cmd "\n" substr(line, 3)
	} else {
		flush_cmd()
		print line > (out "/" n ".want")
		next
	}
	if (match(line, /# exits [0-9]+ *$/))
		rc = substr(line, RSTART + 8) + 0
	next
}
{
	if (inblock)
		marked = 0
	end_block()
}
END {
	end_block()
	print "exec >\"" out "/end.out\" 2>&1" > script
	print n > (out "/blocks")
}
' "$readme"
