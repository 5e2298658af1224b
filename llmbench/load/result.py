"""What one load level measured: each request's sample, whether it was served, and the
level's summary and summary line.

A request is served (it counts towards goodput) only when it ended without an error and
its answer holds tokens: a stream that ends with HTTP 200 but no token at all is an
"empty answer", and with fixed-length requests (`ignore_eos`) an answer with fewer tokens
than `max_new_tokens` is a "short answer". Some servers do exactly that under load (one
that interrupts its running request when a new one arrives answers the interrupted ones
with 200 and nothing), so counting such streams as served would report throughput that
was never delivered. Throughputs and latency percentiles are over served requests only;
every failure keeps its reason, counted per reason for the level.

Counting tokens: the count judged and summed is the server's own (`usage` on the OpenAI
routes with `stream_options.include_usage`, the `done` event's `output_tokens` on the
native `/stream`) when it reports one, else the tokenizer's count of the text received,
and each sample says which (`counted_by`). The tokenizer's count is a fallback because
re-tokenizing text is not the same as counting generated tokens: special tokens decode to
no text, and a model may emit a split of the text that the tokenizer would merge.

Timing rules, all measured on the client from just before the request is sent:
  - TTFT is the arrival of the first chunk that carries a token.
  - ITL is per token, over the tokenizer's count (the only count that is known chunk by
    chunk). A later chunk carrying n tokens that arrives dt after the previous
    token-carrying chunk contributes n intervals of dt / n. The tokens beyond the first in
    the first chunk arrived with it and contribute intervals of 0. So a request with N
    tokens has N - 1 intervals, and their mean is its TPOT.
  - TPOT is (latency - TTFT) / (N - 1), latency being the end of the stream.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np

from llmbench.load.objectives import (
    CONFIDENCE,
    ObjectiveCheck,
    Objectives,
    check,
    level_verdict,
    within_share,
)
from llmbench.load.queueing import QueueTrend, queue_trend

if TYPE_CHECKING:  # only named here
    from llmbench.engine.config import SamplingParams
    from llmbench.load.config import LoadConfig

PERCENTILES = (50, 90, 99)
EMPTY_ANSWER = "empty answer"
SHORT_ANSWER = "short answer"
CUT_OFF = "cut off"


def token_timeline(chunks: Sequence[tuple[float, str]], count_tokens: Callable[[str], int]
                   ) -> tuple[float | None, tuple[float, ...], int]:
    """(TTFT, per-token ITLs, number of tokens) from (arrival_s, text) chunks.

    A chunk may carry several tokens, or none (a token that ends in an incomplete UTF-8
    character arrives with the next one), so after each chunk the text received so far is
    tokenized and the chunk carries the growth of that count (never negative: the count
    kept is the highest seen). See the module docstring for the timing rules."""
    text, counted, ttft, last, itl = "", 0, None, 0.0, []
    for arrival, piece in chunks:
        text += piece
        new = count_tokens(text) - counted
        if new <= 0:
            continue
        counted += new
        if ttft is None:
            ttft = arrival
            itl.extend([0.0] * (new - 1))
        else:
            itl.extend([(arrival - last) / new] * new)
        last = arrival
    return ttft, tuple(itl), counted


@dataclass(frozen=True)
class RequestSample:
    """One request. `reason` and `error` are set when it failed (`reason` is the short kind
    the level counts, `error` the full account); a stream that arrived but failed the check
    keeps its timings and counts, a request that never got an answer has none."""

    latency_s: float
    ttft_s: float | None = None
    itl_s: tuple[float, ...] = ()
    output_tokens: int = 0  # judged and summed: the server's count if reported, else ours
    counted_by: str | None = None  # whose count output_tokens is: "server" or "tokenizer"
    tokenizer_tokens: int = 0  # the received text's tokens by the tokenizer (ITL's count)
    server_output_tokens: int | None = None  # as the server reported them
    input_tokens: int | None = None  # as the server reported them
    # The server's own median time between this request's tokens where the model made them
    # (llmbench's native `done` event reports it; other servers do not).
    server_decode_s: float | None = None
    num_chunks: int = 0
    reason: str | None = None
    error: str | None = None
    # Where the request stood in its level: its place in the order sent, when it was due on
    # an open-loop schedule (None in closed loop) and when it was sent, in seconds from the
    # level's start, and whether it counts (False in the warm-up and cool-down).
    index: int | None = None
    scheduled_s: float | None = None
    sent_s: float | None = None
    measured: bool = True
    max_new_tokens: int | None = None  # the token limit this request asked for
    # Multi-turn: the conversation it belongs to and its place in it, from 0 (None: a
    # request on its own).
    session: int | None = None
    turn: int | None = None

    @classmethod
    def from_dict(cls, saved: dict) -> RequestSample:
        """A sample as `llmbench load` saved it (`asdict`); fields a file from an older
        llmbench lacks take their defaults."""
        known = {f.name for f in fields(cls)}
        values = {name: value for name, value in saved.items() if name in known}
        return cls(**{**values, "itl_s": tuple(values.get("itl_s") or ())})

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.tokenizer_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.tokenizer_tokens - 1)

    @property
    def lag_s(self) -> float | None:
        """How late the client sent it against its schedule: the client's own delay,
        which a server must not be blamed for."""
        if self.scheduled_s is None or self.sent_s is None:
            return None
        return self.sent_s - self.scheduled_s

    def objective_value_s(self, metric: str) -> float:
        """This request's value of an objective's metric (see `objectives`); infinite for a
        failed request, which is outside every objective."""
        if self.error is not None:
            return math.inf
        value = {"ttft": self.ttft_s, "itl": self.tpot_s, "e2e": self.latency_s}[metric]
        # One token has no interval: nothing for an ITL objective to hold against it.
        return 0.0 if value is None and metric == "itl" else (
            math.inf if value is None else value)


def judged(sample: RequestSample, params: SamplingParams) -> RequestSample:
    """`sample`, marked failed when its answer is empty, or short of a fixed length."""
    if sample.error is not None:
        return sample
    count = f"{sample.output_tokens} by the {sample.counted_by}'s count"
    if sample.ttft_s is None:
        return replace(sample, reason=EMPTY_ANSWER,
                       error=f"{EMPTY_ANSWER}: the stream ended without any text ({count})")
    if sample.output_tokens == 0:
        return replace(sample, reason=EMPTY_ANSWER, error=f"{EMPTY_ANSWER}: {count}")
    if params.ignore_eos and sample.output_tokens < params.max_new_tokens:
        return replace(sample, reason=SHORT_ANSWER,
                       error=f"{SHORT_ANSWER}: {count}, {params.max_new_tokens} asked for")
    return sample


def _summary(values: Sequence[float]) -> dict | None:
    if not values:
        return None
    array = np.asarray(values, dtype=float) * 1e3
    return {"mean": float(array.mean()),
            **{f"p{q}": float(np.percentile(array, q)) for q in PERCENTILES}}


@dataclass(frozen=True)
class LoadResult:
    """One load level: every request's sample, and summaries over the measured requests
    (all of them but the warm-up and cool-down) that were served."""

    config: LoadConfig
    params: SamplingParams
    duration_s: float  # wall time of the whole level
    samples: tuple[RequestSample, ...]
    num_cut_off: int = 0  # requests begun that had not ended when `duration_s` ran out
    objectives: Objectives | None = None
    cut_off_s: tuple[float, ...] = ()  # how long each cut-off request had run, if known

    @property
    def measured(self) -> tuple[RequestSample, ...]:
        return tuple(s for s in self.samples if s.measured)

    @property
    def ok(self) -> tuple[RequestSample, ...]:
        """The measured requests that were served: the goodput's."""
        return tuple(s for s in self.measured if s.error is None)

    @property
    def num_requests(self) -> int:
        """Measured requests, cut-off ones included."""
        return len(self.measured) + self.num_cut_off

    @property
    def num_errors(self) -> int:
        return self.num_requests - len(self.ok)

    @property
    def errors_by_reason(self) -> dict[str, int]:
        counts = Counter(s.reason for s in self.measured if s.error is not None)
        if self.num_cut_off:
            counts[CUT_OFF] = self.num_cut_off
        return dict(counts.most_common())

    @property
    def is_mostly_failed(self) -> bool:
        return self.num_errors > self.num_requests / 2

    @property
    def ttft_s(self) -> list[float]:
        return [s.ttft_s for s in self.ok if s.ttft_s is not None]

    @property
    def itl_s(self) -> list[float]:
        return [x for s in self.ok for x in s.itl_s]

    @property
    def tpot_s(self) -> list[float]:
        return [s.tpot_s for s in self.ok if s.tpot_s is not None]

    @property
    def server_decode_s(self) -> list[float]:
        return [s.server_decode_s for s in self.ok if s.server_decode_s is not None]

    @property
    def lag_s(self) -> list[float]:
        """The client's delay behind its schedule, for every measured request the schedule
        timed. The warm-up's are left out like its latencies: a client's first requests wait
        for what it does once (connections, lazy imports), and each request is sent at its
        own offset from the start, so their delay does not move the measured ones. A
        session's later turns are due when its previous answer ends, so their lag, near 0,
        would dilute the percentile that says whether the client kept the schedule."""
        return [s.lag_s for s in self.measured if s.lag_s is not None and not s.turn]

    @property
    def serving_overhead(self) -> float | None:
        """ITL p50 seen by the client over the server's own decode p50 for the same
        requests: what HTTP, streaming and the event loop add to each token (1.0: nothing).
        None when the server does not report its decode."""
        itl, decode = self.itl_s, self.server_decode_s
        if not itl or not decode or float(np.median(decode)) <= 0:
            return None
        return float(np.median(itl) / np.median(decode))

    @property
    def latency_s(self) -> list[float]:
        return [s.latency_s for s in self.ok]

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.ok)

    @property
    def window_s(self) -> float:
        """The time the throughputs are over: from the first measured request's send to the
        last one's end (to the level's end when some were cut off), so the warm-up's and
        cool-down's time is left out with their requests. A closed-loop level that leaves
        none out is over its whole wall time."""
        sent = [s for s in self.measured if s.sent_s is not None]
        leaves_out = self.config.warmup or self.config.cooldown
        if (self.config.arrivals is None and not leaves_out) or not sent:
            return self.duration_s
        end = (self.duration_s if self.num_cut_off
               else max(s.sent_s + s.latency_s for s in sent))
        return max(end - min(s.sent_s for s in sent), 0.0)

    def _per_second(self, count: float) -> float:
        return count / self.window_s if self.window_s > 0 else 0.0

    @property
    def request_throughput(self) -> float:
        """Served measured requests per second over `window_s`."""
        return self._per_second(len(self.ok))

    @property
    def token_throughput(self) -> float:
        """Served measured requests' output tokens per second over `window_s`."""
        return self._per_second(self.output_tokens)

    @property
    def offered_rate(self) -> float | None:
        """Open loop: the measured requests' rate as scheduled (the rate asked for, as this
        seed drew it). With multi-turn sessions only first turns are scheduled: their rate,
        times the measured requests per measured first turn."""
        first = [s for s in self.measured if s.scheduled_s is not None and not s.turn]
        due = sorted(s.scheduled_s for s in first)
        if len(due) < 2 or due[-1] <= due[0]:
            return None
        return (len(due) - 1) / (due[-1] - due[0]) * (len(self.measured) / len(first))

    @property
    def client_kept_schedule(self) -> bool:
        """False when the client's lag behind its schedule at `config.lag_percentile`
        exceeded `config.max_lag_s`: the rate offered was then lower than asked for, so
        the level says nothing about the server at that rate."""
        lags = self.lag_s
        return not lags or (float(np.percentile(lags, self.config.lag_percentile))
                            <= self.config.max_lag_s)

    @property
    def queue(self) -> QueueTrend | None:
        """Open loop: whether the server's queue grew through the level (`queueing`)."""
        if self.config.arrivals is None:
            return None
        # In the order sent: a session's later turns are sent long after their index.
        return queue_trend([s.ttft_s for s in sorted(self.ok, key=lambda s: s.sent_s or 0.0)
                            if s.ttft_s is not None])

    def objective_checks(self) -> list[ObjectiveCheck]:
        if self.objectives is None:
            return []
        return [check(metric, limit, [s.objective_value_s(metric) for s in self.measured]
                      + self._cut_off_values(limit), self.objectives.percentile)
                for metric, limit in self.objectives.limits_ms.items()]

    def _cut_off_values(self, limit_ms: float) -> list[float]:
        """The cut-off requests as an objective sees them: one that had run past the limit
        is over it; one cut sooner might still have made it, so it says nothing (the
        client's --duration cut it, not the server)."""
        if len(self.cut_off_s) != self.num_cut_off:  # how long they ran is not known
            return [math.inf] * self.num_cut_off
        return [math.inf for ran in self.cut_off_s if ran * 1e3 > limit_ms]

    @property
    def num_within_objectives(self) -> int:
        """Measured requests served within every objective."""
        if self.objectives is None:
            return len(self.ok)
        limits = self.objectives.limits_ms
        return sum(all(s.objective_value_s(m) * 1e3 <= limit for m, limit in limits.items())
                   for s in self.ok)

    def _objectives_summary(self) -> dict | None:
        if self.objectives is None:
            return None
        checks = self.objective_checks()
        share, low, high = within_share(self.num_within_objectives, self.num_requests)
        return {"percentile": self.objectives.percentile, "confidence": CONFIDENCE,
                "minimum_requests": self.objectives.minimum_requests,
                "checks": [asdict(c) for c in checks],
                "verdict": level_verdict(checks, sustained=not (self.queue and
                                                                self.queue.growing)),
                "goodput_request_rate": self._per_second(self.num_within_objectives),
                "num_within": self.num_within_objectives,
                "within_share": share, "within_share_ci": [low, high]}

    def summary(self) -> dict:
        """Milliseconds (mean, p50, p90, p99) and throughputs over the served measured
        requests; failures counted per reason, and their distinct messages; with an
        open-loop schedule the client's lag, with objectives their checks and goodput."""
        arrivals = self.config.arrivals
        return {"load": (arrivals.describe() if arrivals is not None
                         else f"concurrency {self.config.concurrency}"),
                "concurrency": None if arrivals is not None else self.config.concurrency,
                "rate": None if arrivals is None else arrivals.rate,
                "offered_rate": self.offered_rate,
                "num_requests": self.num_requests,
                "num_left_out": len(self.samples) - len(self.measured),
                "num_sessions": len({s.session for s in self.measured
                                     if s.session is not None}) or None,
                "num_ok": len(self.ok), "num_errors": self.num_errors,
                "is_mostly_failed": self.is_mostly_failed,
                "errors_by_reason": self.errors_by_reason, "num_cut_off": self.num_cut_off,
                "duration_s": self.duration_s, "window_s": self.window_s,
                "request_throughput": self.request_throughput,
                "token_throughput": self.token_throughput, "output_tokens": self.output_tokens,
                "tokens_counted_by": dict(Counter(s.counted_by for s in self.ok)),
                "ttft_ms": _summary(self.ttft_s), "itl_ms": _summary(self.itl_s),
                "tpot_ms": _summary(self.tpot_s), "latency_ms": _summary(self.latency_s),
                "server_decode_ms": _summary(self.server_decode_s),
                "serving_overhead": self.serving_overhead,
                "lag_ms": _lag_summary(self.lag_s, self.config.lag_percentile),
                "client_kept_schedule": self.client_kept_schedule,
                "queue": None if self.queue is None else asdict(self.queue),
                "objectives": self._objectives_summary(),
                "errors": sorted({s.error for s in self.samples if s.error})}

    def to_dict(self) -> dict:
        return {"config": asdict(self.config), "params": asdict(self.params),
                "objectives": None if self.objectives is None else asdict(self.objectives),
                "summary": self.summary(), "samples": [asdict(s) for s in self.samples]}


def _lag_summary(lags: Sequence[float], judged_percentile: float) -> dict | None:
    """The lag's percentiles in ms, and the one `client_kept_schedule` judged ("judged",
    at "percentile")."""
    if not lags:
        return None
    array = np.asarray(lags, dtype=float) * 1e3
    return {"p50": float(np.percentile(array, 50)), "p99": float(np.percentile(array, 99)),
            "max": float(array.max()), "percentile": judged_percentile,
            "judged": float(np.percentile(array, judged_percentile))}


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in counts.items())


def summary_line(summary: dict) -> str:
    """One level in a line: served and failed requests (a level where most failed says so
    first), throughput, percentiles over the served requests, and whose token count was
    used; then, indented, a client that fell behind its schedule and each objective."""
    def ms(name: str) -> str:
        s = summary[name]
        return "-" if s is None else f"{s['p50']:.1f}/{s['p99']:.1f}"

    ok, errors, reasons = summary["num_ok"], summary["num_errors"], summary["errors_by_reason"]
    if summary["is_mostly_failed"]:
        head = (f"MOSTLY FAILED: {errors} of {summary['num_requests']} requests failed "
                f"({_counts(reasons)}), {ok} ok")
    else:
        head = f"{ok} ok, {errors} errors" + (f" ({_counts(reasons)})" if errors else "")
    if summary.get("num_sessions"):
        head += f", in {summary['num_sessions']} sessions"
    if summary["num_left_out"]:
        head += f", {summary['num_left_out']} left out (warm-up and cool-down)"
    counted = summary["tokens_counted_by"]
    by = ", ".join(f"the {name}" + (f" ({n})" if len(counted) > 1 else "")
                   for name, n in counted.items())
    line = (f"{summary['load']}: {head}; served "
            f"{summary['token_throughput']:.1f} tokens/s, "
            f"{summary['request_throughput']:.2f} req/s; ms p50/p99: TTFT {ms('ttft_ms')}, "
            f"ITL {ms('itl_ms')}, TPOT {ms('tpot_ms')}, latency {ms('latency_ms')}"
            + (f"; tokens counted by {by}" if by else "")
            + (f"; serving overhead x{overhead:.2f} (ITL p50 / the server's own decode p50)"
               if (overhead := summary.get("serving_overhead")) is not None else ""))
    lines = [line]
    lag = summary.get("lag_ms")
    if lag is not None and not summary["client_kept_schedule"]:
        # A level saved before the percentile could be chosen was judged at p99.
        percentile = lag.get("percentile", 99.0)
        lines.append(f"  CLIENT BEHIND SCHEDULE: the client sent its requests up to "
                     f"{lag.get('judged', lag['p99']):.1f} ms late (p{percentile:g}; max "
                     f"{lag['max']:.1f} ms), so the rate offered was lower than asked: "
                     "this level says nothing about the server")
    elif lag is not None:
        lines.append(f"  client on schedule: lag p50 {lag['p50']:.2f} ms, p99 "
                     f"{lag['p99']:.2f} ms")
    queue = summary.get("queue")
    if queue is not None and queue["growing"]:
        lines.append(f"  QUEUE GROWING: TTFT x{queue['ratio']:.2f} from the first quarter of "
                     f"the level to the last (Kendall's tau, p={queue['p_value']:.1g}): the "
                     "server did not keep up with this rate, and a longer level would miss "
                     "any objective")
    if (objectives := summary.get("objectives")) is not None:
        lines.append("  " + objectives_line(objectives, summary["num_requests"]))
    return "\n".join(lines)


def _check_text(check: dict, percentile: float) -> str:
    def fmt(value: float | None) -> str:
        return "?" if value is None else f"{value:.0f}"

    interval = f"[{fmt(check['low_ms'])}, {fmt(check['high_ms'])}]"
    return (f"{check['metric']} p{percentile:g} {fmt(check['value_ms'])} ms {interval} "
            f"vs {check['limit_ms']:g}: {check['verdict']}")


def objectives_line(objectives: dict, num_requests: int) -> str:
    """The objectives of one level in a line: the verdict, goodput, and each check with
    its interval (99% confidence); a percentile too few requests can bound says so."""
    percentile = objectives["percentile"]
    low, high = objectives["within_share_ci"]
    text = (f"objectives {objectives['verdict'].upper()}: goodput "
            f"{objectives['goodput_request_rate']:.2f} req/s ({objectives['num_within']} of "
            f"{num_requests} within every objective, {objectives['within_share']:.1%} "
            f"[{low:.1%}, {high:.1%}]); "
            + "; ".join(_check_text(c, percentile) for c in objectives["checks"]))
    if num_requests < objectives["minimum_requests"]:
        text += (f" (a p{percentile:g} needs at least {objectives['minimum_requests']} "
                 f"measured requests to be claimed at {objectives['confidence']:.0%} "
                 "confidence)")
    return text
