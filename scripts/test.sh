#!/usr/bin/env bash
# Installs what is missing, builds everything in build/ and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/install-deps.sh
frugal_configure
cmake --build --preset default -j "$(nproc)"
ctest --preset default
