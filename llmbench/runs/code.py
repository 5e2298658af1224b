"""What code a run measured, and whether two runs measured the same code.

Two runs measured the same code when both ran one commit from a clean tree (pytest-benchmark's
`commit_info`: `git describe --dirty`), under the same library versions, with the same
slowdowns injected on top (`llmbench.bench.inject`). Any difference between two such runs is
the machine's: the gate then gives no verdict on the code, and the pair is an observation of
how far apart two runs of one environment land (`llmbench.gate.noise`). A run without git,
from a dirty tree, without recorded versions, or whose server benchmarks measured an external
server (`--server-url`: code no commit of ours names) has no known code: it is never "the
same" as another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llmbench.runs.model import Run

# What pytest-benchmark records when it could not ask git.
_NO_COMMIT = ("", "unversioned", "unknown")


@dataclass(frozen=True)
class Code:
    """The code a run measured, as far as the run recorded it."""

    commit: str | None  # None: no git (or git failed)
    dirty: bool  # uncommitted changes to tracked files
    versions: tuple[tuple[str, str], ...]  # library versions, sorted by package
    injected: tuple[tuple[str, float], ...]  # injected slowdowns, sorted by function
    external_server: str | None = None  # the URL the server benchmarks measured, if not ours

    @property
    def is_known(self) -> bool:
        """Whether the run's code can be named exactly: a commit, a clean tree, versions
        recorded, no external server (what was injected on top is part of the name)."""
        return (bool(self.commit) and not self.dirty and bool(self.versions)
                and self.external_server is None)

    @property
    def short(self) -> str:
        """`3d12a17b`, `3d12a17b+dirty`, `3d12a17b+slow decode_step x1.15`, or `no commit`."""
        if not self.commit:
            return "no commit"
        return (self.commit[:8] + ("+dirty" if self.dirty else "")
                + "".join(f"+slow {name} x{1 + factor:g}" for name, factor in self.injected))


def injected_slowdowns(run: Run) -> dict[str, float]:
    """The slowdowns a run recorded as injected, by engine function ({} for none)."""
    slowed = (run.injected or {}).get("slow_down") or {}
    return ({str(k): float(v) for k, v in slowed.items()} if isinstance(slowed, Mapping)
            else {})


def code_of(run: Run) -> Code:
    commit = str(run.commit_info.get("id") or "")
    versions = (run.environment or {}).get("versions") or {}
    server = run.info.get("server") if isinstance(run.info.get("server"), Mapping) else None
    return Code(commit=None if commit in _NO_COMMIT else commit,
                dirty=bool(run.commit_info.get("dirty")),
                versions=tuple(sorted((str(k), str(v)) for k, v in versions.items()))
                if isinstance(versions, Mapping) else (),
                injected=tuple(sorted(injected_slowdowns(run).items())),
                external_server=str(server.get("url")) if server else None)


def same_code(a: Run, b: Run) -> bool:
    """Whether two runs certainly measured the same code (see the module docstring)."""
    ca, cb = code_of(a), code_of(b)
    return ca.is_known and ca == cb


def code_differences(baseline: Run, candidate: Run) -> list[str]:
    """How the two runs' code differs, or why it cannot be told; [] when it is the same."""
    a, b = code_of(baseline), code_of(candidate)
    if a.is_known and a == b:
        return []
    out = []
    if a.commit and b.commit and (a.commit, a.injected) != (b.commit, b.injected):
        out.append(f"commit {a.short} -> {b.short}")
    for side, code in (("baseline", a), ("candidate", b)):
        if not code.commit:
            out.append(f"the {side} recorded no commit")
        elif code.dirty:
            out.append(f"the {side} ran uncommitted changes")
        if code.external_server:
            out.append(f"the {side}'s server benchmarks measured {code.external_server}")
        if not code.versions:
            out.append(f"the {side} recorded no library versions")
    va, vb = dict(a.versions), dict(b.versions)
    out += [f"{k} {va.get(k)} -> {vb.get(k)}" for k in sorted(set(va) | set(vb))
            if a.versions and b.versions and va.get(k) != vb.get(k)]
    return out or ["the code cannot be named exactly"]
