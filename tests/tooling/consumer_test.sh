#!/usr/bin/env bash
# Installs the built Frugal into a scratch prefix and builds and runs tests/consumer against it
# with find_package(frugal), as a user's project would.
set -euo pipefail
build_dir="$1"; source_dir="$2"; python="$3"; work="$4"
rm -rf "$work"; mkdir -p "$work"
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
torch_prefix="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
launcher=(); command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$source_dir/tests/consumer" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
      -DCMAKE_PREFIX_PATH="$work/prefix;$torch_prefix" > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/build/consumer"
