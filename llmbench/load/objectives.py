"""Service-level objectives, and whether a load level met them with confidence.

`--slo ttft=500,itl=50,e2e=4000` sets a limit in milliseconds per metric, each judged at the
same percentile (`--slo-percentile`, 99 by default). Every metric is one value per request,
so the percentile over requests and goodput speak of the same thing:
  - ttft: the request's time to first token;
  - itl (or tpot): the request's mean inter-token latency, (latency - TTFT) / (tokens - 1),
    as vLLM's goodput judges it;
  - e2e: the request's whole latency.
A failed request (an error, an empty or short answer) is outside every objective: it
counts as infinitely slow. A request that --duration cut off counts so only for the
objectives whose limit it had already run past; for the others it says nothing.

A level's percentile is an order statistic of its measured requests, bounded above and
below by the distribution-free one-sided bounds from the binomial (scipy's
`quantile_test`), each at 99% confidence (together a 98% interval). An objective is met
when the upper bound is within the limit, missed when the lower bound is beyond it, and
uncertain otherwise: each verdict is a one-sided test at 1%. Too few requests leave no upper end at
all: MLPerf LoadGen's early-stopping rule, which is the same bound, needs 459 requests
with none over the limit before it will claim a p99 (44 for a p90), and a level with fewer
says it cannot claim one. A level whose queue grew (`queueing`) has not met its
objectives, whatever its requests saw. Goodput is the rate of requests within every
objective.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest, quantile_test

from llmbench.errors import UserError

CONFIDENCE = 0.99
METRICS = ("ttft", "itl", "e2e")
ALIASES = {"tpot": "itl", "latency": "e2e"}
MET, MISSED, UNCERTAIN, NOT_SUSTAINED = "met", "missed", "uncertain", "not sustained"


@dataclass(frozen=True)
class Objectives:
    """Limits in milliseconds per metric, each at `percentile`."""

    limits_ms: dict[str, float]
    percentile: float = 99.0

    def __post_init__(self) -> None:
        if not self.limits_ms:
            raise UserError("--slo needs at least one objective, e.g. ttft=500,itl=50")
        if not 0 < self.percentile < 100:
            raise UserError(f"--slo-percentile must be between 0 and 100, got "
                            f"{self.percentile:g}")

    def describe(self) -> str:
        limits = ", ".join(f"{metric} {limit:g} ms" for metric, limit in self.limits_ms.items())
        return f"p{self.percentile:g} {limits}"

    @property
    def minimum_requests(self) -> int:
        """The fewest measured requests for which a level can claim its percentile at all
        (every one of them within the limit): the smallest n with 1 - p^n >= CONFIDENCE."""
        p = self.percentile / 100
        return math.ceil(math.log(1 - CONFIDENCE) / math.log(p) - 1e-9)


def parse_objectives(text: str, percentile: float = 99.0) -> Objectives:
    """`ttft=500,itl=50,e2e=4000` (milliseconds) as Objectives; one line on a bad part."""
    limits: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        metric = ALIASES.get(name.strip().lower(), name.strip().lower())
        if not sep or metric not in METRICS:
            raise UserError(f"--slo: {part!r} is not METRIC=MS with METRIC one of "
                            f"{', '.join(METRICS)} (e.g. ttft=500,itl=50,e2e=4000)")
        try:
            limit = float(value)
        except ValueError:
            limit = float("nan")
        if not limit > 0 or math.isinf(limit):
            raise UserError(f"--slo: {part!r}: the limit must be a positive number of "
                            "milliseconds")
        if metric in limits:
            raise UserError(f"--slo names {metric} twice")
        limits[metric] = limit
    return Objectives(limits, percentile)


@dataclass(frozen=True)
class ObjectiveCheck:
    """One objective at one level: the percentile and its one-sided 99% bounds, in
    milliseconds (None where the requests cannot bound it), and the verdict."""

    metric: str
    limit_ms: float
    value_ms: float | None
    low_ms: float | None
    high_ms: float | None
    num_requests: int
    verdict: str


def _ms(seconds: float) -> float | None:
    return None if math.isnan(seconds) or math.isinf(seconds) else seconds * 1e3


def check(metric: str, limit_ms: float, values_s: Sequence[float], percentile: float
          ) -> ObjectiveCheck:
    """Judge one objective over one value per measured request (inf for a failure)."""
    values = np.asarray(values_s, dtype=float)
    if values.size == 0:
        return ObjectiveCheck(metric, limit_ms, None, None, None, 0, UNCERTAIN)
    p = percentile / 100
    value = float(np.percentile(values, percentile, method="higher"))
    # One-sided bounds, each at CONFIDENCE: the upper one is MLPerf's early-stopping bound.
    high = float(quantile_test(values, p=p, alternative="less")
                 .confidence_interval(CONFIDENCE).high)
    low = float(quantile_test(values, p=p, alternative="greater")
                .confidence_interval(CONFIDENCE).low)
    limit_s = limit_ms / 1e3
    if not math.isnan(high) and high <= limit_s:
        verdict = MET
    elif not math.isnan(low) and low > limit_s:
        verdict = MISSED
    else:
        verdict = UNCERTAIN
    return ObjectiveCheck(metric, limit_ms, _ms(value), _ms(low), _ms(high),
                          int(values.size), verdict)


def level_verdict(checks: Sequence[ObjectiveCheck], sustained: bool = True) -> str:
    """Missed when any objective was missed; not sustained when the server's queue grew
    through the level (`queueing`: the objectives would be missed given time); met when
    every one was met; else uncertain."""
    verdicts = {c.verdict for c in checks}
    if MISSED in verdicts:
        return MISSED
    if not sustained:
        return NOT_SUSTAINED
    return MET if verdicts == {MET} else UNCERTAIN


def within_share(num_within: int, num_requests: int) -> tuple[float, float, float]:
    """The share of requests within every objective, and its 99% Wilson interval."""
    if num_requests == 0:
        return 0.0, 0.0, 1.0
    ci = binomtest(num_within, num_requests).proportion_ci(CONFIDENCE, method="wilson")
    return num_within / num_requests, float(ci.low), float(ci.high)
