#!/usr/bin/env bash
# frugal-search on the minimal example (an MLP on spirals, a second an epoch), one behaviour a
# scenario (tests/CMakeLists.txt runs each as its own ctest test, label search):
#   promotion  ASHA pauses trials at rungs and resumes the promoted ones from their checkpoints: the
#              completed trial's weights equal a run that never paused, bitwise; Optuna's API reads
#              the intermediate values; the report, CSV, JSON and chart come out
#   stopping   the stopping form stops losers at their rung; Hyperband brackets; a grid
#   faults     a configuration the program refuses and a crashing trial are failed trials with their
#              class, the search goes on; bad spaces, storages and programs exit 2 naming the problem
#   kill       the driver killed with -9 at random moments and restarted completes the study with
#              every trial accounted for and no rung run twice
#   workers    two workers share one study (a journal file), run every trial once; SIGTERM stops cleanly
#   postgres   two workers share one study in a real PostgreSQL server started for the test
#   gpu        [gpu] promotion's checks with every rung on CUDA (skipped without a device)
#   search_test.sh SCENARIO FRUGAL_SEARCH MINIMAL FRUGAL_CHECKPOINT PYTHON SOURCE_DIR WORK_DIR
set -uo pipefail
scenario="$1"; search="$2"; minimal="$3"; checkpoint_tool="$4"; python="$5"; source_dir="$6"; work="$7/$1"
rm -rf "$work"; mkdir -p "$work"; cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
data=(--model.train_examples=1024 --model.validation_examples=512 --smoke_test.mode=off --trainer.cpu_threads=1
      --trainer.log_every_n_steps=1000 --trainer.tensorboard=false)
space=(--space "model.hidden=8:64:log" --space "model.lr=1e-3:3e-2:log")
states() { "$python" -c 'import json,sys,collections; r=json.load(open(sys.argv[1])); print(dict(sorted(collections.Counter(t["state"] for t in r).items())))' "$1"; }

exact=1
if [ "$scenario" = gpu ]; then
  # [gpu]: the promotion scenario with every rung on CUDA, resumed from checkpoints written there.
  "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || { echo "SKIPPED: no CUDA device"; exit 0; }
  data+=(--trainer.device=cuda)
  scenario=promotion exact=0  # cuBLAS may pick another algorithm in a new process: equal within 1e-5
fi

case "$scenario" in
promotion)
  "$search" --out study "${space[@]}" --objective loss:min --max-resource 9 --trials 9 --sampler random --seed 3 \
    -- "$minimal" "${data[@]}" > search.log 2>&1 || fail "search: $(tail -5 search.log)"
  grep -q "paused at epoch 1" search.log || fail "no trial paused at its first rung"
  grep -q "complete: loss" search.log || fail "no trial completed"
  for f in trials.json trials.csv summary.json pareto.csv search.png; do [ -s "study/$f" ] || fail "no study/$f"; done
  s=$(states study/trials.json)
  [ "$s" = "{'complete': 1, 'pruned': 8}" ] || fail "states: $s"
  units=$("$python" -c 'import json; print(json.load(open("study/summary.json"))["units_spent"])')
  [ "$units" -lt 81 ] || fail "ASHA spent $units epochs, a grid of 9 spends 81"
  # The completed trial resumed at epochs 1 and 3: its final weights equal a straight 9-epoch run's.
  read -r dir params < <("$python" -c '
import json
t = [t for t in json.load(open("study/trials.json")) if t["state"] == "complete"][0]
print(t["run_dir"], " ".join(f"--{k}={v}" for k, v in t["params"].items()))')
  [[ $(grep -c '^\$ ' "$dir/search.log") == 3 ]] || fail "the completed trial did not run 3 rungs: $(grep -c '^\$ ' "$dir/search.log")"
  # shellcheck disable=SC2086
  "$minimal" "${data[@]}" $params --trainer.max_epochs=9 --checkpoint.enabled=true --trainer.run_dir=straight > straight.log 2>&1 ||
    fail "straight run: $(tail -3 straight.log)"
  "$checkpoint_tool" export "$dir/checkpoints/ckpt-$(printf %09d "$(sed -n 's/.*"step":\([0-9]*\).*/\1/p' "$dir/metrics.jsonl" | tail -1)")" a.safetensors > /dev/null ||
    fail "cannot export the trial's final checkpoint"
  "$checkpoint_tool" export "straight/checkpoints/$(cat straight/checkpoints/latest)" b.safetensors > /dev/null || fail "cannot export the straight run"
  if [ "$exact" = 1 ]; then
    cmp -s a.safetensors b.safetensors || fail "the paused and resumed trial differs from the straight run"
  else
    "$python" -c 'from safetensors.torch import load_file as l; import torch; a, b = l("a.safetensors"), l("b.safetensors")
assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)' ||
      fail "the paused and resumed trial on CUDA differs from the straight run"
  fi
  # Optuna's own API (what optuna-dashboard reads) sees the study and its learning curves.
  "$python" - <<'PY' || fail "Optuna does not see the intermediate values"
import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage
study = optuna.load_study(study_name="study", storage=JournalStorage(JournalFileBackend("study/study.journal")))
done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
assert len(done) == 1 and sorted(done[0].intermediate_values) == [1, 3, 9], done[0].intermediate_values
assert all(t.intermediate_values for t in study.trials), "a trial without learning curve"
assert set(done[0].params) == {"model.hidden", "model.lr"}
PY
  ;;
stopping)
  "$search" --out stop "${space[@]}" --objective accuracy:max --max-resource 9 --trials 8 --form stopping --sampler tpe --seed 1 \
    -- "$minimal" "${data[@]}" > stop.log 2>&1 || fail "stopping form: $(tail -5 stop.log)"
  grep -q "stopped at epoch" stop.log || fail "the stopping form stopped nothing"
  ! grep -q "paused at" stop.log || fail "the stopping form paused a trial"
  grep -q '"state": "complete"' stop/trials.json || fail "no trial completed"
  "$search" --out hyper "${space[@]}" --objective loss:min --max-resource 9 --trials 10 --hyperband --seed 2 \
    -- "$minimal" "${data[@]}" > hyper.log 2>&1 || fail "hyperband: $(tail -5 hyper.log)"
  "$python" -c 'import json,sys; b={t["bracket"] for t in json.load(open("hyper/trials.json"))}; sys.exit(0 if b >= {0,1,2} else 1)' ||
    fail "Hyperband used only brackets $("$python" -c 'import json; print({t["bracket"] for t in json.load(open("hyper/trials.json"))})')"
  "$search" --out grid --space "model.hidden=8,32" --space "model.lr=0.003,0.01" --objective loss:min --max-resource 3 --sampler grid \
    --form none -- "$minimal" "${data[@]}" > grid.log 2>&1 || fail "grid: $(tail -5 grid.log)"
  s=$(states grid/trials.json)
  [ "$s" = "{'complete': 4}" ] || fail "the grid of 4 gave $s"
  grep -q "x1.000" grid.log || fail "a full grid does not cost what a grid costs: $(grep spent grid.log)"
  ;;
faults)
  # model.layers=0 is refused by the program (exit 2): a failed trial of class config, and the search goes on.
  "$search" --out faults --space "model.layers=0,1,2" --objective loss:min --max-resource 3 --sampler grid --form none \
    -- "$minimal" "${data[@]}" > faults.log 2>&1 || fail "search with a failing trial: $(tail -5 faults.log)"
  "$python" -c '
import json, sys
t = {r["params"]["model.layers"]: r for r in json.load(open("faults/trials.json"))}
assert t["0"]["state"] == "failed" and t["0"]["failure_class"] == "config" and "layers" in t["0"]["failure_reason"], t["0"]
assert t["1"]["state"] == "complete" and t["2"]["state"] == "complete"' || fail "failed trial not recorded with its class: $(grep layers=0 faults.log)"
  expect2() {  # WHAT TEXT ARGS...: exit 2 and TEXT in the message
    local what="$1" text="$2"; shift 2
    out=$("$search" "$@" 2>&1); rc=$?
    [ "$rc" -eq 2 ] && grep -qF -- "$text" <<<"$out" || fail "$what: exit $rc: $out"
  }
  expect2 "bad range" "search space: model.lr: the upper bound 'x' is not a number" --out b1 --space model.lr=1:x --max-resource 3 -- "$minimal"
  expect2 "unknown key" "search space: model.widht is not a key of" --out b2 --space model.widht=1:4 --max-resource 3 -- "$minimal"
  expect2 "bad storage" "storage 'nowhere' is not a URL" --out b3 --space model.hidden=8,16 --max-resource 3 --storage nowhere -- "$minimal"
  expect2 "unreachable database" "storage 127.0.0.1:1/db cannot be used" --out b4 --space model.hidden=8,16 --max-resource 3 \
    --storage postgresql://someone:secret@127.0.0.1:1/db -- "$minimal"
  ! "$search" --out b4 --space model.hidden=8,16 --max-resource 3 --storage postgresql://someone:secret@127.0.0.1:1/db -- "$minimal" 2>&1 |
    grep -q secret || fail "a storage password was printed"
  expect2 "not a Frugal program" "is not a Frugal program" --out b5 --space model.hidden=8,16 --max-resource 3 -- /bin/echo
  expect2 "no program" "no program" --out b6 --space model.hidden=8,16 --max-resource 3
  expect2 "bad objective" "--objective 'loss' is not METRIC:min" --out b7 --space model.hidden=8,16 --max-resource 3 --objective loss -- "$minimal"
  printf '[search]\ntrails = 3\n' > t.toml
  expect2 "bad config file" "t.toml: [search] has unknown key(s) trails" --out b8 --config t.toml --space model.hidden=8,16 -- "$minimal"
  printf '[space]\n"model.hidden" = "8:x"\n' > s.toml
  expect2 "bad space file" "search space: model.hidden: the upper bound 'x' is not a number" --out b9 --config s.toml --max-resource 3 -- "$minimal"
  [ ! -d b1/trials ] && [ ! -d b2/trials ] || fail "a trial ran before the error"
  ;;
kill)
  # The driver killed with -9 at random moments, then started again, until the study is done.
  args=(--out study "${space[@]}" --objective loss:min --max-resource 9 --trials 9 --sampler random --seed 5 -- "$minimal" "${data[@]}")
  for round in $(seq 1 12); do
    "$search" "${args[@]}" >> driver.log 2>&1 &
    pid=$!
    sleep "$("$python" -c "import random; random.seed($round); print(round(random.uniform(0.5, 2.5), 2))")"
    if ! kill -0 "$pid" 2>/dev/null; then wait "$pid"; break; fi
    kill -9 "$pid"; wait "$pid" 2>/dev/null
    echo "--- killed with -9 (round $round)" >> driver.log
  done
  "$search" "${args[@]}" >> driver.log 2>&1 || fail "the last start failed: $(tail -5 driver.log)"
  kills=$(grep -c "killed with -9" driver.log)
  [ "$kills" -ge 2 ] || fail "the driver was killed only $kills times"
  # A driver killed while it appends to the journal leaves no lock behind (the kernel drops it):
  # the next start does not wait out a stale lock file.
  ! grep -q "to acquire the lock file\|Forcibly releasing" driver.log || fail "a killed driver's journal lock stalled the next start: $(grep -m1 lock driver.log)"
  s=$(states study/trials.json)
  # (Which trials ASHA promotes depends on the order rungs end in, which the kills change.)
  "$python" -c 'import json,sys; r=json.load(open("study/trials.json")); sys.exit(0 if all(t["state"] in ("complete","pruned") for t in r) and any(t["state"]=="complete" for t in r) else 1)' ||
    fail "after $kills kills the study ended with $s"
  # No rung twice at once, and no trial lost: each trial's rungs ran one after another.
  "$python" - <<'PY' || fail "a trial's rungs overlap or a trial is missing"
import glob, json, re
trials = json.load(open("study/trials.json"))
assert sorted(t["number"] for t in trials) == list(range(9)), [t["number"] for t in trials]
for t in trials:
    assert t["units"] == max(int(k) for k in t["intermediate"]), t
PY
  echo "killed $kills times"
  ;;
workers)
  args=(--out shared "${space[@]}" --objective loss:min --max-resource 9 --trials 12 --sampler tpe --seed 7 --storage "journal:$work/shared.journal"
        -- "$minimal" "${data[@]}")
  "$search" "${args[@]}" > w1.log 2>&1 & a=$!
  "$search" "${args[@]}" > w2.log 2>&1 & b=$!
  wait "$a" || fail "worker 1: $(tail -3 w1.log)"
  wait "$b" || fail "worker 2: $(tail -3 w2.log)"
  grep -q "trial" w1.log && grep -q "trial" w2.log || fail "one worker ran nothing"
  s=$(states shared/trials.json)
  total=$("$python" -c 'import json; print(len(json.load(open("shared/trials.json"))))')
  # (Two workers starting trials at the same moment may each take the last one: up to one more.)
  [ "$total" -ge 12 ] && [ "$total" -le 13 ] || fail "two workers made $total trials for a budget of 12"
  # Each rung of each trial ran on one worker only: its command line appears once per rung.
  for d in shared/trials/*/; do
    u=$(grep '^\$ ' "$d/search.log" | grep -o 'pause_at_epoch=[0-9]*' | sort | uniq -d)
    [ -z "$u" ] || fail "$d: a rung ran twice: $u"
  done
  # SIGTERM to a worker: its running trials checkpoint and the study stays resumable.
  "$search" --out term "${space[@]}" --objective loss:min --max-resource 9 --trials 9 --sampler random --seed 1 \
    -- "$minimal" "${data[@]}" > term.log 2>&1 & pid=$!
  for _ in $(seq 1 100); do grep -q "epochs 0..1" term.log && break; sleep 0.1; done
  sleep 0.3; kill -TERM "$pid"; wait "$pid"; rc=$?
  [ "$rc" -eq 0 ] || fail "SIGTERM: exit $rc: $(tail -3 term.log)"
  grep -q "stopped; start the same command again" term.log || fail "SIGTERM: $(tail -3 term.log)"
  "$python" -c 'import json,sys; r=json.load(open("term/trials.json")); sys.exit(0 if r and all(t["state"] in ("paused","interrupted","complete") for t in r) else 1)' ||
    fail "SIGTERM did not leave the study resumable: $(states term/trials.json)"
  "$search" --out term "${space[@]}" --objective loss:min --max-resource 9 --trials 9 --sampler random --seed 1 \
    -- "$minimal" "${data[@]}" > term2.log 2>&1 || fail "continuing after SIGTERM: $(tail -3 term2.log)"
  s=$(states term/trials.json)
  "$python" -c 'import json,sys; r=json.load(open("term/trials.json")); sys.exit(0 if len(r) == 9 and all(t["state"] in ("complete","pruned") for t in r) and any(t["state"]=="complete" for t in r) else 1)' ||
    fail "after SIGTERM and a restart: $s"
  ;;
postgres)
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -x "$pg_bin/initdb" ] || { echo "SKIPPED: no PostgreSQL server (apt-get install postgresql)"; exit 0; }
  "$python" -c 'import psycopg' 2>/dev/null || { echo "SKIPPED: no psycopg in $python (bash scripts/install-deps.sh)"; exit 0; }
  port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # The server runs from a directory under /tmp: the build tree may sit where the postgres user
  # cannot reach (a clone under /root), and initdb refuses to run as root.
  pg=$(mktemp -d /tmp/frugal-search-pg.XXXXXX) || fail "mktemp"
  as_user=()
  if [ "$(id -u)" -eq 0 ]; then as_user=(runuser -u postgres --); chown postgres "$pg"; fi
  chmod 700 "$pg"
  stop_pg() { "${as_user[@]}" "$pg_bin/pg_ctl" -D "$pg/data" -m immediate stop > /dev/null 2>&1; rm -rf "$pg"; }
  trap stop_pg EXIT
  "${as_user[@]}" "$pg_bin/initdb" -D "$pg/data" -U frugal --auth=trust > pg.log 2>&1 || fail "initdb: $(tail -3 pg.log)"
  "${as_user[@]}" "$pg_bin/pg_ctl" -D "$pg/data" -o "-p $port -k $pg -c listen_addresses=127.0.0.1" -l "$pg/server.log" -w start \
    >> pg.log 2>&1 || fail "PostgreSQL did not start: $(tail -3 pg.log; "${as_user[@]}" tail -3 "$pg/server.log")"
  "$pg_bin/createdb" -h 127.0.0.1 -p "$port" -U frugal search || fail "createdb failed"
  url="postgresql://frugal@127.0.0.1:$port/search"
  args=(--out pgstudy "${space[@]}" --objective loss:min --max-resource 9 --trials 10 --sampler tpe --seed 9 --storage "$url" -- "$minimal" "${data[@]}")
  "$search" "${args[@]}" > w1.log 2>&1 & a=$!
  "$search" "${args[@]}" > w2.log 2>&1 & b=$!
  wait "$a" || fail "worker 1: $(tail -3 w1.log)"
  wait "$b" || fail "worker 2: $(tail -3 w2.log)"
  # (frugal-search is given the driverless URL; this check names psycopg 3, the driver install-deps installs)
  "$python" - "${url/postgresql:/postgresql+psycopg:}" <<'PY' || fail "the PostgreSQL study is not what two workers should leave"
import sys, optuna
study = optuna.load_study(study_name="pgstudy", storage=sys.argv[1])
states = [t.state for t in study.trials]
# (Two workers starting trials at the same moment may each take the last one: up to one more.)
assert 10 <= len(states) <= 11, len(states)
assert all(s in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for s in states), states
assert sum(s == optuna.trial.TrialState.COMPLETE for s in states) >= 1
# Both workers ran rungs, and no rung ran twice (the last worker out prunes what is left paused, so
# the trials' worker attribute names it: the logs tell who ran what).
runs = [[l.split(" -> ")[0] + l.split(" -> ")[1] for l in open(f) if " -> epochs " in l] for f in ("w1.log", "w2.log")]
assert all(runs), runs
assert len(runs[0] + runs[1]) == len(set(runs[0] + runs[1])), runs
# Workers given the same --seed must not propose the same configurations in lockstep (at most
# their very first trials, sampled before either saw the other, may coincide).
configs = [tuple(sorted(t.params.items())) for t in study.trials]
assert len(configs) - len(set(configs)) <= 1, configs
PY
  ;;
*) fail "unknown scenario $scenario" ;;
esac
echo PASS
