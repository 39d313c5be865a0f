#!/usr/bin/env bash
# The recovery ladder on a probe whose data is corrupted at known batches (batch 16, no shuffle:
# batch b holds examples 16b..16b+15):
#   1. NaN batches 20, 22, 24, 26, 28 close together climb every rung in order (skip, rollback,
#      lower LR, bf16 -> fp32, stop) and the run ends with exit 1, a report and a good checkpoint;
#   2. NaN batches 20 and 22, then a spike at 100, are recovered from: the final validation loss
#      is close to a clean run's; with recovery off the same data stops the run (non-finite);
#   3. killed by SIGKILL right after rung 2's rollback was checkpointed, then resumed: the ladder
#      goes on (rungs 3, 4, 5) and ends in the same checkpoint, byte for byte, as the
#      uninterrupted run;
#   4. on 2 gloo ranks with the corruption on one rank's examples only, both take the same decisions.
set -euo pipefail
probe="$1"; checkpoint_tool="$2"; python="$3"; work="$4"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
rungs() { "$python" -c "import json,sys; print(' '.join(str(int(j['rung'])) for j in map(json.loads, open(sys.argv[1])) if j['event']=='recovery'))" "$1"; }
field() { grep -m1 '^final:' <<<"$1" | sed -E "s/.* $2 ([^ ]+).*/\1/"; }

ladder=(--probe.corrupt=320-335:nan,352-367:nan,384-399:nan,416-431:nan,448-463:nan --precision.mode=bf16
        --recovery.enabled=true --recovery.repeat_window=10 --recovery.snapshot_every_n_steps=5
        --checkpoint.enabled=true --checkpoint.keep_last=2)

echo "== 1. every rung in order"
set +e; out=$("$probe" --trainer.run_dir=all "${ladder[@]}" 2>&1); rc=$?; set -e
[ "$rc" -eq 1 ] || fail "the ladder's last rung should end the run with exit 1, got $rc: $out"
grep -q <<<"$out" "recovery: gave up at step" || fail "no report: $out"
[ "$(rungs all/metrics.jsonl)" = "1 2 3 4 5" ] || fail "rungs $(rungs all/metrics.jsonl), expected 1 2 3 4 5: $out"
grep -q <<<"$out" "learning rate x 0.5" || fail "rung 3 did not lower the learning rate: $out"
grep -q <<<"$out" "precision bf16 -> fp32" || fail "rung 4 did not switch precision: $out"
grep -q <<<"$out" "rolled back to step 15, skipping batches 15 of epoch 0 to before 23 of epoch 0" || fail "rung 2's rollback: $out"
last=$(ls -d all/checkpoints/ckpt-* | sort -V | tail -1)
"$checkpoint_tool" verify "$last" > /dev/null || fail "the checkpoint the ladder stopped with does not verify"

echo "== 2. recovered runs end close to a clean run"
clean=$("$probe" --trainer.run_dir=clean --recovery.enabled=true 2>&1) || fail "clean run: $clean"
[ -z "$(rungs clean/metrics.jsonl)" ] || fail "a clean run saw anomalies: $(rungs clean/metrics.jsonl)"
bumpy=(--probe.corrupt=320-335:nan,352-367:nan,1600-1615:spike --recovery.repeat_window=10 --recovery.snapshot_every_n_steps=5)
out=$("$probe" --trainer.run_dir=bumpy --recovery.enabled=true "${bumpy[@]}" 2>&1) || fail "the bumpy run failed: $out"
# the corrupted batches come back in the second epoch, and are met the same way
[ "$(rungs bumpy/metrics.jsonl)" = "1 2 1 1 2 1" ] || fail "rungs $(rungs bumpy/metrics.jsonl), expected 1 2 1 1 2 1: $out"
v0=$(field "$clean" validation_loss); v1=$(field "$out" validation_loss)
"$python" -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b) <= 0.05 + 0.25*a else 1)" "$v0" "$v1" \
  || fail "recovered validation loss $v1 is far from the clean run's $v0"
echo "clean validation loss $v0, recovered $v1"
set +e; off=$("$probe" --trainer.run_dir=off "${bumpy[@]}" 2>&1); rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q <<<"$off" "non-finite" || fail "with recovery off the NaN batch should stop the run (rc $rc): $off"

echo "== 3. killed mid-ladder and resumed"
kill_args=("${ladder[@]}" --checkpoint.every_n_steps=1 --checkpoint.async=false)
set +e; "$probe" --trainer.run_dir=whole "${kill_args[@]}" > whole.out 2>&1; set -e
set +e; "$probe" --trainer.run_dir=killed "${kill_args[@]}" --probe.kill_after_rollback=1 > killed.out 2>&1; rc=$?; set -e
[ "$rc" -eq 137 ] || fail "the probe should have died of SIGKILL, rc $rc: $(cat killed.out)"
[ "$(rungs killed/metrics.jsonl)" = "1 2" ] || fail "before the kill: rungs $(rungs killed/metrics.jsonl)"
set +e; "$probe" --trainer.run_dir=killed "${kill_args[@]}" > resumed.out 2>&1; rc=$?; set -e
[ "$rc" -eq 1 ] || fail "the resumed run should end on the last rung, rc $rc: $(cat resumed.out)"
[ "$(rungs killed/metrics.jsonl)" = "1 2 3 4 5" ] || fail "killed + resumed: rungs $(rungs killed/metrics.jsonl), expected 1 2 3 4 5"
a=$(ls -d whole/checkpoints/ckpt-* | sort -V | tail -1); b=$(ls -d killed/checkpoints/ckpt-* | sort -V | tail -1)
[ "$(basename "$a")" = "$(basename "$b")" ] || fail "last checkpoints differ: $a vs $b"
for f in $(cd "$a" && ls *.pt); do cmp -s "$a/$f" "$b/$f" || fail "$f differs between the uninterrupted and the resumed run"; done

echo "== 4. two gloo ranks take the same decisions"
cat > wrapper.sh <<'WRAP'
#!/usr/bin/env bash
exec "$@" 2> "rank$RANK.err"
WRAP
chmod +x wrapper.sh
# Global batch b (2 ranks x 16) holds examples 32b..32b+31; one example each: one rank sees it.
timeout 300 "$python" -m torch.distributed.run --standalone --nproc-per-node=2 --no-python ./wrapper.sh "$probe" \
  --trainer.run_dir=ranks --recovery.enabled=true --recovery.repeat_window=10 --recovery.snapshot_every_n_steps=5 \
  --probe.corrupt=640-640:nan,704-704:nan,1600-1600:spike --distributed.log_all_ranks=true > ranks.out 2>&1 || fail "2 ranks: $(cat ranks.out rank*.err)"
d0=$(grep -o "recovery: step.*" rank0.err); d1=$(grep -o "recovery: step.*" rank1.err)
[ -n "$d0" ] || fail "rank 0 logged no decision: $(cat rank0.err)"
[ "$d0" = "$d1" ] || fail "the ranks decided differently:
$d0
---
$d1"
[ "$(rungs ranks/metrics.jsonl)" = "1 2 1 1 2 1" ] || fail "2 ranks: rungs $(rungs ranks/metrics.jsonl), expected 1 2 1 1 2 1"
c0=$(grep '^final: rank 0' ranks.out | sed -E 's/.* checksum //'); c1=$(grep '^final: rank 1' ranks.out | sed -E 's/.* checksum //')
[ -n "$c0" ] && [ "$c0" = "$c1" ] || fail "the ranks' weights differ: '$c0' vs '$c1'"
echo "PASS"
