#!/usr/bin/env bash
# Builds Frugal with the sanitizers in its own folder and runs the unit tests under them:
#   bash scripts/sanitize.sh address   # ASan + UBSan (and LSan): build-asan/, every CPU test
#   bash scripts/sanitize.sh thread    # TSan: build-tsan/, every CPU test
#   bash scripts/sanitize.sh thread -L 'data|checkpoint'   # (ctest arguments select tests)
# Extra arguments go to ctest (for example -R jpeg). -O1 -g keeps the reports readable;
# UBSan's vptr check is off because LibTorch is built without RTTI for some classes. NDEBUG stays
# defined: the wheel's LibTorch was built with it, and some of its classes have members only
# without it (RecordFunction::inputs_valid_), so code built without NDEBUG reads another layout
# (UBSan: "load of value 101, which is not a valid value for type 'bool'" in record_function.h).
# The one file that reads RecordFunction (op_trail.cpp) now gets NDEBUG in every build type; the
# script keeps it for the whole build anyway, as the wheel was built.
# LibTorch itself is not instrumented: the sanitizers see our code and what it hands LibTorch.
# The routine before a release (about 25 min build + 8 min tests on 2 cores; docs/hardening.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
mode="${1:-address}"
shift || true
case "$mode" in
  address)
    dir=build-asan
    flags="-fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined"
    labels=()
    targets=(all)
    # LibTorch keeps allocations alive until exit (its registries, thread pools): not leaks of ours.
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
    export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/scripts/sanitize/lsan.supp:print_suppressions=0}"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
    ;;
  thread)
    dir=build-tsan
    flags="-fsanitize=thread"
    labels=()
    targets=(all)
    export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/sanitize/tsan.supp}"
    ;;
  *) echo "usage: scripts/sanitize.sh address|thread [ctest arguments]" >&2; exit 2 ;;
esac
bash scripts/install-deps.sh
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFRUGAL_PYTHON="$FRUGAL_PYTHON_BIN" \
      -DFRUGAL_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -fno-omit-frame-pointer -DNDEBUG" \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
      > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
rm -f "$dir.configure.log"
start=$(date +%s)
# FRUGAL_SANITIZE_TARGETS="a b" builds only those (then select their tests with ctest arguments).
[ -n "${FRUGAL_SANITIZE_TARGETS:-}" ] && read -r -a targets <<< "$FRUGAL_SANITIZE_TARGETS"
cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}"
built=$(date +%s)
# GPU tests skip themselves here; a sanitizer report fails its test (halt_on_error, exit code).
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" --timeout 1800 "${labels[@]}" "$@"
echo "sanitize.sh $mode: build $((built - start)) s, tests $(( $(date +%s) - built )) s"
