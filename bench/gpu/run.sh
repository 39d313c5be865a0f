#!/usr/bin/env bash
# The GPU check, run ON the GPU machine from the repository root (after bench/gpu/prepare.sh here,
# carrying build/gpu-deps):
#   run(command="bash bench/gpu/run.sh", carry=["build/gpu-deps"])
# Unpacks the carried packages, builds with the machine's own python3 torch, runs the GPU tests
# and the GPU benchmarks, and writes everything under $OUT (results.jsonl, logs).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-build/gpu-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
python="${FRUGAL_GPU_PYTHON:-python3}"  # the machine's own torch
prefix="$PWD/build/gpu-prefix"
for deb in build/gpu-deps/*.deb; do dpkg -x "$deb" "$prefix"; done
# libarchive and libturbojpeg (and what libarchive links) from the carried packages.
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
"$python" -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.is_available())"

generator="Unix Makefiles"; command -v ninja > /dev/null && generator=Ninja
cmake -S . -B build/gpu -G "$generator" -DCMAKE_BUILD_TYPE=Release -DFRUGAL_PYTHON="$python" \
  -DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
  -DCMAKE_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu" -DTORCH_CUDA_ARCH_LIST=9.0 || exit 1
cmake --build build/gpu -j "$(nproc)" --target frugal_precision_tests frugal_core_tests frugal_checkpoint_tests \
  frugal_distributed_tests frugal_data_tests frugal_bench_gpu_precision frugal_bench_data_parallel \
  frugal_bench_data_pipeline frugal_minimal frugal_resnet_tests frugal_resnet50 frugal_bench_resnet frugal_bert_tests \
  frugal_bert_squad frugal_bench_bert frugal_tooling_tests frugal_bench_tooling || exit 1

status=0
# Every test, so the GPU-only ones run instead of skipping; the CPU ones must pass there too.
for t in core precision checkpoint distributed resnet bert tooling; do
  # (the parity tests need torchvision, transformers, safetensors, tensorboard in python3: "~[python]" skips them)
  filter=""; { [ "$t" = resnet ] || [ "$t" = bert ] || [ "$t" = tooling ]; } && filter="~[python]"
  (cd build/gpu/tests && ./frugal_${t}_tests $filter) > "$OUT/tests_$t.txt" 2>&1 || status=1
  tail -n 3 "$OUT/tests_$t.txt"
done
# Data tests without those that need Python's numpy/Pillow (the machine's python3 may lack them):
# pinned batches and the loader's worker scaling on 16 cores.
(cd build/gpu/tests && ./frugal_data_tests "~[python]") > "$OUT/tests_data.txt" 2>&1 || status=1
tail -n 3 "$OUT/tests_data.txt"
build/gpu/bench/frugal_bench_data_pipeline "$OUT/results.jsonl" build/gpu/data_pipeline > "$OUT/data_pipeline.txt" 2>&1 || status=1
cat "$OUT/data_pipeline.txt"
build/gpu/bench/frugal_bench_gpu_precision "$OUT/results.jsonl" || status=1
for p in fp32 fp16 bf16; do
  build/gpu/examples/minimal/frugal_minimal --config examples/minimal/config.toml --trainer.device=cuda \
    --precision.mode=$p --trainer.run_dir="$OUT/minimal_$p" --trainer.max_epochs=3 | tail -n 1 || status=1
done
# ResNet-50 on one GPU, channels-last (auto on CUDA), batch 256: synthetic images made on the
# device (the model alone), then photo-like 500x375 JPEGs decoded by 16 worker threads.
build/gpu/bench/frugal_bench_resnet decode "$OUT/results.jsonl" | grep -v '^{' || status=1
resnet=(build/gpu/examples/resnet50/frugal_resnet50 --trainer.device=cuda --data.batch_size=256 --smoke_test.mode=off
        --trainer.log_every_n_steps=20 --optimizer.warmup_epochs=0)
for p in bf16 fp16 fp32; do
  "${resnet[@]}" --images.source=synthetic --images.synthetic_images=$((256 * 60)) --precision.mode=$p \
    --trainer.run_dir="$OUT/resnet_synthetic_$p" > "$OUT/resnet_synthetic_$p.txt" 2>&1 || status=1
  echo "synthetic $p: $(tail -n 1 "$OUT/resnet_synthetic_$p.txt")"
done
build/gpu/bench/frugal_bench_resnet make-shards build/gpu/jpeg 25600 1000 > /dev/null || status=1
"${resnet[@]}" --images.source=shards --images.train=build/gpu/jpeg --images.val= --precision.mode=bf16 \
  --data.num_workers=16 --data.prefetch_batches=6 --trainer.max_epochs=1 --trainer.run_dir="$OUT/resnet_jpeg_bf16" \
  > "$OUT/resnet_jpeg_bf16.txt" 2>&1 || status=1
echo "JPEG bf16: $(tail -n 1 "$OUT/resnet_jpeg_bf16.txt")"
# BERT-large, sequence length 384, batch 32: fp16 and bf16 against fp32; then the bundled tiny SQuAD
# example on the GPU.
build/gpu/bench/frugal_bench_bert gpu "$OUT/results.jsonl" 32 10 || status=1
build/gpu/examples/bert_squad/frugal_bert_squad --config examples/bert_squad/tiny.toml --trainer.device=cuda \
  --precision.mode=bf16 --squad.cache=build/gpu/cache --trainer.run_dir="$OUT/bert_tiny" | tail -n 1 || status=1
# The bert example as users run it, with a BERT-large config (random weights) on the bundled data at
# sequence length 384: seq/s, MFU, peak memory and GPU utilisation from its log lines, a profile of
# 3 steps (trace, top kernels, memory-bound share of GPU time), then the automatic batch size.
bert_large=(build/gpu/examples/bert_squad/frugal_bert_squad --config examples/bert_squad/tiny.toml --trainer.device=cuda
            --model.config=bench/gpu/bert_large_config.json --squad.max_seq_length=384 --squad.doc_stride=128
            --squad.max_query_length=64 --squad.cache=build/gpu/cache --squad.dev= --smoke_test.mode=off
            --trainer.max_epochs=100 --trainer.max_steps=40 --trainer.log_every_n_steps=10 --cost.price_per_device_hour=3.5)
"${bert_large[@]}" --precision.mode=bf16 --data.batch_size=32 --profiler.every_n_steps=20 --profiler.steps=3 \
  --trainer.run_dir="$OUT/bert_large_bf16" > "$OUT/bert_large_bf16.txt" 2>&1 || status=1
grep -E "step 40 |GPU time:|^bert_squad" "$OUT/bert_large_bf16.txt"
"${bert_large[@]}" --precision.mode=bf16 --trainer.max_steps=10 --auto_batch.enabled=true --auto_batch.multiple_of=8 \
  --auto_batch.max=512 --auto_batch.cache_file="$OUT/batch_sizes.json" --trainer.run_dir="$OUT/bert_large_auto" \
  > "$OUT/bert_large_auto.txt" 2>&1 || status=1
grep -E "automatic batch size|^bert_squad" "$OUT/bert_large_auto.txt"
build/gpu/bench/frugal_bench_tooling "$OUT/results.jsonl" 9 build/gpu/profiles | grep -v '^{' || status=1
# The NCCL path with one rank (an explicit backend makes a real process group even alone): the
# all-reduce bandwidth, and a data-parallel step against the same step alone, overlapped or not.
"$python" -m torch.distributed.run --standalone --nproc-per-node=1 --no-python \
  build/gpu/bench/frugal_bench_data_parallel "$OUT/results.jsonl" cuda nccl > "$OUT/data_parallel.txt" 2>&1 || status=1
grep -E "^all-reduce|^step" "$OUT/data_parallel.txt"
# With every GPU of the machine, when it has several: the weak-scaling figure of docs/benchmarks.md.
gpus=$(nvidia-smi -L 2> /dev/null | wc -l)
if [ "$gpus" -gt 1 ]; then
  "$python" -m torch.distributed.run --standalone --nproc-per-node="$gpus" --no-python \
    build/gpu/bench/frugal_bench_data_parallel "$OUT/results.jsonl" cuda nccl > "$OUT/data_parallel_$gpus.txt" 2>&1 || status=1
fi
cat "$OUT/results.jsonl"
# A short table of every figure (name, value, unit, ratio to its baseline).
"$python" - "$OUT/results.jsonl" <<'PY' | tee "$OUT/summary.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    ratio = f"{r['ratio']:.3f}" if r.get("ratio") else ""
    print(f"{r['name']:<52} {r['value']:>12.4g} {r['unit']:<12} {ratio}")
PY
exit $status
