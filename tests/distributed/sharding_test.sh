#!/usr/bin/env bash
# Sharded optimizer state and gradients across processes (each scenario's first launch by torchrun,
# the others started directly: torchrun_probe.sh), checked against
# unsharded data parallelism; sharded checkpoints resumed on other world sizes and exported.
#   sharding_test.sh PROBE PYTHON FRUGAL_CHECKPOINT WORK_DIR SCENARIO
set -uo pipefail
probe="$1"; python="$2"; tool="$3"; work="$4"; scenario="$5"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/torchrun_probe.sh"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
close() {  # a b what: the parameter files agree to relative 1e-6
  "$python" - "$1" "$2" <<'PY' || fail "$3"
import sys, numpy as np
a, b = np.loadtxt(sys.argv[1]), np.loadtxt(sys.argv[2])
d = float(np.linalg.norm(a - b) / np.linalg.norm(b))
print(f"relative difference {d:.3g}")
sys.exit(0 if a.shape == b.shape and d <= 1e-6 else 1)
PY
}
# The reference: 2 ranks sharding gradients, micro-batches of 6 (12 a step), 12 steps.
reference() {
  out=$(launch 2 train shard=gradients batch=6 dir=whole max_steps=12 out=whole.txt) || fail "uninterrupted: $out"
  expect_all "$out" 2 "stopped at step 12"
  grep -q <<<"$out" "sharded (gradients)" || fail "the run did not shard: $out"
}
# The first half of it, stopped after the checkpoint of step 6.
first_half() {
  out=$(launch_direct 2 train shard=gradients batch=6 dir="$1" max_steps=6) || fail "first half: $out"
  ls "$1"/checkpoints/ckpt-000000006/shard-0000{0,1}-of-00002.{weights,optimizer}.pt >/dev/null || fail "no shard files: $(ls -R "$1")"
  [ -e "$1"/checkpoints/ckpt-000000006/optimizer.pt ] && fail "a sharded checkpoint has a whole optimizer.pt"
  true
}

launcher=launch  # the first launch of a loop goes through torchrun (torchrun_probe.sh)
case "$scenario" in
parity)
  for setup in "2 shard=gradients optimizer=adamw" "2 shard=optimizer optimizer=sgd" "3 shard=gradients optimizer=sgd" \
               "3 shard=optimizer optimizer=fused" "2 shard=gradients optimizer=fused"; do
    set -- $setup
    n="$1"; shift
    out=$($launcher "$n" parity "$@") || fail "$n processes, $*: $out"; launcher=launch_direct
    expect_all "$out" "$n" "parity ok"
    grep -m1 "parity ok" <<<"$out"
    echo "ok: $n processes, $*"
  done ;;
reshard)
  reference
  first_half split
  for target in "2 shard=gradients batch=6" "3 shard=gradients batch=4" "3 shard=optimizer batch=4" "1 shard=off batch=12" \
                "2 shard=off batch=6"; do
    set -- $target
    n="$1"; shift
    dir="resume-$n-$1"; rm -rf "$dir"; cp -r split "$dir"
    out=$(launch_direct "$n" train "$@" dir="$dir" max_steps=12 out="$dir.txt") || fail "resume on $n ($*): $out"
    grep -q <<<"$out" "resuming from .*ckpt-000000006" || fail "resume on $n ($*) did not start from step 6: $out"
    expect_all "$out" "$n" "stopped at step 12"
    if [ "$n" = 2 ] && [ "$1" = shard=gradients ]; then
      cmp -s whole.txt "$dir.txt" || fail "resumed on the same layout but not bitwise equal"
      echo "ok: resumed on 2 sharded processes, bitwise equal to the uninterrupted run"
    else
      close "$dir.txt" whole.txt "resumed on $n ($*) but the continuation differs from the uninterrupted run"
      echo "ok: the 2-process sharded checkpoint continued on $n processes ($*)"
    fi
  done
  # And the other way: an unsharded 2-process checkpoint continued sharded.
  out=$(launch_direct 2 train shard=off batch=6 dir=plain_whole max_steps=12 out=plain_whole.txt) || fail "unsharded: $out"
  out=$(launch_direct 2 train shard=off batch=6 dir=plain_split max_steps=6) || fail "unsharded first half: $out"
  out=$(launch_direct 2 train shard=gradients batch=6 dir=plain_split max_steps=12 out=plain_split.txt) || fail "unsharded -> sharded: $out"
  close plain_split.txt plain_whole.txt "an unsharded checkpoint continued sharded differs from the uninterrupted run"
  echo "ok: an unsharded checkpoint continued with sharded gradients" ;;
remote)  # to a real S3 server and back: a fresh directory on 3 ranks resumes from the bucket
  source "$here/../remote/s3_server.sh"
  s3_start "$work/s3"
  s3_make_bucket frugal || fail "cannot create the bucket"
  reference
  out=$(launch_direct 2 train shard=gradients batch=6 dir=up max_steps=6 remote=s3://frugal/sharded) || fail "sharded run with a remote: $out"
  keys=$(s3_keys frugal sharded/ckpt-000000006/)
  for f in shard-00000-of-00002.weights.pt shard-00001-of-00002.optimizer.pt meta.json manifest.json; do
    grep -q "/$f$" <<<"$keys" || fail "the remote checkpoint lacks $f: $keys"
  done
  out=$(launch_direct 3 train shard=gradients batch=4 dir=fresh3 max_steps=12 remote=s3://frugal/sharded out=fresh3.txt) ||
    fail "3 ranks from the bucket: $out"
  grep -q <<<"$out" "downloaded the remote checkpoint s3://frugal/sharded/ckpt-000000006" || fail "3 ranks did not download step 6: $out"
  expect_all "$out" 3 "stopped at step 12"
  close fresh3.txt whole.txt "3 ranks resumed from the bucket but the continuation differs"
  echo "ok: a 2-rank sharded checkpoint in the bucket continued on 3 fresh ranks"
  rm -rf fresh2b
  out=$(launch_direct 2 train shard=gradients batch=6 dir=fresh2b max_steps=6 remote=s3://frugal/sharded-b) || fail "$out"
  rm -rf fresh2b
  out=$(launch_direct 2 train shard=gradients batch=6 dir=fresh2b max_steps=12 remote=s3://frugal/sharded-b out=fresh2b.txt) || fail "$out"
  grep -q <<<"$out" "downloaded the remote checkpoint" || fail "2 fresh ranks did not download: $out"
  cmp -s whole.txt fresh2b.txt || fail "2 fresh ranks resumed from the bucket but not bitwise equal"
  echo "ok: 2 fresh ranks resumed from the bucket, bitwise" ;;
optim8)  # 8-bit optimizer states: sharded equals unsharded 8-bit, and a 2-rank checkpoint continues on 3 and 2
  for setup in "2 shard=gradients optimizer=fused8" "3 shard=gradients optimizer=fused8" "3 shard=optimizer optimizer=sgd8" \
               "2 shard=optimizer optimizer=sgd8"; do
    set -- $setup
    n="$1"; shift
    out=$($launcher "$n" parity "$@" hidden=64 slack_percent=30) || fail "$n processes, $*: $out"; launcher=launch_direct
    expect_all "$out" "$n" "parity ok"
    grep -m1 "parity ok" <<<"$out"
    echo "ok: 8-bit states, $n processes, $*"
  done
  eight="optimizer=fused8 hidden=64"
  out=$(launch_direct 2 train shard=gradients batch=6 dir=whole8 max_steps=12 out=whole8.txt $eight) || fail "8-bit uninterrupted: $out"
  out=$(launch_direct 2 train shard=gradients batch=6 dir=split8 max_steps=6 $eight) || fail "8-bit first half: $out"
  for target in "2 shard=gradients batch=6" "3 shard=gradients batch=4" "1 shard=off batch=12"; do
    set -- $target
    n="$1"; shift
    dir="resume8-$n-$1"; rm -rf "$dir"; cp -r split8 "$dir"
    out=$(launch_direct "$n" train "$@" dir="$dir" max_steps=12 out="$dir.txt" $eight) || fail "8-bit resume on $n ($*): $out"
    grep -q <<<"$out" "resuming from .*ckpt-000000006" || fail "8-bit resume on $n ($*) did not start from step 6: $out"
    if [ "$n" = 2 ]; then
      cmp -s whole8.txt "$dir.txt" || fail "8-bit states resumed on the same layout but not bitwise equal"
      echo "ok: 8-bit states resumed on 2 sharded processes, bitwise"
    else
      close "$dir.txt" whole8.txt "8-bit states resumed on $n ($*) but the continuation differs from the uninterrupted run"
      echo "ok: a 2-process checkpoint of 8-bit states continued on $n processes ($*)"
    fi
  done
  # The same checkpoint with fp32 states (state_bits=32) on 3 sharded processes: the 8-bit moments as their values.
  rm -rf to32; cp -r split8 to32
  out=$(launch_direct 3 train shard=gradients batch=4 dir=to32 max_steps=12 optimizer=fused hidden=64) || fail "8-bit -> 32-bit states on 3: $out"
  grep -q <<<"$out" "resuming from .*ckpt-000000006" || fail "8-bit -> 32-bit did not resume from step 6: $out"
  expect_all "$out" 3 "stopped at step 12"
  echo "ok: a 2-process checkpoint of 8-bit states continued with fp32 states on 3 processes" ;;
damaged)
  reference
  first_half split
  cp -r split missing
  # One byte of rank 1's optimizer shard changed: rank 1 finds it, every rank falls back to step 3.
  "$python" -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0xFF; open(p,'wb').write(bytes(b))" \
    split/checkpoints/ckpt-000000006/shard-00001-of-00002.optimizer.pt
  out=$(launch_direct 2 train shard=gradients batch=6 dir=split max_steps=12 out=damaged.txt) || fail "resume past a damaged shard: $out"
  grep -q <<<"$out" "ckpt-000000006: shard-00001-of-00002.optimizer.pt fails its checksum" || fail "the damaged shard is not named: $out"
  grep -q <<<"$out" "resuming from .*ckpt-000000003" || fail "did not fall back to step 3: $out"
  cmp -s whole.txt damaged.txt || fail "after the fallback the run is not bitwise equal to the uninterrupted one"
  echo "ok: a damaged shard is named, the previous checkpoint is used, the run ends bitwise equal"
  rm missing/checkpoints/ckpt-000000006/shard-00000-of-00002.weights.pt
  out=$(launch_direct 2 train shard=gradients batch=6 dir=missing max_steps=12 out=missing.txt) || fail "resume past a missing shard: $out"
  grep -q <<<"$out" "ckpt-000000006: missing file shard-00000-of-00002.weights.pt" || fail "the missing shard is not named: $out"
  cmp -s whole.txt missing.txt || fail "after a missing shard the run is not bitwise equal to the uninterrupted one"
  echo "ok: a missing shard is named, the previous checkpoint is used" ;;
export)
  reference
  "$tool" verify whole/checkpoints/ckpt-000000012 || fail "the final checkpoint does not verify"
  "$tool" info whole/checkpoints | grep "sharded over 2 ranks" >/dev/null || fail "info does not say the checkpoint is sharded"
  "$tool" export whole/checkpoints/ckpt-000000012 model.safetensors || fail "export failed"
  "$python" - <<'PY' || fail "the exported weights are not the run's"
import numpy as np
from safetensors.numpy import load_file
w = load_file("model.safetensors")
names = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]
flat = np.concatenate([w[n].reshape(-1) for n in names])
ref = np.loadtxt("whole.txt", dtype=np.float32)
assert sorted(w) == sorted(names), sorted(w)
assert np.array_equal(flat, ref), float(np.abs(flat - ref).max())
print("exported", len(w), "tensors, equal to the run's parameters")
PY
  echo "ok: frugal-checkpoint export gathers every shard into one safetensors file" ;;
*) fail "unknown scenario $scenario" ;;
esac
echo PASS
