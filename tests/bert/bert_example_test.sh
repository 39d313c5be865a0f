#!/usr/bin/env bash
# The BERT example end to end on the bundled SQuAD-format data, one behaviour a test
# (tests/CMakeLists.txt runs each scenario as its own ctest test, on one thread):
#   learns    loss falls, EM/F1 and an official-format predictions.json come out, the features
#             are built into the preprocessing cache; unpadding and oneDNN are the defaults
#   variants  Hugging Face's padded computation with MKL's multiplies; activation checkpointing
#   resume    cached features, bf16, accumulation, clipping, the recovery ladder, and a resume
#   inputs    --smoke-test, and bad input named by file, JSON path or key
#   bert_example_test.sh SCENARIO EXE SOURCE_DIR WORK_DIR
set -euo pipefail
scenario="$1"; exe="$2"; source_dir="$3"; work="$4/$1"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
d="$source_dir/examples/bert_squad"
base=(--config "$d/tiny.toml" --model.config="$d/tiny_config.json" --model.vocab="$d/data/vocab.txt"
      --squad.train="$d/data/train.json" --squad.cache=cache --trainer.device=cpu --trainer.cpu_threads=1)
common=("${base[@]}" --squad.dev="$d/data/dev.json")

case "$scenario" in
learns)
  "$exe" "${common[@]}" --trainer.max_epochs=4 --trainer.run_dir=run > run.log 2>&1 || fail "training run: $(tail -3 run.log)"
  tail -n 1 run.log
  grep -q "preprocessing cache miss: building bert_squad_features" run.log || fail "the features were not built into the cache"
  grep -q 'smoke test passed' run/train.log || fail "the smoke test did not run"
  first=$(grep -m1 -o '"loss":[0-9.]*' run/metrics.jsonl | cut -d: -f2)
  last=$(grep '"event":"validation"' run/metrics.jsonl | tail -1 | grep -o '"loss":[0-9.]*' | cut -d: -f2)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a * 0.75) }' || fail "loss did not fall: first train $first, last validation $last"
  f1=$(sed -n 's/.* f1 \([0-9.]*\).*/\1/p' run.log)
  awk -v f="$f1" 'BEGIN { exit !(f > 15) }' || fail "dev F1 $f1 <= 15"
  python3 -c "import json,sys; p=json.load(open('run/predictions.json')); assert len(p)==180 and all(isinstance(v,str) for v in p.values())" \
    || fail "predictions.json is not {id: answer text} for the 180 dev questions"
  grep -q "SQuAD windows: [0-9]*% padding (unpadded: not computed)" run.log || fail "unpadding is not the default"
  grep -q "float32 linear layers on the CPU through onednn" run.log || fail "oneDNN is not the CPU default"
  ;;
variants)  # unpadding off and MKL's multiplies: Hugging Face's padded computation; attention cores recomputed
  "$exe" "${common[@]}" --trainer.max_steps=3 --model.unpad=false --model.cpu_gemm=mkl --trainer.run_dir=padded > padded.log 2>&1 \
    || fail "padded run: $(tail -3 padded.log)"
  grep -q "% padding (computed: model.unpad is off)" padded.log || fail "model.unpad=false was not applied"
  grep -q "float32 linear layers on the CPU through mkl" padded.log || fail "model.cpu_gemm=mkl was not applied"
  "$exe" "${common[@]}" --trainer.max_steps=3 --model.activation_checkpointing=attention --trainer.run_dir=recompute > recompute.log 2>&1 \
    || fail "checkpointed run: $(tail -3 recompute.log)"
  grep -q "activation checkpointing: attention" recompute.log || fail "model.activation_checkpointing was not applied"
  ;;
resume)  # the second start finds the features in the cache; its policies' state comes back on resume
  policies=(--precision.mode=bf16 --accumulation.steps=2 --clipping.mode=norm --checkpoint.enabled=true --recovery.enabled=true)
  "$exe" "${common[@]}" --trainer.max_steps=4 --trainer.run_dir=warm > warm.log 2>&1 || fail "cache-building run: $(tail -3 warm.log)"
  # A few steps each, stopped and resumed mid-epoch: bf16 on a CPU without AVX-512 BF16 runs at a tenth of fp32's speed.
  "$exe" "${common[@]}" --trainer.max_steps=6 --trainer.run_dir=ck "${policies[@]}" > ck1.log 2>&1 || fail "policies run: $(tail -3 ck1.log)"
  grep -q "preprocessing cache hit: bert_squad_features" ck1.log || fail "the second run tokenized again"
  "$exe" "${common[@]}" --trainer.max_steps=9 --trainer.run_dir=ck "${policies[@]}" > ck2.log 2>&1 || fail "resumed run: $(tail -3 ck2.log)"
  grep -q "recovery: on" ck2.log || fail "the recovery ladder is not on"
  grep -q "resumed at step 6, epoch 0" ck2.log || fail "did not resume: $(grep -m2 -i resum ck2.log)"
  grep -q "fit done: 9 steps" ck2.log || fail "the resumed run did not stop at step 9: $(grep -m1 'fit done' ck2.log)"
  ;;
inputs)
  "$exe" "${common[@]}" --smoke-test --trainer.run_dir=smoke | grep 'smoke test passed' >/dev/null || fail "--smoke-test"
  set +e
  printf '{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "1", "question": 7}]}]}]}' > bad.json
  err=$("$exe" "${base[@]}" --squad.dev=bad.json --trainer.run_dir=bad 2>&1); rc=$?
  [ "$rc" -eq 1 ] && grep -q <<<"$err" 'bad.json: $.data\[0\].paragraphs\[0\].qas\[0\].question: expected string' \
    || fail "malformed SQuAD: exit $rc: $err"
  err=$("$exe" "${common[@]}" --squad.max_seq_length=many 2>&1); rc=$?
  [ "$rc" -eq 2 ] && grep -q <<<"$err" "squad.max_seq_length" || fail "bad value: exit $rc: $err"
  err=$("$exe" "${common[@]}" --model.activation_checkpointing=every:0 2>&1); rc=$?
  [ "$rc" -eq 2 ] && grep -q <<<"$err" "model.activation_checkpointing" || fail "bad activation_checkpointing: exit $rc: $err"
  err=$("$exe" "${common[@]}" --model.cpu_gemm=blas 2>&1); rc=$?
  [ "$rc" -eq 2 ] && grep -q <<<"$err" "model.cpu_gemm must be one of onednn, mkl; got 'blas'" || fail "bad cpu_gemm: exit $rc: $err"
  err=$("$exe" "${common[@]}" --optimizer.state_bits=4 2>&1); rc=$?
  [ "$rc" -eq 2 ] && grep -q <<<"$err" "'optimizer.state_bits' = 4 .*state_bits must be 32 or 8, got 4" || fail "bad state_bits: exit $rc: $err"
  err=$("$exe" "${common[@]}" --optimizer.state_bits=8 --optimizer.fused=false 2>&1); rc=$?
  [ "$rc" -eq 2 ] && grep -q <<<"$err" "state_bits=8 needs optimizer.fused=true" || fail "8-bit unfused: exit $rc: $err"
  set -e
  ;;
*) fail "unknown scenario $scenario" ;;
esac
echo PASS
