"""Where runs live: the store a user names (`--store`, `$LLMBENCH_STORE`, or the default
`baselines` folder), opened as a folder store (`store.FolderStore`) or a database store
(`database.DatabaseStore`); the searches every reader makes in it; and run addresses.

Both stores answer the same few questions (`Store`): can a run be saved, save one, which
environments and which runs of one are held, and read one back as a `Run` whose `origin`
says where it came from. What "the latest comparable run" and "the runs a noise estimate
learns from" mean is written once here, over that interface, for both.

A run is named by its file's path in a folder store, or, in a database, by
`<store URL>#<environment>/<NNNN>` (`RunRef.address`), or by `<environment>/<NNNN>` (or
`NNNN`, where the store holds one environment) beside `--store URL`.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from llmbench.runs import testbed
from llmbench.runs.database import DatabaseStore, is_database_url
from llmbench.runs.environment import environment_differences
from llmbench.runs.model import Run, RunError, RunRef
from llmbench.runs.store import FolderStore, left_out, load_run

STORE_ENV = "LLMBENCH_STORE"
DEFAULT_STORE = "baselines"
# --store's help, as the suite and every command that reads or writes runs give it.
STORE_HELP = ("where saved runs are kept: a folder (one subfolder per environment) or a "
              "database, sqlite:///FILE or postgresql://USER@HOST/DB, where runs are named "
              "ENVIRONMENT/NNNN (or NNNN in a store of one environment). Default: "
              f"${STORE_ENV}, else the folder '{DEFAULT_STORE}'")
_IN_STORE = re.compile(r"(?:(?P<env>[^/#]+)/)?(?P<number>\d{1,9})")


class Store(Protocol):
    """What every reader and writer of runs asks of a store."""

    name: str
    is_database: bool

    def check_writable(self, environment_key: str) -> None: ...
    def save(self, payload: dict, environment_key: str, label: str) -> RunRef: ...
    def environment_keys(self) -> list[str]: ...
    def refs(self, environment_key: str) -> list[RunRef]: ...
    def load(self, ref: RunRef, *, samples: bool = True, summary: bool = False) -> Run: ...
    def load_many(self, refs: list[RunRef], *, samples: bool = True, summary: bool = False
                  ) -> list[Run | RunError]: ...
    def read_document(self, ref: RunRef) -> str: ...
    def put(self, document: str, environment_key: str, label: str) -> tuple[RunRef, bool]: ...


def store_location(given: str | None = None) -> str:
    """The store a command uses: `given` (its --store), else $LLMBENCH_STORE, else the
    `baselines` folder."""
    return given or os.environ.get(STORE_ENV) or DEFAULT_STORE


_OPENED: dict[str, Store] = {}


def open_store(location: str | os.PathLike | None = None) -> Store:
    """The store at `location` (a folder's path, or a database URL; see `store_location`
    for the default), opened once per process: a database is reached and its schema brought
    to this llmbench's, or one `StoreError` line says why it cannot be."""
    text = store_location(None if location is None else str(location))
    if text not in _OPENED:
        _OPENED[text] = (DatabaseStore(text).open() if is_database_url(text)
                         else FolderStore(Path(text)))
    return _OPENED[text]


def _store_named(name: str) -> Store:
    """The opened store whose name (URL without password) is `name`; opened from `name`
    itself when none is (a URL without a password, or a folder)."""
    for store in _OPENED.values():
        if store.name == name:
            return store
    configured = os.environ.get(STORE_ENV)
    if configured:
        store = open_store(configured)
        if store.name == name:
            return store
    return open_store(name)


def find_run(store: Store, text: str) -> RunRef:
    """`<environment>/<NNNN>`, or `NNNN` where the store holds one environment, in `store`."""
    match = _IN_STORE.fullmatch(text)
    if match is None:
        raise RunError(f"{text!r} names no run of {store.name}: write "
                       "<environment>/<NNNN>, e.g. smollm2-135m-cpu-float32/0012")
    environment = match["env"]
    if environment is None:
        held = store.environment_keys()
        if len(held) != 1:
            raise RunError(f"{text!r}: {store.name} holds runs of {len(held)} environments; "
                           f"name one: {', '.join(held) or 'none yet'}")
        environment = held[0]
    number = int(match["number"])
    for ref in store.refs(environment):
        if ref.number == number:
            return ref
    raise RunError(f"{store.name} holds no run {number:04d} of {environment}")


def load_address(text: str | os.PathLike, store: str | None = None, *, samples: bool = True,
                 summary: bool = False) -> Run:
    """The run `text` names: `<database URL>#<environment>/<NNNN>`; a run of `store` (a
    database given with --store) as `<environment>/<NNNN>` or `NNNN`; else a file or a
    folder (its newest run), as always."""
    text = str(text)
    if "#" in text and is_database_url(text):
        url, _, inside = text.rpartition("#")
        found = _store_named(url)
        return found.load(find_run(found, inside), samples=samples, summary=summary)
    if store is not None and is_database_url(store) and (
            _IN_STORE.fullmatch(text) or not os.path.exists(text)):
        # With a database store, a name that is no file is a run of it, or a bad name of one.
        found = open_store(store)
        return found.load(find_run(found, text), samples=samples, summary=summary)
    return load_run(text, samples=samples, summary=summary)


def origin_store(run: Run) -> Store | None:
    """The store a run was read from (None for a run never saved, or read from a file
    outside any store's layout)."""
    if run.origin is None:
        return None
    if not run.origin.database:
        return open_store(run.origin.store)
    return _store_named(run.origin.store)


def _key(ref: RunRef):
    """What makes two refs one run: the file, in a folder (old folders may hold two files of
    one number); the store, environment and number, in a database."""
    if ref.path is not None:
        return Path(ref.path).resolve()
    return ref.store, ref.environment_key, ref.number


def _matching(store: Store, ref: RunRef, environment: Mapping,
              bed: Mapping | None = None) -> Run | None:
    """The run at `ref` if it is of `environment` and, given `bed`, of that testbed (under
    the fields chosen now, `testbed.chosen_fields`); None if not, or if it cannot be read (a
    `DamagedRunSkipped` warning names it)."""
    try:
        run = store.load(ref)
    except RunError as exc:
        left_out(exc)
        return None
    if environment_differences(run.environment, environment):
        return None
    return run if testbed.same_testbed(run.testbed, bed) else None


def environment_runs(store: Store, environment_key: str, environment: Mapping | None,
                     exclude: Sequence[RunRef] = (), bed: Mapping | None = None) -> list[Run]:
    """Every readable run of `environment` (and of testbed `bed`, given one) in the store's
    `environment_key`, oldest first, other than `exclude`: what a stored comparison learns
    the noise between runs from, one kind of machine's."""
    if environment is None:
        return []
    skip = {_key(r) for r in exclude}
    return [run for ref in store.refs(environment_key)
            if _key(ref) not in skip
            and (run := _matching(store, ref, environment, bed)) is not None]


def saved_history(baseline: Run, candidate: Run | None = None) -> list[Run]:
    """The saved runs of a baseline's environment in its store, where a stored comparison
    learns the noise between runs; [] for a run that was never saved. The candidate is left
    out: it is what is being judged (and was not saved yet when the suite judged it). So are
    runs made after it: a saved run is judged later (`llmbench compare`, `report`) against
    the noise the suite knew when it judged it, so both give the same verdicts."""
    made = moment(candidate.datetime) if candidate is not None else None
    return [run for run in _environment_history(baseline, candidate)
            if made is None or (when := moment(run.datetime)) is None or when <= made]


def _environment_history(baseline: Run, candidate: Run | None) -> list[Run]:
    store = origin_store(baseline)
    if store is not None:
        exclude = [candidate.origin] if candidate is not None and candidate.origin else []
        return environment_runs(store, baseline.origin.environment_key, baseline.environment,
                                exclude=exclude, bed=baseline.testbed)
    if baseline.path is None:
        return []
    # A file not named as a saved run (a copy, `b.json`): its folder's numbered runs are its
    # environment's, as a folder store lays them out.
    folder = Path(baseline.path).resolve().parent
    skip = Path(candidate.path).resolve() if candidate is not None and candidate.path else None
    return [run for run in environment_runs(FolderStore(folder.parent), folder.name,
                                            baseline.environment, bed=baseline.testbed)
            if run.path is None or Path(run.path).resolve() != skip]


def moment(stamp: str | None) -> datetime.datetime | None:
    """A run's pytest-benchmark datetime as an aware moment; None if it has none readable."""
    try:
        moment = datetime.datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


class NoBaseline(LookupError):
    """No other run of this environment to compare with: a plain fact (every environment's
    first run meets it), said in one line, never an error."""


def latest_comparable(store: Store, environment_key: str, environment: Mapping | None,
                      exclude: Sequence[RunRef] = (), bed: Mapping | None = None) -> Run:
    """The run to compare a run of `environment` with: the newest run of the store's
    `environment_key` with the same environment (model, fingerprint, device and CPU or GPU
    name, dtype, threads, engine configuration) and, given `bed`, the same testbed, other
    than `exclude`. A run from another kind of machine never qualifies; a damaged one is
    passed by and named. `NoBaseline` says why there is none."""
    where = f"{store.name} ({environment_key})" if store.is_database else (
        f"{Path(store.name) / environment_key}")
    if environment is None:
        raise NoBaseline("the run has no llmbench environment record, so no saved run can be "
                         "matched to it")
    skip = {_key(r) for r in exclude}
    others = [r for r in store.refs(environment_key) if _key(r) not in skip]
    for ref in reversed(others):
        run = _matching(store, ref, environment, bed)
        if run is not None:
            return run
    if not others:
        raise NoBaseline(f"{where} holds no other run")
    count = f"{len(others)} other run{'' if len(others) == 1 else 's'}"
    raise NoBaseline(f"{where} holds {count}, none of this environment and testbed"
                     + _newest_differs(store, others[-1], environment, bed))


def _newest_differs(store: Store, ref: RunRef, environment: Mapping,
                    bed: Mapping | None) -> str:
    """How the newest other run differs, so that a user sees why it is not a baseline."""
    try:
        newest = store.load(ref)
    except RunError:
        return ""
    differences = (environment_differences(newest.environment, environment)
                   or testbed.differences(newest.testbed, bed))
    name = Path(ref.path).name if ref.path is not None else f"{ref.number:04d}_{ref.label}"
    return f" (the newest, {name}, differs: {'; '.join(differences)})"


def latest_before(run: Run) -> Run:
    """The latest comparable run to `run` in its own store, other than itself (`llmbench
    report --baseline latest`)."""
    store = origin_store(run)
    if store is None:
        raise NoBaseline(f"{run.source} was not read from a store of runs, so it has no "
                         "latest run: name the baseline")
    return latest_comparable(store, run.origin.environment_key, run.environment,
                             exclude=[run.origin], bed=run.testbed)
