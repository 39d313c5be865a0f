#!/usr/bin/env bash
# Installs the built Frugal into a scratch prefix and builds and runs tests/consumer against it
# with find_package(frugal), as a user's project would; then once more against the build tree.
set -euo pipefail
# CXX_FLAGS and LINKER_FLAGS: the build's own (a sanitizer build's library needs its runtime at link time).
build_dir="$1"; source_dir="$2"; python="$3"; work="$4"; cxx_flags="${5:-}"; linker_flags="${6:-}"
rm -rf "$work"; mkdir -p "$work"
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
torch_prefix="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
launcher=(); command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
build_consumer() {  # PREFIX FOLDER
  cmake -S "$source_dir/tests/consumer" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
        -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_EXE_LINKER_FLAGS="$linker_flags" \
        -DCMAKE_PREFIX_PATH="$1;$torch_prefix" > "$2.configure.log" 2>&1 || { cat "$2.configure.log"; exit 1; }
  grep -q "frugal_DIR:PATH=$1" "$2/CMakeCache.txt" || { echo "found another frugal:"; grep frugal_DIR "$2/CMakeCache.txt"; exit 1; }
  cmake --build "$2" > "$2.build.log" 2>&1 || { cat "$2.build.log"; exit 1; }
  "$2/consumer"
}
build_consumer "$work/prefix/lib/cmake/frugal" "$work/installed"
build_consumer "$(cd "$build_dir" && pwd)" "$work/build-tree"
