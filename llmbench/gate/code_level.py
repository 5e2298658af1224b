"""The baseline's code level: every saved run of the baseline's code, not one of them.

A stored comparison tests the candidate's run against the noise between runs
(`noise.between_runs`): each run is one draw around its code's level, spread by sigma. With
the baseline's single run on the other side, their difference carries two draws, sigma *
sqrt(2). When the environment holds k saved runs of the baseline's code, their mean is that
code's level to sigma / sqrt(k), and the difference carries sigma * sqrt(1 + 1/k): the
smallest regression a stored comparison can call shrinks towards the noise of one run, as
pyperf's spread over many processes does for one benchmark. A baseline run that landed slow
or fast for its code (a process that settled into a slower state) no longer moves every
verdict on the candidate.

Each run's log median is read as the noise estimate reads it (`noise.estimate_noise`): the
same work shape as the baseline's, no benchmark whose every round other work disturbed, and,
where the comparison divides the machine's speed out, the run's control median to the same
power divided out (runs without control samples then left out). The rounds' verdicts still
compare the candidate with the baseline run itself; only the test against the noise between
runs reads the level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llmbench.runs.code import code_of
from llmbench.runs.model import Run, is_same_run, median


@dataclass(frozen=True)
class Level:
    """One benchmark's baseline level over the saved runs of the baseline's code."""

    shift: float  # the baseline run's log median less the level (> 0: it ran slow)
    runs: int  # runs the level is the mean of, the baseline run among them


def _one_run(a: Run, b: Run) -> bool:
    """Whether two loaded runs are one run: one place in a store, one file, or a copy (a
    `b.json` beside the numbered run it copies, two files of one number in an old folder)."""
    if a is b or (a.origin is not None and a.origin == b.origin):
        return True
    if a.path is not None and b.path is not None \
            and Path(a.path).resolve() == Path(b.path).resolve():
        return True
    return is_same_run(a, b)


def _log_median(run: Run, key: str, slope: float) -> float:
    value = math.log(median(run.benchmarks[key].samples))
    return value - slope * math.log(median(run.control_s)) if slope else value


def code_levels(baseline: Run, history: Sequence[Run], keys: Sequence[str],
                slope: float = 0.0) -> dict[str, Level]:
    """Each of `keys` whose baseline level rests on two runs or more of the baseline's code
    in `history` (the environment's saved runs); the others are judged on the baseline run
    alone. `slope`: the power of each run's control median divided out (0: none)."""
    code = code_of(baseline)
    if not code.is_known:
        return {}
    runs = [baseline]
    for run in history:  # each run once, the baseline's copies included
        if code_of(run) == code and not any(_one_run(run, kept) for kept in runs):
            runs.append(run)
    if slope:
        if not baseline.control_s:
            return {}
        runs = [run for run in runs if run.control_s]
    levels = {}
    for key in keys:
        bench = baseline.benchmarks.get(key)
        if bench is None or not bench.samples or bench.all_disturbed:
            continue
        shape = bench.work_shape
        values = [_log_median(run, key, slope) for run in runs
                  if (other := run.benchmarks.get(key)) is not None and other.samples
                  and not other.all_disturbed and other.work_shape == shape]
        if len(values) >= 2:
            levels[key] = Level(shift=values[0] - sum(values) / len(values), runs=len(values))
    return levels
