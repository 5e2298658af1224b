"""The gate's decision flags, each described once: name, metavar, validator, default, help.

`llmbench compare`, `llmbench ab` and `llmbench report` (argparse) and the suite's
`--compare-to` (pytest) register their flags from these descriptions with `register`, check
"only with" rules with `only_with`, and build their `GateOptions` with `gate_options`, so a
flag's spelling, default, validation and message are the same in every front end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmbench.argtypes import duration, number, parsed_by
from llmbench.gate.compare import (
    DEFAULT_ALPHA,
    GateOptions,
    parse_fraction,
    parse_threshold_for,
    parse_work_threshold,
)
from llmbench.gate.memory import DEFAULT_MEMORY_THRESHOLD
from llmbench.gate.work import DEFAULT_WORK_THRESHOLD


@dataclass(frozen=True)
class Flag:
    """One command-line flag, as both argparse's add_argument and pytest's addoption take it."""

    name: str  # "--threshold"
    help: str
    default: Any = None
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    action: str | None = None  # "store_true", "store_false", "append"
    field: str | None = None  # the GateOptions field it sets; None: named after the flag

    @property
    def dest(self) -> str:
        return self.field or self.name.removeprefix("--").replace("-", "_")

    def arguments(self, help_prefix: str = "") -> dict[str, Any]:
        keywords = {"help": help_prefix + self.help, "default": self.default, "dest": self.dest}
        keywords.update({k: v for k, v in (("metavar", self.metavar), ("type", self.type),
                                           ("action", self.action)) if v is not None})
        return keywords


THRESHOLD = Flag(
    "--threshold", default=None, metavar="PCT", type=parsed_by(parse_fraction, "pct"),
    help="practical threshold for the whole run, e.g. 10%% or 0.1. Default: the device's "
         "(10%% cpu, 5%% cuda/mps)")
THRESHOLD_FOR = Flag(
    "--threshold-for", default=[], metavar="NAME=PCT", action="append",
    type=parsed_by(parse_threshold_for, "name=pct"),
    help="threshold for one group or benchmark, e.g. decode=20%%; repeatable; a benchmark's "
         "beats its group's beats --threshold. Default: %(default)r")
ALPHA = Flag(
    "--alpha", default=DEFAULT_ALPHA, metavar="A",
    type=number("a number in (0, 0.5)", lambda v: 0 < v < 0.5, "in (0, 0.5)"),
    help="family-wise false-alarm rate (Holm over the run). Default: %(default)r")
NORMALIZE = Flag(
    "--normalize", default=False, action="store_true",
    help="divide the whole machine-speed ratio (control workload) out of the candidate's "
         "samples; without it, a stored comparison divides out the share its saved runs of "
         "one code show the benchmarks follow, when they show one. Default: %(default)r")
ALLOW_MISMATCH = Flag(
    "--allow-mismatch", default=False, action="store_true",
    help="compare runs of different model, device, dtype or threads. Default: %(default)r")
FAIL_ON_INCONCLUSIVE = Flag(
    "--fail-on-inconclusive", default=False, action="store_true",
    help="fail (exit 1) when a benchmark is inconclusive, not only on a regression. "
         "Default: %(default)r")
WORK_THRESHOLD = Flag(
    "--work-threshold", default=DEFAULT_WORK_THRESHOLD, metavar="PCT",
    type=parsed_by(parse_work_threshold, "pct"),
    help="counted work (FLOPs, bytes or aten ops of a case) that grows by more than this fails "
         "the gate, exactly, whatever the timing says; 0 fails on any growth. Default: 1%%")
MEMORY_THRESHOLD = Flag(
    "--memory-threshold", default=DEFAULT_MEMORY_THRESHOLD, metavar="PCT",
    type=parsed_by(parse_fraction, "pct"),
    help="a case whose own peak memory grows by more than this (and by more than 128 MiB) "
         "fails the gate. Default: 10%%")
NO_WORK_GATE = Flag(
    "--no-work-gate", default=True, action="store_false", field="work_gate",
    help="report counted-work findings without failing on them. Default: work can fail")

# Every flag that shapes GateOptions, in the order --help lists them.
FLAGS = (THRESHOLD, THRESHOLD_FOR, ALPHA, NORMALIZE, ALLOW_MISMATCH, FAIL_ON_INCONCLUSIVE,
         WORK_THRESHOLD, NO_WORK_GATE, MEMORY_THRESHOLD)

# pytest only: where the suite's gate looks for its baseline.
COMPARE_TO = Flag(
    "--compare-to", default=None, metavar="PATH|latest",
    help="at session end, judge this run against a saved run (a file, an environment folder, "
         "a database store's ENVIRONMENT/NNNN, or 'latest': the newest run of this "
         "environment in the store, --store or --baseline-dir); a regression "
         "fails the session. Write --compare-to=PATH: pytest takes a bare PATH for a test "
         "path. Default: %(default)r")


# pytest only: the paired A/B that confirms a stored comparison's slower benchmarks.
CONFIRM_BUDGET = Flag(
    "--confirm-budget", default=240.0, metavar="DURATION", type=duration,
    help="--compare-to: when the stored runs measured different code and some benchmarks are "
         "slower or undecided, confirm them by a paired A/B against the baseline's commit "
         "within this wall time, both sides' start included (e.g. 4m, 90s), the slower ones "
         "first; its verdicts replace the stored ones. Default: 4m")
NO_CONFIRM = Flag(
    "--no-confirm", default=False, action="store_true",
    help="--compare-to: do not confirm; slower benchmarks the noise between runs cannot "
         "prove stay 'not confirmed' (exit 6). Default: %(default)r")


def register(add_argument: Callable[..., Any], flags: Iterable[Flag] = FLAGS,
             help_prefix: str = "") -> None:
    """Add `flags` with `add_argument`: an argparse parser's or group's add_argument, or a
    pytest option group's addoption."""
    for flag in flags:
        add_argument(flag.name, **flag.arguments(help_prefix))


def only_with(values: Mapping[str, Any], needed: str, flags: Iterable[Flag] = FLAGS
              ) -> str | None:
    """The usage error when decision flags are given without the flag they need (`needed`,
    e.g. "--compare-to PATH|latest"), or None. `values` maps each flag's dest to its value."""
    given = [f.name for f in flags if f.dest in values and values[f.dest] != f.default]
    if not given:
        return None
    return f"{', '.join(given)} only apply with {needed}: add it, or drop them"


def gate_options(values: Mapping[str, Any]) -> GateOptions:
    """The GateOptions that the parsed flags ask for; a flag a front end lacks keeps its
    default. `values` maps each flag's dest to its value (argparse: `vars(args)`)."""
    chosen = {f.dest: values[f.dest] for f in FLAGS if f.dest in values}
    if THRESHOLD_FOR.dest in chosen:
        chosen[THRESHOLD_FOR.dest] = dict(chosen[THRESHOLD_FOR.dest])
    return GateOptions(**chosen)
