#!/usr/bin/env bash
# Spot-ready checkpoints against a real S3 server (SeaweedFS): the resume probe
# (tests/checkpoint/resume_probe.cpp) commits its checkpoints to s3://frugal/<case>, and a
# "fresh machine" (an empty run directory) resumes from the bucket, ending bitwise equal to an
# uninterrupted run: after a SIGTERM; after kill -9 between the parts of a multipart upload,
# before the manifest, and between the manifest and `latest`; with a byte flipped in the newest
# remote checkpoint; with the server frozen, or killed and restarted, mid-run. A newer remote
# checkpoint wins over an older local one, and a newer local one over the remote ones (it is
# uploaded). With the server unreachable at the end of the fit or at a SIGTERM, the run names the
# checkpoint that is only local and exits non-zero.
#   remote_resume_test.sh PROBE WORK_DIR
set -uo pipefail
probe="$1"; work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/s3_server.sh"
s3_test_setup "$work" frugal
export PROBE_PAD_MB=12  # state.pt ~12 MiB: three 5 MiB parts

"$probe" clean clean.bin > clean.log 2>&1 || fail "uninterrupted run: $(tail -3 clean.log)"

fresh_resume() {  # NAME: an empty run directory resumes from the bucket and must end as the clean run
  local name="$1"
  rm -rf "$name"
  "$probe" "$name" "$name.bin" > "$name.fresh.log" 2>&1 || fail "$name: fresh restart failed: $(tail -3 "$name.fresh.log")"
  grep -q "downloaded the remote checkpoint" "$name.fresh.log" || fail "$name: the fresh restart did not download a checkpoint"
  cmp -s clean.bin "$name.bin" || fail "$name: final weights differ from the uninterrupted run"
}
start_paused() {  # NAME MODE STEP: the probe in the background (its pid in $pid), once it waits at STEP
  "$probe" "$1" "$1.bin" "$2" "$3" > "$1.1.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do [ -e "$1/.paused" ] && return 0; sleep 0.1; done
  fail "$1: the probe never reached step $3"
}
downloaded_step() {  # NAME -> the step of the checkpoint the fresh restart downloaded
  sed -n 's/.*downloaded the remote checkpoint s3:\/\/[^ ]*\/ckpt-0*\([0-9][0-9]*\) .*/\1/p' "$1.fresh.log" | sed -n 1p
}

# SIGTERM: the checkpoint is committed before the exit, PREEMPTED names it.
export PROBE_REMOTE="s3://frugal/term"
"$probe" term term.bin term-at-step 11 > term.1.log 2>&1 || fail "SIGTERM run exited $?: $(tail -3 term.1.log)"
grep -q "committed to s3://frugal/term/ckpt-000000011" term.1.log || fail "SIGTERM: no remote commit named: $(tail -3 term.1.log)"
grep -q '"remote_checkpoint": "s3://frugal/term/ckpt-000000011"' term/PREEMPTED || fail "PREEMPTED does not name the remote checkpoint: $(cat term/PREEMPTED)"
keys="$(s3_keys frugal term/)"
grep -q "^term/latest$" <<<"$keys" || fail "no latest object: $keys"
[ "$(s3_get frugal/term/latest)" = "ckpt-000000011" ] || fail "latest names $(s3_get frugal/term/latest)"
cp -r term term-old  # the machine's own directory, for the next check
fresh_resume term
[ "$(downloaded_step term)" = "11" ] || fail "term: resumed from step $(downloaded_step term), want 11"
# Remote retention: keep_last 2 holds there too.
n=$(grep -c "manifest.json$" <<<"$(s3_keys frugal term/)")
[ "$n" -le 2 ] || fail "remote retention: $n committed checkpoints, keep_last is 2"
echo "ok: SIGTERM, commit, fresh resume"

# Local and remote both there: the newest valid one wins. The term run's own directory holds step
# 11; the bucket, after the fresh run above, holds step 40: it is downloaded and nothing is trained.
"$probe" term-old term-again.bin > term-again.log 2>&1 || fail "term, both: $(tail -3 term-again.log)"
grep -q "downloaded the remote checkpoint s3://frugal/term/ckpt-000000040" term-again.log ||
  fail "term, both: the newer remote checkpoint was not used: $(grep -m2 -E 'resum|download' term-again.log)"
cmp -s clean.bin term-again.bin || fail "term, both: final weights differ"
echo "ok: a newer remote checkpoint wins over an older local one"

# kill -9 during an upload: the fresh machine resumes from the newest committed checkpoint.
for stage in part meta.json manifest.json; do
  export PROBE_REMOTE="s3://frugal/kill-$stage"
  "$probe" "kill-$stage" "kill-$stage.bin" kill-at-upload-stage "$stage" 9 > "kill-$stage.1.log" 2>&1
  rc=$?
  [ "$rc" -ge 128 ] || fail "kill at $stage: expected death by SIGKILL, exit $rc: $(tail -3 "kill-$stage.1.log")"
  killed=$(sed -n 's/^killing at upload stage .* of step \([0-9]*\)$/\1/p' "kill-$stage.1.log")
  [ -n "$killed" ] || fail "kill at $stage: the probe did not say where it died"
  fresh_resume "kill-$stage"
  got=$(downloaded_step "kill-$stage")
  if [ "$stage" = manifest.json ]; then  # committed before `latest` moved: it is the newest
    [ "$got" = "$killed" ] || fail "kill after the manifest of step $killed: resumed from step $got"
  else
    [ "$got" -lt "$killed" ] || fail "kill at $stage of step $killed: resumed from the unfinished step $got"
  fi
  uploads=$(s3_curl "$S3_ENDPOINT/frugal?prefix=kill-$stage%2F&uploads=") || fail "cannot list multipart uploads"
  ! grep -q "<UploadId>" <<<"$uploads" || fail "kill at $stage: an unfinished multipart upload was left behind: $uploads"
  echo "ok: kill -9 at upload stage $stage (step $killed), fresh resume from step $got"
done

# A flipped byte in the newest remote checkpoint: skipped with the reason, the previous one used.
# Two pre-empted runs, so that an older commit exists whatever the load: a pre-emption drops the
# older uploads still in flight, and on a busy machine none may have finished by step 14.
export PROBE_REMOTE="s3://frugal/flip"
"$probe" flip flip.bin term-at-step 9 > flip.0.log 2>&1 || fail "flip: first run exited $?: $(tail -3 flip.0.log)"
"$probe" flip flip.bin term-at-step 14 > flip.1.log 2>&1 || fail "flip: run exited $?: $(tail -3 flip.1.log)"
previous=$(sed -n 's/^flip\/ckpt-0*\([0-9][0-9]*\)\/manifest.json$/\1/p' <<<"$(s3_keys frugal flip/)" | sort -n | tail -2 | sed -n 1p)
[ -n "$previous" ] && [ "$previous" != 14 ] || fail "flip: no committed checkpoint before step 14: $(s3_keys frugal flip/)"
s3_get frugal/flip/ckpt-000000014/optimizer.pt > opt.pt || fail "cannot read the remote optimizer.pt"
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[len(b) // 2] ^= 0x40; open(sys.argv[1], "wb").write(b)' opt.pt
s3_put frugal/flip/ckpt-000000014/optimizer.pt opt.pt || fail "cannot replace the remote optimizer.pt"
fresh_resume flip
grep -q "remote checkpoint skipped: s3://frugal/flip/ckpt-000000014: optimizer.pt fails its checksum" flip.fresh.log ||
  fail "flip: no reason given for the damaged checkpoint: $(grep -m3 -i skipped flip.fresh.log)"
[ "$(downloaded_step flip)" = "$previous" ] || fail "flip: resumed from step $(downloaded_step flip), want $previous"
echo "ok: a flipped byte is skipped with its reason"

# The server frozen mid-run: training goes on, uploads wait and commit when it thaws.
export PROBE_REMOTE="s3://frugal/freeze"
start_paused freeze pause-at-step 5
kill -STOP "$S3_PID"; touch freeze/.go
sleep 4
kill -CONT "$S3_PID"
wait "$pid" || fail "freeze: the run failed: $(tail -3 freeze.1.log)"
cmp -s clean.bin freeze.bin || fail "freeze: final weights differ"
fresh_resume freeze
[ "$(downloaded_step freeze)" = "40" ] || fail "freeze: the final checkpoint was not committed (resumed from $(downloaded_step freeze))"
echo "ok: server frozen mid-run"

# The server killed and restarted mid-run: uploads retry until it is back, then commit.
export PROBE_REMOTE="s3://frugal/restart"
start_paused restart pause-at-step 5
kill -9 "$S3_PID"; wait "$S3_PID" 2>/dev/null; touch restart/.go
sleep 3
s3_launch
wait "$pid" || fail "restart: the run failed: $(tail -3 restart.1.log)"
cmp -s clean.bin restart.bin || fail "restart: final weights differ"
fresh_resume restart
[ "$(downloaded_step restart)" = "40" ] || fail "restart: the final checkpoint was not committed (resumed from $(downloaded_step restart))"
echo "ok: server restarted mid-run"

# The server frozen through the end of the fit: the final checkpoint cannot be committed in time,
# and the run says it is only local and exits non-zero.
export PROBE_REMOTE="s3://frugal/end" PROBE_REMOTE_DEADLINE=3
start_paused end pause-at-step 38
kill -STOP "$S3_PID"; touch end/.go
wait "$pid"; rc=$?
kill -CONT "$S3_PID"
[ "$rc" -ne 0 ] || fail "end: the run exited 0 though its final checkpoint never reached the store"
grep -q "the final checkpoint (end/checkpoints/ckpt-000000040) is only local" end.1.log || fail "end: $(tail -2 end.1.log)"
unset PROBE_REMOTE_DEADLINE
echo "ok: a final checkpoint that misses the deadline is named, exit $rc"

# The server down at SIGTERM: the run says which checkpoint is only local and exits non-zero.
export PROBE_REMOTE="s3://frugal/down" PROBE_REMOTE_DEADLINE=4
start_paused down pause-then-term-at-step 8
s3_stop; touch down/.go
wait "$pid"; rc=$?
[ "$rc" -ne 0 ] || fail "down: the run exited 0 though its checkpoint never reached the store"
grep -q "the checkpoint of step 8 is only local" down.1.log || fail "down: the message does not name the local checkpoint: $(tail -3 down.1.log)"
grep -q '"remote_committed": false' down/PREEMPTED || fail "down: PREEMPTED does not say the commit failed"
! grep -q "$S3_SECRET_KEY" down.1.log down/train.log || fail "a secret was printed"
echo "ok: server down at SIGTERM"

# The same machine restarted once the server is back: its local checkpoint of step 8 is newer than
# any remote one, so it wins (no download), goes up, and the run ends as the uninterrupted one.
s3_launch
unset PROBE_REMOTE_DEADLINE
"$probe" down down.bin > down.2.log 2>&1 || fail "down, restart: $(tail -3 down.2.log)"
! grep -q "downloaded the remote checkpoint" down.2.log || fail "down, restart: an older remote checkpoint replaced the newer local one"
grep -q "resuming from down/checkpoints/ckpt-000000008" down.2.log || fail "down, restart: $(grep -m1 resuming down.2.log)"
cmp -s clean.bin down.bin || fail "down, restart: final weights differ"
grep -q "^down/ckpt-000000040/manifest.json$" <<<"$(s3_keys frugal down/)" || fail "down, restart: the final checkpoint was not committed"
echo "ok: a newer local checkpoint wins over the remote ones and is uploaded"
echo PASS
