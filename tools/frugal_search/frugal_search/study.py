"""The study in Optuna's storage: one Optuna trial per configuration, shared by every worker.

Optuna's trial states carry the search's own:
    RUNNING   a worker runs one of its rungs (frugal.worker names it; frugal.heartbeat is renewed)
    WAITING   paused at a rung with its checkpoint (promotion form), or interrupted mid-rung and
              resumable; a worker takes it by the storage's atomic WAITING -> RUNNING transition
              (RDB: a row lock; journal file: the first log entry wins), so two workers never run
              the same trial
    COMPLETE  reached the full budget: its objectives are the trial's values
    PRUNED    stopped at a rung (stopping form), or never promoted when the study ended
    FAIL      crashed, out of memory, non-finite, failed its smoke test, or a bad configuration
Intermediate values are the first objective at each rung (optuna-dashboard draws them as
learning curves); user attributes hold the rest (frugal.*): bracket, rung reached, the rung being
run, run directory, seconds, resource units, failure class and reason, constraint values.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from .errors import SearchError

optuna.logging.set_verbosity(optuna.logging.WARNING)

A = "frugal."  # prefix of the search's user attributes
CONFIRM_SECONDS = 2.0  # how long a trial must look abandoned before another worker takes it over
DEAD_CONFIRM_SECONDS = 0.5  # ... when its worker is a dead process of this machine (the claim's writes take ms)


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _with_installed_driver(url: str) -> str:
    """postgresql://... names no driver, and SQLAlchemy then wants psycopg2; scripts/install-deps.sh
    and docs/search.md install psycopg 3: the URL gets the driver that is installed."""
    if url.startswith("postgresql://"):
        import importlib.util

        if importlib.util.find_spec("psycopg2") is None and importlib.util.find_spec("psycopg") is not None:
            return "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


def open_storage(url: str, default_dir: str):
    """Optuna storage from a URL: sqlite:///PATH, postgresql://..., mysql://..., journal:PATH (a
    journal file, also on a shared file system), or "" (a journal file in the output folder).
    SearchError naming the URL when it cannot be used."""
    try:
        if not url:
            url = "journal:" + os.path.join(default_dir, "study.journal")
        if url.startswith("journal:"):
            path = url[len("journal:"):]
            if not path:
                raise SearchError("storage 'journal:' names no file (journal:PATH)")
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            from optuna.storages.journal import JournalFileBackend, JournalStorage

            from .journal_lock import KernelJournalLock

            return JournalStorage(JournalFileBackend(path, lock_obj=KernelJournalLock(path)))
        if "://" not in url:
            raise SearchError(f"storage '{url}' is not a URL: sqlite:///PATH, postgresql://USER@HOST:PORT/DB or journal:PATH")
        engine_url = _with_installed_driver(url)
        for attempt in range(5):
            try:
                return optuna.storages.RDBStorage(engine_url, engine_kwargs={"pool_pre_ping": True})
            except Exception as e:  # noqa: BLE001
                # Two workers creating the schema at once: one of them sees the other's tables appear.
                if attempt == 4 or not any(w in str(e) for w in ("duplicate key", "already exists", "UniqueViolation", "Duplicate")):
                    raise
                time.sleep(0.5 + attempt)
    except SearchError:
        raise
    except Exception as e:  # noqa: BLE001 - the driver's answer to any failure here is the same
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        safe = url.split("@")[-1] if "@" in url else url  # no password in the message
        raise SearchError(f"storage {safe} cannot be used: {text}") from None


@dataclass
class WorkerId:
    host: str
    boot: str
    pid: int

    @staticmethod
    def mine() -> "WorkerId":
        return WorkerId(socket.gethostname(), boot_id(), os.getpid())

    def text(self) -> str:
        return f"{self.host}/{self.boot}/{self.pid}"

    @staticmethod
    def parse(text: str) -> "WorkerId | None":
        parts = str(text).split("/")
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        return WorkerId(parts[0], parts[1], int(parts[2]))


class Study:
    """The study of one search, in its storage; every worker opens the same one."""

    def __init__(self, storage, name: str, directions: list[str], sampler: optuna.samplers.BaseSampler):
        wanted = ["minimize" if d == "min" else "maximize" for d in directions]
        try:
            self.optuna = optuna.create_study(storage=storage, study_name=name, directions=wanted, sampler=sampler,
                                              load_if_exists=True)
        except Exception as e:  # noqa: BLE001
            raise SearchError(f"study {name}: {e}") from None
        have = [d.name.lower() for d in self.optuna.directions]
        if have != wanted:
            raise SearchError(f"study {name} exists with objectives to {', '.join(have)}, not {', '.join(directions)}: "
                              "give it another --study name")
        self.storage = self.optuna._storage
        self.study_id = self.optuna._study_id
        self.worker = WorkerId.mine()
        self._reseeded = False
        self._suspects: dict[int, tuple[float, tuple]] = {}

    # -- reading --
    def trials(self) -> list[FrozenTrial]:
        return self.storage.get_all_trials(self.study_id, deepcopy=False)

    def trial(self, trial_id: int) -> FrozenTrial:
        return self.storage.get_trial(trial_id)

    # -- creating --
    def new_trial(self, space, bracket: int, trials: list[FrozenTrial], fixed: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
        """A new trial, RUNNING for this worker, with its parameters from the sampler (or `fixed`);
        `trials`: the study's trials as the caller just read them."""
        # The worker's name and heartbeat go in with the trial, in one write: a worker killed before
        # the next write leaves a trial that names its dead creator (taken over in a second), not an
        # anonymous one that waits out --stale-seconds.
        owner = {A + "worker": self.worker.text(), A + "heartbeat": time.time()}
        if fixed is not None:
            distributions = {k: space.param(k).distribution() for k in fixed}
            values = {k: _distribution_value(distributions[k], v) for k, v in fixed.items()}
            template = optuna.trial.create_trial(state=TrialState.RUNNING, params=values, distributions=distributions, user_attrs=owner)
            trial_id = self.storage.create_new_trial(self.study_id, template_trial=template)
            params = dict(fixed)
        else:
            self._diverge_from_other_workers(trials)
            template = optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs=owner)
            trial_id = self.storage.create_new_trial(self.study_id, template_trial=template)
            params = space.sample(optuna.Trial(self.optuna, trial_id))
        self.set(trial_id, bracket=bracket, rung=0, state="running", worker=self.worker.text(), heartbeat=time.time(), seconds=0.0)
        return trial_id, params

    def fill_params(self, trial_id: int, space, bracket: int, trials: list[FrozenTrial], fixed: dict[str, str] | None = None) -> None:
        """Parameters for a trial this worker has claimed that has none: its creator died between
        creating it and sampling them. It then runs as a new trial would."""
        if fixed is not None:
            for k, v in fixed.items():
                d = space.param(k).distribution()
                self.storage.set_trial_param(trial_id, k, d.to_internal_repr(_distribution_value(d, v)), d)
        else:
            self._diverge_from_other_workers(trials)
            space.sample(optuna.Trial(self.optuna, trial_id))
        self.set(trial_id, bracket=bracket, rung=0, state="running", worker=self.worker.text(), heartbeat=time.time(), seconds=0.0)

    def _diverge_from_other_workers(self, trials: list[FrozenTrial]) -> None:
        """Workers started with the same --seed would propose the same configurations in lockstep:
        once another worker's trial is in the study, this worker's sampler takes a fresh seed."""
        if self._reseeded:
            return
        mine = self.worker.text()
        if any(attr(t, "worker", mine) != mine for t in trials):
            self.optuna.sampler.reseed_rng()
            self._reseeded = True

    # -- attributes --
    def set(self, trial_id: int, **values) -> None:
        for key, value in values.items():
            self.storage.set_trial_user_attr(trial_id, A + key, value)

    def heartbeat(self, trial_id: int) -> None:
        self.storage.set_trial_user_attr(trial_id, A + "heartbeat", time.time())

    def report(self, trial_id: int, resource: int, value: float) -> None:
        self.storage.set_trial_intermediate_value(trial_id, resource, value)

    # -- state changes --
    def claim(self, trial_id: int) -> bool:
        """WAITING -> RUNNING for this worker; False when another worker took it first."""
        try:
            if not self.storage.set_trial_state_values(trial_id, TrialState.RUNNING):
                return False
        except optuna.exceptions.UpdateFinishedTrialError:
            return False
        self.set(trial_id, worker=self.worker.text(), heartbeat=time.time())
        return True

    def release(self, trial_id: int, state: str) -> None:
        """RUNNING -> WAITING: paused at a rung, or interrupted and resumable by any worker."""
        self.set(trial_id, state=state)
        self.storage.set_trial_state_values(trial_id, TrialState.WAITING)

    def complete(self, trial_id: int, values: list[float]) -> None:
        self.set(trial_id, state="complete")
        self.optuna.tell(self.trial(trial_id).number, values)  # tell takes a trial's number, not its storage id

    def prune(self, trial_id: int, why: str) -> None:
        self.set(trial_id, state="pruned", pruned=why)
        if self.trial(trial_id).state == TrialState.WAITING:
            self.storage.set_trial_state_values(trial_id, TrialState.RUNNING)  # tell wants a running trial
        self.optuna.tell(self.trial(trial_id).number, state=TrialState.PRUNED)

    def fail(self, trial_id: int, failure_class: str, reason: str) -> None:
        self.set(trial_id, state="failed", failure_class=failure_class, failure_reason=reason[:2000])
        if self.trial(trial_id).state == TrialState.WAITING:
            self.storage.set_trial_state_values(trial_id, TrialState.RUNNING)
        self.optuna.tell(self.trial(trial_id).number, state=TrialState.FAIL)

    def stale(self, trial: FrozenTrial, after_seconds: float) -> bool:
        """A RUNNING trial whose worker is gone: a dead process of this machine's boot, or no
        heartbeat for `after_seconds`. A worker writes its name and heartbeat just after it takes
        a trial, so a trial is judged gone only when it looked so, unchanged, for CONFIRM_SECONDS:
        a trial being created or claimed at this moment is not."""
        if trial.state != TrialState.RUNNING:
            self._suspects.pop(trial._trial_id, None)
            return False
        attrs = trial.user_attrs
        worker = WorkerId.parse(attrs.get(A + "worker", ""))
        started = trial.datetime_start.timestamp() if trial.datetime_start else 0.0
        heartbeat = float(attrs.get(A + "heartbeat", started))
        gone = time.time() - max(heartbeat, started) > after_seconds
        confirm = CONFIRM_SECONDS
        if worker and worker.boot == self.worker.boot and worker.host == self.worker.host and worker.pid != self.worker.pid:
            if not process_alive(worker.pid):
                gone, confirm = True, DEAD_CONFIRM_SECONDS
        if not gone:
            self._suspects.pop(trial._trial_id, None)
            return False
        seen = (attrs.get(A + "worker"), attrs.get(A + "heartbeat"))
        first = self._suspects.get(trial._trial_id)
        if first is None or first[1] != seen:
            self._suspects[trial._trial_id] = (time.time(), seen)
            return False
        return time.time() - first[0] >= confirm


def _distribution_value(distribution, text: str):
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return text
    if isinstance(distribution, optuna.distributions.IntDistribution):
        return int(text)
    return float(text)


def attr(trial: FrozenTrial, key: str, default=None):
    return trial.user_attrs.get(A + key, default)


def params_of(trial: FrozenTrial, space) -> dict[str, str]:
    """The trial's parameters as the program takes them."""
    from .space import value_text

    return {k: value_text(trial.params[k]) for k in space.keys() if k in trial.params}
