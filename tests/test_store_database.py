"""The database store (`llmbench.runs.database`) on SQLite and on a real PostgreSQL server:
what it keeps, its numbering under concurrent writers, its schema and its refusals."""

from __future__ import annotations

import gzip
import json
import multiprocessing
from pathlib import Path

import postgres
import pytest

from llmbench.runs import database
from llmbench.runs.database import DatabaseStore, StoreError, content_hash

RUNS = Path(__file__).parent / "data" / "golden" / "runs"
ENV = "smollm2-135m-cpu-float32"


def real_run(index: int = 0) -> str:
    """A real saved run's JSON document, as the folder store wrote it."""
    files = sorted(RUNS.glob("*.json.gz"))
    return gzip.decompress(files[index % len(files)].read_bytes()).decode("utf-8")


def variant(document: str, tag: int) -> str:
    """Another run of the same shape: a distinct document (its datetime differs)."""
    payload = json.loads(document)
    payload["datetime"] = f"2026-12-05T00:00:00.{tag:06d}+00:00"
    return json.dumps(payload, indent=2)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return request.getfixturevalue("pg_server").database()


@pytest.fixture
def store(url):
    with DatabaseStore(url) as opened:
        yield opened


def test_a_saved_run_reads_back_as_written(store):
    document = real_run()
    saved = store.save_document(document, ENV, "14bd3a1c_20261205T125604")
    assert saved.added and saved.run.number == 1
    assert saved.run.file_name == "0001_14bd3a1c_20261205T125604.json"
    assert store.document(ENV, 1) == document  # byte for byte, formatting included
    assert saved.run.commit == json.loads(document)["commit_info"]["id"]
    assert store.listing(ENV) == [saved.run]
    assert store.environment_keys() == [ENV]


def test_the_same_run_is_not_added_twice_however_formatted(store):
    document = real_run()
    first = store.save_document(document, ENV, "a")
    again = store.save_document(json.dumps(json.loads(document)), ENV, "b")  # other whitespace
    assert not again.added and again.run == first.run
    assert len(store.listing()) == 1
    assert content_hash(document) == content_hash(json.loads(document))


def test_numbers_count_per_environment(store):
    document = real_run()
    numbers = [store.save_document(variant(document, i), env, "r").run.number
               for i, env in enumerate([ENV, "other-env", ENV, ENV, "other-env"])]
    assert numbers == [1, 1, 2, 3, 2]
    assert [r.number for r in store.listing(ENV)] == [1, 2, 3]
    assert store.environment_keys() == sorted([ENV, "other-env"])


def test_one_benchmark_across_runs_reads_no_document(store):
    document = real_run()
    payload = json.loads(document)
    key = payload["benchmarks"][0]["fullname"]
    for i in range(3):
        store.save_document(variant(document, i), ENV, "r")
    medians = store.benchmark_medians(ENV, key)
    assert medians == [(n, payload["benchmarks"][0]["stats"]["median"]) for n in (1, 2, 3)]


def test_a_missing_run_is_one_line(store):
    with pytest.raises(StoreError, match=r"holds no run 0007 of"):
        store.document(ENV, 7)


def _save_many(url: str, first: int, count: int) -> list[tuple[int, str]]:
    document = real_run()
    with DatabaseStore(url) as store:
        return [(store.save_document(variant(document, tag), ENV, f"w{first}").run.number,
                 content_hash(variant(document, tag)))
                for tag in range(first, first + count)]


def test_two_writers_at_once_take_unique_numbers(url):
    """Two processes saving 50 runs each into one store, at the same time: 100 runs, numbers
    1 to 100 each once, every run read back identical."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        results = pool.starmap(_save_many, [(url, 0, 50), (url, 1000, 50)])
    numbers = sorted(n for result in results for n, _ in result)
    assert numbers == list(range(1, 101))
    document = real_run()
    with DatabaseStore(url) as store:
        for n, identity in (pair for result in results for pair in result):
            assert content_hash(store.document(ENV, n)) == identity
        assert {r.content_hash for r in store.listing(ENV)} == {
            content_hash(variant(document, t)) for t in [*range(50), *range(1000, 1050)]}


def test_two_openers_of_a_new_database_create_it_once(url):
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        pool.map(_open_and_list, [url, url])
    with DatabaseStore(url) as store:
        assert store.listing() == []


def _open_and_list(url: str) -> int:
    with DatabaseStore(url) as store:
        return len(store.listing())


def test_the_tables_match_the_migrations(url):
    """The descriptions the queries use (`schema`) and the tables the migrations make agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from llmbench.runs.schema import metadata

    with DatabaseStore(url) as store, store.engine.connect() as conn:
        differences = compare_metadata(MigrationContext.configure(conn), metadata)
    assert differences == []


def test_a_store_migrated_by_a_newer_llmbench_is_refused(url):
    import sqlalchemy as sa

    with DatabaseStore(url) as store, store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(StoreError, match=r"migrated by a newer llmbench \(schema 9999\)"):
        DatabaseStore(url).open()


def test_a_read_only_sqlite_store_is_refused_before_writing(tmp_path):
    path = tmp_path / "runs.db"
    with DatabaseStore(f"sqlite:///{path}") as store:
        store.save_document(real_run(), ENV, "r")
    read_only = DatabaseStore(f"sqlite:///file:{path}?mode=ro&uri=true").open()
    with pytest.raises(StoreError, match=r"^cannot write to the store sqlite:///.*readonly"):
        read_only.check_writable()
    assert len(read_only.listing()) == 1  # reading still works, and nothing was written


def test_a_role_without_insert_is_refused_before_writing(pg_server):
    import psycopg

    url = pg_server.database()
    DatabaseStore(url).open().close()
    from sqlalchemy.engine import make_url

    dbname = make_url(url).database  # the socket's folder follows it in the query
    with psycopg.connect(host=str(pg_server.socket_dir), user=postgres.USER, dbname=dbname,
                         autocommit=True) as conn:
        conn.execute("CREATE ROLE reader LOGIN")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
    reader = DatabaseStore(url.replace(f"//{postgres.USER}@", "//reader@")).open()
    with pytest.raises(StoreError, match=r"^cannot write to the store .*permission denied"):
        reader.check_writable()
    assert reader.listing() == []


def test_check_writable_writes_nothing(store):
    store.check_writable()
    assert store.listing() == [] and store.environment_keys() == []


def test_an_unreachable_server_is_one_line(tmp_path):
    url = f"postgresql://nobody:secret@/runs?host={tmp_path / 'no-such-socket-dir'}"
    with pytest.raises(StoreError) as caught:
        DatabaseStore(url).open()
    message = str(caught.value)
    assert message.startswith("cannot open the store postgresql://nobody:***@/runs")
    assert "secret" not in message and "\n" not in message


@pytest.mark.parametrize("location, why", [
    ("mysql://u@h/db", "llmbench stores runs in SQLite or PostgreSQL, or in a folder"),
    ("sqlite:////no/such/folder/runs.db", "folder /no/such/folder does not exist"),
])
def test_a_url_it_cannot_use_is_one_line(location, why):
    with pytest.raises(StoreError, match=why):
        DatabaseStore(location).open()


@pytest.mark.parametrize("location, expected", [
    ("sqlite:///runs.db", True), ("postgresql://u@h/db", True),
    ("postgresql+psycopg://u@h/db", True), ("postgres://u@h/db", True),
    ("baselines", False), ("./sqlite:/x", False), ("C:\\runs", False),
])
def test_what_names_a_database(location, expected):
    assert database.is_database_url(location) is expected


def test_postgres_spellings_use_psycopg_3():
    for spelling in ("postgres://u@h/db", "postgresql://u@h/db",
                     "postgresql+psycopg2://u@h/db"):
        assert DatabaseStore(spelling).url.drivername == "postgresql+psycopg"
