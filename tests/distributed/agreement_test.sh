#!/usr/bin/env bash
# Ranks that disagree are refused at start-up (torchrun, 2 processes over gloo): a per-rank wrapper
# adds one option on rank 1 only. Every mismatch ends both ranks naming the key and each rank's
# value, with nothing written into the run directory; a per-rank option (loader threads) is fine.
set -euo pipefail
exe="$1"; source_dir="$2"; python="$3"; work="$4"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
cat > wrapper.sh <<'WRAP'
#!/usr/bin/env bash
# rank 1 gets $RANK1_EXTRA on top of the shared arguments
if [ "$RANK" = 1 ]; then exec "$@" $RANK1_EXTRA; else exec "$@"; fi
WRAP
chmod +x wrapper.sh
# The shared settings in a file, so rank 1's flag overrides one (a flag may be given only once).
sed -e 's/^max_epochs = .*/max_epochs = 1/' -e 's/^batch_size = .*/batch_size = 700/' -e 's/^train_examples = .*/train_examples = 4096/' \
    -e 's/^validation_examples = .*/validation_examples = 256/' -e 's/^mode = "fail".*/mode = "off"/' -e 's/^device = .*/device = "cpu"/' \
    "$source_dir/examples/minimal/config.toml" > shared.toml
printf '\n[checkpoint]\nenabled = true\n' >> shared.toml
launch() {  # RUN_DIR RANK1_EXTRA
  RANK1_EXTRA="$2" timeout 300 "$python" -m torch.distributed.run --standalone --nproc-per-node=2 --no-python \
    ./wrapper.sh "$exe" --config shared.toml --trainer.run_dir="$1" 2>&1
}
# 4096 examples / 2 ranks = 2048 each: 3 batches of 700 or of 1000, the same number of steps.
cases=("--trainer.max_epochs=2|trainer.max_epochs' is 1 on rank 0 and 2 on rank 1"
       "--trainer.max_steps=2|trainer.max_steps' is -1 on rank 0 and 2 on rank 1"
       "--model.lr=0.01|model.lr' is 0.003 on rank 0 and 0.01 on rank 1"
       "--data.seed=1|data.seed' is 0 on rank 0 and 1 on rank 1"
       "--model.seed=7|model.seed' is 0 on rank 0 and 7 on rank 1"
       "--data.batch_size=1000|data.batch_size' is 700 on rank 0 and 1000 on rank 1"
       "--model.train_examples=4097|'data identity: training examples' is 4096 on rank 0 and 4097 on rank 1")
for i in "${!cases[@]}"; do
  extra="${cases[$i]%%|*}"; expected="${cases[$i]#*|}"
  set +e; out=$(launch "run$i" "$extra"); rc=$?; set -e
  [ "$rc" -ne 0 ] || fail "$extra on rank 1 was accepted"
  [ "$(echo "$out" | grep -o "the ranks were started with different settings" | wc -l)" -ge 2 ] || fail "$extra: both ranks should say it: $out"
  grep -qF <<<"$out" "$expected" || { [[ "$extra" == --model.train_examples* ]] && grep -qF <<<"$out" "model.train_examples' is 4096 on rank 0 and 4097 on rank 1"; } \
    || fail "$extra: expected '$expected' in: $out"
  grep -q <<<"$out" "terminate called\|Aborted\|core dumped" && fail "$extra: a rank aborted: $out"
  for f in config.toml train.log metrics.jsonl checkpoints; do
    [ ! -e "run$i/$f" ] || fail "$extra: run$i/$f was written"
  done
  echo "refused: $extra"
done
# Per-rank options may differ.
out=$(launch ok "--data.num_workers=2 --progress.enabled=false") || fail "a per-rank difference was refused: $out"
[ -s ok/config.toml ] || fail "config.toml missing after an agreed start"
echo "agreement: all checks passed"
