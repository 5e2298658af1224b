"""Whether a server kept up with an open-loop rate, or its queue grew through the level.

Above its capacity a server's queue grows for as long as requests keep arriving, so each
request waits longer than the one before: its time to first token trends upward through
the level. A short level can end before that wait breaks a loose objective, and would then
pass a rate the server cannot hold for a minute. So a level's queue is judged from its
served measured requests in the order they were sent: it grows when their TTFTs rise with
their order (Kendall's tau, one-sided, p < ALPHA) and the median TTFT of the last quarter
is at least GROWTH_FACTOR times that of the first (a trend too small to matter, such as a
cache warming, is not growth). Fewer than MIN_REQUESTS are not judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import kendalltau

ALPHA = 0.01
GROWTH_FACTOR = 1.5
MIN_REQUESTS = 8


@dataclass(frozen=True)
class QueueTrend:
    """The last quarter's median TTFT over the first quarter's, the trend's p-value, and
    whether the queue grew; None where too few requests were served to tell."""

    ratio: float | None
    p_value: float | None
    growing: bool


def queue_trend(ttfts_in_send_order: Sequence[float]) -> QueueTrend:
    values = np.asarray(ttfts_in_send_order, dtype=float)
    if values.size < MIN_REQUESTS:
        return QueueTrend(None, None, False)
    quarter = values.size // 4
    first, last = np.median(values[:quarter]), np.median(values[-quarter:])
    ratio = float(last / first) if first > 0 else float("inf")
    p_value = float(kendalltau(np.arange(values.size), values, alternative="greater").pvalue)
    return QueueTrend(ratio, p_value, p_value < ALPHA and ratio >= GROWTH_FACTOR)
