#!/usr/bin/env bash
# Installs what is missing, builds the minimal example and trains it on its bundled default
# config; extra arguments go to the example (e.g. --trainer.max_epochs=2, --smoke-test, --help).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/install-deps.sh
frugal_configure
cmake --build --preset default -j "$(nproc)" --target frugal_minimal
exec build/examples/minimal/frugal_minimal --config examples/minimal/config.toml "$@"
