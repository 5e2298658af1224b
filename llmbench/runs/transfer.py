"""Runs moved between stores without loss or duplicates: `llmbench store push` (a folder into
a database, or any store into another) and `pull` (back into a folder).

Each run is copied as its JSON document, byte for byte; a run the target holds already
(the same content hash, `store.content_hash`) is not added again, so a second push adds
nothing. A run that cannot be read, or is not a run llmbench can use, is left out and
named, never copied and never a traceback. The target numbers what it adds as its own next
runs; labels (commit and time) are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llmbench.runs.location import Store
from llmbench.runs.model import RunError, RunRef, run_from_json
from llmbench.runs.store import parse_document


@dataclass
class Transfer:
    """What a copy did: each run added (source -> target), held already, or left out."""

    added: list[tuple[RunRef, RunRef]] = field(default_factory=list)
    held: list[tuple[RunRef, RunRef]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # one line each: which, and why

    def summary(self) -> str:
        return (f"{len(self.added)} added, {len(self.held)} held already, "
                f"{len(self.left_out)} left out")


def copy_runs(source: Store, target: Store,
              environments: Sequence[str] | None = None) -> Transfer:
    """Every run of `source` (or of the named environments), oldest first, into `target`."""
    done = Transfer()
    keys = source.environment_keys() if not environments else list(environments)
    for key in keys:
        for ref in source.refs(key):
            try:
                document = source.read_document(ref)
                # Only a run llmbench can read travels: a damaged one stays where it is.
                run_from_json(parse_document(document, ref.address), ref.address,
                              samples=False)
            except RunError as exc:
                done.left_out.append(str(exc))
                continue
            placed, added = target.put(document, key, ref.label)
            (done.added if added else done.held).append((ref, placed))
    return done
