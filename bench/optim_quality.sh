#!/usr/bin/env bash
# 8-bit optimizer states reach the quality of fp32 states (issue 34): both bundled examples on
# their small defaults (tiny BERT on the bundled SQuAD set: dev F1; quarter-width ResNet-50 on the
# digits: validation top-1), over the same steps, 3 seeds each, 32 and 8 bits. One JSON line per
# example: optim.quality_<example>, value = mean with 8 bits, baseline = mean with 32 bits.
#   bash bench/optim_quality.sh [RESULTS.jsonl]
set -euo pipefail
cd "$(dirname "$0")/.."
results="${1:-build/bench/results.jsonl}"
out=build/bench/optim_quality
mkdir -p "$out"
[ -d data/digits ] || bash scripts/run-example.sh --smoke-test > /dev/null  # writes the digits shards
for seed in 1 2 3; do
  for bits in 32 8; do
    build/examples/bert_squad/frugal_bert_squad --config examples/bert_squad/tiny.toml --model.seed=$seed --data.seed=$seed \
      --optimizer.state_bits=$bits --trainer.run_dir="$out/bert-$bits-$seed" --smoke_test.mode=off --progress.enabled=false \
      > "$out/bert-$bits-$seed.log" 2>&1
    sed -n 's/.* f1 \([0-9.]*\) .*/\1/p' "$out/bert-$bits-$seed.log" | tail -1 > "$out/bert-$bits-$seed.score"
    build/examples/resnet50/frugal_resnet50 --config examples/resnet50/digits.toml --model.seed=$seed --data.seed=$seed \
      --optimizer.state_bits=$bits --trainer.run_dir="$out/resnet-$bits-$seed" --smoke_test.mode=off --progress.enabled=false \
      > "$out/resnet-$bits-$seed.log" 2>&1
    sed -n 's/.*validation top1 \([0-9.]*\).*/\1/p' "$out/resnet-$bits-$seed.log" | tail -1 > "$out/resnet-$bits-$seed.score"
    echo "seed $seed, $bits bits: BERT F1 $(cat "$out/bert-$bits-$seed.score"), ResNet top-1 $(cat "$out/resnet-$bits-$seed.score")"
  done
done
python3 - "$out" "$results" <<'PY'
import json, sys, statistics
out, results = sys.argv[1], sys.argv[2]
def scores(name, bits):
    return [float(open(f"{out}/{name}-{bits}-{s}.score").read()) for s in (1, 2, 3)]
with open(results, "a") as f:
    for name, unit, scale in (("bert", "F1", 1.0), ("resnet", "top-1 %", 100.0)):
        eight, full = [x * scale for x in scores(name, 8)], [x * scale for x in scores(name, 32)]
        line = {"name": f"optim.quality_{name}", "value": statistics.mean(eight), "unit": unit, "baseline": statistics.mean(full),
                "ratio": statistics.mean(eight) / statistics.mean(full), "command": "bash bench/optim_quality.sh",
                "eight_bit": eight, "fp32": full}
        print(json.dumps(line))
        f.write(json.dumps(line) + "\n")
PY
