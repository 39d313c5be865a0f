#!/usr/bin/env bash
# The minimal example on 2 processes with the one documented command (torchrun --no-python):
# rank 0 alone writes the run directory, every rank trains on half of each epoch, the ranks end
# on the same step and the model still learns.
set -euo pipefail
exe="$1"; source_dir="$2"; python="$3"; work="$4"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

out=$(timeout 300 "$python" -m torch.distributed.run --standalone --nproc-per-node=2 --no-python \
      "$exe" --config "$source_dir/examples/minimal/config.toml" --trainer.max_epochs=2 --trainer.run_dir=run \
      --model.train_examples=16384 --trainer.device=cpu 2>&1) || fail "2-process run exited $?: $out"
echo "$out" | grep "minimal:"
# 16384 examples / 2 ranks / batch 128 = 64 steps per epoch.
grep -q <<<"$out" "minimal: 2 processes, 128 steps" || fail "expected 128 steps on 2 processes: $(echo "$out" | tail -3)"
[ "$(echo "$out" | grep -c "minimal:")" -eq 1 ] || fail "only rank 0 should report"
for f in run/config.toml run/metrics.jsonl run/train.log; do [ -s "$f" ] || fail "$f missing"; done
grep -q "data parallel: rank 0 of 2 (gloo)" run/train.log || fail "train.log does not show data parallelism"
[ "$(grep -c '"event":"validation"' run/metrics.jsonl)" -eq 2 ] || fail "metrics.jsonl should have one validation per epoch, once"
acc=$(echo "$out" | sed -n 's/.*validation accuracy \([0-9.]*\).*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a > 0.8) }' || fail "validation accuracy $acc <= 0.8"

# The same from tar shards: both ranks ask the preprocessing cache at once (one builds, one waits), then
# each streams its half of every epoch through worker threads.
out=$(timeout 300 "$python" -m torch.distributed.run --standalone --nproc-per-node=2 --no-python \
      "$exe" --config "$source_dir/examples/minimal/config.toml" --trainer.max_epochs=2 --trainer.run_dir=sharded \
      --model.train_examples=16384 --trainer.device=cpu --model.shard_cache=cache --data.num_workers=1 2>&1) \
  || fail "2-process sharded run exited $?: $out"
grep -q <<<"$out" "minimal: 2 processes, 128 steps" || fail "sharded: expected 128 steps: $(echo "$out" | tail -3)"
[ "$(ls -d cache/*/ | wc -l)" -eq 1 ] || fail "one cache entry expected: $(ls cache)"
ls cache | grep partial >/dev/null && fail "a partial cache entry was left behind: $(ls cache)"
acc=$(echo "$out" | sed -n 's/.*validation accuracy \([0-9.]*\).*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a > 0.8) }' || fail "sharded validation accuracy $acc <= 0.8"
echo PASS
