#!/usr/bin/env bash
# frugal-sweep on the minimal example: a 2x2 grid with one cell that cannot run (a batch larger
# than its data, with drop_last) gives 3 measured rows and 1 failed row with its reason, the CSV,
# JSON and PNG charts; a re-run skips finished cells; --repeat gives a spread; bad usage is named.
# --seconds ends each cell by SIGTERM after warm-up; a sweep stopped by SIGTERM exits 143 with
# the unfinished cells unrecorded and no cell left running. The queue runs one job per device
# (CUDA_VISIBLE_DEVICES) or 2 CPU jobs at a time and, on SIGTERM, stops the running ones (they
# get SIGTERM) and keeps them and the never-started ones queued.
set -euo pipefail
sweep="$1"; minimal="$2"; source_dir="$3"; python="$4"; work="$5"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
program=("$minimal" --config "$source_dir/examples/minimal/config.toml" --trainer.device=cpu --model.hidden=64 --model.layers=2
         --model.validation_examples=256 --data.drop_last=true)

echo "== 2x2 grid"
"$sweep" --grid data.batch_size=64,4096 --grid model.train_examples=2048,4096 --steps 6 --warmup 2 --price 2.5 --out grid -- "${program[@]}" > grid.out 2>&1 \
  || fail "the sweep failed: $(cat grid.out)"
cat grid.out
"$python" - grid/results.csv <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4, f"{len(rows)} rows"
for k in ("data.batch_size", "model.train_examples", "status", "samples_per_s", "peak_memory_mb", "reason", "cost_per_epoch", "loss"):
    assert k in rows[0], f"no column {k}"
failed = [r for r in rows if r["status"] != "ok"]
assert len(failed) == 1, f"failed rows: {failed}"
f = failed[0]
assert (f["data.batch_size"], f["model.train_examples"]) == ("4096", "2048"), f
assert f["reason"] == "error" and "no training batch" in f["message"], f
ok = [r for r in rows if r["status"] == "ok"]
for r in ok:
    assert float(r["samples_per_s"]) > 0 and float(r["peak_memory_mb"]) > 0 and float(r["cost_per_epoch"]) > 0, r
    assert 0 <= float(r["compute_fraction"]) <= 1, r
# Sorted by samples/s, best first, the failed row last.
rates = [float(r["samples_per_s"]) for r in ok]
assert rates == sorted(rates, reverse=True), rates
assert rows[-1]["status"] == "failed"
PY
for png in grid/throughput_vs_memory.png grid/bars_samples_per_s.png grid/bars_peak_memory_mb.png grid/bars_loss.png; do
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$png is not a PNG"
done
"$python" -c "import json; d=json.load(open('grid/results.json')); assert len(d['cells'])==4 and d['objective']=='samples_per_s'" || fail "results.json"
ls grid/cells/*/r0/run/metrics.jsonl > /dev/null || fail "no cell run directory"
grep -q "smoke test passed" grid/cells/01-*/r0/output.log || fail "the cell did not run the smoke test first: $(cat grid/cells/01-*/r0/output.log)"

echo "== a re-run skips finished cells"
"$sweep" --grid data.batch_size=64,4096 --grid model.train_examples=2048,4096 --steps 6 --warmup 2 --price 2.5 --out grid -- "${program[@]}" > again.out 2>&1 \
  || fail "the re-run failed: $(cat again.out)"
grep -q "4 of 4 runs are done already" again.out || fail "the re-run did not reuse the cells: $(cat again.out)"
"$python" -c "import json; d=json.load(open('grid/sweep.json')); assert d['runs_started']==0, d" || fail "cells ran again"

echo "== the grid from a TOML file: --grid-file, or the file given to --grid"
cat > grid.toml <<'TOML'
[grid]
"data.batch_size" = [64, 128]
"model.lr" = 0.01
TOML
"$sweep" --grid-file grid.toml --steps 3 --warmup 1 --no-plots --out fromfile -- "${program[@]}" > fromfile.out 2>&1 \
  || fail "--grid-file: $(cat fromfile.out)"
"$python" - fromfile/results.csv <<'PY' || fail "--grid-file rows: $(cat fromfile/results.csv)"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2 and all(r["status"] == "ok" and r["model.lr"] == "0.01" for r in rows), rows
assert sorted(r["data.batch_size"] for r in rows) == ["128", "64"], rows
PY
grep -q -- "--model.lr=0.01" fromfile/cells/01-*/r0/result.json || fail "the file's setting did not reach the program"
"$sweep" --grid grid.toml --steps 3 --warmup 1 --no-plots --out fromfile -- "${program[@]}" > fromfile2.out 2>&1 \
  || fail "--grid FILE: $(cat fromfile2.out)"
grep -q "2 of 2 runs are done already" fromfile2.out || fail "--grid FILE should be the same grid: $(cat fromfile2.out)"
printf '[grid]\n"data.batch_size" = [64, {a = 1}]\n' > bad_grid.toml
set +e; out=$("$sweep" --grid-file bad_grid.toml --out bad -- "$minimal" 2>&1); rc=$?; set -e
[ "$rc" -eq 2 ] && grep -q <<<"$out" "bad_grid.toml: grid.data.batch_size: values must be strings, numbers or booleans" \
  || fail "a bad grid file: rc $rc $out"

echo "== a damaged result.json is not a result: that run starts again"
damaged=$(ls -d grid/cells/02-*/r0)
echo '{"status": 7, "figures": []}' > "$damaged/result.json"
"$sweep" --grid data.batch_size=64,4096 --grid model.train_examples=2048,4096 --steps 6 --warmup 2 --price 2.5 --out grid -- "${program[@]}" > damaged.out 2>&1 \
  || fail "the run over a damaged record failed: $(cat damaged.out)"
grep -q "3 of 4 runs are done already" damaged.out || fail "the damaged record was reused: $(cat damaged.out)"
"$python" -c "import json; d=json.load(open('$damaged/result.json')); assert d['status']=='ok', d" || fail "the damaged run was not run again"

echo "== many axes: directory names stay short enough for the file system; a huge grid is refused"
long_axes=(); for k in a b c d e f g h i j k l; do long_axes+=(--grid "extra_${k}_section_with_a_long_name.key_$k=value_$k"); done
set +e; out=$("$sweep" "${long_axes[@]}" --steps 1 --warmup 0 --no-plots --out names -- true 2>&1); rc=$?; set -e
dir=$(ls names/cells)
[ "${#dir}" -le 128 ] || fail "a cell directory of ${#dir} characters: $dir"
[ -f "names/cells/$dir/r0/result.json" ] || fail "the cell with a long name did not run: rc $rc $out"
huge=(); for k in a b c d e f g h i j k l m n; do huge+=(--grid "s.$k=1,2"); done
set +e; out=$("$sweep" "${huge[@]}" --out huge -- true 2>&1); rc=$?; set -e
[ "$rc" -eq 2 ] && grep -q <<<"$out" "the grid has more than 10000 cells" || fail "a 16384-cell grid: rc $rc $out"

echo "== --repeat 2, objective by memory"
"$sweep" --grid data.batch_size=64 --repeat 2 --steps 4 --warmup 1 --objective peak_memory_mb --no-plots --out repeat -- "${program[@]}" > repeat.out 2>&1 \
  || fail "repeat: $(cat repeat.out)"
"$python" - repeat/results.csv <<'PY'
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[0]
assert r["repeats"] == "2/2", r
assert float(r["samples_per_s_min"]) <= float(r["samples_per_s"]) <= float(r["samples_per_s_max"]), r
PY
grep -q "sorted by peak_memory_mb (lower is better)" repeat.out || fail "objective: $(cat repeat.out)"

echo "== --seconds times each cell after warm-up, then SIGTERM ends it; a SIGTERM to the sweep stops it cleanly"
long=("${program[@]}" --trainer.max_epochs=1000)
"$sweep" --grid data.batch_size=64 --seconds 1 --warmup 2 --no-plots --out seconds -- "${long[@]}" > seconds.out 2>&1 || fail "--seconds: $(cat seconds.out)"
"$python" -c "import csv; r=list(csv.DictReader(open('seconds/results.csv')))[0]; assert r['status']=='ok' and float(r['samples_per_s'])>0, r" \
  || fail "--seconds row: $(cat seconds/results.csv)"
"$sweep" --grid data.batch_size=64,128 --steps 100000 --no-plots --out stopped -- "${long[@]}" > stopped.out 2>&1 &
sweeper=$!
for _ in $(seq 300); do grep -q '"event":"train"' stopped/cells/01-*/r0/run/metrics.jsonl 2>/dev/null && break; sleep 0.1; done
kill -TERM "$sweeper"
set +e; wait "$sweeper"; rc=$?; set -e
[ "$rc" -eq 143 ] || fail "a sweep stopped by SIGTERM should exit 143, got $rc: $(cat stopped.out)"
grep -q "stopped by signal 15" stopped.out || fail "no word of the stop: $(cat stopped.out)"
[ ! -f stopped/cells/01-*/r0/result.json ] || fail "the interrupted cell was recorded as finished"
grep -q "not_run" stopped/results.csv || fail "the unfinished cells should be rows saying so: $(cat stopped/results.csv)"
pgrep -f "trainer.run_dir=$PWD/stopped" > /dev/null && fail "a cell outlived the sweep"

echo "== bad usage is named"
set +e; out=$("$sweep" --grid data.batch_size=64,128 --out bad -- "$minimal" --data.batch_size=32 2>&1); rc=$?; set -e
[ "$rc" -eq 2 ] && grep -q <<<"$out" "data.batch_size is a grid axis but the program's arguments set it too" || fail "conflict: rc $rc $out"
set +e; out=$("$sweep" --grid data.batch_size --out bad -- "$minimal" 2>&1); rc=$?; set -e
[ "$rc" -eq 2 ] && grep -q <<<"$out" "expected key=value1,value2" || fail "malformed grid: rc $rc $out"
set +e; out=$("$sweep" --grid data.batch_size=1 --objective speed --out bad -- "$minimal" 2>&1); rc=$?; set -e
[ "$rc" -eq 2 ] && grep -q <<<"$out" "'speed' is not one of" || fail "objective: rc $rc $out"

echo "== queue"
for i in 1 2; do "$sweep" queue add q --name quick$i -- bash -c "echo \$CUDA_VISIBLE_DEVICES > quick$i.txt; sleep 0.5" > /dev/null; done
"$sweep" queue run q --devices 3,5 > run1.out 2>&1 || fail "queue run: $(cat run1.out)"
[ -f quick1.txt ] && [ -f quick2.txt ] || fail "the quick jobs did not run: $(cat run1.out)"
[ "$(cat quick1.txt quick2.txt | sort | tr '\n' ' ')" = "3 5 " ] || fail "CUDA_VISIBLE_DEVICES per job: $(cat quick1.txt quick2.txt)"
grep -q "\[cuda:3\] job 000001" run1.out && grep -q "\[cuda:5\] job 000002" run1.out || fail "one job per device: $(cat run1.out)"
for i in 3 4 5 6; do
  "$sweep" queue add q --name slow$i -- bash -c "trap 'echo term > term$i.txt; exit 0' TERM; echo started > started$i.txt; sleep 60 & wait" > /dev/null
done
[ "$("$sweep" queue list q | grep -c pending)" -eq 4 ] || fail "4 pending expected: $("$sweep" queue list q)"
"$sweep" queue run q --parallel 2 > run2.out 2>&1 &
runner=$!
for _ in $(seq 100); do [ "$(ls started*.txt 2>/dev/null | wc -l)" -ge 2 ] && break; sleep 0.1; done
[ "$(ls started*.txt 2>/dev/null | wc -l)" -eq 2 ] || fail "2 jobs should run at once: $(ls)"
kill -TERM "$runner"
set +e; wait "$runner"; rc=$?; set -e
[ "$rc" -eq 143 ] || fail "the runner should exit 143 after SIGTERM, got $rc: $(cat run2.out)"
[ "$(ls term*.txt 2>/dev/null | wc -l)" -eq 2 ] || fail "the running jobs did not get SIGTERM: $(cat run2.out)"
list=$("$sweep" queue list q)
echo "$list"
[ "$(echo "$list" | grep -c ' pending ')" -eq 4 ] || fail "the 2 stopped and 2 unstarted jobs should stay queued"
[ "$(echo "$list" | grep -c ' done ')" -eq 2 ] || fail "the 2 quick jobs should stay done"
"$python" -c "import json,glob; n=[json.load(open(f)).get('interrupted',0) for f in glob.glob('q/pending/*.json')]; assert sorted(n)==[0,0,1,1], n" \
  || fail "the interrupted jobs are not marked"

echo "== a damaged job file is named, moved to failed/, and the queue goes on"
rm -rf q2
"$sweep" queue add q2 --name good -- bash -c "echo ran > good.txt" > /dev/null
"$sweep" queue add q2 --name bad -- true > /dev/null
bad=$(ls q2/pending | tail -1)
echo '{"command": ["true", 5]}' > "q2/pending/$bad"
"$sweep" queue list q2 | grep "is damaged (command: 5 is not a string)" >/dev/null || fail "list should name the damage: $("$sweep" queue list q2)"
"$sweep" queue run q2 > run3.out 2>&1 || fail "queue run over a damaged job: $(cat run3.out)"
grep -q "is damaged (command: 5 is not a string): moved to failed/" run3.out && [ -f "q2/failed/$bad" ] || fail "the damaged job: $(cat run3.out)"
[ -f good.txt ] || fail "the good job did not run: $(cat run3.out)"
echo "PASS"
