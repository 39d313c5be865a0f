#!/usr/bin/env bash
# Collectives over gloo between 2 and 3 processes started by torchrun (from the pinned torch
# wheel), as users launch jobs; and a rank that exits early makes the others fail promptly.
set -uo pipefail
probe="$1"; python="$2"; work="$3"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
launch() {  # nprocs, probe args...
  local n="$1"; shift
  timeout 120 "$python" -m torch.distributed.run --standalone --nproc-per-node="$n" --no-python "$probe" "$@"
}
for n in 2 3; do
  out=$(launch "$n" 2>&1) || fail "$n processes: $out"
  [ "$(echo "$out" | grep -c 'collectives ok')" -eq "$n" ] || fail "$n processes: not every rank reported: $out"
  echo "ok: $n processes"
done
out=$(launch 3 die 2>&1)
grep -q <<<"$out" "rank 0: failed after" || fail "rank 0 did not fail promptly when rank 1 died: $out"
grep -q <<<"$out" "rank 2: failed after" || fail "rank 2 did not fail promptly when rank 1 died: $out"
grep -q <<<"$out" "failed, a peer may have died" || fail "the error does not say what happened: $out"
echo "ok: a dead rank makes the others fail"
# A collective mismatch (rank 1 all-reduces more elements): gloo throws from a thread of its own,
# which would end the process with SIGABRT; every rank ends with an error message and code 1.
out=$(launch 2 mismatch 2>&1)
grep -q <<<"$out" "terminate called\|exitcode *: *-6\|Aborted" && fail "a rank aborted on a collective mismatch: $out"
grep -q <<<"$out" "collective mismatch" || fail "no word of a collective mismatch: $out"
[ "$(echo "$out" | grep -c "exitcode *: *1 ")" -ge 1 ] || fail "no rank exited 1: $out"
echo "ok: a collective mismatch ends the ranks with a message, not SIGABRT"
echo PASS
