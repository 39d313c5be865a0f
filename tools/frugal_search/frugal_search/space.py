"""The search space: configuration keys of the program and the values each may take.

Given like the sweep's grid, on the command line or in a TOML file:

    --space optimizer.lr=1e-4:1e-1:log          float range, log scale
    --space model.hidden=32:256:log             int range (both bounds integers), log scale
    --space model.layers=1:4                    int range
    --space model.variant=resnet18,resnet34     categorical
    --space "model.depth=2,3 if model.variant=resnet18"     only when model.variant is resnet18

    [space]                                     # the same in a TOML file (--config)
    "optimizer.lr" = "1e-4:1e-1:log"
    "model.variant" = ["resnet18", "resnet34"]
    "model.depth" = { values = [2, 3], when = { "model.variant" = ["resnet18"] } }

Values are passed to the program as --KEY=VALUE. Every error names the key.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import optuna

from .errors import SearchError

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


@dataclass(frozen=True)
class Param:
    """One key: categorical `choices`, or a numeric range [low, high] (int or float, maybe log)."""

    key: str
    choices: tuple[str, ...] = ()
    low: float = 0.0
    high: float = 0.0
    integer: bool = False
    log: bool = False
    step: float | None = None
    when: tuple[tuple[str, tuple[str, ...]], ...] = ()  # active only when each key has one of these values

    @property
    def categorical(self) -> bool:
        return bool(self.choices)

    def distribution(self) -> optuna.distributions.BaseDistribution:
        if self.categorical:
            return optuna.distributions.CategoricalDistribution(list(self.choices))
        if self.integer:
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return optuna.distributions.FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def grid_values(self, points: int) -> list[str]:
        """The values a grid takes: every choice or integer, else `points` spread over the range."""
        if self.categorical:
            return list(self.choices)
        if self.integer:
            step = int(self.step or 1)
            count = (int(self.high) - int(self.low)) // step + 1
            if count <= points:  # every integer of a short range
                return [str(int(self.low) + i * step) for i in range(count)]
            return sorted({str(int(round(v))) for v in _spread(self.low, self.high, points, self.log)}, key=int)
        return [format_float(v) for v in _spread(self.low, self.high, points, self.log)]

    def active(self, params: dict[str, str]) -> bool:
        return all(params.get(key) in values for key, values in self.when)


def _spread(low: float, high: float, points: int, log: bool) -> list[float]:
    if points == 1:
        return [math.sqrt(low * high) if log else (low + high) / 2]
    if log:
        return [math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / (points - 1)) for i in range(points)]
    return [low + (high - low) * i / (points - 1) for i in range(points)]


def format_float(value: float) -> str:
    """A float as the program reads it back, without noise digits."""
    return f"{value:.6g}"


def value_text(value: Any) -> str:
    """A parameter's value as passed on the command line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float(value)
    return str(value)


@dataclass
class SearchSpace:
    params: list[Param] = field(default_factory=list)

    def keys(self) -> list[str]:
        return [p.key for p in self.params]

    def param(self, key: str) -> Param:
        for p in self.params:
            if p.key == key:
                return p
        raise KeyError(key)

    def grid(self, points: int = 3) -> list[dict[str, str]]:
        """Every configuration of the space (conditional keys only where active), in a fixed order."""
        configs: list[dict[str, str]] = [{}]
        for p in self.params:  # conditions refer to earlier keys (checked at parse time)
            grown = []
            for config in configs:
                if not p.active(config):
                    grown.append(config)
                    continue
                for v in p.grid_values(points):
                    grown.append({**config, p.key: v})
            configs = grown
        return configs

    def sample(self, trial: optuna.Trial) -> dict[str, str]:
        """The trial's configuration, asked of its sampler key by key (conditional keys when active)."""
        params: dict[str, str] = {}
        for p in self.params:
            if not p.active(params):
                continue
            if p.categorical:
                params[p.key] = str(trial.suggest_categorical(p.key, list(p.choices)))
            elif p.integer:
                params[p.key] = str(trial.suggest_int(p.key, int(p.low), int(p.high), log=p.log, step=int(p.step or 1)))
            else:
                params[p.key] = format_float(trial.suggest_float(p.key, p.low, p.high, log=p.log, step=p.step))
        return params


def _number(text: str, key: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SearchError(f"search space: {key}: the {what} '{text}' is not a number") from None
    if not math.isfinite(value):
        raise SearchError(f"search space: {key}: the {what} '{text}' is not finite")
    return value


def _is_int_text(text: str) -> bool:
    return re.fullmatch(r"[+-]?\d+", text.strip()) is not None


def parse_range(key: str, text: str, when=()) -> Param:
    parts = [part.strip() for part in text.split(":")]
    if len(parts) < 2:
        raise SearchError(f"search space: {key}: '{text}' is neither a range LOW:HIGH[:log][:step=S] nor a list of values")
    low_text, high_text, options = parts[0], parts[1], parts[2:]
    low, high = _number(low_text, key, "lower bound"), _number(high_text, key, "upper bound")
    integer = _is_int_text(low_text) and _is_int_text(high_text)
    log, step = False, None
    for option in options:
        if option == "log":
            log = True
        elif option.startswith("step="):
            step = _number(option[5:], key, "step")
            if step <= 0:
                raise SearchError(f"search space: {key}: the step must be > 0, got {option[5:]}")
            if integer and step != int(step):
                raise SearchError(f"search space: {key}: an integer range needs an integer step, got {option[5:]}")
        else:
            raise SearchError(f"search space: {key}: unknown range option '{option}' (log, step=S)")
    if not low < high:
        raise SearchError(f"search space: {key}: the range {low_text}:{high_text} is empty (the lower bound must be below the upper)")
    if log and low <= 0:
        raise SearchError(f"search space: {key}: a log range needs a lower bound > 0, got {low_text}")
    if log and step is not None:
        raise SearchError(f"search space: {key}: a log range cannot have a step")
    return Param(key=key, low=low, high=high, integer=integer, log=log, step=step, when=when)


def parse_choices(key: str, values: list[Any], when=()) -> Param:
    if not values:
        raise SearchError(f"search space: {key}: no values")
    texts = [value_text(v) for v in values]
    for text in texts:
        if text == "" or any(c in text for c in "\n\r"):
            raise SearchError(f"search space: {key}: the value '{text}' cannot be passed on a command line")
    if len(set(texts)) != len(texts):
        raise SearchError(f"search space: {key}: a value is listed twice in {', '.join(texts)}")
    return Param(key=key, choices=tuple(texts), when=when)


def parse_spec(key: str, spec: str, when=()) -> Param:
    """KEY's specification as a flag gives it: LOW:HIGH[:log][:step=S] or V1,V2,..."""
    if "," in spec or ":" not in spec:
        return parse_choices(key, [v.strip() for v in spec.split(",")], when)
    return parse_range(key, spec, when)


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not _KEY.match(key):
        raise SearchError(f"search space: '{key}' is not a configuration key (section.key, as the program's --help lists them)")


def _parse_when(key: str, text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    conditions = []
    for clause in text.split(" and "):
        if "=" not in clause:
            raise SearchError(f"search space: {key}: the condition '{clause.strip()}' is not KEY=V1|V2")
        other, values = clause.split("=", 1)
        other = other.strip()
        _check_key(other)
        choices = tuple(v.strip() for v in values.split("|") if v.strip())
        if not choices:
            raise SearchError(f"search space: {key}: the condition on {other} lists no value")
        conditions.append((other, choices))
    return tuple(conditions)


def parse_flag(flag: str) -> Param:
    """One --space KEY=SPEC [if KEY=V1|V2 [and ...]]."""
    if "=" not in flag:
        raise SearchError(f"search space: '--space {flag}' is not KEY=SPEC")
    key, rest = flag.split("=", 1)
    key = key.strip()
    _check_key(key)
    when: tuple = ()
    if " if " in rest:
        rest, condition = rest.split(" if ", 1)
        when = _parse_when(key, condition)
    return parse_spec(key, rest.strip(), when)


def parse_table(table: Any, source: str) -> list[Param]:
    """The [space] table of a TOML file: KEY = "spec" | [values] | {range = [lo, hi], log, step, values, when}."""
    if not isinstance(table, dict):
        raise SearchError(f"{source}: [space] must be a table of keys")
    params = []
    for key, spec in table.items():
        _check_key(key)
        when: tuple = ()
        if isinstance(spec, dict):
            unknown = set(spec) - {"values", "range", "log", "step", "when"}
            if unknown:
                raise SearchError(f"{source}: space key {key}: unknown field(s) {', '.join(sorted(unknown))} (values, range, log, step, when)")
            raw_when = spec.get("when", {})
            if not isinstance(raw_when, dict):
                raise SearchError(f"{source}: space key {key}: 'when' must be a table of KEY = [values]")
            conditions = []
            for other, values in raw_when.items():
                _check_key(other)
                values = values if isinstance(values, list) else [values]
                if not values:
                    raise SearchError(f"{source}: space key {key}: the condition on {other} lists no value")
                conditions.append((other, tuple(value_text(v) for v in values)))
            when = tuple(conditions)
            if ("values" in spec) == ("range" in spec):
                raise SearchError(f"{source}: space key {key}: give either 'values' or 'range'")
            if "values" in spec:
                if not isinstance(spec["values"], list):
                    raise SearchError(f"{source}: space key {key}: 'values' must be a list")
                params.append(parse_choices(key, spec["values"], when))
                continue
            bounds = spec["range"]
            if not isinstance(bounds, list) or len(bounds) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds):
                raise SearchError(f"{source}: space key {key}: 'range' must be [LOW, HIGH], two numbers")
            text = f"{bounds[0]}:{bounds[1]}"
            if spec.get("log", False) is True:
                text += ":log"
            elif spec.get("log", False) is not False:
                raise SearchError(f"{source}: space key {key}: 'log' must be true or false")
            if "step" in spec:
                if not isinstance(spec["step"], (int, float)) or isinstance(spec["step"], bool):
                    raise SearchError(f"{source}: space key {key}: 'step' must be a number")
                text += f":step={spec['step']}"
            params.append(parse_range(key, text, when))
        elif isinstance(spec, list):
            params.append(parse_choices(key, spec, when))
        elif isinstance(spec, str):
            params.append(parse_spec(key, spec, when))
        else:
            raise SearchError(f"{source}: space key {key}: expected \"LOW:HIGH[:log]\", a list of values or a table, got {type(spec).__name__}")
    return params


def build(params: list[Param]) -> SearchSpace:
    """Checks the keys together: each once, conditions on earlier categorical keys and their values."""
    if not params:
        raise SearchError("search space: no key to search (give --space KEY=SPEC or a [space] table)")
    seen: dict[str, Param] = {}
    for p in params:
        if p.key in seen:
            raise SearchError(f"search space: {p.key} is given twice")
        for other, values in p.when:
            if other == p.key:
                raise SearchError(f"search space: {p.key}: a key cannot depend on itself")
            if other not in seen:
                raise SearchError(f"search space: {p.key} depends on {other}, which must be a key of the space given before it")
            if not seen[other].categorical:
                raise SearchError(f"search space: {p.key} depends on {other}, which must be categorical")
            missing = [v for v in values if v not in seen[other].choices]
            if missing:
                raise SearchError(f"search space: {p.key}: {other} never takes {', '.join(missing)} (its values: {', '.join(seen[other].choices)})")
        seen[p.key] = p
    return SearchSpace(list(params))
