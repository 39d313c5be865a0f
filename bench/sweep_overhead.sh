#!/usr/bin/env bash
# frugal-sweep's own cost: the wall time of a 2x2 grid on the minimal example with --parallel 1
# against the sum of its cells' run times (goal <= 1.05x). Appends one JSON line.
#   bash bench/sweep_overhead.sh build/bench/results.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-build/bench/results.jsonl}"
dir=build/bench/sweep_overhead
rm -rf "$dir"
build/tools/frugal-sweep --grid precision.mode=fp32,bf16 --grid data.batch_size=64,256 --steps 30 --warmup 5 --parallel 1 \
  --out "$dir" -- build/examples/minimal/frugal_minimal --config examples/minimal/config.toml --trainer.device=cpu > "$dir.log"
python3 - "$dir/sweep.json" "$out" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
line = {"name": "sweep_overhead_2x2_minimal", "value": s["wall_seconds"], "unit": "s", "baseline": s["cell_seconds"],
        "ratio": s["wall_seconds"] / s["cell_seconds"], "command": "bash bench/sweep_overhead.sh"}
open(sys.argv[2], "a").write(json.dumps(line) + "\n")
print(f"sweep: {s['wall_seconds']:.2f} s for cells that ran {s['cell_seconds']:.2f} s: {line['ratio']:.4f}x")
PY
