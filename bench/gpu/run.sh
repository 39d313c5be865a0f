#!/usr/bin/env bash
# The GPU check, run ON the GPU machine from the repository root, after bench/gpu/prepare.sh here:
#   run(command="bash bench/gpu/run.sh", carry=["build/gpu-deps", "build/gpu-bin"], timeout_s=560)
# Uses the binaries built here (prepare.sh) against the machine's own python3 torch (the same
# 2.11.0+cu130), or builds there when they do not load. Runs the test binaries (the GPU tests run
# instead of skipping) and the GPU benchmarks, each stage under a time limit so the whole stays
# inside FRUGAL_GPU_BUDGET_S seconds.
#
# What comes back from the device tool is at most 8 files, so $OUT holds only: run.log and
# results.jsonl (both written as the run goes, so a run stopped at its limit still returns them),
# summary.txt (a table of every figure) and logs.tar.gz (each stage's output, the runs' metrics,
# profiler tables and traces).
#
# Rehearsal on a machine without a GPU, the same stages on the CPU at tiny sizes, to catch wrong
# flags and paths before a GPU session:
#   FRUGAL_GPU_REHEARSAL=1 FRUGAL_GPU_PYTHON=~/.cache/frugal/venv/bin/python bash bench/gpu/run.sh
# A partial re-check (what changed since the last GPU session): FRUGAL_GPU_ONLY='^(tests_|bert_large_bench)'
# runs only the stages whose names match.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT="${OUT:-build/gpu-out}"
logs=build/gpu-logs  # every stage's output and run directory, packed into $OUT/logs.tar.gz
rm -rf "$logs"
mkdir -p "$OUT" "$logs"
exec > >(tee "$OUT/run.log") 2>&1
results="$OUT/results.jsonl"
python="${FRUGAL_GPU_PYTHON:-python3}"  # the machine's own torch
budget="${FRUGAL_GPU_BUDGET_S:-540}"  # a session has 15 device minutes: one run, with the start and transfers
bin=build/gpu-bin
status=0

if [ -n "${FRUGAL_GPU_REHEARSAL:-}" ]; then
  dev=cpu backend=gloo batch=4 images=8 jpegs=64 workers=2 bert_batch=2 bert_steps=4 bench_steps=2 rounds=3
  gpu_decode=auto verify_on=cpu gpu_workers=2 resnet_size=(--model.base_channels=8 --images.size=64)
  bert_config=examples/bert_squad/tiny_config.json auto=(--auto_batch.cpu_memory_limit_mb=1500)
else
  dev=cuda backend=nccl batch=256 images=$((256 * 60)) jpegs=12800 workers=16 bert_batch=32 bert_steps=40 bench_steps=10
  rounds=9 bert_config=bench/gpu/bert_large_config.json auto=() gpu_decode=gpu verify_on=gpu gpu_workers=4 resnet_size=()
fi

# stage NAME LIMIT_S COMMAND...: runs COMMAND with its output in $logs/NAME.txt, under `timeout`,
# skipped once the budget is spent; a failure marks the whole check failed.
stage() {
  local name=$1 limit=$2 left=$((budget - SECONDS))
  shift 2
  [[ "$name" =~ ^(configure|build)$ || "$name" =~ ${FRUGAL_GPU_ONLY:-.} ]] || return 1  # a partial re-check: these stages only
  if [ "$left" -lt 15 ]; then
    echo "[${SECONDS}s] $name: SKIPPED, out of time"
    status=1
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local begin=$SECONDS rc
  timeout "$limit" "$@" > "$logs/$name.txt" 2>&1
  rc=$?
  echo "[${SECONDS}s] $name: rc $rc after $((SECONDS - begin)) s"
  [ "$rc" -ne 0 ] && status=1 && tail -n 5 "$logs/$name.txt"
  return $rc
}

# Packs the logs for the trip back: files under 16 MiB, the traces left out when over 15 MiB.
pack() {
  local files=(find "$logs" -type f -size -16M ! -name '*.pt' ! -path '*/checkpoints/*')
  "${files[@]}" | tar czf "$OUT/logs.tar.gz" -T -
  if [ "$(stat -c %s "$OUT/logs.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
    "${files[@]}" ! -name '*.trace.json' | tar czf "$OUT/logs.tar.gz" -T -
  fi
}

summary() {
  "$python" - "$results" << 'PY' | tee "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    ratio = f"{r['ratio']:.3f}" if r.get("ratio") else ""
    print(f"{r['name']:<60} {r['value']:>12.4g} {r['unit']:<12} {ratio}")
PY
}

# --- The machine and its torch -------------------------------------------------------------------
date -u
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
prefix="$PWD/build/gpu-prefix"
for deb in build/gpu-deps/*.deb; do dpkg -x "$deb" "$prefix"; done
torch_lib=$("$python" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
nvidia_libs=$(ls -d "$torch_lib"/../../nvidia/*/lib 2> /dev/null | tr '\n' ':')
# libarchive and libturbojpeg (and what libarchive links) from the carried packages; torch's own
# libraries, CUDA's and NCCL's from the machine's torch.
export LD_LIBRARY_PATH="$torch_lib:$nvidia_libs$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# libnvjpeg (GPU JPEG decoding, opened at run time): the machine's own if its torch has the wheel,
# else the one prepare.sh carried.
[ -f build/gpu-deps/libnvjpeg.so.13 ] && ! ls "$torch_lib"/../../nvidia/cu13/lib/libnvjpeg.so.13 > /dev/null 2>&1 &&
  export FRUGAL_NVJPEG_LIBRARY="$PWD/build/gpu-deps/libnvjpeg.so.13"

# --- The binaries: carried (built here by prepare.sh) or built there -------------------------------
# The tests and benchmarks read data from the source directory they were built in.
source_dir=$(cat "$bin/SOURCE_DIR" 2> /dev/null)
if [ -n "$source_dir" ] && [ "$source_dir" != "$PWD" ] && [ ! -e "$source_dir" ]; then
  mkdir -p "$(dirname "$source_dir")" && ln -s "$PWD" "$source_dir"
fi
if "$bin/frugal_core_tests" --help > /dev/null 2>&1; then  # loads every library it links
  echo "using the binaries built by prepare.sh ($(cat "$bin/BUILT" 2> /dev/null))"
else
  echo "the carried binaries do not load here; building"
  ldd "$bin/frugal_core_tests" 2>&1 | grep -i "not found"
  generator="Unix Makefiles"
  command -v ninja > /dev/null && generator=Ninja
  stage configure 120 cmake -S . -B build/gpu -G "$generator" -DCMAKE_BUILD_TYPE=Release -DFRUGAL_PYTHON="$python" \
    -DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
    -DCMAKE_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu" -DTORCH_CUDA_ARCH_LIST=9.0 || exit 1
  stage build 400 cmake --build build/gpu -j "$(nproc)" --target $(cat bench/gpu/targets.txt) || { pack; exit 1; }
  bash bench/gpu/collect_binaries.sh build/gpu "$bin"
fi

# --- Tests: every test binary, side by side, so the GPU-only tests run instead of skipping ----------
# ("~[python]" leaves out the parity tests, which need the Python reference packages.)
pids=()
for t in core precision checkpoint distributed data resnet bert tooling memory recovery optim; do
  stage "tests_$t" 240 "$bin/frugal_${t}_tests" "~[python]" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
grep -h -E "^All tests passed|^test cases:|SKIPPED" "$logs"/tests_*.txt | sort | uniq -c

# --- Issue 31 first: ResNet-50, batch 256, channels-last (auto on CUDA). Synthetic images made on ---
# the device (the model alone), then photo-like 500x375 JPEG shards decoded on the CPU by 16 worker
# threads (one intra-op thread each, region-of-interest decoding) and on the GPU by nvJPEG, in bf16
# and fp16; resnet_jpeg_figures.py turns the runs into img/s and data-wait figures against synthetic.
resnet=("$bin/frugal_resnet50" --trainer.device=$dev --data.batch_size=$batch --smoke_test.mode=off
        --trainer.log_every_n_steps=20 --optimizer.warmup_epochs=0 --trainer.max_epochs=1 "${resnet_size[@]}")
for p in bf16 fp16 fp32; do
  stage "resnet_synthetic_$p" 90 "${resnet[@]}" --images.source=synthetic --images.synthetic_images=$images \
    --precision.mode=$p --trainer.run_dir="$logs/resnet_synthetic_$p" && tail -n 1 "$logs/resnet_synthetic_$p.txt"
done
stage resnet_make_jpegs 90 "$bin/frugal_bench_resnet" make-shards build/gpu-jpeg $jpegs 1000
stage resnet_verify_jpegs 60 "$bin/frugal-data" verify --decode --decode-on $verify_on build/gpu-jpeg && tail -n 2 "$logs/resnet_verify_jpegs.txt"
jpeg_run=("${resnet[@]}" --images.source=shards --images.train=build/gpu-jpeg --images.val= --data.prefetch_batches=6)
stage resnet_jpeg_cpu_bf16 90 "${jpeg_run[@]}" --precision.mode=bf16 --images.decode=cpu --data.num_workers=$workers \
  --trainer.run_dir="$logs/resnet_jpeg_cpu_bf16" && tail -n 1 "$logs/resnet_jpeg_cpu_bf16.txt"
for p in bf16 fp16; do
  stage "resnet_jpeg_gpu_$p" 90 "${jpeg_run[@]}" --precision.mode=$p --images.decode=$gpu_decode --data.num_workers=$gpu_workers \
    --trainer.run_dir="$logs/resnet_jpeg_gpu_$p" && grep -h -E "images.decode|^resnet" "$logs/resnet_jpeg_gpu_$p.txt"
done
stage resnet_jpeg_cpu_fp16 90 "${jpeg_run[@]}" --precision.mode=fp16 --images.decode=cpu --data.num_workers=$workers \
  --trainer.run_dir="$logs/resnet_jpeg_cpu_fp16" && tail -n 1 "$logs/resnet_jpeg_cpu_fp16.txt"
"$python" bench/gpu/resnet_jpeg_figures.py "$results" "$logs"
stage resnet_decode 60 "$bin/frugal_bench_resnet" decode "$results"
# The loader's worker threads against a busy training thread, on the machine's 16 cores.
stage data_pipeline 120 "$bin/frugal_bench_data_pipeline" "$results" build/gpu-data-pipeline loader-threads
pack

# --- Issue 34: FusedAdamW's step on BERT-base with 8-bit states over fp32 states (goal <= 1.05), and
# BERT-large's example with 8-bit states at sequence length 384 (its largest micro-batch by auto_batch below).
stage optim_step_gpu 90 "$bin/frugal_bench_optim" "$results" 7 $dev && cat "$logs/optim_step_gpu.txt"

# --- Mixed precision and data parallel first (short, and what no CPU can check): CUDA autocast in ---
# each precision, then NCCL with one rank (an explicit backend makes a real process group even alone).
stage precision_bench 90 "$bin/frugal_bench_gpu_precision" "$results"
stage data_parallel 90 "$python" -m torch.distributed.run --standalone --nproc-per-node=1 --no-python \
  "$bin/frugal_bench_data_parallel" "$results" $dev $backend && grep -E "^all-reduce|^step" "$logs/data_parallel.txt"
gpus=$(nvidia-smi -L 2> /dev/null | wc -l)
if [ "$gpus" -gt 1 ]; then  # every GPU of the machine: the weak-scaling figure of docs/benchmarks.md
  stage "data_parallel_$gpus" 90 "$python" -m torch.distributed.run --standalone --nproc-per-node="$gpus" --no-python \
    "$bin/frugal_bench_data_parallel" "$results" $dev $backend
fi

# --- BERT-large (issue 11): seq/s in fp16 and bf16 against fp32, then the example as users run it ---
stage bert_large_bench 150 "$bin/frugal_bench_bert" gpu "$results" "$bert_batch" "$bench_steps" && cat "$logs/bert_large_bench.txt"
# The example with a BERT-large config (random weights) on the bundled data at sequence length 384:
# seq/s, MFU, peak memory and GPU utilisation from its log lines, and a 3-step profile (trace, top
# kernels, memory-bound share of GPU time); then the automatic batch size on the card. Padded
# (model.unpad=false): the bundled paragraphs are short, so all 384 tokens are computed, as the
# reference scripts do; the unpadding gain is the benchmark's SQuAD-padding figure above.
bert=("$bin/frugal_bert_squad" --config examples/bert_squad/tiny.toml --trainer.device=$dev --model.config=$bert_config
      --model.unpad=false
      --squad.max_seq_length=384 --squad.doc_stride=128 --squad.max_query_length=64 --squad.cache=build/gpu-cache
      --squad.dev= --smoke_test.mode=off --trainer.max_epochs=100 --cost.price_per_device_hour=3.5)
stage bert_large_bf16 120 "${bert[@]}" --precision.mode=bf16 --data.batch_size="$bert_batch" --trainer.max_steps="$bert_steps" \
  --trainer.log_every_n_steps=$((bert_steps / 4)) --profiler.every_n_steps=$((bert_steps / 2)) --profiler.skip_steps=1 \
  --profiler.steps=3 --trainer.run_dir="$logs/bert_large_bf16"
grep -h -E "% padding|step $bert_steps |GPU time:|memory-bound|^bert_squad" "$logs/bert_large_bf16.txt"
stage bert_large_auto_8bit 120 "${bert[@]}" --precision.mode=bf16 --trainer.max_steps=10 --auto_batch.enabled=true --optimizer.state_bits=8 \
  --auto_batch.cache_file=build/gpu-logs/auto_batch_8bit.json && grep -h -E "auto_batch|batch size" "$logs/bert_large_auto_8bit.txt" | tail -3
stage bert_large_auto_8bit_checkpointing 120 "${bert[@]}" --precision.mode=bf16 --trainer.max_steps=10 --auto_batch.enabled=true \
  --optimizer.state_bits=8 --model.activation_checkpointing=full --auto_batch.cache_file=build/gpu-logs/auto_batch_8bit_ckpt.json \
  && grep -h -E "auto_batch|batch size" "$logs/bert_large_auto_8bit_checkpointing.txt" | tail -3
stage bert_large_auto 120 "${bert[@]}" --precision.mode=bf16 --trainer.max_steps=10 --auto_batch.enabled=true \
  --auto_batch.multiple_of=32 --auto_batch.max=512 --auto_batch.cache_file="$logs/batch_sizes.json" "${auto[@]}" \
  --trainer.run_dir="$logs/bert_large_auto"
grep -h -E "automatic batch size|^bert_squad" "$logs/bert_large_auto.txt"
# Memory-frugal training (issue 22): the largest BERT-large micro-batch at 384 that fits, without and
# with activation checkpointing (every layer), and seq/s at each.
stage bert_large_checkpointing 150 "$bin/frugal_bench_memory" gpu "$results" 3 && cat "$logs/bert_large_checkpointing.txt"
pack

# --- The tooling overhead, the data pipeline on 16 cores, the small examples. ----------------------
stage tooling_bench 90 "$bin/frugal_bench_tooling" "$results" $rounds "$logs/tooling_profiles"
for p in fp32 fp16 bf16; do
  stage "minimal_$p" 60 "$bin/frugal_minimal" --config examples/minimal/config.toml --trainer.device=$dev \
    --precision.mode=$p --trainer.run_dir="$logs/minimal_$p" --trainer.max_epochs=3 && tail -n 1 "$logs/minimal_$p.txt"
done
stage bert_tiny 60 "$bin/frugal_bert_squad" --config examples/bert_squad/tiny.toml --trainer.device=$dev \
  --precision.mode=bf16 --squad.cache=build/gpu-cache --trainer.run_dir="$logs/bert_tiny" && tail -n 1 "$logs/bert_tiny.txt"
# frugal-search on the device (issue 42): ASHA over the minimal example on CUDA, its promoted trials
# resumed from checkpoints written on the GPU. Optuna comes zipped in build/gpu-deps (prepare.sh);
# the machine's python3 must have numpy.
stage search_gpu 120 env PYTHONPATH="$PWD/build/gpu-deps/python.zip:$PWD/tools/frugal_search" "$python" -m frugal_search \
  --out "$logs/search_gpu" --space "model.hidden=8:64:log" --space "model.lr=1e-3:3e-2:log" --objective loss:min \
  --max-resource 3 --trials 6 --sampler tpe --seed 1 -- "$PWD/$bin/frugal_minimal" --config examples/minimal/config.toml \
  --trainer.device=$dev --precision.mode=bf16 --smoke_test.mode=off && tail -n 4 "$logs/search_gpu.txt"

summary
pack
echo "[${SECONDS}s] done, status $status"
exit $status
