"""A stored comparison's confirmation, as one typed record: what the paired A/B of the two
commits re-measured and decided, or why none ran.

The suite's gate writes it into the run it judged (the run's `llmbench.confirmation`), so that
`llmbench compare`, `report` and the dashboard give the same verdicts later from the same saved
data (`stored.settle_by`). Its JSON is the run format's (`runs.FORMAT_VERSION`): the keys below,
in this order; a run saved by an older llmbench reads the same way (its `failed` part, from when
a second A/B could follow the first, is kept).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from llmbench.gate.host_move import Cleared
from llmbench.gate.stats import Comparison, Verdict
from llmbench.runs.model import Run

# The suite's `--no-confirm`: the user declined the A/B, and the stored verdicts stand.
NO_CONFIRM = "--no-confirm"


class Status(str, Enum):
    RAN = "ran"
    NOT_RUN = "not run"


def run_stamp(run: Run) -> dict:
    """What names a saved run across copies and paths: when it ran and its commit."""
    return {"datetime": run.datetime, "commit": run.commit_info.get("id")}


def comparison_json(c: Comparison) -> dict:
    """A verdict as a run saves it (JSON has no infinity)."""
    out = {**dataclasses.asdict(c), "verdict": c.verdict.value}
    return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in out.items()}


def comparison_from_json(data: Mapping) -> Comparison:
    fields = {f.name for f in dataclasses.fields(Comparison)}
    values = {k: v for k, v in data.items() if k in fields}
    values["verdict"] = Verdict(values["verdict"])
    if values.get("ci_high") is None:
        values["ci_high"] = math.inf
    return Comparison(**values)


@dataclass(frozen=True)
class Family:
    """Slower benchmarks the budget could not decide alone, decided together (`gate.family`)."""

    benchmarks: tuple[str, ...]  # every member judged, sorted
    pairs: int  # each member's pairs
    alpha: float  # the closed test's level: the members' shares of alpha
    regression: tuple[str, ...]  # the members it named, sorted
    # Members whose pairs pointed at a regression, so they left the family to be decided
    # alone on fresh pairs (`ab.focus.leaving_look`), sorted.
    decided_alone: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"benchmarks": list(self.benchmarks), "pairs": self.pairs, "alpha": self.alpha,
                "regression": list(self.regression),
                **({"decided_alone": list(self.decided_alone)} if self.decided_alone else {})}

    @classmethod
    def from_json(cls, data: Mapping) -> Family:
        return cls(tuple(data.get("benchmarks") or ()), int(data.get("pairs") or 0),
                   float(data.get("alpha") or 0.0), tuple(data.get("regression") or ()),
                   tuple(data.get("decided_alone") or ()))


def _cleared(data) -> Cleared | None:
    """One judged candidate as saved; None where the entry is damaged (it clears nothing)."""
    try:
        values = [float(data[k]) for k in ("ratio", "ci_low", "ci_high")]
        move = float(data.get("move", math.nan))
        return Cleared(*values, data["not_slower"] is True, move)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class HostMove:
    """The machine's move between the two runs as the A/B's pairs measured it, and the
    candidates they did not decide judged on their stored ratios over it (`gate.host_move`)."""

    ratio: float  # the move: stored over paired, a random-effects mean over the readings
    tau: float  # the readings' scatter beyond their noise, as an SD in log units (>= 0)
    readings: tuple[str, ...]  # the paired candidates it was measured on
    judged: Mapping[str, Cleared]  # undecided candidates, their ratio over the move
    # The stored ratios it was read from had the control's share of the machine's speed
    # divided out (`gate.host_speed`): the move is what the control did not see.
    beyond_control: bool = False

    @property
    def cleared(self) -> tuple[str, ...]:
        return tuple(name for name, c in self.judged.items() if c.not_slower)

    def to_json(self) -> dict:
        return {"ratio": self.ratio, "tau": self.tau, "readings": list(self.readings),
                "judged": {name: dataclasses.asdict(c) for name, c in self.judged.items()},
                "beyond_control": self.beyond_control}

    @classmethod
    def from_json(cls, data: Mapping) -> HostMove | None:
        """The saved move; None where it is damaged (then it clears nothing)."""
        try:
            judged = data.get("judged") if isinstance(data.get("judged"), Mapping) else {}
            readings = data.get("readings") or ()
            if isinstance(readings, str) or not all(isinstance(r, str) for r in readings):
                return None
            return cls(float(data["ratio"]), float(data.get("tau") or 0.0), tuple(readings),
                       {str(name): cleared for name, c in judged.items()
                        if (cleared := _cleared(c)) is not None},
                       data.get("beyond_control") is True)
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Confirmation:
    """The paired A/B that settled a stored comparison, or why none ran."""

    status: Status
    against: str  # the baseline's commit (8 characters when none ran)
    baseline: Mapping  # `run_stamp` of the baseline it was judged against
    benchmarks: tuple[str, ...]  # ran: those the A/B judged; not run: those it was for
    why: str | None = None  # not run: why (NO_CONFIRM when the user declined)
    left: tuple[str, ...] = ()  # candidates the budget left out: no pair
    undecided: tuple[str, ...] = ()  # candidates the stored runs could not decide either way
    alpha: float | None = None  # the A/B's level for those decided alone
    seconds: float | None = None
    summary: str | None = None  # the A/B's own summary line
    comparisons: tuple[Comparison, ...] = ()  # the A/B's verdicts, family applied
    family: Family | None = None
    host_move: HostMove | None = None
    # A run saved by an older llmbench: the candidates a further A/B was for, and why it failed.
    failed: tuple[tuple[str, ...], str | None] | None = None

    @property
    def ran(self) -> bool:
        return self.status is Status.RAN

    @property
    def declined(self) -> bool:
        """None ran because the user said --no-confirm: the stored verdicts stand."""
        return not self.ran and self.why == NO_CONFIRM

    @property
    def covered(self) -> tuple[str, ...]:
        """Every candidate it was for: judged, left out, or in a failed further A/B."""
        return (*self.benchmarks, *self.left, *(self.failed[0] if self.failed else ()))

    @property
    def cleared(self) -> int:
        """How many candidates its pairs cleared (`sequential`, Clearing)."""
        return sum(c.reason.startswith("cleared") for c in self.comparisons)

    def to_json(self) -> dict:
        """As the run saves it: the keys of its status, in the run format's order."""
        if not self.ran:
            return {"status": self.status.value, "why": self.why, "against": self.against,
                    "baseline": dict(self.baseline), "benchmarks": list(self.benchmarks)}
        out = {"status": self.status.value, "against": self.against,
               "baseline": dict(self.baseline), "benchmarks": list(self.benchmarks),
               "left": list(self.left), "undecided": list(self.undecided), "alpha": self.alpha,
               "seconds": self.seconds, "summary": self.summary,
               "comparisons": [comparison_json(c) for c in self.comparisons]}
        if self.family is not None:
            out["family"] = self.family.to_json()
        if self.host_move is not None:
            out["host_move"] = self.host_move.to_json()
        if self.failed is not None:
            out["failed"] = {"benchmarks": list(self.failed[0]), "why": self.failed[1]}
        return out

    @classmethod
    def from_json(cls, data: Mapping) -> Confirmation:
        failed = data.get("failed")
        family = data.get("family")
        moved = data.get("host_move")
        return cls(
            # Only "ran" says pairs were taken; anything else (a damaged file) is none.
            status=Status.RAN if data.get("status") == Status.RAN.value else Status.NOT_RUN,
            against=str(data.get("against") or ""), baseline=dict(data.get("baseline") or {}),
            benchmarks=tuple(data.get("benchmarks") or ()), why=data.get("why"),
            left=tuple(data.get("left") or ()), undecided=tuple(data.get("undecided") or ()),
            alpha=data.get("alpha"), seconds=data.get("seconds"), summary=data.get("summary"),
            comparisons=tuple(comparison_from_json(d) for d in data.get("comparisons") or ()),
            family=Family.from_json(family) if isinstance(family, Mapping) and family else None,
            host_move=HostMove.from_json(moved) if isinstance(moved, Mapping) and moved
            else None,
            failed=(tuple(failed.get("benchmarks") or ()), failed.get("why"))
            if isinstance(failed, Mapping) and failed else None)


def not_run(baseline: Run, why: str, keys) -> Confirmation:
    """No A/B ran for candidates `keys`, and why."""
    return Confirmation(Status.NOT_RUN, (baseline.commit_info.get("id") or "")[:8],
                        run_stamp(baseline), tuple(keys), why=why)


def recorded(baseline: Run, candidate: Run) -> Confirmation | None:
    """The paired A/B the suite ran when it judged `candidate` against this very `baseline`
    (saved in the candidate's `llmbench` section), or None."""
    saved = candidate.info.get("confirmation")
    if not isinstance(saved, Mapping) or saved.get("baseline") != run_stamp(baseline):
        return None
    return Confirmation.from_json(saved)
