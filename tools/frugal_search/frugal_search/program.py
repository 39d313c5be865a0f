"""The Frugal program a trial runs: what keys it takes (its --help), the command of one rung, its
outcome (exit status, the failure's class and reason) and the values its metrics.jsonl holds.

A trial is the program itself with --trainer.run_dir of its own and its schedule set to the full
budget (trainer.max_epochs or trainer.max_steps); each rung is one run that ends with
--trainer.pause_at_epoch / pause_at_step (a checkpoint, then exit 0) and the next rung is the same
command continued from that checkpoint, exactly as if it had never stopped.
"""
from __future__ import annotations

import json
import math
import os
import re
import statistics
import signal
import subprocess
from dataclasses import dataclass, field

from .errors import SearchError

UNITS = {"epochs": ("trainer.max_epochs", "trainer.pause_at_epoch"), "steps": ("trainer.max_steps", "trainer.pause_at_step")}
NEEDED = ("trainer.run_dir", "checkpoint.enabled")


def program_keys(command: list[str]) -> set[str]:
    """The configuration keys the program's --help lists; SearchError when it is not a Frugal program."""
    try:
        done = subprocess.run(command + ["--help"], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SearchError(f"the program {command[0]} does not exist") from None
    except PermissionError:
        raise SearchError(f"the program {command[0]} is not executable") from None
    except subprocess.TimeoutExpired:
        raise SearchError(f"{command[0]} --help did not answer in 120 s: not a Frugal program") from None
    keys = set(re.findall(r"^\s+--([a-z_][a-z0-9_]*\.[a-z0-9_.]+)\b", done.stdout, flags=re.M))
    missing = [k for k in NEEDED + UNITS["epochs"] + UNITS["steps"] if k not in keys]
    if done.returncode != 0 or missing:
        raise SearchError(f"{command[0]} is not a Frugal program, or one too old for frugal-search: its --help "
                          f"{'exited ' + str(done.returncode) if done.returncode else 'does not list ' + ', '.join(missing)}")
    return keys


@dataclass
class RungRun:
    """One run of a trial, to the end of a rung."""

    returncode: int
    seconds: float
    output_tail: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def stopped_mid_rung(self, reached_target: bool) -> bool:
        """Whether a run the driver sent SIGTERM ended short of its rung in a way that resumes.

        A trial stops on SIGTERM in one of three ways, by when the signal came: killed by it before
        the program caught signals (-SIGTERM); exit 128 + SIGTERM from a stage that ends at once
        (connecting to the other ranks); or exit 0, after a checkpoint (PREEMPTED in its run
        directory) or before training started (nothing written). None of these is a failure.
        """
        if self.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM):
            return True
        return self.returncode == 0 and not reached_target


def failure_of(run: RungRun) -> tuple[str, str]:
    """(class, reason) of a failed run: oom, nonfinite, smoke_test, config, killed, crash."""
    text = run.output_tail
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if "error" in line.lower() or "what():" in line), lines[-1] if lines else "")
    last = re.sub(r"^\[[^\]]*\] \[[a-z]+\] ", "", last)[:500]
    lowered = text.lower()
    if run.returncode < 0:
        name = signal.Signals(-run.returncode).name if -run.returncode in signal.Signals._value2member_map_ else str(-run.returncode)
        return "killed", f"killed by {name}" + (f" after: {last}" if last else "")
    if "out of memory" in lowered or "outofmemory" in lowered:
        return "oom", last
    if "non-finite" in lowered or "nonfinite" in lowered or "nan" in re.findall(r"\bnan\b", lowered):
        return "nonfinite", last
    if "smoke test" in lowered and "fail" in lowered:
        return "smoke_test", last
    if run.returncode == 2:
        return "config", last
    return "crash", f"exit {run.returncode}: {last}"


@dataclass
class TrialMetrics:
    """What a trial's metrics.jsonl holds: validation records, and throughput, memory and cost."""

    validations: list[dict] = field(default_factory=list)
    train: list[dict] = field(default_factory=list)
    cost: float | None = None
    problems: list[str] = field(default_factory=list)

    def value_at(self, metric: str, unit: str, resource: int) -> float | None:
        """The metric of the validation that closed `resource` epochs (or steps)."""
        for record in reversed(self.validations):
            at = record.get("epoch", -1) + 1 if unit == "epochs" else record.get("step", -1)
            if at == resource and metric in record:
                return float(record[metric])
        return None

    def summary(self, metric: str) -> float | None:
        """A throughput, memory or cost figure of the whole trial, or None."""
        if metric == "cost":
            return self.cost
        values = [float(r[metric]) for r in self.train if metric in r and isinstance(r[metric], (int, float))]
        if not values:
            return None
        if metric.startswith("peak") or metric.endswith("_mb"):
            return max(values)
        # A rate's median over the trial's log windows: one stalled window (a page-cache miss, another
        # process on the core) must not reorder configurations whose real speeds are equal.
        return statistics.median(values)


def read_metrics(run_dir: str) -> TrialMetrics:
    """Reads <run_dir>/metrics.jsonl; a damaged line is named in `problems` and skipped."""
    out = TrialMetrics()
    path = os.path.join(run_dir, "metrics.jsonl")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return out
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if number < len(lines):  # the last line may be cut by a kill mid-write
                out.problems.append(f"{path}:{number}: not JSON ({e.msg})")
            continue
        if not isinstance(record, dict):
            out.problems.append(f"{path}:{number}: not a JSON object")
            continue
        record = {k: v for k, v in record.items() if not (isinstance(v, float) and not math.isfinite(v)) or k in ("loss",)}
        event = record.get("event")
        if event == "validation":
            out.validations.append(record)
        elif event == "train":
            out.train.append(record)
        if isinstance(record.get("cost"), (int, float)):
            out.cost = float(record["cost"])
    return out


def rung_command(program: list[str], run_dir: str, unit: str, max_resource: int, stop_at: int, params: dict[str, str],
                 validate_every: int, extra: list[str]) -> list[str]:
    """The command of one rung: the trial's keys, its run directory, the full schedule, the pause."""
    max_key, pause_key = UNITS[unit]
    command = list(program) + list(extra) + [f"--trainer.run_dir={run_dir}", f"--{max_key}={max_resource}", "--checkpoint.enabled=true"]
    if unit == "steps":
        command.append(f"--trainer.validate_every_n_steps={validate_every}")
    if stop_at < max_resource:
        command.append(f"--{pause_key}={stop_at}")
    command += [f"--{key}={value}" for key, value in params.items()]
    return command
