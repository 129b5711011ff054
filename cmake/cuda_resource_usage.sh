#!/usr/bin/env bash
# CUDA compiler launcher for the nvcc build (cmake/kernel_resources.cmake): runs the compile it is
# given (usually "ccache nvcc ... -o <object> -c <source>") and keeps what ptxas reported about
# each kernel (--resource-usage: registers, shared memory, stack frame, spills) in
# <object>.resource-usage.txt, which scripts/kernel_resources.py reads. The toolkit on the build
# machines has no cuobjdump to read the same numbers back from the cubin, so they are taken when
# ptxas prints them.
#
# Why a launcher and not a post-build step: ccache stores a compile's stderr with the object and
# replays it on a hit, so the report is rewritten on every build, cached or not, and stays in step
# with the object. The ptxas info lines are kept out of the build log (hundreds of lines per file);
# everything else the compiler prints (warnings, errors) still goes to stderr.
set -u
out=""
prev=""
for arg in "$@"; do
  [[ $prev == "-o" ]] && out=$arg
  prev=$arg
done
if [[ -z $out ]]; then
  exec "$@"
fi
report="$out.resource-usage.txt"
tmp="$report.tmp.$$"
"$@" 2>"$tmp"
rc=$?
grep -v -E '^ptxas info +: |^ +[0-9]+ bytes stack frame, [0-9]+ bytes spill stores, [0-9]+ bytes spill loads$' "$tmp" >&2
if [[ $rc -eq 0 ]]; then
  mv -f "$tmp" "$report"
else
  # No object, no report: a stale one would describe code that no longer compiles.
  rm -f "$tmp" "$report"
fi
exit $rc
