"""Every reader and writer of runs works the same from a folder, SQLite and a real PostgreSQL
server (`llmbench.runs.location`): saving, `latest`, the noise history, run addresses,
`llmbench store push|pull|ls`, compare, history, the dashboard, and the suite itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gate_runs import (
    ENVIRONMENT,
    SELECTION,
    TINY_ARGS,
    make_run,
    run_pytest,
    suite_copy,
    write_run,
)

from llmbench import runs
from llmbench.runs.store import content_hash

ENV = "tiny-cpu-float32"


@pytest.fixture(params=["folder", "sqlite", "postgresql"])
def location(request, tmp_path) -> str:
    if request.param == "folder":
        return str(tmp_path / "baselines")
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return request.getfixturevalue("pg_server").database()


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmbench", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_a_saved_run_reads_back_with_its_place(location):
    store = runs.open_store(location)
    ref = store.save(make_run(1), ENV, "abc_20261205T000000")
    assert (ref.environment_key, ref.number, ref.label) == (ENV, 1, "abc_20261205T000000")
    run = store.load(ref)
    assert run.origin == ref
    assert set(run.benchmarks) == {b["fullname"] for b in make_run(1)["benchmarks"]}
    assert [r.number for r in store.refs(ENV)] == [1]
    assert store.environment_keys() == [ENV]
    assert runs.load_address(ref.address, location).origin == ref


def test_many_runs_read_at_once_keep_their_order_and_a_damaged_one_its_place(location):
    store = runs.open_store(location)
    refs = [store.save(make_run(seed), ENV, f"r{seed}") for seed in (1, 2, 3)]
    damaged = make_run(4)
    damaged["benchmarks"][0]["stats"]["data"] = [-1.0] * 10  # no physical time
    refs.append(store.save(damaged, ENV, "bad"))
    read = store.load_many(refs)
    assert [r.origin for r in read[:3]] == refs[:3]
    assert all(r.commit_info == store.load(ref).commit_info
               for r, ref in zip(read[:3], refs, strict=False))
    assert isinstance(read[3], runs.RunError) and "0004" in str(read[3])


def test_latest_and_the_noise_history_read_the_store(location):
    store = runs.open_store(location)
    other_cpu = {**ENVIRONMENT, "device_name": "Another CPU"}
    first = store.save(make_run(1), ENV, "a")
    second = store.save(make_run(2), ENV, "b")
    store.save(make_run(3, environment=other_cpu), ENV, "c")
    latest = runs.latest_comparable(store, ENV, ENVIRONMENT)
    assert latest.origin == second
    assert runs.latest_comparable(store, ENV, ENVIRONMENT, exclude=[second]).origin == first
    history = runs.saved_history(store.load(first), store.load(second))
    assert [r.origin for r in history] == [first]
    with pytest.raises(runs.NoBaseline,
                       match=r"none of this environment and testbed \(the newest, "):
        runs.latest_comparable(store, ENV, ENVIRONMENT, exclude=[first, second])


def test_a_damaged_run_in_a_database_is_named_and_passed_by(pg_server):
    store = runs.open_store(pg_server.database())
    first = store.save(make_run(1), ENV, "a")
    broken = make_run(2)
    broken["benchmarks"][0]["stats"]["data"][0] = 5e-324  # no clock measures it
    store.save(broken, ENV, "b")
    with pytest.warns(runs.DamagedRunSkipped, match=r"#tiny-cpu-float32/0002"):
        assert runs.latest_comparable(store, ENV, ENVIRONMENT).origin == first


@pytest.mark.parametrize("text, message", [
    ("tiny-cpu-float32/0009", "holds no run 0009 of tiny-cpu-float32"),
    ("nonsense/", "names no run of"),
])
def test_a_run_name_a_database_does_not_hold_is_one_line(tmp_path, text, message):
    location = f"sqlite:///{tmp_path / 'runs.db'}"
    runs.open_store(location).save(make_run(1), ENV, "a")
    with pytest.raises(runs.RunError, match=message):
        runs.load_address(text, location)
    assert runs.load_address("0001", location).origin.number == 1  # one environment: NNNN


def _folder_of(count: int, root: Path) -> Path:
    for i in range(count):
        write_run(root / ENV / f"{i + 1:04d}_r{i}.json", make_run(i))
    return root


def test_push_then_pull_is_byte_identical_and_a_second_push_adds_nothing(pg_server, tmp_path):
    url = pg_server.database()
    folder = _folder_of(12, tmp_path / "baselines")
    (folder / ENV / "0013_damaged.json").write_text("[" * 200_000)
    pushed = _cli("store", "push", str(folder), "--to", url)
    assert pushed.returncode == 2, pushed.stderr  # one run left out, the rest copied
    assert pushed.stdout.strip().endswith("12 added, 0 held already, 1 left out")
    assert "llmbench store: " in pushed.stderr and "0013_damaged.json" in pushed.stderr
    again = _cli("store", "push", str(folder), "--to", url)
    assert again.stdout.strip().endswith("0 added, 12 held already, 1 left out")
    pulled = _cli("store", "pull", str(tmp_path / "copy"), "--store", url)
    assert pulled.returncode == 0, pulled.stderr
    originals = sorted((folder / ENV).glob("00[01]?_r*.json"))
    copies = sorted((tmp_path / "copy" / ENV).glob("*.json"))
    assert [p.name for p in copies] == [p.name for p in originals]
    assert [p.read_bytes() for p in copies] == [p.read_bytes() for p in originals]
    listed = _cli("store", "ls", "--store", url)
    assert listed.returncode == 0 and re.search(rf"^{ENV}\s+12$", listed.stdout, re.M)


def test_push_refuses_what_it_cannot_use_in_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _cli("store", "push", str(empty), "--to", f"sqlite:///{tmp_path / 'r.db'}")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "holds no saved runs" in out.stderr
    unreachable = _cli("store", "ls", "--store",
                       f"postgresql://nobody@/x?host={tmp_path / 'none'}")
    assert unreachable.returncode == 2 and "Traceback" not in unreachable.stderr
    assert unreachable.stderr.startswith("llmbench store: error: cannot open the store ")


def test_compare_history_and_dashboard_read_a_database(pg_server, tmp_path):
    url = pg_server.database()
    store = runs.open_store(url)
    for i in range(6):
        store.save(make_run(i), ENV, f"r{i}")
    compared = _cli("compare", "--store", url, f"{ENV}/0005", f"{ENV}/0006", "--format", "json")
    assert compared.returncode in (0, 1, 6), compared.stderr
    assert json.loads(compared.stdout)["comparisons"]
    history = _cli("history", "--store", url, ENV)
    assert history.returncode in (0, 1), history.stderr
    assert f"{store.name}#{ENV}" in history.stdout
    site = tmp_path / "site"
    dashboard = _cli("dashboard", "--store", url, "-o", str(site))
    assert dashboard.returncode == 0, dashboard.stderr
    assert (site / "index.html").is_file()
    assert ENV in (site / "index.html").read_text()


def test_the_suite_saves_into_a_database_and_judges_against_it(pg_server, tmp_path):
    """The main flow from a PostgreSQL store: a first run saved there, a second judged
    against it with --compare-to=latest (the same code: no verdict), both in the store."""
    url = pg_server.database()
    suite = suite_copy(tmp_path / "suite")
    # One clean commit on both runs: the same code, so the second gets no verdict.
    git = ["git", "-C", str(suite), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "suite"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    (suite / ".gitignore").write_text("*\n")  # what the runs leave behind is not the code
    common = [*TINY_ARGS, f"--store={url}", *SELECTION, "--compare-to=latest"]
    first = run_pytest(suite, *common)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    assert f"llmbench: saved run {runs.open_store(url).name}#{ENV}/0001" in first.stdout
    second = run_pytest(suite, *common)
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    assert "SAME CODE" in second.stdout
    assert [r.number for r in runs.open_store(url).refs(ENV)] == [1, 2]
    assert not (suite / "baselines").exists()  # nothing went to the default folder


def test_the_suite_refuses_a_store_it_cannot_reach_before_any_benchmark(tmp_path):
    suite = suite_copy(tmp_path / "suite")
    url = f"postgresql://nobody@/x?host={tmp_path / 'none'}"
    proc = run_pytest(suite, *TINY_ARGS, f"--store={url}", SELECTION[0])
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, (proc.stdout + proc.stderr)[-3000:]
    line = proc.stderr.strip()
    assert line.startswith("ERROR: --store: cannot open the store postgresql://nobody@/x")
    assert "\n" not in line and "passed" not in proc.stdout


def test_store_and_baseline_dir_together_are_refused(tmp_path):
    suite = suite_copy(tmp_path / "suite")
    proc = run_pytest(suite, *TINY_ARGS, f"--store={tmp_path}", f"--baseline-dir={tmp_path}",
                      SELECTION[0])
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--store and --baseline-dir both say where runs are saved" in proc.stderr


def test_the_store_variable_names_the_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    runs.open_store(url).save(make_run(1), ENV, "a")
    listed = _cli("store", "ls", env={**os.environ, runs.STORE_ENV: url})
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"{url}: 1 environment")


def test_identity_is_content_not_formatting():
    payload = make_run(1)
    assert content_hash(json.dumps(payload)) == content_hash(json.dumps(payload, indent=2))
    assert content_hash(payload) != content_hash(make_run(2))
