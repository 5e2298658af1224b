"""Whether a stored comparison divides the machine's speed out, and by how much.

Every run times a fixed control workload between its benchmarks (`bench.control`); its
median moves with the host, not with our code. Between two stored runs a shared host drifts
by several percent, and every benchmark feels part of that move: left in, it is most of the
noise between runs, and it hides a real slowdown as easily as it fakes one. So the candidate's
rounds are divided by the control's ratio to a power, the slope at which this environment's
benchmarks follow their control between runs of one code (`noise.estimate_noise(adjust=True)`
fits it and measures the noise that remains, the control's own noise included), when:

- both runs timed the control;
- the saved runs show a slope above 0 (enough runs of one code with control samples, and
  a significant fit): a control whose moves the benchmarks do not share would only add
  its noise;
- the control moved no more than it moves between runs of one code: its log ratio within
  the two-sided 99% t bound of that spread. A larger move is not the host's drift as this
  environment knows it: the code may have moved the control with the benchmarks (its
  threads, a pool left spinning), and dividing it out would hide that slowdown.

`--normalize` divides the control's whole ratio out (slope 1), whatever the history says:
the user's word that the control speaks for the machine (runs on two machines). Otherwise
nothing is divided out and the raw noise between runs judges the ratios.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

from llmbench.gate.noise import MIN_SLOPE_OBSERVATIONS, NoiseEstimate, estimate_noise
from llmbench.gate.stats import SpeedRatio
from llmbench.runs.model import Run

# The control's move the host may explain: a two-sided bound at this level.
GUARD_CONFIDENCE = 0.99


@dataclass(frozen=True)
class HostSpeed:
    """The machine's speed between two stored runs, and what the comparison did with it."""

    control_ratio: float  # candidate / baseline control median: > 1, the machine was slower
    slope: float  # the power of control_ratio divided out (0: none)
    why: str  # how it was divided out, or why it was not

    @property
    def factor(self) -> float:
        """What the candidate's rounds are divided by."""
        return self.control_ratio ** self.slope

    @property
    def divided_out(self) -> bool:
        return self.slope > 0


def _within_host_drift(ratio: float, estimate: NoiseEstimate) -> tuple[bool, str]:
    spread = estimate.control
    if spread is None or spread.df < 1:
        return False, "no two saved runs of one code timed the control, so its drift is unknown"
    bound = math.exp(float(scipy_stats.t.ppf(0.5 + GUARD_CONFIDENCE / 2, spread.df))
                     * spread.sigma * math.sqrt(2))
    if 1 / bound <= ratio <= bound:
        return True, ""
    return False, (f"it moved beyond the x{bound:.3f} that runs of one code move it by "
                   f"({GUARD_CONFIDENCE:.0%}), so the code may have moved it too")


def divide_out(speed: SpeedRatio | None, history: Sequence[Run], normalize: bool
               ) -> tuple[HostSpeed | None, NoiseEstimate]:
    """The host decision for two stored runs (None without control samples) and the noise
    between runs to judge their ratios against: measured the same way they are divided."""
    if speed is None:
        return None, estimate_noise(history)
    if normalize:
        estimate = estimate_noise(history, adjust=True, slope=1.0)
        return HostSpeed(speed.ratio, 1.0, "divided out in full (--normalize)"), estimate
    adjusted = estimate_noise(history, adjust=True)
    if not adjusted.spreads or adjusted.observations < MIN_SLOPE_OBSERVATIONS:
        return HostSpeed(speed.ratio, 0.0, (
            "not divided out: too few saved runs of one code with control samples to fit how "
            "much of its move the benchmarks share")), estimate_noise(history)
    if adjusted.slope <= 0:
        return HostSpeed(speed.ratio, 0.0, "not divided out: the benchmarks do not follow it "
                                           "between runs of one code"), estimate_noise(history)
    within, why = _within_host_drift(speed.ratio, adjusted)
    if not within:
        return HostSpeed(speed.ratio, 0.0, f"not divided out: {why}"), estimate_noise(history)
    host = HostSpeed(speed.ratio, adjusted.slope, "")
    return dataclasses.replace(host, why=(
        f"divided out to the power {host.slope:.2f} (x{host.factor:.3f}: how closely the "
        f"benchmarks follow it between {adjusted.runs} saved runs of one code)")), adjusted
