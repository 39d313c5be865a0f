#!/usr/bin/env bash
# Remote checkpoints against a real S3 server (SeaweedFS) on loopback: upload throughput against
# curl, step time while uploading against local checkpoints only, and the time from SIGTERM to a
# committed remote checkpoint for both examples (printed; docs/benchmarks.md records them).
#   bash bench/remote.sh [results.jsonl]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-build/bench/results.jsonl}"
work="$PWD/build/bench/remote"
rm -rf "$work"; mkdir -p "$work"
python="$(sed -n 's/^FRUGAL_PYTHON:[A-Z]*=//p' build/CMakeCache.txt)"
export FRUGAL_WEED="${FRUGAL_WEED:-$(dirname "$python")/weed}"
source tests/remote/s3_server.sh
s3_start "$work/s3"
s3_make_bucket bench
build/bench/frugal_bench_remote upload "$out" bench "$work/upload" "${FRUGAL_BENCH_ROUNDS_REMOTE:-3}"
build/bench/frugal_bench_remote step-time "$out" bench "$work/steps" "${FRUGAL_BENCH_ROUNDS_REMOTE:-5}"

# SIGTERM to a committed remote checkpoint: each example is signalled mid-run; the time is from the
# signal to the process's exit, which comes only after the commit (or with an error).
sigterm_to_commit() {  # NAME COMMAND...
  local name="$1"; shift
  "$@" > "$work/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 1200); do grep -q "step [0-9]* epoch" "$work/$name.log" && break; sleep 0.1; done
  local start; start=$(date +%s.%N)
  kill -TERM "$pid"
  wait "$pid" || { echo "$name: exit $? after SIGTERM: $(tail -3 "$work/$name.log")"; return 1; }
  local end; end=$(date +%s.%N)
  grep -q "committed to s3://bench/" "$work/$name.log" || { echo "$name: no remote commit: $(tail -3 "$work/$name.log")"; return 1; }
  local bytes; bytes=$(du -sb "$(ls -d "$work/$name"/checkpoints/ckpt-* | tail -1)" | cut -f1)
  echo "$name: SIGTERM to committed remote checkpoint $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') s ($bytes bytes)"
}
bash examples/resnet50/prepare_digits.sh "$work/digits" build/tools/frugal-data "$python" > "$work/prepare.log" 2>&1
sigterm_to_commit resnet build/examples/resnet50/frugal_resnet50 --config examples/resnet50/digits.toml --trainer.device=cpu \
  --images.train="$work/digits/train-shards" --images.val="$work/digits/val-shards" --trainer.run_dir="$work/resnet" \
  --trainer.log_every_n_steps=1 --checkpoint.remote=s3://bench/resnet
d=examples/bert_squad
sigterm_to_commit bert build/examples/bert_squad/frugal_bert_squad --config $d/tiny.toml --model.config=$d/tiny_config.json \
  --model.vocab=$d/data/vocab.txt --squad.train=$d/data/train.json --squad.dev=$d/data/dev.json --squad.cache="$work/cache" \
  --trainer.device=cpu --trainer.run_dir="$work/bert" --trainer.log_every_n_steps=1 --checkpoint.remote=s3://bench/bert

# Pre-emption through a link of known bandwidth (bench/throttle_proxy.py): the probe checkpoints
# every 3 steps of 250 ms, far faster than a checkpoint uploads, so an older upload is always in
# flight when SIGTERM comes. The time from SIGTERM to the exit (after the commit of the newest
# checkpoint) against that checkpoint's size / bandwidth: remote.preemption_commit (goal <= 1.1 x + 1 s).
rate=$((8 * 1024 * 1024))
proxy_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 bench/throttle_proxy.py "$proxy_port" "$S3_PORT" "$rate" > "$work/proxy.log" 2>&1 &
proxy=$!
for _ in $(seq 1 50); do grep -q ready "$work/proxy.log" && break; sleep 0.1; done
for round in 1 2 3; do
  (
    export AWS_ENDPOINT_URL="http://127.0.0.1:$proxy_port" PROBE_REMOTE="s3://bench/preempt-$round" PROBE_PAD_MB=24 PROBE_STEP_MS=250 \
      PROBE_REMOTE_DEADLINE=120
    build/tests/frugal_resume_probe "$work/preempt-$round" "$work/preempt-$round.bin" > "$work/preempt-$round.log" 2>&1 &
    pid=$!
    sleep 6
    start=$(date +%s.%N)
    kill -TERM "$pid"
    wait "$pid" || { echo "pre-emption round $round: exit $?: $(tail -3 "$work/preempt-$round.log")"; exit 1; }
    end=$(date +%s.%N)
    newest=$(ls -d "$work/preempt-$round"/checkpoints/ckpt-* | tail -1)
    bytes=$(du -sb "$newest" | cut -f1)
    grep -q "committed to s3://bench/preempt-$round/$(basename "$newest")" "$work/preempt-$round.log" || { echo "round $round: not committed"; exit 1; }
    python3 - "$out" "$start" "$end" "$bytes" "$rate" "$round" <<'PY'
import json, sys
out, start, end, size, rate, rnd = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
took, ideal = end - start, size / rate
print(f"pre-emption round {rnd}: SIGTERM to committed remote checkpoint {took:.2f} s; {size / 1e6:.1f} MB at {rate / 2**20:.0f} MiB/s is {ideal:.2f} s "
      f"(x{took / ideal:.2f}; goal <= 1.1 x + 1 s = {1.1 * ideal + 1:.2f} s)")
with open(out, "a") as f:
    f.write(json.dumps({"name": "remote.preemption_commit", "value": took, "unit": "s", "baseline": ideal, "ratio": took / ideal,
                        "command": "bash bench/remote.sh"}) + "\n")
PY
  ) || { kill "$proxy"; exit 1; }
done
kill "$proxy"
