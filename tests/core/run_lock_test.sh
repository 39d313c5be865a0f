#!/usr/bin/env bash
# One run per run directory: a second run on a directory in use is refused at once, naming the
# holder's process id and host, and writes nothing there; the lock of a run killed with SIGKILL
# never blocks the next one.
set -euo pipefail
exe="$1"; source_dir="$2"; work="$3"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; kill -9 "${first:-0}" 2> /dev/null || true; exit 1; }
args=(--config "$source_dir/examples/minimal/config.toml" --trainer.device=cpu --smoke_test.mode=off --trainer.run_dir=run)
"$exe" "${args[@]}" --trainer.max_epochs=100 > first.out 2>&1 &
first=$!
for _ in $(seq 300); do grep -q "pid $first" run/.frugal.lock 2> /dev/null && break; sleep 0.1; done
grep -q "pid $first" run/.frugal.lock || fail "the first run did not take the lock: $(cat first.out)"
kill -STOP "$first"  # holding the lock, doing nothing
cp run/config.toml config.before
set +e
"$exe" "${args[@]}" --trainer.max_epochs=1 --model.seed=5 > second.out 2>&1; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "a second run on the directory exited $rc: $(cat second.out)"
grep -q "trainer.run_dir 'run' is in use by process $first on host $(hostname)" second.out || fail "message: $(cat second.out)"
cmp -s config.before run/config.toml || fail "the refused run rewrote config.toml"
kill -9 "$first"
wait "$first" 2> /dev/null || true
# The lock file stays behind; the lock itself died with its holder.
[ -e run/.frugal.lock ] || fail "the lock file vanished"
"$exe" "${args[@]}" --trainer.max_epochs=1 --model.train_examples=2048 > third.out 2>&1 || fail "a run after the holder died: $(cat third.out)"
grep -q "minimal: " third.out || fail "third run: $(cat third.out)"
echo "run lock: all checks passed"
