#!/usr/bin/env bash
# A Debug build of Frugal against the release LibTorch wheel: the smoke test's op trail reads
# RecordFunction, whose layout depends on NDEBUG, so it must be compiled with NDEBUG (and without
# the precompiled header, which a Debug build makes without it) in every build type. Configures
# the source tree as Debug and compiles that one file: src/policies/detail/op_trail.cpp stops
# with #error when NDEBUG is missing.
set -euo pipefail
source_dir="$1"; python="$2"; work="$3"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
launcher=(); command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$source_dir" -B "$work" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFRUGAL_PYTHON="$python" "${launcher[@]}" \
      -DFRUGAL_BUILD_TESTS=OFF -DFRUGAL_BUILD_EXAMPLES=OFF -DFRUGAL_BUILD_BENCH=OFF > "$work/configure.log" 2>&1 || fail "Debug configure: $(tail -20 "$work/configure.log")"
object=src/CMakeFiles/frugal.dir/policies/detail/op_trail.cpp.o
command=$(ninja -C "$work" -t commands "$object" | tail -1)
[[ " $command " == *" -DNDEBUG "* ]] || fail "op_trail.cpp is compiled without -DNDEBUG in a Debug build: $command"
[[ "$command" != *cmake_pch* ]] || fail "op_trail.cpp uses the Debug precompiled header (made without NDEBUG): $command"
ninja -C "$work" "$object" > "$work/compile.log" 2>&1 || fail "op_trail.cpp does not compile in a Debug build: $(tail -20 "$work/compile.log")"
echo "Debug build: op_trail.cpp compiled with NDEBUG, without the precompiled header"
