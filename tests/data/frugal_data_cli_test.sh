#!/usr/bin/env bash
# The frugal-data tool end to end: convert, index, verify (and its exit code on damage), dedup,
# augment, a clear error for a bad argument, and images that do not decode.
set -euo pipefail
tool="$1"; work="$2"; jpegs="$(cd "$3" && pwd)"  # JPEG_DIR: small good JPEGs
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

for i in $(seq 0 59); do
  echo "{\"text\": \"sample number $i talks about topic $((i % 7)) in a sentence long enough for shingles\"}"
done > data.jsonl
echo '{"text": "sample number 3 talks about topic 3 in a sentence long enough for shingles"}' >> data.jsonl  # exact copy

"$tool" convert --from jsonl data.jsonl shards --shard-size 2k > convert.out
grep -q "wrote 61 samples in" convert.out || fail "convert: $(cat convert.out)"
[ "$(ls shards/*.tar | wc -l)" -gt 2 ] || fail "expected several shards"
ls shards/*.tar.idx.json > /dev/null || fail "no index files"

"$tool" verify shards > verify.out || fail "verify of good shards: $(cat verify.out)"
"$tool" dedup shards clean --report report.jsonl --text-field json:text > dedup.out
grep -q "scanned 61, kept 60, removed 1 (exact: 1)" dedup.out || fail "dedup: $(cat dedup.out)"
grep -q '"removed":"000000060"' report.jsonl || fail "report: $(cat report.jsonl)"
grep -q '"kept":"000000003"' report.jsonl || fail "report: $(cat report.jsonl)"

tars=(shards/*.tar); first=${tars[0]}
truncate -s 1500 "$first"
set +e
"$tool" verify shards > damaged.out; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "verify of a damaged shard exited $rc"
grep -q "DAMAGED.*$(basename "$first").*byte offset" damaged.out || fail "damage report: $(cat damaged.out)"

set +e
"$tool" convert --from jsonl data.jsonl out2 --shard-size lots 2> bad.err; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "shard-size" bad.err || fail "bad size: rc $rc, $(cat bad.err)"
# An image folder with an empty and a non-JPEG .jpg (skipped by convert, each named) and a
# truncated one (its header is fine: only verify --decode finds it, naming shard and offset).
mkdir -p images/cat images/dog
cp "$jpegs/rgb.jpg" images/cat/a.jpg
cp "$jpegs/grey.jpg" images/dog/b.jpg
head -c 1000 "$jpegs/rgb.jpg" > images/cat/truncated.jpg
: > images/dog/empty.jpg
echo "not a picture" > images/dog/text.jpg
"$tool" convert --from imagefolder images ishards > iconvert.out 2>&1
grep -q "wrote 3 samples" iconvert.out || fail "image convert: $(cat iconvert.out)"
grep -q "skipped .*dog/empty.jpg" iconvert.out && grep -q "skipped .*dog/text.jpg" iconvert.out || fail "skips: $(cat iconvert.out)"
# JPEGs are rewritten with restart markers (the same pixels), the truncated one stored as it is
# with a warning naming it; --no-restart-markers stores every file's bytes unchanged.
grep -q "cat/truncated.jpg.*corrupt JPEG.*stored as it is" iconvert.out || fail "rewrite warning: $(cat iconvert.out)"
tar -xOf ishards/shard-000000.tar 000000000.jpg > stored_a.jpg
cmp -s stored_a.jpg images/cat/a.jpg && fail "convert kept a.jpg's bytes: no restart markers"
tar -xOf ishards/shard-000000.tar 000000001.jpg | cmp -s - images/cat/truncated.jpg || fail "the truncated JPEG was not stored as it is"
"$tool" convert --from imagefolder --no-restart-markers images ishards_plain > iplain.out 2>&1 || fail "convert --no-restart-markers: $(cat iplain.out)"
tar -xOf ishards_plain/shard-000000.tar 000000000.jpg | cmp -s - images/cat/a.jpg || fail "--no-restart-markers changed a.jpg"
"$tool" verify ishards > iverify.out || fail "verify without --decode reads members only: $(cat iverify.out)"
set +e
"$tool" verify --decode ishards > idecode.out; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "verify --decode of a truncated image exited $rc: $(cat idecode.out)"
grep -q "BAD IMAGE  at byte offset [0-9]*: sample '000000001'.*corrupt JPEG" idecode.out || fail "decode report: $(cat idecode.out)"
grep -q "DAMAGED  1 of 3 samples" idecode.out || fail "decode summary: $(cat idecode.out)"
# The same check with nvJPEG, as GPU training decodes: the same report where a GPU is; elsewhere
# exit 2 saying why, before reading anything.
set +e
"$tool" verify --decode --decode-on gpu ishards > igpu.out 2> igpu.err; rc=$?
set -e
if [ "$rc" -eq 2 ]; then
  grep -q "GPU JPEG decoding is unavailable" igpu.err || fail "verify on an unavailable GPU: $(cat igpu.err)"
else
  [ "$rc" -eq 1 ] || fail "verify --decode-on gpu of a truncated image exited $rc: $(cat igpu.out igpu.err)"
  grep -q "BAD IMAGE  at byte offset [0-9]*: sample '000000001'.*corrupt JPEG" igpu.out || fail "GPU decode report: $(cat igpu.out)"
fi
echo "frugal-data CLI: all checks passed"
