#!/usr/bin/env bash
# frugal-sweep over both bundled examples, the recovery ladder on: the tiny BERT on the bundled
# SQuAD set and a narrow ResNet-18 on synthetic images, fp32 against bf16. Every cell is a row
# with samples/s and peak memory, BERT's with tokens/s and MFU, ResNet's with MFU; each cell ran
# the smoke test first and had the ladder on (recovery counters in its metrics).
set -euo pipefail
sweep="$1"; bert="$2"; resnet="$3"; source_dir="$4"; python="$5"; work="$6"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
d="$source_dir/examples/bert_squad"

check_rows() {  # results.csv, then the columns every row must have above zero
  "$python" - "$@" <<'PY'
import csv, sys
path, columns = sys.argv[1], sys.argv[2:]
rows = list(csv.DictReader(open(path)))
assert len(rows) == 2, f"{path}: {len(rows)} rows"
assert sorted(r["precision.mode"] for r in rows) == ["bf16", "fp32"], rows
for r in rows:
    assert r["status"] == "ok", f"{path}: {r}"
    for c in columns:
        assert c in r and r[c] and float(r[c]) > 0, f"{path}: {c} in {r}"
PY
}
ladder_on() {  # every cell's metrics carry the ladder's counters, with no anomaly on clean data
  for m in "$1"/cells/*/r0/run/metrics.jsonl; do
    grep -q '"recovery_anomalies":0.0' "$m" || fail "the ladder was not on in $m"
    grep -q "smoke test passed" "$(dirname "$(dirname "$m")")/output.log" || fail "no smoke test before $m"
  done
}

echo "== BERT"
"$sweep" --grid precision.mode=fp32,bf16 --steps 3 --warmup 1 --price 2.5 --no-plots --out bert -- \
  "$bert" --config "$d/tiny.toml" --model.config="$d/tiny_config.json" --model.vocab="$d/data/vocab.txt" \
  --squad.train="$d/data/train.json" --squad.dev="$d/data/dev.json" --squad.cache="$work/cache" --trainer.device=cpu --throughput.peak_tflops=0.5 --trainer.validate_every_n_steps=4 --recovery.enabled=true \
  > bert.out 2>&1 || fail "BERT sweep: $(cat bert.out)"
cat bert.out
check_rows bert/results.csv samples_per_s tokens_per_s peak_memory_mb mfu cost_per_epoch loss validation_loss
ladder_on bert

echo "== ResNet"
"$sweep" --grid precision.mode=fp32,bf16 --steps 3 --warmup 1 --price 2.5 --no-plots --out resnet -- \
  "$resnet" --config "$source_dir/examples/resnet50/digits.toml" --trainer.device=cpu --model.variant=resnet18 \
  --model.base_channels=8 --images.source=synthetic --images.synthetic_images=256 --images.synthetic_classes=10 \
  --images.size=32 --throughput.peak_tflops=0.5 --recovery.enabled=true > resnet.out 2>&1 || fail "ResNet sweep: $(cat resnet.out)"
cat resnet.out
check_rows resnet/results.csv samples_per_s peak_memory_mb mfu cost_per_epoch loss
ladder_on resnet
echo "PASS"
