#!/usr/bin/env bash
# Data-parallel training across processes started by torchrun (from the pinned torch wheel), as
# users launch jobs; a scenario's further launches start the ranks directly with torchrun's
# environment (torchrun_probe.sh). One scenario per ctest test, so they run side by side:
#   data_parallel_test.sh PROBE PYTHON WORK_DIR SCENARIO
set -uo pipefail
probe="$1"; python="$2"; work="$3"; scenario="$4"
source "$(dirname "$0")/torchrun_probe.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"

launcher=launch  # the first launch of a loop goes through torchrun, the others start the ranks directly
case "$scenario" in
parity)
  for setup in "2 accumulate=1" "2 accumulate=4" "3 accumulate=4" "2 accumulate=3 overlap=false"; do
    set -- $setup
    n="$1"; shift
    out=$($launcher "$n" parity "$@") || fail "$n processes, $*: $out"; launcher=launch_direct
    expect_all "$out" "$n" "parity ok"
    grep -m1 "parity ok" <<<"$out"
    echo "ok: $n processes, $*"
  done ;;
oom)
  for shard in off gradients; do
    out=$($launcher 2 oom shard=$shard) || fail "shard=$shard: $out"; launcher=launch_direct
    expect_all "$out" 2 "oom ok: every rank went on with micro-batches of 2"
    expect_all "$out" 2 "parity ok"
    grep -m1 "parity ok" <<<"$out"
    echo "ok: shard=$shard, rank 1 alone out of memory: both ranks halve, same weights as one process"
  done ;;
overflow)
  out=$(launch 2 overflow) || fail "$out"
  expect_all "$out" 2 "overflow ok: skipped 1 of"
  echo "ok: an overflow on rank 1 alone is skipped by both ranks" ;;
buffers)
  for how in broadcast average; do
    out=$($launcher 2 buffers buffers=$how) || fail "$how: $out"; launcher=launch_direct
    expect_all "$out" 2 "buffers $how ok, equal on all ranks: yes"
    echo "ok: buffers $how"
  done
  # The check must be able to fail: left alone, the ranks' statistics drift apart.
  out=$(launch_direct 2 buffers buffers=off) || fail "off: $out"
  expect_all "$out" 2 "buffers off ok, equal on all ranks: no"
  echo "ok: without synchronisation the buffers differ" ;;
die)
  out=$(launch 3 die)
  grep -q <<<"$out" "rank 0: failed after" || fail "rank 0 did not fail promptly when rank 1 died: $out"
  grep -q <<<"$out" "rank 2: failed after" || fail "rank 2 did not fail promptly when rank 1 died: $out"
  grep -q <<<"$out" "a peer may have died" || fail "the error does not say what happened: $out"
  echo "ok: a dead rank makes the others fail" ;;
resume)
  whole=$(launch 2 resume dir=whole max_steps=12) || fail "uninterrupted: $whole"
  first=$(launch_direct 2 resume dir=split max_steps=6) || fail "first half: $first"
  expect_all "$first" 2 "stopped at step 6"
  second=$(launch_direct 2 resume dir=split max_steps=12) || fail "second half: $second"
  expect_all "$second" 2 "stopped at step 12"
  for r in 0 1; do
    a=$(echo "$whole" | grep "rank $r: digest"); b=$(echo "$second" | grep "rank $r: digest")
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "rank $r resumed to other weights: '$a' vs '$b'"
  done
  echo "ok: resumed from a 2-process checkpoint, bitwise equal to an uninterrupted run"
  other=$(launch_direct 3 resume dir=split max_steps=18) || fail "a 3-process resume of the 2-process checkpoint: $other"
  grep -q <<<"$other" "resuming on 3 ranks from a checkpoint written by 2" || fail "no word of the new world size: $other"
  expect_all "$other" 3 "stopped at step 18"
  echo "ok: a 2-process checkpoint resumes on 3 processes, at the same place in the epoch" ;;
preempt)
  for shard in off gradients; do
    out=$(launch 2 preempt dir=run-$shard max_steps=12 shard=$shard) || fail "shard=$shard: $out"
    expect_all "$out" 2 "stopped at step 4: checkpoint: pre-empted"
    grep -q <<<"$out" "latest checkpoint .*0*4$" || fail "shard=$shard: rank 0 wrote no checkpoint of step 4: $out"
    echo "ok: shard=$shard, a signal to one rank stops every rank at the same step, with a checkpoint"
  done
  ls run-gradients/checkpoints/ckpt-000000004/shard-0000{0,1}-of-00002.optimizer.pt > /dev/null || fail "no shard of each rank" ;;
*) fail "unknown scenario $scenario" ;;
esac
echo PASS
