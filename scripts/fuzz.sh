#!/usr/bin/env bash
# Fuzzes every parser of outside input (tests/fuzz/*_fuzz.cpp) with libFuzzer under AddressSanitizer
# and UBSan, each for SECONDS (default 60), starting from the seeds in tests/fuzz/corpus/<target>.
# Each target's parser sources are compiled with clang and the sanitizers (the table below); the
# rest of Frugal comes from the normal build (build/src/libfrugal.a), so build first
# (bash scripts/test.sh). Findings (crash inputs) land in build/fuzz/<target>/; exit 1 if any.
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
# FRUGAL_FUZZ_SEED=N fixes libFuzzer's random seed (CI: the same short run every time).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
seconds="${1:-60}"
shift || true
[ -f build/src/libfrugal.a ] || { echo "fuzz.sh: build first (bash scripts/test.sh)" >&2; exit 2; }
torch=$("$FRUGAL_PYTHON_BIN" -c "import os, torch; print(os.path.dirname(torch.__file__))")

# target -> the sources it instruments (the parser and what it calls on the input's bytes)
declare -A sources=(
  [checkpoint]="src/checkpoint/checkpoint_store.cpp src/checkpoint/consolidate.cpp src/base/durable_io.cpp src/base/snapshot.cpp src/optim/portable_state.cpp"
  [tar_shard]="src/data/tar_shard.cpp src/data/detail/tar_members.cpp src/data/sample.cpp"
  [jpeg]="src/data/image/jpeg.cpp src/data/image/jpeg_region.cpp src/data/image/detail/restart_crop.cpp src/data/image/detail/libjpeg_errors.cpp src/data/image/jpeg_restart_markers.cpp"
  [npy]="src/data/npy.cpp"
  [safetensors]="src/io/safetensors.cpp"
  [squad]="src/text/squad.cpp src/text/wordpiece.cpp src/data/converters.cpp"
  [wordpiece]="src/text/wordpiece.cpp"
  [config]="src/config/config.cpp src/config/command_line.cpp"
  [s3_xml]="src/remote/s3_xml.cpp"
  [sweep]="tools/frugal_sweep/cell_metrics.cpp tools/frugal_sweep/grid.cpp tools/frugal_sweep/job_queue.cpp tools/frugal_sweep/process_pool.cpp tools/frugal_sweep/report.cpp tools/frugal_sweep/run_record.cpp"
)
# Python targets (atheris, libFuzzer's engine for Python): tests/fuzz/<target>_fuzz.py.
python_targets=(search)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(checkpoint tar_shard jpeg npy safetensors squad wordpiece config sweep s3_xml search)

flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-sanitize=vptr
       -D_GLIBCXX_USE_CXX11_ABI=1 -Iinclude -Isrc -Itools -Itests/fuzz -Ithird_party/tomlplusplus/include -isystem "$torch/include"
       -isystem "$torch/include/torch/csrc/api/include" -isystem /usr/local/cuda/include)
libs=(build/src/libfrugal.a -Wl,--no-as-needed -L"$torch/lib" -ltorch -ltorch_cpu -lc10 -ltorch_cuda -lc10_cuda
      -Wl,-rpath,"$torch/lib" -L/usr/local/cuda/lib64 -lcudart -Wl,--as-needed -larchive -lpugixml -lturbojpeg -ljpeg -lutf8proc -lz -lpthread -ldl)
cxx=clang++-14
command -v ccache > /dev/null && cxx="ccache clang++-14"
seed=()
[ -n "${FRUGAL_FUZZ_SEED:-}" ] && seed=(-seed="$FRUGAL_FUZZ_SEED")
# Each source is compiled on its own, as many at a time as there are cores: ccache caches only
# one-source calls (a source shared by two targets then comes from the cache too); the objects are
# linked with libFuzzer's main.
compile_flags=("${flags[@]/-fsanitize=fuzzer,/-fsanitize=fuzzer-no-link,}")
compile_all() {  # SOURCE... -> prints the objects; compile errors on stderr, status 1
  # In batches of nproc, each compile waited for by its pid (`wait -n` can miss a job that ended
  # before it was called, and then returns 127).
  local src obj objs=() pids=() failed=0 pid
  for src in "$@"; do
    obj=build/fuzz/obj/${src//\//_}.o
    objs+=("$obj")
    $cxx "${compile_flags[@]}" -c "$src" -o "$obj" &
    pids+=($!)
    if [ "${#pids[@]}" -ge "$(nproc)" ]; then
      for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
      pids=()
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  echo "${objs[@]}"
  [ "$failed" -eq 0 ] || echo "compile failed: $*" >&2
  return $failed
}
mkdir -p build/fuzz/obj
status=0
for t in "${targets[@]}"; do
  out=build/fuzz/$t
  mkdir -p "$out/corpus"
  cp -n tests/fuzz/corpus/"$t"/* "$out/corpus/" 2> /dev/null
  if [[ " ${python_targets[*]} " == *" $t "* ]]; then
    "$FRUGAL_PYTHON_BIN" tests/fuzz/"$t"_fuzz.py "$out/corpus" -max_total_time="$seconds" -artifact_prefix="$out/" -max_len=65536 \
      -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 "${seed[@]}" > "$out/run.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/run.log")
    if [ "$rc" -ne 0 ]; then
      status=1
      echo "$t: FINDING after ${runs:-?} runs: $(grep -m1 -E "Uncaught Python exception|Error|error" "$out/run.log")"
      for f in "$out"/crash-* "$out"/timeout-*; do if [ -e "$f" ]; then echo "$f"; fi; done
    else
      echo "$t: ${runs:-?} runs in ${seconds} s (Python, atheris), corpus $(ls "$out/corpus" | wc -l) inputs, no finding"
    fi
    continue
  fi
  # shellcheck disable=SC2086
  if ! objects=$(compile_all tests/fuzz/"$t"_fuzz.cpp ${sources[$t]} 2> "$out/build.log") ||
     ! $cxx "${flags[@]}" $objects -o "$out/fuzz" "${libs[@]}" >> "$out/build.log" 2>&1; then
    echo "$t: build failed (see $out/build.log)"; tail -5 "$out/build.log"; status=1; continue
  fi
  # LibTorch's own allocations are not instrumented; leaks inside it are not ours to report.
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 FRUGAL_FUZZ_SEED_DIR="$out/corpus" \
    "$out/fuzz" "$out/corpus" -max_total_time="$seconds" -artifact_prefix="$out/" -max_len=65536 -timeout=20 \
    -rss_limit_mb=4096 -print_final_stats=1 "${seed[@]}" > "$out/run.log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/run.log")
  cov=$(grep -o "cov: [0-9]*" "$out/run.log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    status=1
    echo "$t: FINDING after ${runs:-?} runs ($cov): $(grep -m1 -E "ERROR|runtime error|terminate|deadly signal" "$out/run.log")"
    for f in "$out"/crash-* "$out"/oom-* "$out"/timeout-*; do if [ -e "$f" ]; then echo "$f"; fi; done
  else
    echo "$t: ${runs:-?} runs in ${seconds} s, $cov, corpus $(ls "$out/corpus" | wc -l) inputs, no finding"
  fi
done
exit $status
