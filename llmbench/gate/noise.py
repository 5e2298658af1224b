"""The noise between runs: how far apart two runs of the same code land on this environment,
measured from its saved runs, and the stored comparison's test against it.

A run's rounds measure the noise within one process and a few minutes. Separate runs of the
same code differ by more: the machine's speed drifts over hours on a shared host, and a
process can settle into one of several speeds (address-space layout, allocator state). A
rank test on two runs' rounds answers "do these two sets of rounds differ?", which on such
a machine is often yes with no change to the code. So a stored verdict must also clear the
noise between runs, and that noise is measured here, never assumed:

- The environment's saved runs are grouped by the code they measured (`runs.code`: one
  commit, clean, same library versions, same injected slowdowns). Within a group every
  difference is the machine's. Each benchmark's spread is the pooled standard deviation of
  its runs' log medians around their group's mean (a one-way analysis of variance's within
  mean square): df = runs - groups, one degree of freedom per A/A observation.
- Few runs give few degrees of freedom per benchmark, so each benchmark's variance is
  moderated towards the one all benchmarks share, by as much as the benchmarks' variances
  agree (the empirical Bayes estimate of Smyth 2004, "Linear models and empirical Bayes
  methods for assessing differential expression", as limma's `squeezeVar`): with a prior
  of d0 degrees of freedom at s0^2, a benchmark's s^2 on d df becomes
  (d0 s0^2 + d s^2) / (d0 + d) on d0 + d df. Benchmarks that disagree get small d0 and keep
  their own spread. d0 is capped at the number of A/A observations: one run's drift moves
  every benchmark at once, so their variances are not independent estimates.
- The test (`between_runs`): the candidate's log median minus the baseline's, over
  sigma * sqrt(2) (each run is one draw around its code's level), against Student's t on
  the moderated df (where the baseline's code has k saved runs: minus their mean level,
  over sigma * sqrt(1 + 1/k), `code_level`): a two-sided p (Holm over the run, as the
  rounds' test) and an interval at the rule's confidence. A stored regression needs this
  interval wholly above 1 + delta, beside the rounds' verdict; `smallest_regression` is the
  least ratio that can pass.
- The machine's speed (`estimate_noise(adjust=True)`): every run times a fixed control
  workload (`bench.control`), whose median moves with the host and not with the code. Within
  runs of one code, a run's benchmarks move with its log control median at a slope the
  saved runs measure (one slope for the environment, fitted on each run's shared move and
  kept only where it is significant; clamped to [0, 1] so a move is never amplified).
  Dividing each median by its control's median to that power removes the host's share of
  the drift; the spread is then measured on what is left, so a comparison that divides the
  same way (`gate.host_speed`) is tested against the noise that division leaves, the
  control's own noise included.
- The residual noise (`NoiseEstimate.residuals`): the same spread once each run's shared
  move is removed (the median, over its benchmarks, of their deviations from their code's
  level). A host's speed moves every benchmark of a run together; what is left is each
  benchmark's own. A confirmation that measures the shared move with its pairs judges the
  candidates it did not pair against this (`host_move`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import special
from scipy import stats as scipy_stats

from llmbench.gate.code_level import Level
from llmbench.gate.stats import holm
from llmbench.runs.code import code_of
from llmbench.runs.model import Run, median


@dataclass(frozen=True)
class Spread:
    """One benchmark's noise between runs, in log time (a run's log median around its
    code's level)."""

    sigma: float  # moderated standard deviation
    df: float  # moderated degrees of freedom (own + prior)
    own_sigma: float  # from this benchmark's runs alone
    own_df: int  # runs - groups: its A/A observations


@dataclass(frozen=True)
class NoiseEstimate:
    """Every benchmark's spread in one environment, and what it was measured from."""

    spreads: Mapping[str, Spread] = field(default_factory=dict)  # by benchmark key
    runs: int = 0  # runs of known code that share their code with another run
    groups: int = 0  # distinct codes among them
    prior_df: float = 0.0  # d0 of the moderation (inf: all benchmarks share one spread)
    # The same with each run's shared move (the machine's speed that run, felt by every
    # benchmark) removed: what is left is each benchmark's own (`host_move`).
    residuals: Mapping[str, Spread] = field(default_factory=dict)
    # adjust=True: the power of the control's ratio divided out of every median (0: none),
    # and the spread of the control's own log median between runs of one code.
    slope: float = 0.0
    control: Spread | None = None

    @property
    def observations(self) -> int:
        """A/A observations: runs beyond the first of each code."""
        return self.runs - self.groups


@dataclass(frozen=True)
class Between:
    """One benchmark's ratio judged against the noise between runs."""

    p_value: float  # two-sided t
    p_adjusted: float  # Holm over the run
    ci_low: float
    ci_high: float
    # The least ratio whose interval clears 1 + delta (Holm's step may ask for more).
    smallest_regression: float
    # The candidate against its baseline's level: the mean of `level_runs` saved runs of the
    # baseline's code (`code_level`; 1: the baseline run alone, the rounds' ratio).
    ratio: float
    level_runs: int = 1


def pooled_spread(groups: Sequence[Sequence[float]]) -> tuple[float, int] | None:
    """(sd, df) of log values around their own group's mean, pooled over groups; None when
    no group has two values."""
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g) >= 2]
    df = sum(a.size - 1 for a in arrays)
    if df == 0:
        return None
    ss = sum(float(np.sum((a - a.mean()) ** 2)) for a in arrays)
    return math.sqrt(ss / df), df


def _trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x, by Newton's method from Smyth's starting point (limma)."""
    if x > 1e7:
        return 1 / math.sqrt(x)
    if x < 1e-6:
        return 1 / x
    y = 0.5 + 1 / x
    for _ in range(50):
        tri = float(special.polygamma(1, y))
        step = tri * (1 - tri / x) / float(special.polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def fit_prior(variances: Sequence[float], dfs: Sequence[float]) -> tuple[float, float]:
    """(s0^2, d0): the scaled inverse chi-square prior that the benchmarks' variances share,
    fitted by moments of log variances (Smyth 2004, section 6.2). d0 is inf when the
    variances agree as well as their own df allow: then every benchmark has s0^2."""
    s2 = np.asarray(variances, dtype=float)
    d = np.asarray(dfs, dtype=float)
    keep = s2 > 0
    s2, d = s2[keep], d[keep]
    if s2.size == 0:
        return 0.0, 0.0
    e = np.log(s2) - special.digamma(d / 2) + np.log(d / 2)
    e_mean = float(e.mean())
    if s2.size < 2:
        return float(np.exp(e_mean)), 0.0
    excess = float(np.mean((e - e_mean) ** 2) * s2.size / (s2.size - 1)
                   - np.mean(special.polygamma(1, d / 2)))
    if excess <= 0:
        return float(np.exp(e_mean)), math.inf
    d0 = 2 * _trigamma_inverse(excess)
    return float(np.exp(e_mean + special.digamma(d0 / 2) - math.log(d0 / 2))), d0


def _moderated(s2: float, df: int, s0_2: float, d0: float) -> tuple[float, float]:
    if d0 == 0 or s0_2 == 0:
        return s2, float(df)
    if math.isinf(d0):
        return s0_2, math.inf
    return (d0 * s0_2 + df * s2) / (d0 + df), d0 + df


def _moderate_all(own: Mapping[str, tuple[float, int]], observations: int
                  ) -> tuple[dict[str, Spread], float]:
    """Each benchmark's (sd, df) moderated towards the spread they share; and d0."""
    s0_2, d0 = fit_prior([s ** 2 for s, _ in own.values()], [d for _, d in own.values()])
    # The benchmarks' variances are not independent estimates: a run's drift moves all of
    # them at once, so they agree more than their own df say. The prior is worth at most
    # as many degrees of freedom as there are A/A observations.
    d0 = min(d0, observations)
    spreads = {}
    for key, (sigma, df) in own.items():
        s2, total_df = _moderated(sigma ** 2, df, s0_2, d0)
        spreads[key] = Spread(sigma=math.sqrt(s2), df=total_df, own_sigma=sigma, own_df=df)
    return spreads, d0


# A run's shared move is a median over its other benchmarks: a run of fewer (a `-k` subset)
# cannot tell a benchmark's own noise from the run's.
MIN_SHARED = 8


def _deviations(cells: Mapping[tuple, Mapping[int, float]], runs: set[int] | None = None
                ) -> dict[tuple, dict[int, float]]:
    """Each cell's log medians less the cell's mean, over `runs` (None: all); cells with
    fewer than two of them are left out."""
    out = {}
    for cell, by_run in cells.items():
        kept = {run: v for run, v in by_run.items() if runs is None or run in runs}
        if len(kept) >= 2:
            mean = sum(kept.values()) / len(kept)
            out[cell] = {run: v - mean for run, v in kept.items()}
    return out


def _residual_spreads(cells: Mapping[tuple, Mapping[int, float]]) -> dict[str, tuple[float, int]]:
    """(sd, df) of each benchmark's log medians once each run's shared move is removed.
    `cells`: (benchmark, group, shape) -> {run: log median}. A benchmark's share of a run's
    move is the median, over the run's other benchmarks, of their deviations from their
    cell's mean (the benchmark itself left out, so its own noise does not shrink its
    residual); what is left is its own. Runs with fewer than MIN_SHARED benchmarks are left
    out. A cell of n runs gives n - 1 df, as in `pooled_spread`."""
    sizes: dict[int, int] = {}
    for by_run in cells.values():
        for run in by_run:
            sizes[run] = sizes.get(run, 0) + 1
    deviations = _deviations(cells, {run for run, size in sizes.items() if size >= MIN_SHARED})
    per_run: dict[int, list[tuple[tuple, float]]] = {}
    for cell, by_run in deviations.items():
        for run, v in by_run.items():
            per_run.setdefault(run, []).append((cell, v))
    sums: dict[str, list[float]] = {}
    for cell, by_run in deviations.items():
        total = sums.setdefault(cell[0], [0.0, 0])
        for run, v in by_run.items():
            others = [d for other, d in per_run[run] if other != cell]
            total[0] += (v - float(np.median(others))) ** 2 if others else 0.0
        total[1] += len(by_run) - 1
    return {key: (math.sqrt(ss / df), int(df)) for key, (ss, df) in sums.items() if df > 0}


# Fewer A/A observations than this with control samples fit no slope: the adjustment would
# rest on one or two moves of the host.
MIN_SLOPE_OBSERVATIONS = 3


# A slope is divided out only when the runs show it at this one-sided level: a control whose
# moves the benchmarks do not share would add its own noise to every ratio.
SLOPE_LEVEL = 0.01


def fit_slope(cells: Mapping[tuple, Mapping[int, float]], controls: Mapping[int, float]) -> float:
    """How much of the control's log move the benchmarks share: the least-squares slope,
    through the origin, of each run's shared move (the median of its benchmarks' deviations
    from their cell's mean) on its control's deviation from its code's mean; clamped to
    [0, 1], and 0 unless a t test on the runs shows it above 0 at SLOPE_LEVEL. Runs, not
    benchmarks, are the observations: one host move moves all of a run's benchmarks."""
    deviations: dict[int, list[float]] = {}
    groups: dict[int, int] = {}
    for (_, group, *_), by_run in _deviations(cells).items():
        for run, value in by_run.items():
            deviations.setdefault(run, []).append(value)
            groups[run] = group
    by_group: dict[int, list[int]] = {}
    for run in deviations:
        by_group.setdefault(groups[run], []).append(run)
    shared, control = [], []
    for runs in by_group.values():
        if len(runs) < 2:
            continue
        level = sum(controls[run] for run in runs) / len(runs)
        for run in runs:
            shared.append(float(np.median(deviations[run])))
            control.append(controls[run] - level)
    m, c = np.array(shared), np.array(control)
    df = m.size - sum(1 for runs in by_group.values() if len(runs) >= 2) - 1
    den = float(c @ c)
    if df < 1 or den <= 0:
        return 0.0
    slope = float(m @ c) / den
    residual = float(np.sum((m - slope * c) ** 2)) / df
    if residual > 0 and slope / math.sqrt(residual / den) < scipy_stats.t.ppf(1 - SLOPE_LEVEL,
                                                                             df):
        return 0.0
    return min(1.0, max(0.0, slope))


def estimate_noise(history: Sequence[Run], *, adjust: bool = False,
                   slope: float | None = None) -> NoiseEstimate:
    """The noise between runs of one environment's saved runs (see the module docstring).
    Runs of unknown code (no commit, a dirty tree) tell nothing here and are left out; so
    are a benchmark's runs that did other work (another profile) than the rest of its code.
    `adjust`: each median divided by its run's control median to a power (`slope`, or the
    one the saved runs fit; runs without control samples are left out)."""
    by_code: dict = {}
    for run in history:
        code = code_of(run)
        if code.is_known and (run.control_s or not adjust):
            by_code.setdefault(code, []).append(run)
    repeated = [group for group in by_code.values() if len(group) >= 2]
    # (benchmark, group, work shape) -> {run's index: its log median}
    cells: dict[tuple, dict[int, float]] = {}
    controls: dict[int, float] = {}  # run's index -> its log control median
    control_groups: list[list[float]] = []
    index = 0
    for group_index, group in enumerate(repeated):
        control_groups.append([])
        for run in group:
            if run.control_s:
                controls[index] = math.log(median(run.control_s))
                control_groups[-1].append(controls[index])
            for key, bench in run.benchmarks.items():
                # Every round of it disturbed by other work: it says nothing of quiet runs.
                if bench.samples and not bench.all_disturbed:
                    cells.setdefault((key, group_index, bench.work_shape), {})[index] = \
                        math.log(median(bench.samples))
            index += 1
    observations = sum(len(group) - 1 for group in repeated)
    control = None
    if adjust:
        if slope is None:
            slope = (fit_slope(cells, controls) if observations >= MIN_SLOPE_OBSERVATIONS
                     else 0.0)
        cells = {cell: {run: v - slope * controls[run] for run, v in by_run.items()}
                 for cell, by_run in cells.items()}
        if (found := pooled_spread(control_groups)) is not None:
            control = Spread(sigma=found[0], df=found[1], own_sigma=found[0], own_df=found[1])
    own: dict[str, tuple[float, int]] = {}
    keys = dict.fromkeys(key for key, *_ in cells)
    for key in keys:
        found = pooled_spread([list(by_run.values()) for (k, *_), by_run in cells.items()
                               if k == key])
        if found is not None:
            own[key] = found
    if not own:
        return NoiseEstimate()
    spreads, d0 = _moderate_all(own, observations)
    residual = _residual_spreads(cells)
    residuals = _moderate_all(residual, observations)[0] if residual else {}
    return NoiseEstimate(spreads=spreads, runs=sum(map(len, repeated)), groups=len(repeated),
                         prior_df=d0, residuals=residuals, slope=slope or 0.0, control=control)


def between_runs(ratios: Mapping[str, float], spreads: Mapping[str, Spread],
                 thresholds: Mapping[str, float], confidence: float,
                 levels: Mapping[str, Level] | None = None) -> dict[str, Between]:
    """Each ratio (candidate median / baseline median) that has a spread, judged against the
    noise between runs; Holm over the benchmarks judged. `levels`: where the baseline's code
    has several saved runs, the ratio is moved to their mean level and its standard error is
    sigma * sqrt(1 + 1/k) instead of sigma * sqrt(2) (`code_level`)."""
    judged = [k for k in ratios if k in spreads]
    if not judged:
        return {}
    levels = levels or {}
    rows = {}
    for key in judged:
        level = levels.get(key, Level(shift=0.0, runs=1))
        spread, d = spreads[key], math.log(ratios[key]) + level.shift
        se = spread.sigma * math.sqrt(1 + 1 / level.runs)
        q = float(scipy_stats.t.ppf(0.5 + confidence / 2, spread.df))
        if se == 0:  # no spread at all (synthetic runs): any move is beyond it
            p = 1.0 if d == 0 else 0.0
        else:
            p = float(2 * scipy_stats.t.sf(abs(d) / se, spread.df))
        rows[key] = (p, math.exp(d - q * se), math.exp(d + q * se),
                     (1 + thresholds[key]) * math.exp(q * se), math.exp(d), level.runs)
    adjusted = holm([rows[k][0] for k in judged])
    return {k: Between(p_value=rows[k][0], p_adjusted=float(pa), ci_low=rows[k][1],
                       ci_high=rows[k][2], smallest_regression=rows[k][3], ratio=rows[k][4],
                       level_runs=rows[k][5])
            for k, pa in zip(judged, adjusted, strict=True)}
