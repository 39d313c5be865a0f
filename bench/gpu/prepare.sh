#!/usr/bin/env bash
# Run HERE, before the GPU check: downloads the Debian packages Frugal builds against into
# build/gpu-deps/, to be carried to the GPU machine (which has no network and none of them).
# Header-only libraries, plus zlib and the data pipeline's shared libraries (libarchive with the
# runtime libraries it links, libjpeg-turbo), which run.sh puts on LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/gpu-deps
cd build/gpu-deps
rm -f ./*.deb
apt-get download libspdlog-dev libfmt-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev catch2 \
  zlib1g-dev zlib1g libgloo-dev \
  libarchive-dev libarchive13 libturbojpeg0-dev libturbojpeg0 libxxhash-dev libutf8proc-dev libutf8proc2 \
  libacl1 libbz2-1.0 liblz4-1 liblzma5 libnettle8 libxml2 libicu72 libzstd1 > /dev/null
ls -1 ./*.deb
