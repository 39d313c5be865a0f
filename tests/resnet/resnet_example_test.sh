#!/usr/bin/env bash
# The ResNet example end to end on the bundled digits: prepared into shards by the repo's script,
# a short run reaches its accuracy; every policy switches on from the command line; a run stopped
# after one epoch and resumed ends with the same weights as an uninterrupted one; the image-folder
# and synthetic sources; bad input names the key or file.
set -euo pipefail
exe="$1"; tool="$2"; source_dir="$3"; python="$4"; work="$5"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
accuracy() { sed -n 's/.*validation top1 \([0-9.]*\).*/\1/p' "$1"; }

bash "$source_dir/examples/resnet50/prepare_digits.sh" digits "$tool" "$python" > prepare.log 2>&1 || fail "prepare_digits: $(tail -3 prepare.log)"
[ -f digits/train-shards/classes.json ] || fail "no shards written"
shards=(--images.train=digits/train-shards --images.val=digits/val-shards)

# The bundled default as run-example.sh runs it (a quarter-width ResNet-50), shortened from 12 epochs to 6.
"$exe" --config "$source_dir/examples/resnet50/digits.toml" "${shards[@]}" --trainer.run_dir=default \
  --trainer.max_epochs=6 > default.log 2>&1 \
  || fail "default run: $(tail -3 default.log)"
tail -n 1 default.log
grep -q "resnet: resnet50 (base 16, 10 classes)" default.log || fail "the default is not the quarter-width ResNet-50"
acc=$(accuracy default.log)
awk -v a="$acc" 'BEGIN { exit !(a > 0.9) }' || fail "validation top1 $acc <= 0.9 (chance is 0.1)"
grep -q 'smoke test passed' default/train.log || fail "the smoke test did not run"
grep -q '"top5"' default/metrics.jsonl || fail "no top5 in metrics.jsonl"

# The rest on a narrow ResNet-18 (~1 s per epoch).
base=(--config "$source_dir/examples/resnet50/digits.toml" --trainer.device=cpu --model.variant=resnet18 --model.base_channels=16)
common=("${base[@]}" "${shards[@]}")

# Every policy at once from the command line: bf16 autocast, accumulation, clipping, channels-last,
# Nesterov off, 8-bit momentum, checkpoints, early stopping on top-1, the recovery ladder (idle on clean data).
"$exe" "${common[@]}" --trainer.max_epochs=6 --trainer.run_dir=policies --precision.mode=bf16 --accumulation.steps=2 \
  --clipping.mode=norm --clipping.max_norm=5 --model.channels_last=true --optimizer.nesterov=false --optimizer.state_bits=8 \
  --checkpoint.enabled=true --checkpoint.every_epoch=true --checkpoint.keep_last=2 \
  --early_stopping.enabled=true --early_stopping.monitor=top1 --early_stopping.mode=max \
  --early_stopping.stopping_threshold=0.5 --recovery.enabled=true > policies.log 2>&1 || fail "policies run: $(tail -3 policies.log)"
grep -q '"recovery_anomalies":0.0' policies/metrics.jsonl || fail "the recovery ladder is not on, or saw anomalies in clean data"
grep -q 'channels_last' policies.log || fail "channels_last not reported"
grep -q '"grad_norm"' policies/metrics.jsonl || fail "no grad_norm (clipping) in metrics.jsonl"
grep -q 'stopped: early_stopping: top1' policies/train.log || fail "early stopping at top1 >= 0.5 did not stop the run: $(grep -i -m3 stop policies/train.log)"
[ -f policies/checkpoints/latest ] || fail "no checkpoint written"

# Exact resume: one epoch, then a restart to two, equals two epochs straight (same schedule).
exact=("${common[@]}" --optimizer.schedule_epochs=2 --data.num_workers=2 --smoke_test.mode=off)
"$exe" "${exact[@]}" --trainer.max_epochs=2 --trainer.run_dir=straight --model.export=straight.safetensors \
  > straight.log 2>&1 || fail "straight run: $(tail -3 straight.log)"
"$exe" "${exact[@]}" --trainer.max_epochs=1 --trainer.run_dir=resumed --checkpoint.enabled=true \
  > first.log 2>&1 || fail "first half: $(tail -3 first.log)"
"$exe" "${exact[@]}" --trainer.max_epochs=2 --trainer.run_dir=resumed --checkpoint.enabled=true \
  --model.export=resumed.safetensors > second.log 2>&1 || fail "second half: $(tail -3 second.log)"
grep -q "resumed at step" second.log || fail "the second start did not resume: $(grep -m3 -i resum second.log)"
cmp -s straight.safetensors resumed.safetensors || fail "resumed weights differ from the uninterrupted run"

# Data-parallel on 2 processes (torchrun), channels-last weights and gradients through the buckets,
# sharded optimizer state (8-bit momentum) and gradients, every other residual block recomputed in backward.
out=$(timeout 300 "$python" -m torch.distributed.run --standalone --nproc-per-node=2 --no-python "$exe" "${common[@]}" \
      --trainer.max_epochs=3 --trainer.run_dir=ddp --model.channels_last=true --data.num_workers=1 \
      --distributed.shard=gradients --model.activation_checkpointing=every:2 --optimizer.state_bits=8 2>&1) \
  || fail "2-process run exited $?: $(echo "$out" | tail -3)"
grep -q <<<"$out" "resnet: resnet18 (base 16, 10 classes, channels_last) on cpu, 2 processes, 69 steps" \
  || fail "2 processes: $(echo "$out" | grep "resnet:")"
grep -q "data parallel: rank 0 of 2" ddp/train.log || fail "train.log does not show data parallelism"
grep -q "sharded (gradients): this rank updates" ddp/train.log || fail "train.log does not show sharding"
grep -q <<<"$out" "activation checkpointing: every:2" || fail "the run does not report activation checkpointing"
grep -q '"memory_optimizer_mb"' ddp/metrics.jsonl || fail "no per-rank memory in metrics.jsonl"
top1=$(grep '"event":"validation"' ddp/metrics.jsonl | tail -1 | sed 's/.*"top1":\([0-9.]*\).*/\1/')
awk -v a="$top1" 'BEGIN { exit !(a > 0.5) }' || fail "sharded, checkpointed 2-process run: top-1 $top1 <= 0.5"

# An image folder read file by file, and synthetic images.
"$exe" "${base[@]}" --images.source=folder --images.train=digits/images/train --images.val=digits/images/val \
  --trainer.max_epochs=1 --trainer.run_dir=folder > folder.log 2>&1 || fail "folder run: $(tail -3 folder.log)"
grep -q "resnet: resnet18" folder.log || fail "folder run did not finish"
"$exe" "${base[@]}" --images.source=synthetic --images.synthetic_images=64 --images.synthetic_classes=10 \
  --images.size=32 --trainer.max_epochs=1 --trainer.run_dir=synthetic > synthetic.log 2>&1 || fail "synthetic run: $(tail -3 synthetic.log)"
grep -q "resnet: resnet18 (base 16, 10 classes) on cpu, 2 steps" synthetic.log || fail "synthetic: $(tail -1 synthetic.log)"

"$exe" "${common[@]}" --smoke-test --trainer.run_dir=smoke | grep 'smoke test passed' >/dev/null || fail "--smoke-test"

# Bad input: a key's value, a missing directory, a corrupt image (an error, or a counted skip).
set +e
err=$("$exe" "${common[@]}" --model.variant=resnet51 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q <<<"$err" "model.variant" || fail "bad variant: exit $rc: $err"
err=$("$exe" "${common[@]}" --optimizer.state_bits=16 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q <<<"$err" "'optimizer.state_bits' = 16 .*state_bits must be 32 or 8, got 16" || fail "bad state_bits: exit $rc: $err"
err=$("$exe" "${common[@]}" --model.activation_checkpointing=attention 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q <<<"$err" "model.activation_checkpointing: attention is BERT's" || fail "attention on ResNet: exit $rc: $err"
err=$("$exe" "${base[@]}" --images.train=nowhere 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -q <<<"$err" "nowhere" || fail "missing directory: exit $rc: $err"
mkdir -p broken/train/0 broken/train/1 broken/val
cp digits/images/train/0/*.jpg broken/train/0/ && cp digits/images/train/1/*.jpg broken/train/1/
cp -r digits/images/val/0 digits/images/val/1 broken/val/
head -c 300 digits/images/train/1/0001.jpg > broken/train/1/0001.jpg
err=$("$exe" "${base[@]}" --images.source=folder --images.train=broken/train --images.val=broken/val --trainer.max_epochs=1 \
      --trainer.run_dir=broken1 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -q <<<"$err" "1/0001.jpg" || fail "corrupt image: exit $rc: $(echo "$err" | tail -2)"
err=$("$exe" "${base[@]}" --images.source=folder --images.train=broken/train --images.val=digits/images/val 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -q <<<"$err" "classes that differ" || fail "mismatched validation classes: exit $rc: $err"
set -e
"$exe" "${base[@]}" --images.source=folder --images.train=broken/train --images.val=broken/val --trainer.max_epochs=1 \
  --data.on_corrupt=skip --trainer.run_dir=broken2 > skip.log 2>&1 || fail "skip run: $(tail -3 skip.log)"
grep -q "skipping a corrupt sample.*1/0001.jpg" skip.log || fail "the corrupt image was not reported as skipped"
echo PASS
