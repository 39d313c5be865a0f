#!/usr/bin/env bash
# Exact resume after a crash: the probe killed with SIGKILL between steps, mid-epoch, and at each
# stage of a checkpoint write, then restarted, ends with weights bitwise equal to an uninterrupted
# run. SIGTERM: a checkpoint is written, the exit code is 0, and the restart finishes the same way.
set -uo pipefail
probe="$1"; work="$2"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

"$probe" clean clean.bin > clean.log 2>&1 || fail "uninterrupted run: $(tail -3 clean.log)"
[ -s clean.bin ] || fail "no weights from the uninterrupted run"
grep -q "skipped [1-9]" clean.log || fail "the probe should skip some fp16 steps: $(tail -1 clean.log)"

run_killed() {  # name, probe arguments...
  local name="$1"; shift
  "$probe" "$name" "$name.bin" "$@" > "$name.1.log" 2>&1
  local rc=$?
  [ "$rc" -eq 137 ] || [ "$rc" -eq 9 ] || [ "$rc" -ge 128 ] || fail "$name: expected death by SIGKILL, exit $rc"
  [ ! -e "$name.bin" ] || fail "$name: the killed run should not have finished"
  "$probe" "$name" "$name.bin" > "$name.2.log" 2>&1 || fail "$name: restart failed: $(tail -3 "$name.2.log")"
  grep -q "resumed at step" "$name.2.log" "$name/train.log" 2>/dev/null || fail "$name: restart did not resume"
  cmp -s clean.bin "$name.bin" || fail "$name: final weights differ from the uninterrupted run"
  echo "ok: $name"
}

run_killed between-steps kill-at-step 7
run_killed mid-epoch kill-at-step 17
for stage in state.pt optimizer.pt meta.json manifest.json renamed latest; do
  run_killed "during-write-$stage" kill-at-stage "$stage" 9
done

"$probe" term term.bin term-at-step 11 > term.1.log 2>&1 || fail "SIGTERM run exited $? (want 0)"
grep -q "pre-empted by SIGTERM: checkpoint of step 11" term.1.log term/train.log 2>/dev/null || fail "no pre-emption checkpoint"
[ -d term/checkpoints/ckpt-000000011 ] || fail "no checkpoint of step 11"
"$probe" term term.bin > term.2.log 2>&1 || fail "restart after SIGTERM failed"
cmp -s clean.bin term.bin || fail "after SIGTERM: final weights differ"
echo "ok: term"

"$probe" term2 term2.bin term-twice-at-step 13 > term2.1.log 2>&1 || fail "double SIGTERM run exited $? (want 0)"
[ -d term2/checkpoints/ckpt-000000013 ] || fail "no checkpoint of step 13 after a second SIGTERM during the write"
"$probe" term2 term2.bin > term2.2.log 2>&1 || fail "restart after a double SIGTERM failed"
cmp -s clean.bin term2.bin || fail "after a double SIGTERM: final weights differ"
echo "ok: term twice"

"$probe" usr1 usr1.bin usr1-at-step 5 > usr1.1.log 2>&1 || fail "SIGUSR1 run exited $? (want 0)"
grep -q "pre-empted by SIGUSR1: checkpoint of step 5" usr1.1.log || fail "no pre-emption checkpoint on SIGUSR1"
"$probe" usr1 usr1.bin > usr1.2.log 2>&1 || fail "restart after SIGUSR1 failed"
cmp -s clean.bin usr1.bin || fail "after SIGUSR1: final weights differ"
echo "ok: usr1"
echo PASS
