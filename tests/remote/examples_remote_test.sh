#!/usr/bin/env bash
# checkpoint.remote from the command line, a config file and FRUGAL_CHECKPOINT_REMOTE in every
# example, against a real S3 server (SeaweedFS): each commits its checkpoints to the bucket and a
# fresh run directory resumes from there. Bad remote settings (malformed URLs, a wrong secret, a
# missing bucket, an unreachable endpoint, no credentials) stop the run before any training with
# an error that names the problem, and the secret is never printed.
# frugal-checkpoint lists, downloads, verifies and exports s3:// checkpoints.
#   examples_remote_test.sh MINIMAL RESNET BERT FRUGAL_DATA FRUGAL_CHECKPOINT SOURCE_DIR PYTHON WORK_DIR
set -uo pipefail
minimal="$1"; resnet="$2"; bert="$3"; data_tool="$4"; tool="$5"; source_dir="$6"; python="$7"; work="$8"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/s3_server.sh"
s3_test_setup "$work" frugal
committed() { grep -c "manifest.json$" <<<"$(s3_keys frugal "$1/")"; }

# The minimal example: the command line, then a fresh machine resumes from the bucket.
small=(--config "$source_dir/examples/minimal/config.toml" --trainer.device=cpu --model.train_examples=4096
       --model.validation_examples=512 --model.hidden=32 --checkpoint.every_n_steps=20)
"$minimal" "${small[@]}" --trainer.max_epochs=2 --trainer.run_dir=m1 --checkpoint.remote=s3://frugal/minimal > m1.log 2>&1 || fail "minimal: $(tail -3 m1.log)"
grep -q "checkpoint committed remotely: s3://frugal/minimal/ckpt-" m1.log || fail "minimal: nothing committed"
[ "$(committed minimal)" -ge 1 ] || fail "minimal: no committed checkpoint in the bucket"
"$minimal" "${small[@]}" --trainer.run_dir=m1-fresh --trainer.max_epochs=3 --checkpoint.remote=s3://frugal/minimal > m1-fresh.log 2>&1 ||
  fail "minimal, fresh machine: $(tail -3 m1-fresh.log)"
grep -q "downloaded the remote checkpoint s3://frugal/minimal/" m1-fresh.log || fail "minimal: the fresh run did not download"
grep -q "resumed at step 64" m1-fresh.log m1-fresh/train.log || fail "minimal: the fresh run did not resume at the end of epoch 2: $(grep -m1 resumed m1-fresh.log)"
echo "ok: minimal, command line, fresh resume"

# frugal-checkpoint on the bucket.
listed=$("$tool" list s3://frugal/minimal) || fail "frugal-checkpoint list: $listed"
grep -q "^s3://frugal/minimal/ckpt-0*96  step 96$" <<<"$listed" || fail "frugal-checkpoint list: $listed"
"$tool" download s3://frugal/minimal restored > dl.log 2>&1 || fail "frugal-checkpoint download: $(cat dl.log)"
grep -q "downloaded and verified: restored/ckpt-000000096" dl.log || fail "download: $(cat dl.log)"
"$tool" verify s3://frugal/minimal/ckpt-000000096 > verify.log 2>&1 || fail "frugal-checkpoint verify: $(cat verify.log)"
"$tool" export s3://frugal/minimal model.safetensors > export.log 2>&1 || fail "frugal-checkpoint export: $(cat export.log)"
[ -s model.safetensors ] || fail "export wrote nothing"
! "$tool" list s3://no-such-bucket/x > nobucket.log 2>&1 || fail "list of a missing bucket succeeded"
grep -q "does not exist" nobucket.log || fail "list of a missing bucket: $(cat nobucket.log)"
echo "ok: frugal-checkpoint list, download, verify, export on s3://"

# The same key from a config file and from the environment.
cp "$source_dir/examples/minimal/config.toml" remote.toml
cat >> remote.toml <<TOML

[checkpoint]
remote = "s3://frugal/from-file"
remote_endpoint = "$S3_ENDPOINT"
TOML
"$minimal" "${small[@]:2}" --config remote.toml --trainer.max_epochs=1 --trainer.run_dir=m2 > m2.log 2>&1 || fail "config file: $(tail -3 m2.log)"
[ "$(committed from-file)" -ge 1 ] || fail "config file: nothing committed"
FRUGAL_CHECKPOINT_REMOTE=s3://frugal/from-env "$minimal" "${small[@]}" --trainer.max_epochs=1 --trainer.run_dir=m3 > m3.log 2>&1 ||
  fail "environment: $(tail -3 m3.log)"
[ "$(committed from-env)" -ge 1 ] || fail "FRUGAL_CHECKPOINT_REMOTE: nothing committed"
echo "ok: config file and environment"

# Bad settings: a clear error before training, nothing trained, no secret printed.
bad() {  # NAME EXPECTED-TEXT ARGS...
  local name="$1" want="$2"; shift 2
  "$minimal" "${small[@]}" --trainer.max_epochs=1 --trainer.run_dir="bad-$name" "$@" > "bad-$name.log" 2>&1
  local rc=$?
  [ "$rc" -ne 0 ] || fail "$name: exit 0"
  grep -q -- "$want" "bad-$name.log" || fail "$name: the error does not say '$want': $(tail -2 "bad-$name.log")"
  ! grep -q "step [0-9]* epoch" "bad-$name.log" || fail "$name: it trained before failing"
  ! grep -q -- "$S3_SECRET_KEY" "bad-$name.log" || fail "$name: the secret was printed"
  echo "ok: $name refused"
}
bad one-slash "checkpoint.remote" --checkpoint.remote=s3:/x
bad no-bucket "the bucket is missing" --checkpoint.remote=s3://
bad http-url "not s3://" --checkpoint.remote=http://example.com/bucket
bad missing-bucket "the bucket no-such-bucket does not exist" --checkpoint.remote=s3://no-such-bucket/x
bad unreachable "Couldn't connect" --checkpoint.remote=s3://frugal/x --checkpoint.remote_endpoint=http://127.0.0.1:9
AWS_SECRET_ACCESS_KEY=wrong-secret-5678 bad wrong-secret "HTTP 403 SignatureDoesNotMatch" --checkpoint.remote=s3://frugal/x
! grep -q "wrong-secret-5678" bad-wrong-secret.log || fail "the wrong secret was printed"
(unset AWS_ACCESS_KEY_ID; bad no-credentials "AWS_ACCESS_KEY_ID" --checkpoint.remote=s3://frugal/x) || exit 1

# ResNet on the bundled digits and BERT on the bundled SQuAD set: a few steps each, committed,
# and a fresh run directory resumes from the bucket.
bash "$source_dir/examples/resnet50/prepare_digits.sh" digits "$data_tool" "$python" > prepare.log 2>&1 || fail "prepare_digits: $(tail -3 prepare.log)"
rn=(--config "$source_dir/examples/resnet50/digits.toml" --trainer.device=cpu --model.variant=resnet18 --model.base_channels=16
    --images.train=digits/train-shards --images.val=digits/val-shards --checkpoint.remote=s3://frugal/resnet)
"$resnet" "${rn[@]}" --trainer.max_steps=6 --trainer.run_dir=r1 > r1.log 2>&1 || fail "resnet: $(tail -3 r1.log)"
[ "$(committed resnet)" -ge 1 ] || fail "resnet: nothing committed"
"$resnet" "${rn[@]}" --trainer.max_steps=8 --trainer.run_dir=r1-fresh > r1-fresh.log 2>&1 || fail "resnet, fresh machine: $(tail -3 r1-fresh.log)"
grep -q "resumed at step 6" r1-fresh.log r1-fresh/train.log || fail "resnet: the fresh run did not resume at step 6"
echo "ok: resnet"
d="$source_dir/examples/bert_squad"
bt=(--config "$d/tiny.toml" --model.config="$d/tiny_config.json" --model.vocab="$d/data/vocab.txt" --squad.train="$d/data/train.json"
    --squad.dev="$d/data/dev.json" --squad.cache=cache --trainer.device=cpu --checkpoint.remote=s3://frugal/bert)
"$bert" "${bt[@]}" --trainer.max_steps=3 --trainer.run_dir=b1 > b1.log 2>&1 || fail "bert: $(tail -3 b1.log)"
[ "$(committed bert)" -ge 1 ] || fail "bert: nothing committed"
"$bert" "${bt[@]}" --trainer.max_steps=4 --trainer.run_dir=b1-fresh > b1-fresh.log 2>&1 || fail "bert, fresh machine: $(tail -3 b1-fresh.log)"
grep -q "resumed at step 3" b1-fresh.log b1-fresh/train.log || fail "bert: the fresh run did not resume at step 3"
echo "ok: bert"
echo PASS
