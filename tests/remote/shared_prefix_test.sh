#!/usr/bin/env bash
# One writer per remote prefix, against a real S3 server (SeaweedFS) and the resume probe: a
# second run started on the prefix of a run that is mid-upload is refused naming it (host, pid,
# run directory) and touches nothing there; the first run then finishes, releases its lease, and
# a fresh machine resumes from it bitwise. A run killed with -9 leaves a stale lease that the
# next start on this machine takes over at once. A SIGTERM while an older checkpoint uploads
# stops that upload, so that the newest goes up alone, and commits it.
#   shared_prefix_test.sh PROBE WORK_DIR
set -uo pipefail
probe="$1"; work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/s3_server.sh"
s3_test_setup "$work" frugal
export PROBE_PAD_MB=12 PROBE_REMOTE_LEASE=3  # state.pt ~12 MiB: three 5 MiB parts; a 3 s lease
"$probe" clean clean.bin > clean.log 2>&1 || fail "uninterrupted run: $(tail -3 clean.log)"
uploads_of() { s3_curl "$S3_ENDPOINT/frugal?prefix=$1%2F&uploads=" | grep -o "<UploadId>[^<]*</UploadId>" | sort; }

export PROBE_REMOTE="s3://frugal/shared"
"$probe" a a.bin pause-at-upload-stage part 6 > a.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do [ -e a/.paused ] && break; sleep 0.1; done
[ -e a/.paused ] || fail "run A never reached its upload"
in_flight="$(uploads_of shared)"
[ -n "$in_flight" ] || fail "run A has no multipart upload in flight"
objects="$(s3_keys frugal shared/)"

start=$(date +%s)
"$probe" b b.bin > b.log 2>&1; rc=$?
[ "$rc" -ne 0 ] || fail "run B on run A's prefix exited 0"
grep -q "checkpoint.remote s3://frugal/shared is in use: its lease is held by run .* (a) on host $(hostname), pid $pid" b.log ||
  fail "run B's refusal does not name run A: $(grep -m2 -i -E 'error|lease' b.log)"
[ $(( $(date +%s) - start )) -le 30 ] || fail "run B took $(( $(date +%s) - start )) s to be refused"
[ "$(uploads_of shared)" = "$in_flight" ] || fail "run B touched run A's multipart upload"
[ "$(s3_keys frugal shared/)" = "$objects" ] || fail "run B changed the prefix: $(diff <(echo "$objects") <(s3_keys frugal shared/))"
[ ! -e b/checkpoints/latest ] || fail "run B wrote checkpoints"
echo "ok: a second run on a leased prefix is refused, naming the holder, and touches nothing"

touch a/.go
wait "$pid" || fail "run A failed after run B's attempt: $(tail -3 a.log)"
cmp -s clean.bin a.bin || fail "run A's final weights differ from the uninterrupted run"
! grep -q "^shared/frugal.lease$" <<<"$(s3_keys frugal shared/)" || fail "run A did not release its lease"
rm -rf c
"$probe" c c.bin > c.log 2>&1 || fail "fresh resume after run A: $(tail -3 c.log)"
grep -q "downloaded the remote checkpoint s3://frugal/shared/ckpt-000000040" c.log || fail "the fresh run did not resume from run A's end"
cmp -s clean.bin c.bin || fail "the fresh run's weights differ"
echo "ok: run A finished, released its lease, and a fresh machine resumed from it"

export PROBE_REMOTE="s3://frugal/killed"
"$probe" k k.bin kill-at-step 7 > k.1.log 2>&1
[ $? -ge 128 ] || fail "the probe was not killed"
grep -q "^killed/frugal.lease$" <<<"$(s3_keys frugal killed/)" || fail "no lease left by the killed run"
rm -rf k2
start=$(date +%s.%N)
"$probe" k2 k2.bin > k2.log 2>&1 || fail "restart after kill -9: $(tail -3 k2.log)"
grep -q "taking over the stale lease of run .* (k) on host $(hostname)" k2.log || fail "no warning about the stale lease: $(grep -m2 lease k2.log)"
! grep -q "watching the lease" k2.log || fail "a dead process of this machine's lease was watched instead of taken over"
cmp -s clean.bin k2.bin || fail "the restart's weights differ"
echo "ok: a killed run's lease is taken over at once on its machine"

export PROBE_REMOTE="s3://frugal/term"
"$probe" t t.bin term-at-upload-stage part 9 > t.log 2>&1 || fail "SIGTERM mid-upload: exit $?: $(tail -3 t.log)"
older=$(sed -n 's/^SIGTERM at upload stage part of step \([0-9]*\)$/\1/p' t.log)
newest=$(sed -n 's/.*stopping: checkpoint: pre-empted by SIGTERM: checkpoint of step \([0-9]*\) written and committed.*/\1/p' t.log)
[ -n "$older" ] && [ -n "$newest" ] || fail "SIGTERM mid-upload: $(tail -3 t.log)"
[ "$newest" -gt "$older" ] || fail "the checkpoint of step $newest is not newer than the one uploading ($older)"
grep -q "the upload of the older checkpoint of step $older stops, so that the one of step $newest goes up alone" t.log ||
  fail "the older upload did not give way: $(grep -m3 -E 'upload|commit' t.log)"
[ "$(s3_get frugal/term/latest)" = "$(printf 'ckpt-%09d' "$newest")" ] || fail "latest names $(s3_get frugal/term/latest)"
! grep -q "^term/$(printf 'ckpt-%09d' "$older")/manifest.json$" <<<"$(s3_keys frugal term/)" || fail "the cancelled checkpoint was committed"
[ -z "$(uploads_of term)" ] || fail "the cancelled checkpoint's multipart upload was not aborted"
echo "ok: SIGTERM mid-upload: the older upload stops, the newest is committed"
echo PASS
