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
echo "$out" | grep -q "rank 0: failed after" || fail "rank 0 did not fail promptly when rank 1 died: $out"
echo "$out" | grep -q "rank 2: failed after" || fail "rank 2 did not fail promptly when rank 1 died: $out"
echo "$out" | grep -q "failed, a peer may have died" || fail "the error does not say what happened: $out"
echo "ok: a dead rank makes the others fail"
echo PASS
