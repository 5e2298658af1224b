"""Saved runs in a database that many machines share: SQLite, or PostgreSQL for a team.

A folder of JSON files (`store`) is the default and stays one machine's; a database is how
a team's CI runners and GPU hosts save into one place and judge against each other's runs.
Both keep the same thing: each run's JSON document, whole, exactly as the folder store
writes it, so a run moved between them comes back byte-identical. Beside the document a
database keeps what queries need without parsing it: the environment key (the folder
name), the run's number and label, its commit and time, and one row per benchmark with its
median and raw per-round samples.

Identity and numbering. A run's identity is the SHA-256 of its canonical JSON
(`content_hash`): saving a run the store holds already adds nothing, however it is
formatted. Its number is unique within its environment however many machines save at once:
the next number and the insert are one transaction, and the unique (environment, number)
constraint turns a race into a retry, never a duplicate.

The schema is versioned with alembic (`migrations/`): opening a store brings it to this
llmbench's head under a lock, so two machines opening a new database at once create it
once; a store migrated by a newer llmbench is refused by name.

SQLAlchemy is imported when a database is opened: a folder store never pays for it.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from llmbench.errors import UserError
from llmbench.runs.model import Run, RunError, RunRef, run_from_json
from llmbench.runs.store import content_hash, parse_document, run_document

MIGRATIONS = Path(__file__).with_name("migrations")
SCHEMES = ("sqlite", "postgresql", "postgres")
# Two openers of one new PostgreSQL database serialize their migrations on this
# transaction-level advisory lock (any constant; "llmb" in ASCII).
_MIGRATION_LOCK = 0x6C6C6D62
# How often a save retries after another writer took its number (each retry re-reads the
# newest number, so two writers collide at most a few times).
_SAVE_ATTEMPTS = 100
# The execution option that marks a transaction that writes (SQLite takes its lock at BEGIN).
_WRITE_OPTION = "llmbench_writes"


class StoreError(UserError):
    """A store that cannot be reached, read or written: one line that names it."""


def is_database_url(location: str) -> bool:
    """Whether `location` names a database (`sqlite:///…`, `postgresql://…`) rather than a
    folder."""
    scheme = location.split("://", 1)[0] if "://" in location else ""
    return scheme.split("+", 1)[0].lower() in SCHEMES


@dataclass(frozen=True)
class StoredRun:
    """One run as a database lists it, without its document."""

    environment_key: str
    number: int
    label: str
    content_hash: str
    commit: str | None
    run_datetime: str | None  # pytest-benchmark's `datetime`
    saved_at: str  # when the store took it (UTC, ISO 8601)

    @property
    def file_name(self) -> str:
        """The name it has in a folder store: `NNNN_<label>.json`."""
        return f"{self.number:04d}_{self.label}.json"


@dataclass(frozen=True)
class Saved:
    """What `save` did: the run's place, and whether the store held it already."""

    run: StoredRun
    added: bool


def _engine_url(url: str):
    """SQLAlchemy's URL for `url`, and the name messages give it (as the user spelled it,
    without the password): PostgreSQL through psycopg 3 whatever the spelling
    (`postgresql://` alone would ask for psycopg2, which llmbench does not install)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"{url!r} is not a database URL ({exc}): write "
                         "sqlite:///PATH or postgresql://USER@HOST/DATABASE") from None
    name = parsed.render_as_string(hide_password=True)
    # From the spelling alone: asking SQLAlchemy for the driver loads its default dialect
    # (psycopg2 for postgresql, none at all for the old `postgres` alias).
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("postgres", "postgresql") and driver in ("", "psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
        backend = "postgresql"
    elif backend not in ("sqlite", "postgresql"):
        raise StoreError(f"{name}: llmbench stores runs in SQLite or PostgreSQL, or in a "
                         "folder")
    return parsed, name


class DatabaseStore:
    """Runs in SQLite or PostgreSQL (see the module's docstring), a `location.Store`.
    `open` it before use."""

    is_database = True

    def __init__(self, url: str):
        # `name`, what messages and run addresses show: the URL without its password.
        self.url, self.name = _engine_url(url)
        self._engine = None

    # -- opening ---------------------------------------------------------------------------

    def open(self) -> DatabaseStore:
        """Connect and bring the schema to this llmbench's head (creating it in a new
        database); `StoreError` in one line when the database cannot be reached or was
        migrated by a newer llmbench. A store whose schema is current is only read, so a
        read-only store opens."""
        import sqlalchemy as sa

        if self._engine is None:
            database = self.url.database or ""
            if (self.url.get_backend_name() == "sqlite" and database
                    and not database.startswith("file:") and database != ":memory:"):
                folder = Path(database).expanduser().parent
                if not folder.is_dir():
                    raise StoreError(f"{self.name}: folder {folder} does not exist; create it "
                                     "or name another SQLite file")
            self._engine = _create_engine(self.url)
        with self._failures("open"):
            with self._engine.connect() as conn:
                current = _schema_is_current(conn, self.name)
            if not current:
                with self._writing().begin() as conn:
                    if conn.dialect.name == "postgresql":
                        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"),
                                     {"key": _MIGRATION_LOCK})
                    if not _schema_is_current(conn, self.name):  # another opener may have
                        _upgrade(conn)
        return self

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> DatabaseStore:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def engine(self):
        if self._engine is None:
            raise RuntimeError("open() the store first")
        return self._engine

    def _writing(self):
        """The engine for a transaction that writes: on SQLite it takes the write lock when
        it begins (`_create_engine`)."""
        return self.engine.execution_options(**{_WRITE_OPTION: True})

    def check_writable(self, environment_key: str = "") -> None:
        """Refuse, in one line, a store this process cannot save into: before any benchmark
        runs, so no measured run is lost at the end. Writes nothing (the probe's insert is
        rolled back)."""
        from llmbench.runs.schema import runs

        with self._failures("write to"):
            with self._writing().connect() as conn:
                with conn.begin() as tx:
                    conn.execute(runs.insert().values(
                        environment_key="llmbench-write-check", number=0, label="check",
                        content_hash="0" * 64, saved_at=_now(), document="{}"))
                    tx.rollback()

    # -- writing ---------------------------------------------------------------------------

    def save(self, payload: dict, environment_key: str, label: str) -> RunRef:
        """Save a run as the next number of its environment (or find it, if the store holds
        it already): its place."""
        return self.ref(self.save_document(run_document(payload), environment_key, label).run)

    def save_document(self, document: str, environment_key: str, label: str) -> Saved:
        """Save one run's JSON `document` (kept as written) as the next number of
        `environment_key`; a run the store holds already (same content hash) is not added
        again and `Saved.added` is False."""
        import sqlalchemy as sa

        from llmbench.runs.schema import benchmarks, runs

        payload = json.loads(document)
        identity = content_hash(payload)
        commit = (payload.get("commit_info") or {}).get("id")
        stamp = payload.get("datetime")
        for _ in range(_SAVE_ATTEMPTS):
            try:
                with self._failures("save to"), self._writing().begin() as conn:
                    held = self._find(conn, identity)
                    if held is not None:
                        return Saved(held, added=False)
                    number = conn.execute(
                        sa.select(sa.func.coalesce(sa.func.max(runs.c.number), 0) + 1)
                        .where(runs.c.environment_key == environment_key)).scalar_one()
                    saved_at = _now()
                    run_id = conn.execute(runs.insert().values(
                        environment_key=environment_key, number=number, label=label,
                        content_hash=identity,
                        commit_id=commit if isinstance(commit, str) else None,
                        run_datetime=stamp if isinstance(stamp, str) else None,
                        saved_at=saved_at, document=document)).inserted_primary_key[0]
                    rows = list(_benchmark_rows(run_id, payload))
                    if rows:
                        conn.execute(benchmarks.insert(), rows)
                    return Saved(StoredRun(environment_key, number, label, identity,
                                           commit if isinstance(commit, str) else None,
                                           stamp if isinstance(stamp, str) else None,
                                           saved_at), added=True)
            except sa.exc.IntegrityError:
                # Another writer took this number (or saved this very run) meanwhile: read
                # again and take the next, or find the run it saved.
                time.sleep(0.01)
        raise StoreError(f"{self.name}: could not take a run number for {environment_key} "
                         f"in {_SAVE_ATTEMPTS} tries; too many machines saving at once?")

    # -- reading ---------------------------------------------------------------------------

    def environment_keys(self) -> list[str]:
        """Every environment the store holds runs of, sorted."""
        import sqlalchemy as sa

        from llmbench.runs.schema import runs

        with self._failures("read"), self.engine.connect() as conn:
            return list(conn.execute(sa.select(runs.c.environment_key).distinct()
                                     .order_by(runs.c.environment_key)).scalars())

    def listing(self, environment_key: str | None = None) -> list[StoredRun]:
        """The runs of one environment (or of all), oldest first (by number)."""
        import sqlalchemy as sa

        from llmbench.runs.schema import runs

        query = sa.select(*_listed()).order_by(runs.c.environment_key, runs.c.number)
        if environment_key is not None:
            query = query.where(runs.c.environment_key == environment_key)
        with self._failures("read"), self.engine.connect() as conn:
            return [StoredRun(*row) for row in conn.execute(query)]

    def document(self, environment_key: str, number: int) -> str:
        """Run `number`'s JSON document, as it was saved; `StoreError` if there is none."""
        import sqlalchemy as sa

        from llmbench.runs.schema import runs

        with self._failures("read"), self.engine.connect() as conn:
            text = conn.execute(sa.select(runs.c.document).where(
                runs.c.environment_key == environment_key,
                runs.c.number == number)).scalar_one_or_none()
        if text is None:
            raise StoreError(f"{self.name} holds no run {number:04d} of {environment_key}")
        return text

    def holds(self, identity: str) -> StoredRun | None:
        """The run whose content hash is `identity`, if the store holds it."""
        with self._failures("read"), self.engine.connect() as conn:
            return self._find(conn, identity)

    def benchmark_medians(self, environment_key: str, key: str) -> list[tuple[int, float]]:
        """One benchmark's median seconds in every run of an environment that measured it,
        oldest first: (run number, median). A history of one benchmark without reading a
        document."""
        import sqlalchemy as sa

        from llmbench.runs.schema import benchmarks, runs

        query = (sa.select(runs.c.number, benchmarks.c.median_s)
                 .join(benchmarks, benchmarks.c.run_id == runs.c.id)
                 .where(runs.c.environment_key == environment_key, benchmarks.c.key == key)
                 .order_by(runs.c.number))
        with self._failures("read"), self.engine.connect() as conn:
            return [(n, m) for n, m in conn.execute(query) if m is not None]

    def put(self, document: str, environment_key: str, label: str) -> tuple[RunRef, bool]:
        """`save_document` as every store answers it: the run's place, and whether it was
        added (False: the store held it already)."""
        saved = self.save_document(document, environment_key, label)
        return self.ref(saved.run), saved.added

    def read_document(self, ref: RunRef) -> str:
        return self.document(ref.environment_key, ref.number)

    def ref(self, stored: StoredRun) -> RunRef:
        """A listed run's place, as every reader of runs takes it."""
        return RunRef(self.name, stored.environment_key, stored.number, stored.label,
                      database=True)

    def refs(self, environment_key: str) -> list[RunRef]:
        """The runs of an environment, oldest first."""
        return [self.ref(r) for r in self.listing(environment_key)]

    def load(self, ref: RunRef, *, samples: bool = True, summary: bool = False) -> Run:
        """A run read back, with what a reader requires (`model.run_from_json`); one
        `RunError` line if it is damaged."""
        source = f"{self.name}#{ref.environment_key}/{ref.number:04d}"
        data = parse_document(self.document(ref.environment_key, ref.number), source)
        return run_from_json(data, source, samples=samples, summary=summary, origin=ref)

    def load_many(self, refs: list[RunRef], *, samples: bool = True, summary: bool = False
                  ) -> list[Run | RunError]:
        """Runs read back as `load` reads each, their documents fetched in one query per
        environment (a history reads hundreds: one round trip each would double its time);
        a damaged one is its `RunError`, in its place."""
        import sqlalchemy as sa

        from llmbench.runs.schema import runs

        documents: dict[tuple[str, int], str] = {}
        for key in dict.fromkeys(r.environment_key for r in refs):
            numbers = [r.number for r in refs if r.environment_key == key]
            with self._failures("read"), self.engine.connect() as conn:
                documents.update(((key, n), d) for n, d in conn.execute(
                    sa.select(runs.c.number, runs.c.document).where(
                        runs.c.environment_key == key, runs.c.number.in_(numbers))))
        out: list[Run | RunError] = []
        for ref in refs:
            source = f"{self.name}#{ref.environment_key}/{ref.number:04d}"
            try:
                text = documents.get((ref.environment_key, ref.number))
                if text is None:
                    raise RunError(f"{self.name} holds no run {ref.number:04d} of "
                                   f"{ref.environment_key}")
                out.append(run_from_json(parse_document(text, source), source, samples=samples,
                                         summary=summary, origin=ref))
            except RunError as exc:
                out.append(exc)
        return out

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _find(conn, identity: str) -> StoredRun | None:
        import sqlalchemy as sa

        from llmbench.runs.schema import runs

        row = conn.execute(sa.select(*_listed()).where(runs.c.content_hash == identity)).first()
        return StoredRun(*row) if row is not None else None

    def _failures(self, doing: str):
        return _translate(self.name, doing)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


def _listed() -> tuple:
    """The columns a `StoredRun` is made of, in its fields' order."""
    from llmbench.runs.schema import runs

    return (runs.c.environment_key, runs.c.number, runs.c.label, runs.c.content_hash,
            runs.c.commit_id, runs.c.run_datetime, runs.c.saved_at)


def _benchmark_rows(run_id: int, payload: dict) -> Iterator[dict]:
    """The benchmarks table's rows of one run: what a query of one benchmark across runs
    needs without reading documents."""
    for entry in payload.get("benchmarks") or ():
        if not isinstance(entry, dict):
            continue
        key = entry.get("fullname") or entry.get("name")
        stats = entry.get("stats") if isinstance(entry.get("stats"), dict) else {}
        if not isinstance(key, str):
            continue
        median_s = stats.get("median")
        rounds = stats.get("rounds")
        yield {"run_id": run_id, "key": key, "name": str(entry.get("name") or key),
               "group_name": entry.get("group") if isinstance(entry.get("group"), str) else None,
               "median_s": float(median_s) if isinstance(median_s, (int, float))
               and not isinstance(median_s, bool) else None,
               "rounds": rounds if isinstance(rounds, int) and not isinstance(rounds, bool)
               else None,
               "samples": json.dumps(stats.get("data") or [])}


def _create_engine(url):
    import sqlalchemy as sa

    if url.get_backend_name() != "sqlite":
        return sa.create_engine(url, pool_pre_ping=True)
    # SQLite: wait for another writer rather than fail at once, and let a transaction that
    # writes take the write lock when it begins (BEGIN IMMEDIATE), so reading the newest
    # number and inserting the next cannot interleave with another process's; reads begin
    # deferred, so a read-only file can be read. SQLAlchemy's documented recipe for
    # pysqlite's transactions, with the BEGIN chosen per transaction.
    engine = sa.create_engine(url, connect_args={"timeout": 60})

    @sa.event.listens_for(engine, "connect")
    def _no_implicit_transactions(dbapi_connection, _record):
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _begin(conn):
        writes = conn.get_execution_options().get(_WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")

    return engine


def _schema_is_current(conn, name: str) -> bool:
    """Whether the schema on `conn` is this llmbench's head; `StoreError` if a newer
    llmbench migrated it."""
    from alembic.runtime.migration import MigrationContext

    scripts = _scripts()
    current = MigrationContext.configure(conn).get_current_revision()
    if current is not None and current not in {s.revision for s in scripts.walk_revisions()}:
        raise StoreError(f"{name} was migrated by a newer llmbench (schema {current}); "
                         "upgrade llmbench to use it")
    return current == scripts.get_current_head()


def _config():
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _scripts():
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config())


def _upgrade(conn) -> None:
    """Bring the schema on `conn` to this llmbench's head (alembic), in its transaction."""
    from alembic import command

    config = _config()
    config.attributes["connection"] = conn
    command.upgrade(config, "head")


class _translate:
    """Turns a database failure into one `StoreError` line that names the store."""

    def __init__(self, name: str, doing: str):
        self.name, self.doing = name, doing

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, _tb):
        if exc is None or isinstance(exc, UserError):
            return False
        import sqlalchemy as sa

        if isinstance(exc, sa.exc.IntegrityError):
            return False  # a race the caller retries
        if isinstance(exc, sa.exc.DBAPIError):
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise StoreError(f"cannot {self.doing} the store {self.name}: {reason}") from None
        if isinstance(exc, sa.exc.SQLAlchemyError):
            raise StoreError(f"cannot {self.doing} the store {self.name}: "
                             f"{str(exc).splitlines()[0]}") from None
        return False
