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
build_consumer() {  # PREFIX FOLDER TARGET...
  cmake -S "$source_dir/tests/consumer" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
        -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_EXE_LINKER_FLAGS="$linker_flags" \
        -DCMAKE_PREFIX_PATH="$1;$torch_prefix" > "$2.configure.log" 2>&1 || { cat "$2.configure.log"; exit 1; }
  grep -q "frugal_DIR:PATH=$1" "$2/CMakeCache.txt" || { echo "found another frugal:"; grep frugal_DIR "$2/CMakeCache.txt"; exit 1; }
  # One compile at a time: the test holds one ctest slot, and the slot's time is what the suite pays.
  cmake --build "$2" -j 1 --target "${@:3}" > "$2.build.log" 2>&1 || { cat "$2.build.log"; exit 1; }
  "$2/consumer"
}
build_consumer "$work/prefix/lib/cmake/frugal" "$work/installed" consumer skip_high_loss

# A policy of one's own (public headers only) next to bf16, accumulation and checkpoints: the
# model learns in spite of a bad shard; with the policy off it does not, so the check can fail.
plug="$work/installed/skip_high_loss"
common=(--precision.mode=bf16 --accumulation.steps=2 --checkpoint.enabled=true --checkpoint.every_n_steps=4 --smoke_test.mode=off)
"$plug" "${common[@]}" --trainer.run_dir="$work/plug" --trainer.max_epochs=2 > "$work/plug.out" 2>&1 \
  || { echo "the policy did not keep the model learning:"; cat "$work/plug.out"; exit 1; }
grep -q ", 2 rollbacks," "$work/plug.out" || { echo "one rollback per epoch expected:"; tail -3 "$work/plug.out"; exit 1; }
# Resumed from its checkpoint, the policy's counters go on from where they were.
"$plug" "${common[@]}" --trainer.run_dir="$work/plug" --trainer.max_epochs=3 > "$work/plug2.out" 2>&1 \
  || { echo "the resumed run failed:"; cat "$work/plug2.out"; exit 1; }
grep -q ", 3 rollbacks," "$work/plug2.out" || { echo "the policy's state did not survive the resume:"; tail -3 "$work/plug2.out"; exit 1; }
if "$plug" "${common[@]}" --trainer.run_dir="$work/unplugged" --trainer.max_epochs=2 --skip.enabled=false > "$work/unplugged.out" 2>&1; then
  echo "without the policy the bad shard should have spoiled the model:"; tail -3 "$work/unplugged.out"; exit 1
fi
# --help says the keys and trains nothing.
help_text="$("$plug" --help --trainer.run_dir="$work/help")"
grep -q "skip.threshold" <<< "$help_text" || { echo "--help does not list the policy's key: $help_text"; exit 1; }
[ ! -e "$work/help/metrics.jsonl" ] || { echo "--help trained"; exit 1; }
# The build tree's package too (one target: finding it and linking is what differs).
build_consumer "$(cd "$build_dir" && pwd)" "$work/build-tree" consumer
