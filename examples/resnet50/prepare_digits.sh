#!/usr/bin/env bash
# The ResNet example's bundled default data: scikit-learn's digits as JPEGs (make_digits.py),
# converted to tar shards with frugal-data. Idempotent: an existing OUT/train-shards is kept.
#   bash examples/resnet50/prepare_digits.sh OUT [frugal-data] [python]
set -euo pipefail
out="${1:?usage: prepare_digits.sh OUT [frugal-data] [python]}"
here="$(cd "$(dirname "$0")" && pwd)"
tool="${2:-$here/../../build/tools/frugal-data}"
python="${3:-${FRUGAL_VENV:-$HOME/.cache/frugal/venv}/bin/python}"
if [ -f "$out/val-shards/classes.json" ]; then exit 0; fi
rm -rf "$out/images" "$out/train-shards" "$out/val-shards"
"$python" "$here/make_digits.py" "$out/images" 64
"$tool" convert --from imagefolder "$out/images/train" "$out/train-shards" --shard-size 256k
"$tool" convert --from imagefolder "$out/images/val" "$out/val-shards" --shard-size 256k
