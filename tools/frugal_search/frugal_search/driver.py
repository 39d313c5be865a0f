"""The search driver: one worker of a study. Runs up to `parallel` trials at once (one a device
with `devices`), each rung a run of the Frugal program, and decides from the study what to run
next: a trial interrupted elsewhere, a paused trial promoted to its next rung, or a new trial.

Everything it knows lives in the study's storage, so a worker killed with -9 and started again
continues the same study: its trials (whose processes died with it: they get SIGTERM when their
parent dies, checkpoint, and exit) are taken up again from their checkpoints; another worker takes
them up once their heartbeat is stale. SIGINT/SIGTERM stop the worker cleanly: running trials are
told to checkpoint, then left resumable.
"""
from __future__ import annotations

import ctypes
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field

from optuna.trial import TrialState

from . import program as prog
from . import schedule
from .study import Study, attr, params_of

HEARTBEAT_SECONDS = 5.0


@dataclass
class Settings:
    program: list[str]
    extra_args: list[str]
    out_dir: str
    unit: str                     # epochs | steps
    rungs: schedule.Rungs
    form: str                     # promotion | stopping | none (every trial to the full budget)
    hyperband: bool
    objectives: list[tuple[str, str]]  # (metric, min|max); the first ranks trials at the rungs
    method: str                   # random | grid | tpe | nsga2
    max_trials: int | None
    max_units: int | None
    max_wall_seconds: float | None
    max_money: float | None
    price_per_hour: float
    devices: list[str]
    parallel: int
    grid_points: int
    stale_seconds: float
    constraints: dict[str, float] = field(default_factory=dict)  # metric -> largest allowed
    seed: int | None = None       # also orders the grid (a grid searched by ASHA in a random order)
    keep: float | None = None     # the fraction that goes on from a rung (default 1/eta)


@dataclass
class Running:
    trial_id: int
    number: int
    target: int
    process: subprocess.Popen
    started: float
    slot: int
    log_path: str


def _die_with_parent() -> None:
    """In the child: SIGTERM when the driver dies (a trial checkpoints and exits), and its own
    session, so that a terminal's Ctrl-C reaches the driver only (which forwards it)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Driver:
    def __init__(self, settings: Settings, study: Study, space, log=print):
        self.s = settings
        self.study = study
        self.space = space
        self.log = log
        self.running: dict[int, Running] = {}
        self.free_slots = deque(range(settings.parallel))
        self.stop_requested = False
        self.started = time.time()
        self.grid = space.grid(settings.grid_points) if settings.method == "grid" else None
        if self.grid is not None and settings.seed is not None:
            random.Random(settings.seed).shuffle(self.grid)
        self.minimize = settings.objectives[0][1] == "min"
        self.driver_cpu_seconds = 0.0

    # -- budget --
    def used_units(self, trials) -> int:
        return sum(int(attr(t, "units", 0)) for t in trials)

    def spent_money(self, trials) -> float:
        return sum(float(attr(t, "seconds", 0.0)) for t in trials) * self.s.price_per_hour / 3600.0 * self.devices_per_trial()

    def devices_per_trial(self) -> int:
        return 1

    def may_start_new(self, trials) -> bool:
        # Every trial counts but one failed before it had parameters: a trial whose creator died
        # before sampling is run by whoever takes it over, within the budget.
        created = [t for t in trials if t.params or attr(t, "state") != "failed"]
        if self.stop_requested:
            return False
        if self.s.max_trials is not None and len(created) >= self.s.max_trials:
            return False
        if self.grid is not None and len(created) >= len(self.grid):
            return False
        if not self.within_units(trials, self.s.rungs.max_resource if self.s.form == "none" else self.s.rungs.min_resource):
            return False
        if self.s.max_wall_seconds is not None and time.time() - self.started >= self.s.max_wall_seconds:
            return False
        if self.s.max_money is not None and self.spent_money(trials) >= self.s.max_money:
            return False
        return True

    def within_units(self, trials, more: int) -> bool:
        """Whether `more` resource units still fit the budget of units (with what runs now)."""
        return self.s.max_units is None or self.used_units(trials) + self.committed_units() + more <= self.s.max_units

    def committed_units(self) -> int:
        total = 0
        for r in self.running.values():
            total += r.target - int(attr(self.study.trial(r.trial_id), "rung", 0))
        return total

    # -- launching --
    def launch(self, trial_id: int, target: int) -> None:
        trial = self.study.trial(trial_id)
        run_dir = os.path.join(self.s.out_dir, "trials", f"{trial.number:05d}")
        os.makedirs(run_dir, exist_ok=True)
        command = prog.rung_command(self.s.program, run_dir, self.s.unit, self.s.rungs.max_resource, target, params_of(trial, self.space),
                                    self.s.rungs.min_resource, self.s.extra_args)
        slot = self.free_slots.popleft()
        env = dict(os.environ)
        if self.s.devices:
            env["CUDA_VISIBLE_DEVICES"] = self.s.devices[slot]
        log_path = os.path.join(run_dir, "search.log")
        with open(log_path, "ab") as log:
            log.write(("\n$ " + " ".join(command) + "\n").encode())
            log.flush()
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                       preexec_fn=_die_with_parent, start_new_session=True)
        self.study.set(trial_id, target=target, run_dir=run_dir, state="running", heartbeat=time.time(), pid=process.pid)
        self.running[trial_id] = Running(trial_id, trial.number, target, process, time.time(), slot, log_path)
        self.log(f"trial {trial.number}: {' '.join(f'{k}={v}' for k, v in params_of(trial, self.space).items())} -> "
                 f"{self.s.unit} {attr(trial, 'rung', 0)}..{target}")

    # -- one rung ended --
    def finish(self, r: Running) -> None:
        self.free_slots.append(r.slot)
        del self.running[r.trial_id]
        seconds = time.time() - r.started
        trial = self.study.trial(r.trial_id)
        total_seconds = float(attr(trial, "seconds", 0.0)) + seconds
        with open(r.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8000))
            tail = f.read().decode(errors="replace")
        outcome = prog.RungRun(r.process.returncode, seconds, tail)
        metrics = prog.read_metrics(attr(trial, "run_dir"))
        value = metrics.value_at(self.s.objectives[0][0], self.s.unit, r.target)
        if self.stop_requested and outcome.stopped_mid_rung(value is not None):
            # Stopped by us: resumable from its last checkpoint (its rung and units stay where they were).
            self.study.set(r.trial_id, seconds=total_seconds)
            self.study.release(r.trial_id, "interrupted")
            return
        # Resource reached: the rung's, when the run paused or finished where it should.
        reached = r.target if outcome.ok else int(attr(trial, "rung", 0))
        self.study.set(r.trial_id, seconds=total_seconds, rung=reached, units=reached)
        if not outcome.ok:
            failure_class, reason = prog.failure_of(outcome)
            self.study.fail(r.trial_id, failure_class, reason)
            self.log(f"trial {r.number}: failed ({failure_class}): {reason}")
            return
        if value is None or not math.isfinite(value):
            why = (f"its metrics.jsonl has no finite validation '{self.s.objectives[0][0]}' at {self.s.unit[:-1]} {r.target}"
                   + (f" ({'; '.join(metrics.problems[:2])})" if metrics.problems else ""))
            self.study.fail(r.trial_id, "nonfinite" if value is not None else "metrics", why)
            self.log(f"trial {r.number}: failed: {why}")
            return
        self.study.report(r.trial_id, r.target, value)
        if len(self.s.objectives) > 1:  # every objective's value so far, for Pareto ranking at the rung
            vectors = dict(attr(trial, "rung_vectors", {}) or {})
            vectors[str(r.target)] = self.objective_values(metrics, total_seconds, r.target, value)
            self.study.set(r.trial_id, rung_vectors=vectors)
        if r.target >= self.s.rungs.max_resource:
            self.complete(r.trial_id, metrics, total_seconds, value)
            return
        bracket = int(attr(trial, "bracket", 0))
        if self.s.form == "stopping":
            mine, values = self.rung_standing(self.study.trial(r.trial_id), bracket, r.target)
            if schedule.continues(mine, values, self.s.rungs.eta, self.directions(mine), self.s.keep):
                self.launch(r.trial_id, self.s.rungs.next_level(r.target, bracket))
            else:
                self.study.prune(r.trial_id, f"below the top 1/{self.s.rungs.eta} at {self.s.unit[:-1]} {r.target}")
                self.log(f"trial {r.number}: stopped at {self.s.unit[:-1]} {r.target} ({value:.6g})")
            return
        self.study.release(r.trial_id, "paused")
        self.log(f"trial {r.number}: paused at {self.s.unit[:-1]} {r.target} ({value:.6g})")

    def complete(self, trial_id: int, metrics: prog.TrialMetrics, seconds: float, first: float) -> None:
        values = [first]
        figures = {"seconds": seconds, "cost": seconds * self.s.price_per_hour / 3600.0 * self.devices_per_trial()}
        for metric, _ in self.s.objectives[1:]:
            value = figures.get(metric)
            if value is None:
                value = metrics.value_at(metric, self.s.unit, self.s.rungs.max_resource)
            if value is None:
                value = metrics.summary(metric)
            if value is None:
                self.study.fail(trial_id, "metrics", f"the objective '{metric}' is neither a validation metric nor a throughput, "
                                                     "memory or cost figure in the trial's metrics.jsonl")
                return
            values.append(float(value))
        for metric, _ in self.s.constraints.items():
            figure = figures.get(metric, metrics.summary(metric))
            figures[metric] = figure
        violations = [float(figures[m]) - limit if figures.get(m) is not None else 0.0 for m, limit in self.s.constraints.items()]
        peak = metrics.summary("peak_memory_mb")
        self.study.set(trial_id, objectives=values, constraints=violations, feasible=all(v <= 0 for v in violations),
                       peak_memory_mb=peak if peak is not None else -1.0, cost=figures["cost"])
        self.study.storage.set_trial_system_attr(trial_id, "constraints", violations)
        self.study.complete(trial_id, values)
        number = self.study.trial(trial_id).number
        self.log(f"trial {number}: complete: " + ", ".join(f"{m} {v:.6g}" for (m, _), v in zip(self.s.objectives, values)))

    def objective_values(self, metrics, seconds: float, resource: int, first: float) -> list[float]:
        """Each objective's value after `resource` units (None where the metrics do not say yet)."""
        values = [first]
        for metric, _ in self.s.objectives[1:]:
            if metric in ("seconds", "cost"):
                v = seconds * (self.s.price_per_hour / 3600.0 if metric == "cost" else 1.0)
            else:
                v = metrics.value_at(metric, self.s.unit, resource)
                if v is None:
                    v = metrics.summary(metric)
            values.append(v)
        return values

    def directions(self, value) -> bool | list[bool]:
        return [d == "min" for _, d in self.s.objectives] if isinstance(value, list) else self.minimize

    def rung_standing(self, trial, bracket: int, resource: int, trials=None):
        """The trial's standing at a rung and every standing there: its first objective, or with
        several objectives the vector of all of them (Pareto ranking: cost-aware promotion)."""
        trials = self.study.trials() if trials is None else trials
        at_rung = [t for t in trials if int(attr(t, "bracket", 0)) == bracket and resource in t.intermediate_values]
        if len(self.s.objectives) > 1:
            def vector(t):
                v = (attr(t, "rung_vectors", {}) or {}).get(str(resource))
                return v if v and all(x is not None for x in v) else None
            vectors = [vector(t) for t in at_rung]
            if all(v is not None for v in vectors) and vector(trial) is not None:
                return vector(trial), vectors
        return trial.intermediate_values[resource], [t.intermediate_values[resource] for t in at_rung]

    # -- choosing what to run --
    def promotable_trial(self, trials):
        """Promotion form: the paused trial at the highest rung that is among its rung's top 1/eta."""
        if self.s.form != "promotion":
            return None
        paused = [t for t in trials if t.state == TrialState.WAITING and attr(t, "state") == "paused"]
        for t in sorted(paused, key=lambda t: -int(attr(t, "rung", 0))):
            rung, bracket = int(attr(t, "rung", 0)), int(attr(t, "bracket", 0))
            if not self.within_units(trials, self.s.rungs.next_level(rung, bracket) - rung):
                continue  # the budget of resource units does not cover its next rung
            mine, values = self.rung_standing(t, bracket, rung, trials)
            if schedule.promotable(mine, values, self.s.rungs.eta, self.directions(mine), self.s.keep):
                return t
        return None

    def previous_run_alive(self, trial) -> bool:
        """Whether the process of the trial's last run (started by a worker of this machine's boot)
        still exists: it holds the run directory until it has written its checkpoint."""
        from .study import WorkerId, process_alive

        worker = WorkerId.parse(attr(trial, "worker", ""))
        pid = int(attr(trial, "pid", 0) or 0)
        return bool(worker and pid and worker.boot == self.study.worker.boot and worker.host == self.study.worker.host and process_alive(pid))

    def fill_slots(self) -> None:
        while self.free_slots:
            trials = self.study.trials()
            # 1. trials interrupted elsewhere (or by this worker's last life), whose workers are gone
            adopted = False
            for t in trials:
                if t.state == TrialState.RUNNING and t._trial_id not in self.running and self.study.stale(t, self.s.stale_seconds):
                    self.study.release(t._trial_id, "interrupted")
                    self.log(f"trial {t.number}: its worker is gone: resumable")
            for t in self.study.trials():
                if t.state == TrialState.WAITING and attr(t, "state") == "interrupted" and not self.stop_requested:
                    if not t.params:  # its creator died before sampling: sampled now, it runs as a new trial
                        fixed = self.next_grid_point(trials) if self.grid is not None else None
                        if self.grid is not None and fixed is None:
                            if self.study.claim(t._trial_id):
                                self.study.fail(t._trial_id, "driver", "created without parameters by a worker that died at that moment; the grid is done")
                            continue
                        if self.study.claim(t._trial_id):
                            bracket = schedule.bracket_for(t.number, self.s.rungs, self.s.hyperband)
                            self.study.fill_params(t._trial_id, self.space, bracket, trials, fixed)
                            self.launch(t._trial_id, self.s.rungs.max_resource if self.s.form == "none" else self.s.rungs.levels(bracket)[0])
                            adopted = True
                            break
                        continue
                    if self.previous_run_alive(t):
                        continue  # its last run is still checkpointing after its driver died: later
                    if self.study.claim(t._trial_id):
                        self.launch(t._trial_id, int(attr(t, "target", self.s.rungs.levels(int(attr(t, "bracket", 0)))[0])))
                        adopted = True
                        break
            if adopted:
                continue
            if self.stop_requested:
                return
            # 2. a paused trial promoted to its next rung
            promoted = self.promotable_trial(trials)
            if promoted is not None and self.study.claim(promoted._trial_id):
                self.launch(promoted._trial_id, self.s.rungs.next_level(int(attr(promoted, "rung", 0)), int(attr(promoted, "bracket", 0))))
                continue
            # 3. a new trial
            if not self.may_start_new(trials):
                return
            index = len([t for t in trials])
            bracket = schedule.bracket_for(index, self.s.rungs, self.s.hyperband)
            fixed = self.next_grid_point(trials) if self.grid is not None else None
            if self.grid is not None and fixed is None:
                return
            trial_id, _ = self.study.new_trial(self.space, bracket, trials, fixed)
            # Without early decisions a trial runs straight to the full budget.
            self.launch(trial_id, self.s.rungs.max_resource if self.s.form == "none" else self.s.rungs.levels(bracket)[0])

    def next_grid_point(self, trials) -> dict[str, str] | None:
        """The first grid configuration no trial has taken, or None when all are taken."""
        taken = {tuple(sorted(params_of(t, self.space).items())) for t in trials}
        remaining = [g for g in self.grid if tuple(sorted(g.items())) not in taken]
        return remaining[0] if remaining else None

    def done(self) -> bool:
        if self.running:
            return False
        trials = self.study.trials()
        if self.stop_requested:
            return True
        if any(t.state == TrialState.RUNNING for t in trials):
            return False  # another worker's
        if any(t.state == TrialState.WAITING and attr(t, "state") == "interrupted" for t in trials):
            return False
        if self.promotable_trial(trials) is not None:
            return False
        return not self.may_start_new(trials)

    def end_study(self) -> None:
        """The last worker out prunes the paused trials no rung promoted."""
        trials = self.study.trials()
        if any(t.state == TrialState.RUNNING for t in trials) or self.stop_requested:
            return
        for t in trials:
            if t.state == TrialState.WAITING and attr(t, "state") == "paused":
                if self.study.claim(t._trial_id):
                    self.study.prune(t._trial_id, f"not promoted past {self.s.unit[:-1]} {attr(t, 'rung')}")

    # -- the loop --
    def request_stop(self, signum, _frame) -> None:
        if not self.stop_requested:
            self.log(f"{signal.Signals(signum).name}: the running trials checkpoint and stop; the study stays resumable")
        self.stop_requested = True
        for r in self.running.values():
            try:
                r.process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def run(self) -> None:
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGTERM, self.request_stop)
        last_beat = 0.0
        while True:
            cpu0 = time.process_time()
            for r in list(self.running.values()):
                if r.process.poll() is not None:
                    self.finish(r)
            if not self.stop_requested:
                self.fill_slots()
            if time.time() - last_beat > HEARTBEAT_SECONDS:
                for r in self.running.values():
                    self.study.heartbeat(r.trial_id)
                last_beat = time.time()
            if self.done():
                break
            self.driver_cpu_seconds += time.process_time() - cpu0
            time.sleep(0.05 if self.running else 0.5)
        self.end_study()
        sys.stdout.flush()
