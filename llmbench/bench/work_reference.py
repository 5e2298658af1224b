"""The committed work reference: a run's counted work, judged exactly, on any machine.

Time needs a quiet machine and many rounds; counted work (aten ops, FLOPs, bytes of one
round) is the same on every machine and every run of the same code and libraries. So the
counts of a run can be committed, small and without timings, and every later run judged
against them in one pass, a gate that cannot flake:

- `--work-reference=DIR` judges this run's counts, case by case, against
  `DIR/<model>-<device>-<dtype>.json` at session end (the rule of `llmbench.gate.work`).
  More work fails the session (exit 1) with the ops that changed, reported as one test,
  `llmbench::work-reference`. No reference for this environment, or one counted with other
  torch/transformers versions, is a usage error (exit 4) saying how to make or refresh it.
- `--save-work-reference=DIR` writes this run's counts there instead. Do it after an
  intended change of work, in the same commit, so the diff shows the new counts beside
  the code that explains them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llmbench.bench.gate_hook import report_synthetic
from llmbench.bench.settings import SETTINGS_KEY
from llmbench.gate import options
from llmbench.gate.work import (
    WORK_VERSIONS,
    WorkStatus,
    differing,
    judge_work,
    rule_words,
    tally,
)
from llmbench.runs.environment import environment_key
from llmbench.runs.store import write_atomic

FORMAT = "llmbench-work-reference/1"
NODEID = "llmbench::work-reference"
STATE_KEY = pytest.StashKey["ReferenceState"]()
WORK_FLAGS = (options.WORK_THRESHOLD, options.NO_WORK_GATE)


def pytest_addoption(parser: pytest.Parser) -> None:
    """--work-reference and --save-work-reference, in the suite's option group."""
    group = parser.getgroup("llmbench")
    group.addoption("--work-reference", default=None, metavar="DIR",
                    help="at session end, judge every case's counted work (ops, FLOPs, bytes) "
                         "exactly against the reference in DIR for this model, device and "
                         "dtype; more work fails the session. Default: %(default)r")
    group.addoption("--save-work-reference", default=None, metavar="DIR",
                    help="write this run's counted work as DIR's reference for its model, "
                         "device and dtype (after an intended change of work; commit it with "
                         "the change). Default: %(default)r")


@dataclasses.dataclass
class ReferenceState:
    folder: Path
    saving: bool
    threshold: float
    gate: bool
    lines: list[str] = dataclasses.field(default_factory=list)  # for the terminal summary
    exit_code: pytest.ExitCode | None = None  # what the judgement asks of the session


def pytest_configure(config: pytest.Config) -> None:
    """Check the options before anything runs."""
    judge_dir = config.getoption("work_reference")
    save_dir = config.getoption("save_work_reference")
    if judge_dir and save_dir:
        raise pytest.UsageError("--work-reference and --save-work-reference exclude each "
                                "other: judge against the reference, or refresh it")
    if not (judge_dir or save_dir):
        return
    if config.getoption("benchmark_disable") or hasattr(config, "workerinput") or (
            config.getoption("numprocesses", None)):
        raise pytest.UsageError("counted work needs the benchmarks to run, serially: drop "
                                "--benchmark-disable and -n")
    values = {f.dest: config.getoption(f.dest) for f in WORK_FLAGS}
    config.stash[STATE_KEY] = ReferenceState(
        folder=Path(judge_dir or save_dir), saving=bool(save_dir),
        threshold=values[options.WORK_THRESHOLD.dest], gate=values[options.NO_WORK_GATE.dest])


def _environment(output: dict) -> dict:
    env = (output.get("llmbench") or {}).get("environment") or {}
    versions = env.get("versions") or {}
    return {"model": env.get("model"), "device": env.get("device"), "dtype": env.get("dtype"),
            "versions": {k: _public(versions.get(k)) for k in WORK_VERSIONS}}


def _public(version: str | None) -> str | None:
    """A version without its local label: torch 2.13.0+cpu and PyPI's 2.13.0 (a CUDA
    build) dispatch the same ops on the CPU, so one reference serves both."""
    return version.split("+", 1)[0] if isinstance(version, str) else version


def _counts(output: dict) -> dict[str, dict]:
    return {b["fullname"]: (b.get("extra_info") or {}).get("work") for b in output["benchmarks"]}


def reference_path(config: pytest.Config, folder: Path) -> Path:
    s = config.stash[SETTINGS_KEY]
    return folder / f"{environment_key(s.engine.model, s.device, s.dtype, s.engine.variant)}.json"


def _save(config: pytest.Config, state: ReferenceState, output: dict) -> None:
    """Write the reference; a failure is one line and a usage-error exit, never a traceback
    (this runs at session end, where a raised error would be pytest's INTERNALERROR)."""
    path = reference_path(config, state.folder)
    counts = _counts(output)
    missing = [k for k, v in counts.items() if v is None]
    if missing:
        state.lines.append(f"--save-work-reference: {len(missing)} cases have no counts "
                           f"(e.g. {missing[0]}); nothing written")
        state.exit_code = pytest.ExitCode.USAGE_ERROR
        return
    try:
        previous = _load(path, "")["benchmarks"] if path.exists() else None
    except LookupError:
        previous = None  # not a reference we can read: replaced, as asked
    payload = {"format": FORMAT, "environment": _environment(output),
               "benchmarks": dict(sorted(counts.items()))}
    try:
        write_atomic(path, json.dumps(payload, indent=1) + "\n", replace=True)
    except OSError as exc:
        state.lines.append(f"--save-work-reference: cannot write {path}: "
                           f"{exc.strerror or exc}; nothing written")
        state.exit_code = pytest.ExitCode.USAGE_ERROR
        return
    if previous is None:
        state.lines.append(f"work reference written: {path} ({len(counts)} cases)")
    else:
        changed = [k for k, v in counts.items() if previous.get(k) != v]
        state.lines.append(f"work reference refreshed: {path} ({len(counts)} cases, "
                           f"{len(changed)} changed; `git diff {path}` shows how)")


def _load(path: Path, save_hint: str) -> dict:
    if not path.exists():
        raise LookupError(f"no work reference for this environment: {path} does not exist; "
                          f"make it with {save_hint}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LookupError(f"{path} is not a work reference ({exc}); refresh it with "
                          f"{save_hint}") from None
    if (not isinstance(data, dict) or data.get("format") != FORMAT
            or not isinstance(data.get("benchmarks"), dict)
            or not all(isinstance(v, dict) for v in data["benchmarks"].values())):
        raise LookupError(f"{path} is not a work reference (format {FORMAT!r}); refresh it "
                          f"with {save_hint}")
    return data


def _judge(config: pytest.Config, state: ReferenceState, output: dict) -> None:
    path = reference_path(config, state.folder)
    save_hint = f"--save-work-reference={state.folder}"
    try:
        reference = _load(path, save_hint)
    except LookupError as exc:
        report_synthetic(config, NODEID, error=str(exc))
        state.lines.append(f"cannot judge work: {exc}")
        state.exit_code = pytest.ExitCode.USAGE_ERROR
        return
    saved = (reference.get("environment") or {}).get("versions") or {}
    ref_versions = {k: _public(saved.get(k)) for k in WORK_VERSIONS}
    run_versions = _environment(output)["versions"]
    if ref_versions != run_versions:
        diffs = ", ".join(f"{k} {ref_versions.get(k)} (reference) vs {run_versions.get(k)}"
                          for k in WORK_VERSIONS if ref_versions.get(k) != run_versions.get(k))
        message = (f"{path} was counted with other library versions ({diffs}), which "
                   f"dispatch other ops: install those, or refresh it with {save_hint}")
        report_synthetic(config, NODEID, error=message)
        state.lines.append(f"cannot judge work: {message}")
        state.exit_code = pytest.ExitCode.USAGE_ERROR
        return
    known = reference.get("benchmarks") or {}
    findings, new = [], []
    for key, counts in _counts(output).items():
        if key not in known:
            new.append(key)
            continue
        findings.append(judge_work(key, {"work": known[key]}, {"work": counts},
                                   state.threshold))
    more = [f for f in findings if f.status is WorkStatus.MORE]
    lines = [f"{f.name}: {f.status.value}: {f.describe()}" for f in differing(findings)]
    summary = (f"{'WORK REGRESSION' if more and state.gate else 'work'} against {path}: "
               f"{tally(findings)}")
    if new:
        summary += f"; {len(new)} cases not in the reference (new: refresh it to include them)"
    if more:
        summary += (f"; {rule_words(state.threshold)} "
                    + ("fails" if state.gate else "is shown only (--no-work-gate)"))
    failing = bool(more) and state.gate
    report_synthetic(config, NODEID, failure="\n".join([*lines, summary]) if failing else None,
                     message=summary, properties=[("summary", summary)])
    state.lines += [*lines, summary]
    state.exit_code = pytest.ExitCode.TESTS_FAILED if failing else None


def judge(session: pytest.Session, output: dict | None) -> None:
    """Judge (or save) the finished run's counts and set the session's exit status."""
    config = session.config
    state = config.stash.get(STATE_KEY, None)
    if state is None or not output or not output.get("benchmarks"):
        return
    if state.saving:
        _save(config, state, output)
    else:
        session.testscollected += 1
        _judge(config, state, output)
    if state.exit_code is not None and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = state.exit_code


def summarize(terminalreporter, config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is None or not state.lines:
        return
    terminalreporter.write_sep("=", "llmbench work reference")
    for line in state.lines:
        terminalreporter.write_line(f"llmbench: {line}", red=state.exit_code is not None)

