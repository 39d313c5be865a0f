#!/usr/bin/env bash
# No rank outlives its launcher: torchrun's agent killed with SIGKILL mid-run (as a scheduler or the
# OOM killer ends a job). Both ranks get SIGTERM from the kernel (distributed.exit_with_launcher),
# write a pre-emption checkpoint and exit well within the timeout; the checkpoint verifies; a
# relaunch resumes and ends with the same weights, byte for byte, as an uninterrupted run.
set -euo pipefail
exe="$1"; checkpoint_tool="$2"; source_dir="$3"; python="$4"; work="$5"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
args=(--config "$source_dir/examples/minimal/config.toml" --trainer.max_epochs=2 --model.train_examples=8192
      --model.validation_examples=256 --model.hidden=768 --data.batch_size=64 --trainer.device=cpu --smoke_test.mode=off
      --checkpoint.enabled=true --checkpoint.every_n_steps=16 --trainer.log_every_n_steps=16)
launch() {  # RUN_DIR (exec: the caller's $! is the agent itself)
  exec "$python" -m torch.distributed.run --standalone --nproc-per-node=2 --no-python "$exe" "${args[@]}" --trainer.run_dir="$1"
}
# 8192 / 2 ranks / 64 = 64 steps an epoch, 128 in all: the kill comes after step 32, with 96 to go.
timeout 600 bash -c "$(declare -f launch); $(declare -p args exe python); launch whole" > whole.out 2>&1 || fail "uninterrupted: $(tail -5 whole.out)"
final=whole/checkpoints/ckpt-000000128
[ -f "$final/state.pt" ] || fail "no final checkpoint: $(ls whole/checkpoints)"

launch split > split.out 2>&1 &
agent=$!
for _ in $(seq 600); do [ -d split/checkpoints/ckpt-000000032 ] && break; sleep 0.1; done
[ -d split/checkpoints/ckpt-000000032 ] || fail "no checkpoint of step 32 appeared: $(tail -5 split.out)"
ranks=$(pgrep -P "$agent" || true)
[ -n "$ranks" ] || fail "no rank processes under the agent $agent"
kill -9 "$agent"
killed_at=$(date +%s)
for _ in $(seq 300); do
  alive=0; for r in $ranks; do kill -0 "$r" 2> /dev/null && alive=1; done
  [ "$alive" -eq 0 ] && break; sleep 0.1
done
[ "$alive" -eq 0 ] || fail "ranks $ranks still running 30 s after the agent was killed"
echo "ranks gone $(( $(date +%s) - killed_at )) s after the agent was killed"
# Both ranks get SIGTERM at nearly the same moment: rank 0 names its own signal, or the other
# rank's when that one reached the stop agreement first.
grep -qE "pre-empted by (SIGTERM|a signal to another rank)" split/train.log || fail "rank 0 did not stop as on a pre-emption: $(tail -5 split/train.log)"
latest=$(cat split/checkpoints/latest)
[ "$latest" != "ckpt-000000128" ] || fail "the run finished before the agent was killed"
"$checkpoint_tool" verify "split/checkpoints/$latest" > /dev/null || fail "the pre-emption checkpoint $latest does not verify"
grep -q "\"step\": $((10#${latest#ckpt-}))" split/PREEMPTED || fail "no PREEMPTED marker naming step ${latest#ckpt-}: $(cat split/PREEMPTED 2>&1)"
echo "stopped at $latest"

timeout 600 bash -c "$(declare -f launch); $(declare -p args exe python); launch split" > resumed.out 2>&1 || fail "relaunch: $(tail -5 resumed.out)"
[ ! -e split/PREEMPTED ] || fail "the PREEMPTED marker outlived the run that resumed"
cmp -s "$final/state.pt" split/checkpoints/ckpt-000000128/state.pt || fail "the resumed run ended with other weights"
cmp -s "$final/optimizer.pt" split/checkpoints/ckpt-000000128/optimizer.pt || fail "the resumed run ended with another optimizer state"
echo "launcher death: all checks passed"
