#!/usr/bin/env bash
# The frugal-data tool end to end: convert, index, verify (and its exit code on damage), dedup,
# augment, and a clear error for a bad argument.
set -euo pipefail
tool="$1"; work="$2"
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

first=$(ls shards/*.tar | head -1)
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
echo "frugal-data CLI: all checks passed"
