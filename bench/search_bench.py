#!/usr/bin/env python3
"""frugal-search against a grid on a real space: an MLP (the minimal example) on scikit-learn's
handwritten digits, 27 configurations (hidden width 16/64/256 x layers 1/2/3 x learning rate
1e-3/1e-2/1e-1), 27 epochs each. Writes one JSON line per figure:

- search.budget_ratio: epochs spent by ASHA (promotion form, eta 3, rungs 1/3/9/27) searching the
  same 27 configurations in a seeded random order, over the grid's; over 10 seeds. Target: a
  configuration whose full-budget accuracy is within 0.5 points of the grid's best (the regret of
  each seed is recorded, and the wall-time ratio).
- search.pareto_hypervolume: the hypervolume (accuracy x throughput) of what a cost-aware search
  finds with at most a quarter of the grid's epochs (every configuration one epoch, the best fifth
  by Pareto rank of accuracy and throughput to the full budget), over the grid's front; the
  configurations it found are scored with the grid's measurements of them.
- search.driver_overhead: the driver's own CPU time a trial over the trial's wall time.

    search_bench.py RESULTS.jsonl FRUGAL_SEARCH MINIMAL [SEEDS]
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tools", "frugal_search"))
from frugal_search.report import hypervolume  # noqa: E402

results, search, minimal = sys.argv[1], sys.argv[2], sys.argv[3]
seeds = int(sys.argv[4]) if len(sys.argv) > 4 else 10
work = os.path.join(os.path.dirname(os.path.abspath(results)), "search_bench")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
digits = os.path.join(work, "digits")
subprocess.run([sys.executable, os.path.join(here, "..", "examples", "minimal", "make_digits.py"), digits], check=True, capture_output=True)
program = ["--", minimal, f"--model.data_dir={digits}", "--smoke_test.mode=off", "--trainer.cpu_threads=1", "--trainer.tensorboard=false",
           "--trainer.log_every_n_steps=4", "--data.batch_size=64"]  # 5 throughput windows an epoch
space = ["--space", "model.hidden=16,64,256", "--space", "model.layers=1,2,3", "--space", "model.lr=0.001,0.01,0.1"]
COMMAND = "python3 bench/search_bench.py build/bench/results.jsonl build/tools/frugal-search build/examples/minimal/frugal_minimal"


def run(out, *args):
    start = time.time()
    done = subprocess.run([search, "--out", os.path.join(work, out), *space, *args, *program], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"search_bench: {out} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(os.path.join(work, out, "trials.json")) as f:
        trials = json.load(f)
    with open(os.path.join(work, out, "summary.json")) as f:
        summary = json.load(f)
    cpu = float(done.stdout.split("the driver's own CPU time: ")[1].split(" s")[0])
    return trials, summary, time.time() - start, cpu


def key(t):
    return tuple(sorted(t["params"].items()))


def append(name, value, unit, baseline):
    with open(results, "a") as f:
        f.write(json.dumps({"name": name, "value": value, "unit": unit, "baseline": baseline,
                            "ratio": value / baseline if baseline else None, "command": COMMAND}) + "\n")


# The grid: every configuration to the full budget, with its throughput (the second objective).
grid, grid_summary, grid_wall, _ = run("grid", "--sampler", "grid", "--form", "none", "--max-resource", "27",
                                       "--objective", "accuracy:max", "--objective", "samples_per_s:max")
by_config = {key(t): t for t in grid if t["state"] == "complete"}
assert len(by_config) == 27, f"the grid completed {len(by_config)} of 27"
grid_best = max(t["objectives"]["accuracy"] for t in by_config.values())
grid_units = grid_summary["units_spent"]
print(f"grid: 27 configurations, {grid_units} epochs, best accuracy {grid_best:.4f}, {grid_wall:.1f} s")

# FRUGAL_SEARCH_BENCH_PARTS=pareto measures the grid and the multi-objective part only.
parts = os.environ.get("FRUGAL_SEARCH_BENCH_PARTS", "asha,pareto").split(",")
ratios, regrets, walls, overheads = [], [], [], []
for seed in range(seeds if "asha" in parts else 0):
    trials, summary, wall, cpu = run(f"asha-{seed}", "--sampler", "grid", "--seed", str(seed), "--form", "promotion", "--eta", "3",
                                     "--max-resource", "27", "--objective", "accuracy:max")
    best = summary["best"]
    regret = (grid_best - by_config[key(best)]["objectives"]["accuracy"]) * 100  # points, on the grid's own run of it
    ratios.append(summary["units_spent"] / grid_units)
    regrets.append(regret)
    walls.append(wall / grid_wall)
    trial_seconds = [t["seconds"] for t in trials if t["seconds"] > 0]
    overheads.append(cpu / len(trials) / statistics.mean(trial_seconds))
    print(f"asha seed {seed}: {summary['units_spent']} epochs (x{ratios[-1]:.3f} the grid's), best trial accuracy "
          f"{best['objectives']['accuracy']:.4f}, regret {regret:.2f} points, wall x{walls[-1]:.2f}, driver {overheads[-1] * 100:.2f}% of a trial")
if "asha" in parts:
    met = sum(r <= 0.5 for r in regrets)
    append("search.budget_ratio", statistics.mean(ratios) * grid_units, "epochs", grid_units)
    append("search.budget_ratio_regret_points_max", max(regrets), "points", 0.5)
    append("search.budget_ratio_target_met", met / seeds, "fraction of seeds", 0.9)
    append("search.budget_ratio_wall", statistics.mean(walls) * grid_wall, "s", grid_wall)
    append("search.driver_overhead", statistics.mean(overheads), "fraction of a trial", 0.02)
    print(f"search.budget_ratio: x{statistics.mean(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}; goal <= 0.15); "
          f"regret within 0.5 points in {met}/{seeds} seeds (regrets {', '.join(f'{r:.2f}' for r in regrets)}); "
          f"wall x{statistics.mean(walls):.2f}; driver {statistics.mean(overheads) * 100:.2f}% of a trial (goal <= 2%)")


# Multi-objective at a quarter of the grid's epochs: the hypervolume of what it finds.
def front_points(configs):
    return [[-c["objectives"]["accuracy"], -c["objectives"]["samples_per_s"]] for c in configs]


reference = [-min(t["objectives"]["accuracy"] for t in by_config.values()) + 1e-9,
             -min(t["objectives"]["samples_per_s"] for t in by_config.values()) + 1e-9]
grid_hv = hypervolume(front_points(by_config.values()), reference)
hvs = []
for seed in range(min(seeds, 5) if "pareto" in parts else 0):
    # Cost-aware successive halving: every configuration for one epoch (its throughput is known
    # then), the best fifth by Pareto rank of (accuracy, throughput) on to the full budget.
    trials, summary, _, _ = run(f"pareto-{seed}", "--sampler", "grid", "--seed", str(seed), "--form", "promotion", "--min-resource", "1",
                                "--eta", "27", "--keep", "0.2", "--max-resource", "27", "--budget-units", str(grid_units // 4),
                                "--objective", "accuracy:max", "--objective", "samples_per_s:max")
    found = [by_config[key(t)] for t in trials if t["state"] == "complete" and key(t) in by_config]
    hvs.append(hypervolume(front_points(found), reference) / grid_hv)
    print(f"pareto seed {seed}: {len(found)} configurations at {summary['units_spent']} epochs ({summary['units_spent'] / grid_units:.2f} of the grid's): "
          f"hypervolume {hvs[-1]:.3f} of the grid's front")
if hvs:
    append("search.pareto_hypervolume", statistics.mean(hvs), "fraction of the grid's", 0.95)
    print(f"search.pareto_hypervolume: {statistics.mean(hvs):.3f} (range {min(hvs):.3f}-{max(hvs):.3f}; goal >= 0.95)")
