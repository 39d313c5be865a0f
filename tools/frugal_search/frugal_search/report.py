"""What a study found: every trial (parameters, intermediate values, objectives, resource units,
state, run directory), the best trial or the Pareto front, the trial that best meets a target,
the resource units and wall time spent against a grid's on the same space; as a table, CSV, JSON
and a PNG chart (objective against cost with the front, or the learning curves)."""
from __future__ import annotations

import csv
import json
import math
import os
import re

from optuna.trial import TrialState

from . import schedule
from .errors import SearchError
from .study import attr, params_of

STATES = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.WAITING: "paused", TrialState.FAIL: "failed",
          TrialState.RUNNING: "running"}


def parse_target(text: str) -> tuple[str, str, float]:
    """'top1>=0.97' -> (top1, >=, 0.97)."""
    match = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(>=|<=|>|<)\s*([-+0-9.eE]+)\s*", text or "")
    if not match:
        raise SearchError(f"--target '{text}' is not METRIC>=VALUE (or <=, >, <)")
    try:
        value = float(match.group(3))
    except ValueError:
        raise SearchError(f"--target '{text}': '{match.group(3)}' is not a number") from None
    return match.group(1), match.group(2), value


def meets(value: float, op: str, bound: float) -> bool:
    return {">=": value >= bound, "<=": value <= bound, ">": value > bound, "<": value < bound}[op]


def trial_rows(study, space, objectives) -> list[dict]:
    rows = []
    for t in study.trials():
        row = {"number": t.number, "state": STATES.get(t.state, t.state.name.lower()),
               "units": int(attr(t, "units", 0)), "seconds": round(float(attr(t, "seconds", 0.0)), 3),
               "run_dir": attr(t, "run_dir", ""), "bracket": int(attr(t, "bracket", 0))}
        if attr(t, "state") == "interrupted" and t.state == TrialState.WAITING:
            row["state"] = "interrupted"
        row["params"] = params_of(t, space)
        row["intermediate"] = {str(k): v for k, v in sorted(t.intermediate_values.items())}
        values = t.values if t.state == TrialState.COMPLETE and t.values else []
        row["objectives"] = {m: v for (m, _), v in zip(objectives, values)}
        row["feasible"] = bool(attr(t, "feasible", True))
        if t.state == TrialState.FAIL:
            row["failure_class"] = attr(t, "failure_class", "")
            row["failure_reason"] = attr(t, "failure_reason", "")
        if t.state == TrialState.PRUNED:
            row["pruned"] = attr(t, "pruned", "")
        rows.append(row)
    return rows


def pareto(rows: list[dict], objectives) -> list[dict]:
    """The complete, feasible trials no other one beats on every objective."""
    candidates = [r for r in rows if r["state"] == "complete" and r["feasible"] and len(r["objectives"]) == len(objectives)]
    sign = [1.0 if d == "min" else -1.0 for _, d in objectives]

    def key(r):
        return [s * r["objectives"][m] for s, (m, _) in zip(sign, objectives)]

    front = []
    for r in candidates:
        k = key(r)
        dominated = any(all(a <= b for a, b in zip(key(o), k)) and any(a < b for a, b in zip(key(o), k)) for o in candidates if o is not r)
        if not dominated:
            front.append(r)
    return sorted(front, key=key)


def hypervolume(points: list[list[float]], reference: list[float]) -> float:
    """Hypervolume of 2-D minimisation points against a reference point (worse than all)."""
    pts = sorted((p for p in points if p[0] < reference[0] and p[1] < reference[1]), key=lambda p: p[0])
    volume, best_y = 0.0, reference[1]
    for x, y in pts:
        if y < best_y:
            volume += (reference[0] - x) * (best_y - y)
            best_y = y
    return volume


def write(out_dir: str, study, space, settings, wall_seconds: float, target: str | None, print_table=True) -> dict:
    objectives = settings.objectives
    rows = trial_rows(study, space, objectives)
    front = pareto(rows, objectives)
    first, direction = objectives[0]
    complete = [r for r in rows if r["state"] == "complete" and r["feasible"] and first in r["objectives"]]
    best = None
    if complete:
        best = (min if direction == "min" else max)(complete, key=lambda r: r["objectives"][first])
    configurations = len(space.grid(settings.grid_points))
    units = sum(r["units"] for r in rows)
    grid_units = schedule.grid_cost(configurations, settings.rungs.max_resource)
    summary = {"trials": len(rows), "by_state": {s: sum(1 for r in rows if r["state"] == s) for s in sorted({r["state"] for r in rows})},
               "resource_unit": settings.unit, "units_spent": units, "grid_configurations": configurations,
               "grid_units": grid_units, "units_vs_grid": units / grid_units if grid_units else None,
               "wall_seconds": round(wall_seconds, 2), "trial_seconds": round(sum(r["seconds"] for r in rows), 2),
               "best": best, "pareto_front": front}
    if target:
        metric, op, bound = parse_target(target)
        meeting = [r for r in complete if metric in r["objectives"] and meets(r["objectives"][metric], op, bound)]
        cost_key = next((m for m, _ in objectives if m in ("cost", "seconds")), None)
        chosen = min(meeting, key=lambda r: r["objectives"][cost_key] if cost_key else r["seconds"]) if meeting else None
        summary["target"] = {"target": target, "trial": chosen}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "trials.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    keys = space.keys()
    with open(os.path.join(out_dir, "trials.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["number", "state", "units", "seconds", *keys, *[m for m, _ in objectives], "run_dir", "failure"])
        for r in rows:
            w.writerow([r["number"], r["state"], r["units"], r["seconds"], *[r["params"].get(k, "") for k in keys],
                        *[r["objectives"].get(m, "") for m, _ in objectives], r["run_dir"],
                        (r.get("failure_class", "") + ": " + r.get("failure_reason", "")) if r["state"] == "failed" else ""])
    with open(os.path.join(out_dir, "pareto.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["number", *keys, *[m for m, _ in objectives]])
        for r in front:
            w.writerow([r["number"], *[r["params"].get(k, "") for k in keys], *[r["objectives"][m] for m, _ in objectives]])
    chart(out_dir, rows, front, objectives, settings.unit)
    if print_table:
        print_summary(rows, summary, objectives, keys)
    return summary


def chart(out_dir: str, rows, front, objectives, unit) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    first = objectives[0][0]
    if len(objectives) >= 2:
        second = objectives[1][0]
        done = [r for r in rows if r["state"] == "complete"]
        ax.scatter([r["objectives"][second] for r in done], [r["objectives"][first] for r in done], s=18, alpha=0.6, label="complete trials")
        if front:
            ax.plot([r["objectives"][second] for r in front], [r["objectives"][first] for r in front], "o-", color="C3", label="Pareto front")
        ax.set_xlabel(second)
        ax.set_ylabel(first)
        ax.set_title("frugal-search: objective against cost")
    else:
        for r in rows:
            if r["intermediate"]:
                xs = [int(k) for k in r["intermediate"]]
                ax.plot(xs, list(r["intermediate"].values()), "-o", ms=3, alpha=0.6, color="C0" if r["state"] == "complete" else "C7")
        ax.set_xlabel(unit)
        ax.set_ylabel(first)
        ax.set_xscale("log")
        ax.set_title("frugal-search: learning curves (blue: complete)")
    ax.grid(alpha=0.3)
    if len(objectives) >= 2:
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "search.png"))
    plt.close(fig)


def print_summary(rows, summary, objectives, keys) -> None:
    print(f"{'trial':>5} {'state':<11} {'units':>6} {'seconds':>8}  " + "  ".join(f"{m:>12}" for m, _ in objectives) + "  parameters")
    for r in rows:
        values = "  ".join(f"{r['objectives'][m]:>12.6g}" if m in r["objectives"] else f"{'-':>12}" for m, _ in objectives)
        params = " ".join(f"{k}={r['params'][k]}" for k in keys if k in r["params"])
        note = f"  ({r.get('failure_class')}: {r.get('failure_reason', '')[:80]})" if r["state"] == "failed" else ""
        print(f"{r['number']:>5} {r['state']:<11} {r['units']:>6} {r['seconds']:>8.1f}  {values}  {params}{note}")
    print(f"spent {summary['units_spent']} {summary['resource_unit']} in {summary['trials']} trials "
          f"({summary['wall_seconds']:.1f} s); a grid of the {summary['grid_configurations']} configurations spends "
          f"{summary['grid_units']}: x{(summary['units_vs_grid'] or 0):.3f}")
    if summary["best"]:
        b = summary["best"]
        print(f"best: trial {b['number']} ({', '.join(f'{m} {v:.6g}' for m, v in b['objectives'].items())}): "
              + " ".join(f"--{k}={v}" for k, v in b["params"].items()))
    if len(objectives) > 1:
        print(f"Pareto front: trials {', '.join(str(r['number']) for r in summary['pareto_front'])}")
    if "target" in summary:
        t = summary["target"]["trial"]
        print(f"target {summary['target']['target']}: " + (f"trial {t['number']} at the least cost" if t else "no complete trial meets it"))
