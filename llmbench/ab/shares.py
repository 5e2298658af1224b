"""What a benchmark of a paired A/B may take of the budget when its turn comes.

A plain `llmbench ab` knows nothing about its benchmarks before it pairs them, so each gets
an equal share of what is left when it starts: one that cannot be decided does not starve
the rest. A confirmation knows more. Its plan (`llmbench.gate.confirm_plan`) puts the
candidates in order (stored regressions first, then the cheapest to decide) and costs each
to the first look that can decide it. It runs them all in one A/B, in that order, on a
schedule: when a benchmark's turn comes, what the first looks of the later ones cost is
reserved for them, as far as what is left holds them, and the benchmark may take the rest.
One that decides early leaves its unspent time to the next; one whose own first look no
longer fits is skipped, as any benchmark reached after the deadline is. Starting both sides
once for every candidate, rather than once for each pass over those an earlier A/B left
out, leaves that start-up time to pairs. A schedule may name benchmarks nothing is
reserved for (`Schedule.unreserved`: a confirmation's candidates that the stored runs could
not decide either way, after the slower ones): each may take its own first look, with a
margin, while that fits in what is left, and more only when its pairs point at a regression
(`focus`). An equal share of what is left is often less than a first look, and a pair or
two decide nothing: on the whole quick suite 23 such benchmarks got one pair each. The
slower candidates the budget cannot decide alone are a family (`Schedule.family`,
`gate.family`): each member's reservation is its few pairs, which a benchmark that takes
the rest of the budget leaves them (`reserved_for_family`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

# What an unreserved benchmark may take beyond its expected first look: the stored runs'
# rounds that cost it are not the pairs' (a pair may run slower than its two rounds did).
UNRESERVED_MARGIN = 1.5


@dataclass(frozen=True)
class Schedule(Mapping[str, float]):
    """Benchmark -> seconds to its first deciding look, in the order they run, and the ones
    among them nothing is reserved for."""

    first_looks: Mapping[str, float]
    unreserved: frozenset[str] = field(default_factory=frozenset)
    # Slower candidates decided together (`gate.family`): each takes `family_pairs` pairs,
    # its reservation, and no regression is named from its pairs alone.
    family: frozenset[str] = field(default_factory=frozenset)
    family_pairs: int = 0

    def __getitem__(self, name: str) -> float:
        return self.first_looks[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.first_looks)

    def __len__(self) -> int:
        return len(self.first_looks)


def reserved_for_family(nodeid: str, left_s: float, schedule: Mapping[str, float],
                        started: set[str]) -> float:
    """What the family members after `nodeid` that have not started keep of the `left_s`
    seconds, as far as it holds them: a benchmark that takes the rest of the budget (`focus`)
    leaves them that, since they are decided only on their pairs."""
    members = getattr(schedule, "family", frozenset())
    kept = 0.0
    for name in schedule:
        if name in members and name != nodeid and name not in started:
            if kept + schedule[name] <= left_s:
                kept += schedule[name]
    return kept


def equal_share(left_s: float, remaining: int) -> float:
    """A benchmark's equal share of the `left_s` seconds with `remaining` benchmarks (itself
    included) still to pair."""
    return max(0.0, left_s) / max(1, remaining)


def scheduled(common: Sequence[str], schedule: Mapping[str, float]) -> list[str]:
    """The benchmarks both sides share, in the schedule's order; any it does not name keep
    their order after it."""
    rank = {name: i for i, name in enumerate(schedule)}
    return sorted(common, key=lambda name: rank.get(name, len(rank)))


def share_at_turn(nodeid: str, left_s: float, remaining: int,
                  schedule: Mapping[str, float]) -> float | None:
    """What `nodeid` may take of the `left_s` seconds when its turn comes on `schedule`, with
    `remaining` benchmarks (itself included) still to pair: a scheduled one its reserved
    share (None: skip it), one the schedule does not name an equal share."""
    if nodeid not in schedule:
        return equal_share(left_s, remaining)
    return reserved_share(nodeid, left_s, schedule)


def reserved_share(nodeid: str, left_s: float, schedule: Mapping[str, float]) -> float | None:
    """What `nodeid` may take of the `left_s` seconds on `schedule` (benchmark -> seconds to
    its first deciding look, in the order they run): all of it, less what is reserved for
    the later benchmarks that fit beside its own reservation. None when its own does not
    fit."""
    own = schedule.get(nodeid, 0.0)
    if own > left_s:
        return None
    unreserved = getattr(schedule, "unreserved", frozenset())
    if nodeid in unreserved:
        return min(left_s, UNRESERVED_MARGIN * own)
    names = list(schedule)
    later_names = names[names.index(nodeid) + 1:] if nodeid in schedule else []
    # The family's members first: they are decided on a few pairs each, together, where a
    # later benchmark decided alone needs a dozen or more (`gate.family`).
    members = getattr(schedule, "family", frozenset())
    later_names.sort(key=lambda name: name not in members)
    reserved = 0.0
    for name in later_names:
        # One that does not fit is skipped at its turn; a cheaper one after it may fit.
        if name not in unreserved and own + reserved + schedule[name] <= left_s:
            reserved += schedule[name]
    return left_s - reserved
