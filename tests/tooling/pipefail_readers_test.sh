#!/usr/bin/env bash
# Under `set -o pipefail`, a reader that stops early (grep -q, grep -m, head) makes the writer before
# it die of SIGPIPE when its output is long, and the pipeline fails at random: a test that passed
# on a short output fails on a long one. Our scripts match with here-strings (grep -q <<<"$out" ...)
# or let the reader read everything; this check keeps it so.
set -euo pipefail
root="$1"
cd "$root"
found=0
while IFS= read -r -d '' file; do
  [ "$file" != tests/tooling/pipefail_readers_test.sh ] && grep -q pipefail "$file" || continue
  # a pipe into grep with -q or -m in its first options, or into head
  if hits=$(grep -nE '\|[[:space:]]*(grep([[:space:]]+-[a-zA-Z]+)*[[:space:]]+-[a-zA-Z]*[qm][a-zA-Z]*\b|head\b)' "$file"); then
    echo "$file: a writer piped into a reader that stops early, under pipefail:"
    echo "$hits"
    found=1
  fi
done < <(find tests bench scripts examples tools .ci -type f \( -name '*.sh' -o -path .ci/run -o -path bench/run \) -print0)
[ "$found" -eq 0 ] || exit 1
echo "pipefail readers: no early-stopping reader after a pipe"
