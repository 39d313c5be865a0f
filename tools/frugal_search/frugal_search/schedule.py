"""Successive halving, its asynchronous form ASHA (Li et al., MLSys 2020) and Hyperband's brackets
(Li et al., JMLR 2018): pure arithmetic, no I/O, so that tests check it against worked examples.

A bracket s has rungs at min_resource * eta^(k + s) for k = 0, 1, ... up to max_resource (the
last rung is max_resource itself). A trial's value at a rung is compared only with the values
other trials of its bracket had at that rung:

- promotion (ASHA): a trial pauses at each rung; a paused trial is promoted to the next rung when
  it is among the top floor(n / eta) of the n trials that reached its rung (the best first);
- stopping: a trial goes on past a rung only when its value is among the top 1 / eta of the
  values recorded there so far (with fewer than eta values it goes on), else it stops for good.

Hyperband runs brackets s = 0 .. s_max (s_max = floor(log_eta(max / min))), bracket s starting
trials at min_resource * eta^s; trials are assigned to brackets in proportion to Hyperband's
trial counts, so every bracket costs about the same budget.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Rungs:
    min_resource: int
    max_resource: int
    eta: int = 3

    def __post_init__(self):
        if self.min_resource < 1 or self.max_resource < self.min_resource or self.eta < 2:
            raise ValueError(f"rungs need 1 <= min_resource <= max_resource and eta >= 2, got {self}")

    @property
    def max_bracket(self) -> int:
        """s_max: the number of times max/min can be divided by eta."""
        s, r = 0, self.min_resource
        while r * self.eta <= self.max_resource:
            r *= self.eta
            s += 1
        return s

    def levels(self, bracket: int = 0) -> list[int]:
        """The resource of each rung of a bracket, ascending, ending at max_resource."""
        r = self.min_resource * self.eta ** bracket
        out = []
        while r < self.max_resource:
            out.append(r)
            r *= self.eta
        out.append(self.max_resource)
        return out

    def next_level(self, resource: int, bracket: int = 0) -> int | None:
        for level in self.levels(bracket):
            if level > resource:
                return level
        return None


def top_count(reached: int, eta: int, keep: float | None = None) -> int:
    """How many of the trials that reached a rung may go on from it: ASHA's floor(n / eta), or
    floor(n * keep) with another fraction."""
    return int(math.floor(reached * keep + 1e-9)) if keep is not None else reached // eta


def rank_of(value, values: list, minimize) -> int:
    """0 for the best of `values` (which include `value`); ties share the better rank. Vectors
    (several objectives; `minimize` then a list) rank by non-dominated sorting, then by the first
    objective within a front."""
    if not isinstance(value, (list, tuple)):
        return sum(1 for v in values if (v < value if minimize else v > value))
    signs = [1.0 if m else -1.0 for m in minimize]
    points = [tuple(s * x for s, x in zip(signs, v)) for v in values]
    mine = tuple(s * x for s, x in zip(signs, value))
    fronts = pareto_ranks(points)
    order = sorted(range(len(points)), key=lambda i: (fronts[i], points[i][0]))
    mine_key = (fronts[points.index(mine)], mine[0])
    return sum(1 for i in order if (fronts[i], points[i][0]) < mine_key)


def pareto_ranks(points: list[tuple]) -> list[int]:
    """Non-dominated sorting (all objectives minimised): 0 for the first front, 1 for the next..."""
    remaining, rank, ranks = set(range(len(points))), 0, [0] * len(points)

    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    while remaining:
        front = {i for i in remaining if not any(dominates(points[j], points[i]) for j in remaining if j != i)}
        for i in front:
            ranks[i] = rank
        remaining -= front
        rank += 1
    return ranks


def promotable(value, rung_values: list, eta: int, minimize, keep: float | None = None) -> bool:
    """Promotion form: among the top floor(n / eta) (or n * keep) of the n values at the rung."""
    k = top_count(len(rung_values), eta, keep)
    return k > 0 and rank_of(value, rung_values, minimize) < k


def continues(value, rung_values: list, eta: int, minimize, keep: float | None = None) -> bool:
    """Stopping form: with fewer than eta values at the rung the trial goes on; otherwise only
    among the top 1/eta (or keep; at least one) of the values recorded there so far."""
    if len(rung_values) < eta and keep is None:
        return True
    k = max(1, top_count(len(rung_values), eta, keep))
    return rank_of(value, rung_values, minimize) < k


def hyperband_trials(rungs: Rungs) -> list[int]:
    """Hyperband's trials per bracket, bracket b starting at min_resource * eta^b: its s = s_max - b,
    n = ceil((s_max + 1) / (s + 1) * eta^s). Bracket 0 (many short trials) is the most aggressive."""
    s_max = rungs.max_bracket
    return [math.ceil((s_max + 1) / (s_max - b + 1) * rungs.eta ** (s_max - b)) for b in range(s_max + 1)]


def bracket_for(trial_index: int, rungs: Rungs, hyperband: bool) -> int:
    """The bracket of the trial_index-th trial: always 0 for successive halving; for Hyperband, the
    brackets in proportion to their trial counts, interleaved (deterministic)."""
    if not hyperband:
        return 0
    counts = hyperband_trials(rungs)
    total = sum(counts)
    # Weighted round robin: the bracket furthest behind its share takes the next trial.
    assigned = [0] * len(counts)
    for i in range(trial_index + 1):
        lag = [(i + 1) * c / total - a for c, a in zip(counts, assigned)]
        chosen = max(range(len(counts)), key=lambda s: (lag[s], -s))
        assigned[chosen] += 1
        if i == trial_index:
            return chosen
    return 0


def grid_cost(configurations: int, max_resource: int) -> int:
    """Resource units a full grid spends: every configuration to max_resource."""
    return configurations * max_resource


def synchronous_halving_cost(configurations: int, rungs: Rungs) -> int:
    """Resource units synchronous successive halving spends on `configurations` trials in bracket
    0 (promotion form: a promoted trial continues from its checkpoint, so each rung adds only the
    difference): the worked example's arithmetic."""
    total, alive, previous = 0, configurations, 0
    for level in rungs.levels(0):
        total += alive * (level - previous)
        previous = level
        alive = top_count(alive, rungs.eta)
        if alive == 0:
            break
    return total
