#!/usr/bin/env bash
# Installs what is missing, builds an example and trains it on its bundled default:
#   bash scripts/run-example.sh [resnet50|bert|minimal] [--section.key=value ...]
# resnet50 (the default): a narrow ResNet-50 on scikit-learn's handwritten digits as JPEG shards
# (prepared once into data/digits), about a minute on two CPU cores.
# bert: a tiny BERT on the bundled SQuAD-format set (examples/bert_squad/data), about a minute.
# minimal: an MLP on spirals, about 15 seconds.
# Extra arguments go to the example (e.g. --trainer.max_epochs=2, --smoke-test, --help).
set -euo pipefail
cd "$(dirname "$0")/.."
example="resnet50"
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then example="$1"; shift; fi
source scripts/env.sh
bash scripts/install-deps.sh
frugal_configure
case "$example" in
  resnet50)
    cmake --build --preset default -j "$(nproc)" --target frugal_resnet50 frugal-data
    bash examples/resnet50/prepare_digits.sh data/digits
    exec build/examples/resnet50/frugal_resnet50 --config examples/resnet50/digits.toml "$@" ;;
  bert)
    cmake --build --preset default -j "$(nproc)" --target frugal_bert_squad
    exec build/examples/bert_squad/frugal_bert_squad --config examples/bert_squad/tiny.toml "$@" ;;
  minimal)
    cmake --build --preset default -j "$(nproc)" --target frugal_minimal
    exec build/examples/minimal/frugal_minimal --config examples/minimal/config.toml "$@" ;;
  *) echo "run-example.sh: unknown example '$example' (resnet50, bert, minimal)" >&2; exit 2 ;;
esac
