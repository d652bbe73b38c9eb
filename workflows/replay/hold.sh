#!/bin/sh
# hold SECONDS OUT [PARENT...]: hold this task's allocation for SECONDS (a compressed
# runtime), then write OUT: its own name and the md5 of its parents' outputs, so a wrong,
# missing or reordered input shows in every descendant.
s=$1; out=$2; shift 2
sleep "$s"
{ echo "$out"; cat "$@" </dev/null | md5sum; } > "$out"
