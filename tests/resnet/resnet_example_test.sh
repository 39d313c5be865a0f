#!/usr/bin/env bash
# The ResNet example end to end on the bundled digits, one behaviour a test (tests/CMakeLists.txt
# runs each scenario as its own ctest test, on one training thread and one loader thread):
#   prepare   the repo's script writes the digits as shards (the fixture the others read)
#   learns    the bundled default (a quarter-width ResNet-50) learns them: the one learning check
#   policies  every policy switches on from the command line at once
#   resume    a run stopped after one epoch and resumed ends with an uninterrupted run's weights
#   ddp       2 processes, sharded 8-bit state and gradients, activation checkpointing
#   inputs    image folders, synthetic images, --smoke-test, and bad input named by key or file
#   resnet_example_test.sh SCENARIO EXE FRUGAL_DATA SOURCE_DIR PYTHON WORK_DIR
set -euo pipefail
scenario="$1"; exe="$2"; tool="$3"; source_dir="$4"; python="$5"; work="$6"
fail() { echo "FAIL: $*"; exit 1; }
accuracy() { sed -n 's/.*validation top1 \([0-9.]*\).*/\1/p' "$1"; }
digits="$work/digits"
shards=(--images.train="$digits/train-shards" --images.val="$digits/val-shards")
# One training thread and one loader thread: what the test's PROCESSORS property declares.
threads=(--trainer.cpu_threads=1 --data.num_workers=1)
# The rest on a narrow ResNet-18 (~1 s per epoch).
base=(--config "$source_dir/examples/resnet50/digits.toml" --trainer.device=cpu --model.variant=resnet18 --model.base_channels=16 "${threads[@]}")
common=("${base[@]}" "${shards[@]}")

if [ "$scenario" = prepare ]; then
  rm -rf "$work"; mkdir -p "$work"
  bash "$source_dir/examples/resnet50/prepare_digits.sh" "$digits" "$tool" "$python" > "$work/prepare.log" 2>&1 ||
    fail "prepare_digits: $(tail -3 "$work/prepare.log")"
  [ -f "$digits/train-shards/classes.json" ] || fail "no shards written"
  echo PASS; exit 0
fi
[ -f "$digits/val-shards/classes.json" ] || fail "no digits in $digits (the prepare scenario did not run)"
run="$work/$scenario"; rm -rf "$run"; mkdir -p "$run"; cd "$run"

case "$scenario" in
learns)  # the bundled default as run-example.sh runs it, shortened from 12 epochs to 3
  "$exe" --config "$source_dir/examples/resnet50/digits.toml" "${shards[@]}" "${threads[@]}" --trainer.run_dir=default \
    --trainer.max_epochs=3 > default.log 2>&1 || fail "default run: $(tail -3 default.log)"
  tail -n 1 default.log
  grep -q "resnet: resnet50 (base 16, 10 classes)" default.log || fail "the default is not the quarter-width ResNet-50"
  acc=$(accuracy default.log)
  awk -v a="$acc" 'BEGIN { exit !(a > 0.7) }' || fail "validation top1 $acc <= 0.7 after 3 epochs (chance is 0.1)"
  grep -q 'smoke test passed' default/train.log || fail "the smoke test did not run"
  grep -q '"top5"' default/metrics.jsonl || fail "no top5 in metrics.jsonl"
  ;;
policies)  # bf16 autocast, accumulation, clipping, channels-last, Nesterov off, 8-bit momentum, checkpoints,
           # early stopping on top-1, the recovery ladder (idle on clean data)
  "$exe" "${common[@]}" --trainer.max_epochs=4 --trainer.run_dir=policies --precision.mode=bf16 --accumulation.steps=2 \
    --clipping.mode=norm --clipping.max_norm=5 --model.channels_last=true --optimizer.nesterov=false --optimizer.state_bits=8 \
    --checkpoint.enabled=true --checkpoint.every_epoch=true --checkpoint.keep_last=2 \
    --early_stopping.enabled=true --early_stopping.monitor=top1 --early_stopping.mode=max \
    --early_stopping.stopping_threshold=0.3 --recovery.enabled=true > policies.log 2>&1 || fail "policies run: $(tail -3 policies.log)"
  grep -q '"recovery_anomalies":0.0' policies/metrics.jsonl || fail "the recovery ladder is not on, or saw anomalies in clean data"
  grep -q 'channels_last' policies.log || fail "channels_last not reported"
  grep -q '"grad_norm"' policies/metrics.jsonl || fail "no grad_norm (clipping) in metrics.jsonl"
  grep -q 'stopped: early_stopping: top1' policies/train.log || fail "early stopping at top1 >= 0.3 did not stop the run: $(grep -i -m3 stop policies/train.log)"
  [ -f policies/checkpoints/latest ] || fail "no checkpoint written"
  ;;
resume)  # one epoch, then a restart to two, equals two epochs straight (same schedule)
  exact=("${common[@]}" --optimizer.schedule_epochs=2 --smoke_test.mode=off)
  "$exe" "${exact[@]}" --trainer.max_epochs=2 --trainer.run_dir=straight --model.export=straight.safetensors \
    > straight.log 2>&1 || fail "straight run: $(tail -3 straight.log)"
  "$exe" "${exact[@]}" --trainer.max_epochs=1 --trainer.run_dir=resumed --checkpoint.enabled=true \
    > first.log 2>&1 || fail "first half: $(tail -3 first.log)"
  "$exe" "${exact[@]}" --trainer.max_epochs=2 --trainer.run_dir=resumed --checkpoint.enabled=true \
    --model.export=resumed.safetensors > second.log 2>&1 || fail "second half: $(tail -3 second.log)"
  grep -q "resumed at step" second.log || fail "the second start did not resume: $(grep -m3 -i resum second.log)"
  cmp -s straight.safetensors resumed.safetensors || fail "resumed weights differ from the uninterrupted run"
  ;;
ddp)  # channels-last weights and gradients through the buckets, sharded 8-bit momentum and gradients,
      # every other residual block recomputed in backward
  # Each process: one training thread, the batches read on it (no loader thread): 2 processors.
  ddp=(--config "$source_dir/examples/resnet50/digits.toml" --trainer.device=cpu --model.variant=resnet18 --model.base_channels=16
       --trainer.cpu_threads=1 --data.num_workers=0 "${shards[@]}")
  out=$(OMP_NUM_THREADS=1 timeout 170 "$python" -m torch.distributed.run --standalone --nproc-per-node=2 --no-python "$exe" "${ddp[@]}" \
        --trainer.max_epochs=2 --trainer.run_dir=ddp --model.channels_last=true \
        --distributed.shard=gradients --model.activation_checkpointing=every:2 --optimizer.state_bits=8 2>&1) \
    || fail "2-process run exited $?: $(echo "$out" | tail -3)"
  grep -q <<<"$out" "resnet: resnet18 (base 16, 10 classes, channels_last) on cpu, 2 processes, 46 steps" \
    || fail "2 processes: $(echo "$out" | grep "resnet:")"
  grep -q "data parallel: rank 0 of 2" ddp/train.log || fail "train.log does not show data parallelism"
  grep -q "sharded (gradients): this rank updates" ddp/train.log || fail "train.log does not show sharding"
  grep -q <<<"$out" "activation checkpointing: every:2" || fail "the run does not report activation checkpointing"
  grep -q '"memory_optimizer_mb"' ddp/metrics.jsonl || fail "no per-rank memory in metrics.jsonl"
  top1=$(grep '"event":"validation"' ddp/metrics.jsonl | tail -1 | sed 's/.*"top1":\([0-9.]*\).*/\1/')
  awk -v a="$top1" 'BEGIN { exit !(a > 0.3) }' || fail "sharded, checkpointed 2-process run: top-1 $top1 <= 0.3"
  ;;
inputs)  # an image folder read file by file, synthetic images, the smoke test alone, bad input
  "$exe" "${base[@]}" --images.source=folder --images.train="$digits/images/train" --images.val="$digits/images/val" \
    --trainer.max_epochs=1 --trainer.run_dir=folder > folder.log 2>&1 || fail "folder run: $(tail -3 folder.log)"
  grep -q "resnet: resnet18" folder.log || fail "folder run did not finish"
  "$exe" "${base[@]}" --images.source=synthetic --images.synthetic_images=64 --images.synthetic_classes=10 \
    --images.size=32 --trainer.max_epochs=1 --trainer.run_dir=synthetic > synthetic.log 2>&1 || fail "synthetic run: $(tail -3 synthetic.log)"
  grep -q "resnet: resnet18 (base 16, 10 classes) on cpu, 2 steps" synthetic.log || fail "synthetic: $(tail -1 synthetic.log)"
  "$exe" "${common[@]}" --smoke-test --trainer.run_dir=smoke | grep 'smoke test passed' >/dev/null || fail "--smoke-test"
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
  cp "$digits"/images/train/0/*.jpg broken/train/0/ && cp "$digits"/images/train/1/*.jpg broken/train/1/
  cp -r "$digits"/images/val/0 "$digits"/images/val/1 broken/val/
  head -c 300 "$digits/images/train/1/0001.jpg" > broken/train/1/0001.jpg
  err=$("$exe" "${base[@]}" --images.source=folder --images.train=broken/train --images.val=broken/val --trainer.max_epochs=1 \
        --trainer.run_dir=broken1 2>&1); rc=$?
  [ "$rc" -eq 1 ] && grep -q <<<"$err" "1/0001.jpg" || fail "corrupt image: exit $rc: $(echo "$err" | tail -2)"
  err=$("$exe" "${base[@]}" --images.source=folder --images.train=broken/train --images.val="$digits/images/val" 2>&1); rc=$?
  [ "$rc" -eq 1 ] && grep -q <<<"$err" "classes that differ" || fail "mismatched validation classes: exit $rc: $err"
  set -e
  "$exe" "${base[@]}" --images.source=folder --images.train=broken/train --images.val=broken/val --trainer.max_epochs=1 \
    --data.on_corrupt=skip --trainer.run_dir=broken2 > skip.log 2>&1 || fail "skip run: $(tail -3 skip.log)"
  grep -q "skipping a corrupt sample.*1/0001.jpg" skip.log || fail "the corrupt image was not reported as skipped"
  ;;
*) fail "unknown scenario $scenario" ;;
esac
echo PASS
