#!/usr/bin/env bash
# The minimal example end to end: a short run writes its run directory and reaches a useful
# accuracy; --smoke-test runs alone; bad input exits 2 naming the key.
set -euo pipefail
exe="$1"; source_dir="$2"; work="$3"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$exe" --config "$source_dir/examples/minimal/config.toml" --trainer.max_epochs=3 --trainer.run_dir=run \
      --trainer.device=cpu 2>&1) || fail "training run exited $?: $out"
echo "$out" | tail -n 3
for f in run/config.toml run/metrics.jsonl run/train.log; do [ -s "$f" ] || fail "$f missing"; done
grep -q 'max_epochs = 3  # command line --trainer.max_epochs' run/config.toml || fail "config.toml lacks the override"
grep -q '"event":"validation"' run/metrics.jsonl || fail "no validation line in metrics.jsonl"
grep -q 'smoke test passed' run/train.log || fail "the smoke test did not run before training"
acc=$(echo "$out" | sed -n 's/.*validation accuracy \([0-9.]*\).*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a > 0.9) }' || fail "validation accuracy $acc <= 0.9"

# Every efficiency switch from the command line and the environment at once.
amp=$(FRUGAL_PRECISION=bf16 "$exe" --config "$source_dir/examples/minimal/config.toml" --trainer.max_epochs=1 \
      --model.train_examples=4096 --accumulation.steps=2 --clipping.mode=norm --trainer.run_dir=amp \
      --trainer.device=cpu --trainer.log_every_n_steps=8 2>&1) || fail "amp run exited $?: $amp"
grep -q 'mode = "bf16"  # environment variable FRUGAL_PRECISION' amp/config.toml || fail "FRUGAL_PRECISION not applied"
grep -q '"grad_norm"' amp/metrics.jsonl || fail "no grad_norm in metrics.jsonl"
grep -q <<<"$amp" "16 steps" || fail "accumulation 2 over 32 batches should make 16 steps: $amp"

# Checkpointing from the command line: a second start resumes where the first stopped.
ck=(--config "$source_dir/examples/minimal/config.toml" --model.train_examples=4096 --trainer.run_dir=ck
    --trainer.device=cpu --checkpoint.enabled=true --checkpoint.every_n_steps=10 --checkpoint.keep_last=2)
"$exe" "${ck[@]}" --trainer.max_epochs=1 > ck1.log 2>&1 || fail "checkpointed run: $(tail -3 ck1.log)"
[ -f ck/checkpoints/latest ] || fail "no checkpoint written"
"$exe" "${ck[@]}" --trainer.max_epochs=2 > ck2.log 2>&1 || fail "resumed run: $(tail -3 ck2.log)"
grep -q "resumed at step 32, epoch 1" ck2.log || fail "the second start did not resume: $(grep -m3 resum ck2.log)"
grep -q "minimal: 64 steps" ck2.log || fail "the resumed run should end at step 64: $(tail -1 ck2.log)"
[ "$(ls -d ck/checkpoints/ckpt-* | wc -l)" -eq 2 ] || fail "keep_last=2 not applied: $(ls ck/checkpoints)"

# The same data streamed from tar shards written into a preprocessing cache, by worker threads.
sh=(--config "$source_dir/examples/minimal/config.toml" --model.train_examples=16384 --model.validation_examples=1024
    --trainer.device=cpu --trainer.max_epochs=3 --model.shard_cache=cache --data.num_workers=2 --trainer.log_every_n_steps=8)
"$exe" "${sh[@]}" --trainer.run_dir=sh1 > sh1.log 2>&1 || fail "sharded run: $(tail -3 sh1.log)"
grep -q "preprocessing cache miss" sh1.log || fail "the first sharded run did not build the cache"
[ "$(ls cache/*/train/*.tar | wc -l)" -ge 1 ] || fail "no shards in the cache"
grep -q '"data_wait_fraction"' sh1/metrics.jsonl || fail "no data_wait_fraction in metrics.jsonl"
"$exe" "${sh[@]}" --trainer.run_dir=sh2 > sh2.log 2>&1 || fail "second sharded run: $(tail -3 sh2.log)"
grep -q "preprocessing cache hit" sh2.log || fail "the second sharded run did not reuse the cache"
acc=$(sed -n 's/.*validation accuracy \([0-9.]*\).*/\1/p' sh2.log)
awk -v a="$acc" 'BEGIN { exit !(a > 0.85) }' || fail "sharded validation accuracy $acc <= 0.85"
"$exe" "${sh[@]}" --trainer.run_dir=sh3 --model.noise=0.05 > sh3.log 2>&1 || fail "third sharded run: $(tail -3 sh3.log)"
grep -q "preprocessing cache miss" sh3.log || fail "a new noise level must not reuse the cached spirals"

"$exe" --smoke-test --trainer.run_dir=smoke | grep 'smoke test passed' >/dev/null || fail "--smoke-test"

set +e
err=$(FRUGAL_DATA_BATCH_SIZE=many "$exe" --trainer.run_dir=bad 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] || fail "bad env value exited $rc, want 2"
grep -q <<<"$err" "FRUGAL_DATA_BATCH_SIZE" || fail "error does not name the variable: $err"
echo "PASS"
