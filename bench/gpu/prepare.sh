#!/usr/bin/env bash
# Run HERE, before the GPU check. The GPU machine has no network and none of our Debian packages, but
# the same torch (2.11.0+cu130) as our venv, so:
# - build/gpu-deps/: the Debian packages Frugal builds and runs against: header-only libraries, zlib,
#   the data pipeline's shared libraries (libarchive with what it links, libjpeg-turbo) and pugixml
#   (remote checkpoints; libcurl and libcrypto are opened at run time, only by runs that use them), which
#   run.sh unpacks and puts on LD_LIBRARY_PATH; and libnvjpeg from the venv's nvidia-nvjpeg wheel;
# - build/gpu-bin/: the GPU check's programs built here in Release (bench/gpu/targets.txt), stripped,
#   so the check spends its device time running rather than compiling (run.sh builds there when
#   they do not load).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/gpu-deps
(
  cd build/gpu-deps
  rm -f ./*.deb
  apt-get download libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev catch2 \
    zlib1g-dev zlib1g libgloo-dev \
    libarchive-dev libarchive13 libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo libxxhash-dev libutf8proc-dev libutf8proc2 \
    libacl1 libbz2-1.0 liblz4-1 liblzma5 libnettle8 libxml2 libicu72 libzstd1 \
    libpugixml-dev libpugixml1v5 > /dev/null  # pugixml: remote checkpoints' XML (libcurl and libcrypto are opened only when used)
)
# libnvjpeg from the nvidia-nvjpeg wheel (GPU JPEG decoding), in case the machine's torch lacks it.
venv_nvjpeg=$("${FRUGAL_VENV:-$HOME/.cache/frugal/venv}/bin/python" -c \
  "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13', 'lib', 'libnvjpeg.so.13'))")
cp "$venv_nvjpeg" build/gpu-deps/
# Optuna and its pure-Python dependencies, zipped, for frugal-search's stage (the machine's python3
# has torch and numpy but not these).
"${FRUGAL_VENV:-$HOME/.cache/frugal/venv}/bin/python" - build/gpu-deps/python.zip <<'PY'
import os, sys, zipfile, optuna
site = os.path.dirname(os.path.dirname(optuna.__file__))
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    for package in ("optuna", "colorlog", "tqdm", "packaging"):
        for root, dirs, files in os.walk(os.path.join(site, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for f in files:
                z.write(os.path.join(root, f), os.path.relpath(os.path.join(root, f), site))
PY
source scripts/env.sh
grep -q "CMAKE_BUILD_TYPE:STRING=Release" build/CMakeCache.txt || { echo "prepare.sh: build/ is not a Release build" >&2; exit 1; }
cmake --build build -j "$(nproc)" --target $(cat bench/gpu/targets.txt)
bash bench/gpu/collect_binaries.sh build build/gpu-bin
du -sh build/gpu-deps build/gpu-bin
