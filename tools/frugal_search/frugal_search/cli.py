"""frugal-search: find the cheapest good configuration of a Frugal program.

    frugal-search --out DIR [options] -- PROGRAM [PROGRAM ARGS]
    frugal-search report --out DIR [--storage URL --study NAME ...the search's options]

Every bad option, search space, storage or program is named and exits 2 before any trial runs.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib  # type: ignore

import optuna

from . import schedule
from . import space as space_mod
from .driver import Driver, Settings
from .errors import SearchError
from .program import program_keys
from .report import parse_target, write
from .study import Study, open_storage

# What a [search] table in a --config file may hold: the long options, with '_' for '-'.
FILE_KEYS = {"resource", "min_resource", "max_resource", "eta", "keep", "form", "hyperband", "sampler", "grid_points", "objective", "trials",
             "budget_units", "max_wall_seconds", "max_money", "price", "parallel", "devices", "storage", "study", "seed",
             "max_peak_memory_mb", "max_cost", "target", "stale_seconds"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="frugal-search", description="Multi-fidelity, cost-aware search over a Frugal program's keys "
                                "(successive halving / ASHA, Hyperband; Optuna's samplers and storage). docs/search.md.")
    p.add_argument("--out", required=True, help="folder for the trials' run directories, the report and (by default) the study")
    p.add_argument("--config", help="TOML file: a [space] table and a [search] table of these options")
    p.add_argument("--space", action="append", default=[], help="KEY=LOW:HIGH[:log][:step=S] | KEY=V1,V2,... [if KEY=V1|V2]")
    p.add_argument("--objective", action="append", default=[], help="METRIC:min|max; the first ranks trials at the rungs "
                   "(a validation metric); others: validation metrics, cost, seconds, peak_memory_mb, samples_per_s...")
    p.add_argument("--resource", choices=["epochs", "steps"], help="the program's budget unit (default epochs)")
    p.add_argument("--min-resource", type=int, help="the first rung (default 1)")
    p.add_argument("--max-resource", type=int, help="a trial's full budget (default: the program's own max_epochs/max_steps must be given)")
    p.add_argument("--eta", type=int, help="keep the top 1/eta at each rung; rungs at min * eta^k (default 3)")
    p.add_argument("--keep", type=float, help="the fraction that goes on from a rung, instead of 1/eta")
    p.add_argument("--form", choices=["promotion", "stopping", "none"], help="promotion: pause at rungs and resume the promoted "
                   "(ASHA, default); stopping: stop losers at their rung; none: every trial to the full budget")
    p.add_argument("--hyperband", action="store_true", default=None, help="Hyperband's brackets instead of one successive halving")
    p.add_argument("--sampler", choices=["auto", "random", "grid", "tpe", "nsga2"], help="auto: TPE, NSGA-II with several objectives")
    p.add_argument("--grid-points", type=int, help="values of a numeric range in a grid (default 3)")
    p.add_argument("--trials", type=int, help="at most this many trials (default: the grid's size with --sampler grid, else 27)")
    p.add_argument("--budget-units", type=int, help="at most this many resource units in all")
    p.add_argument("--max-wall-seconds", type=float, help="start no trial after this long")
    p.add_argument("--max-money", type=float, help="start no trial once this much is spent (with --price)")
    p.add_argument("--price", type=float, help="price of a device-hour (cost objective and --max-money)")
    p.add_argument("--parallel", type=int, help="trials at once (default 1; the number of --devices with devices)")
    p.add_argument("--devices", help="comma-separated CUDA devices, one trial each")
    p.add_argument("--storage", help="sqlite:///F.db, postgresql://USER@HOST:PORT/DB, journal:PATH (default: journal in --out)")
    p.add_argument("--study", help="the study's name in the storage (default: the --out folder's name)")
    p.add_argument("--seed", type=int, help="the sampler's seed")
    p.add_argument("--max-peak-memory-mb", type=float, help="constraint: trials above it are infeasible")
    p.add_argument("--max-cost", type=float, help="constraint: trials costing more are infeasible")
    p.add_argument("--target", help="METRIC>=VALUE: report the cheapest complete trial that meets it")
    p.add_argument("--stale-seconds", type=float, help="a running trial without a heartbeat this long is taken over (default 60)")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS]")
    return p


def load_file(path: str) -> tuple[dict, list]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise SearchError(f"--config {path}: no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SearchError(f"--config {path}: not TOML: {e}") from None
    unknown = set(data) - {"space", "search"}
    if unknown:
        raise SearchError(f"--config {path}: unknown table(s) {', '.join(sorted(unknown))} ([space] and [search])")
    search = data.get("search", {})
    if not isinstance(search, dict):
        raise SearchError(f"--config {path}: [search] must be a table")
    bad = set(search) - FILE_KEYS
    if bad:
        raise SearchError(f"--config {path}: [search] has unknown key(s) {', '.join(sorted(bad))}")
    params = space_mod.parse_table(data.get("space", {}), path) if "space" in data else []
    return search, params


def option(args, search: dict, name: str, default, kind=None):
    value = getattr(args, name)
    if value is None:
        value = search.get(name, default)
    if kind is not None and value is not None:
        try:
            if kind is int and (isinstance(value, bool) or (isinstance(value, float) and value != int(value))):
                raise ValueError
            value = kind(value)
        except (TypeError, ValueError):
            raise SearchError(f"{name.replace('_', '-')}: '{value}' is not {'an integer' if kind is int else 'a number'}") from None
    return value


def settings_from(args) -> tuple[Settings, space_mod.SearchSpace, dict]:
    search, file_params = load_file(args.config) if args.config else ({}, [])
    params = file_params + [space_mod.parse_flag(f) for f in args.space]
    space = space_mod.build(params)
    program = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        raise SearchError("no program: give it after --, e.g. -- build/examples/minimal/frugal_minimal")
    keys = program_keys(program[:1])
    for key in space.keys():
        if key not in keys:
            raise SearchError(f"search space: {key} is not a key of {program[0]} (its --help does not list it)")
    objectives_text = args.objective or ([search["objective"]] if isinstance(search.get("objective"), str) else search.get("objective", ["loss:min"]))
    objectives = []
    for text in objectives_text:
        metric, _, direction = str(text).rpartition(":")
        if not metric or direction not in ("min", "max"):
            raise SearchError(f"--objective '{text}' is not METRIC:min or METRIC:max")
        objectives.append((metric, direction))
    if objectives[0][0] in ("cost", "seconds"):
        raise SearchError(f"--objective {objectives[0][0]}: the first objective ranks trials at the rungs and must be a validation metric")
    unit = option(args, search, "resource", "epochs")
    if unit not in ("epochs", "steps"):
        raise SearchError(f"resource '{unit}' is neither epochs nor steps")
    min_resource = option(args, search, "min_resource", 1, int)
    max_resource = option(args, search, "max_resource", None, int)
    if max_resource is None:
        raise SearchError("--max-resource: a trial's full budget (in --resource units) is needed")
    eta = option(args, search, "eta", 3, int)
    try:
        rungs = schedule.Rungs(min_resource, max_resource, eta)
    except ValueError:
        raise SearchError(f"rungs: need 1 <= --min-resource ({min_resource}) <= --max-resource ({max_resource}) and --eta >= 2 ({eta})") from None
    for key in ("trainer.max_epochs" if unit == "epochs" else "trainer.max_steps",):
        if any(a.startswith(f"--{key}=") or a == f"--{key}" for a in program[1:]):
            raise SearchError(f"{key} is set by frugal-search from --max-resource: leave it out of the program's arguments")
    for key in space.keys():
        if any(a.startswith(f"--{key}=") for a in program[1:]):
            raise SearchError(f"search space: {key} is also given in the program's arguments")
    sampler = option(args, search, "sampler", "auto")
    if sampler not in ("auto", "random", "grid", "tpe", "nsga2"):
        raise SearchError(f"sampler '{sampler}' is not auto, random, grid, tpe or nsga2")
    if sampler == "auto":
        sampler = "tpe" if len(objectives) == 1 else "nsga2"
    form = option(args, search, "form", "promotion")
    if form not in ("promotion", "stopping", "none"):
        raise SearchError(f"form '{form}' is not promotion, stopping or none")
    devices_text = option(args, search, "devices", "")
    devices = [d.strip() for d in str(devices_text).split(",") if d.strip()] if devices_text else []
    parallel = option(args, search, "parallel", len(devices) or 1, int)
    if devices and parallel != len(devices):
        raise SearchError(f"--parallel {parallel} with {len(devices)} --devices: one trial a device")
    if parallel < 1:
        raise SearchError(f"--parallel must be >= 1, got {parallel}")
    grid_points = option(args, search, "grid_points", 3, int)
    if grid_points < 1:
        raise SearchError(f"--grid-points must be >= 1, got {grid_points}")
    max_trials = option(args, search, "trials", None, int)
    if max_trials is None and sampler != "grid":
        max_trials = 27
    for name in ("trials", "budget_units"):
        value = option(args, search, name, None, int)
        if value is not None and value < 1:
            raise SearchError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    price = option(args, search, "price", 0.0, float)
    max_money = option(args, search, "max_money", None, float)
    if max_money is not None and price <= 0:
        raise SearchError("--max-money needs --price (the price of a device-hour)")
    constraints = {}
    if option(args, search, "max_peak_memory_mb", None, float) is not None:
        constraints["peak_memory_mb"] = option(args, search, "max_peak_memory_mb", None, float)
    if option(args, search, "max_cost", None, float) is not None:
        if price <= 0:
            raise SearchError("--max-cost needs --price (the price of a device-hour)")
        constraints["cost"] = option(args, search, "max_cost", None, float)
    target = option(args, search, "target", None)
    if target:
        parse_target(target)
    if any(m == "cost" for m, _ in objectives) and price <= 0:
        raise SearchError("the objective 'cost' needs --price (the price of a device-hour)")
    settings = Settings(program=program, extra_args=[], out_dir=os.path.abspath(args.out), unit=unit, rungs=rungs, form=form,
                        hyperband=bool(option(args, search, "hyperband", False)), objectives=objectives, method=sampler,
                        max_trials=max_trials, max_units=option(args, search, "budget_units", None, int),
                        max_wall_seconds=option(args, search, "max_wall_seconds", None, float), max_money=max_money, price_per_hour=price,
                        devices=devices, parallel=parallel, grid_points=grid_points,
                        stale_seconds=option(args, search, "stale_seconds", 60.0, float), constraints=constraints,
                        seed=option(args, search, "seed", None, int), keep=option(args, search, "keep", None, float))
    if settings.keep is not None and not 0 < settings.keep < 1:
        raise SearchError(f"--keep must be between 0 and 1, got {settings.keep}")
    settings.program, settings.extra_args = program[:1], program[1:]
    extras = {"storage": option(args, search, "storage", ""), "study": option(args, search, "study", None),
              "seed": option(args, search, "seed", None, int), "target": target}
    return settings, space, extras


def make_sampler(settings: Settings, seed):
    def constraints(trial):
        return trial.system_attrs.get("constraints", [0.0])

    with_constraints = constraints if settings.constraints else None
    if settings.method == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if settings.method == "grid":
        return optuna.samplers.RandomSampler(seed=seed)  # never asked: the driver enumerates the grid
    if settings.method == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, constraints_func=with_constraints)
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=settings.parallel > 1, constraints_func=with_constraints)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    report_only = bool(argv) and argv[0] == "report"
    if report_only:
        argv = argv[1:]
    args = parser().parse_args(argv)
    try:
        settings, space, extras = settings_from(args)
        os.makedirs(settings.out_dir, exist_ok=True)
        storage = open_storage(extras["storage"], settings.out_dir)
        name = extras["study"] or os.path.basename(os.path.normpath(settings.out_dir))
        study = Study(storage, name, [d for _, d in settings.objectives], make_sampler(settings, extras["seed"]))
    except SearchError as e:
        print(f"frugal-search: {e}", file=sys.stderr)
        return 2
    started = time.time()
    if not report_only:
        driver = Driver(settings, study, space, log=lambda text: print(f"frugal-search: {text}", flush=True))
        driver.run()
        if driver.stop_requested:
            print("frugal-search: stopped; start the same command again to continue the study", flush=True)
        trials_run = max(1, len({t.number for t in study.trials()}))
        print(f"frugal-search: the driver's own CPU time: {driver.driver_cpu_seconds:.3f} s ({driver.driver_cpu_seconds / trials_run * 1000:.1f} ms a trial)")
    write(settings.out_dir, study, space, settings, time.time() - started, extras["target"])
    return 0
