#!/usr/bin/env bash
# Run HERE, before the GPU check: downloads the Debian packages Frugal builds against into
# build/gpu-deps/, to be carried to the GPU machine (which has no network and none of them).
# All are header-only libraries, plus zlib.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/gpu-deps
cd build/gpu-deps
rm -f ./*.deb
apt-get download libspdlog-dev libfmt-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev catch2 \
  zlib1g-dev zlib1g libgloo-dev > /dev/null
ls -1 ./*.deb
