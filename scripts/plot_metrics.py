#!/usr/bin/env python3
"""Turns a run's metrics.jsonl into PNG plots a person can look at.

    python scripts/plot_metrics.py runs/resnet50            # writes runs/resnet50/plots/*.png
    python scripts/plot_metrics.py runs/x --out /tmp/plots

Plots: loss (training, and validation when present), learning rate, throughput (samples/s;
tokens/s and MFU when logged), step time split (data wait / communication / compute), and cost
(so far and projected, with budget alerts) when the cost policy ran. A partial last line (a run
killed mid-write) is skipped.
"""
import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def read_records(path):
    records = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                print(f"{path}:{number}: not a JSON line, skipped", file=sys.stderr)
    return records


def series(records, event, field):
    points = [(r["step"], r[field]) for r in records
              if r.get("event") == event and r.get(field) is not None and "step" in r]
    return [p[0] for p in points], [p[1] for p in points]


def plot(out, name, title, ylabel, lines, markers=()):
    lines = [(label, xs, ys) for label, xs, ys in lines if xs]
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, xs, ys in lines:
        ax.plot(xs, ys, label=label, marker="o" if len(xs) < 30 else None)
    for label, x in markers:
        ax.axvline(x, color="red", linestyle=":", linewidth=1)
        ax.annotate(label, (x, ax.get_ylim()[1]), rotation=90, va="top", ha="right", fontsize=8, color="red")
    ax.set_title(title)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / f"{name}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run directory holding metrics.jsonl")
    parser.add_argument("--out", type=Path, help="where the PNGs go (default: <run_dir>/plots)")
    args = parser.parse_args()
    metrics = args.run_dir / "metrics.jsonl"
    if not metrics.is_file():
        sys.exit(f"plot_metrics: {metrics} does not exist")
    records = read_records(metrics)
    if not any(r.get("event") == "train" for r in records):
        sys.exit(f"plot_metrics: {metrics} has no training records")
    out = args.out or args.run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    alerts = [(f"{int(round(100 * r['fraction']))}% of budget", r["step"])
              for r in records if r.get("event") == "budget_alert"]
    written = [
        plot(out, "loss", "Loss", "loss",
             [("train", *series(records, "train", "loss")), ("validation", *series(records, "validation", "loss"))]),
        plot(out, "learning_rate", "Learning rate", "lr", [("lr", *series(records, "train", "lr"))]),
        plot(out, "throughput", "Throughput", "per second",
             [("samples/s", *series(records, "train", "samples_per_s")),
              ("tokens/s", *series(records, "train", "tokens_per_s"))]),
        plot(out, "mfu", "Model FLOPs utilisation", "MFU", [("mfu", *series(records, "train", "mfu"))]),
        plot(out, "step_split", "Where the step time goes", "share of the step",
             [("data wait", *series(records, "train", "data_wait_fraction")),
              ("communication", *series(records, "train", "communication_fraction")),
              ("compute", *series(records, "train", "compute_fraction"))]),
        plot(out, "cost", "Cost", "money",
             [("so far", *series(records, "train", "cost")),
              ("projected for the run", *series(records, "train", "projected_cost"))], alerts),
    ]
    for path in written:
        if path:
            print(path)


if __name__ == "__main__":
    main()
