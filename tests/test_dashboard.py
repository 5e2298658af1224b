"""`llmbench dashboard`: the static site of saved runs, built from seeded synthetic histories
(the run files `llmbench history`'s tests use, with a planted change point and an injected
run), read back as a reader's browser would get it: the HTML it wrote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from gate_runs import make_run, write_run

from llmbench.dashboard import build_site
from llmbench.errors import EXIT_USAGE, UserError

ENV = "tiny-cpu-float32"
DATA = Path(__file__).resolve().parent / "data"
DECODE = ("test_decode_steps[ctx=16]", "test_decode_steps[ctx=128]")
PREFILL = ("test_prefill[in=32]", "test_prefill[in=128]")


def write_history(folder: Path, levels: list[float], *, seed: int = 0, injected_at: int = 0,
                  commit_from: int = 7) -> None:
    """One run per level: decode scaled by the level (the code's speed), every benchmark by
    a small per-run draw of the machine's spread; commits change at run `commit_from`."""
    rng = np.random.default_rng(seed)
    for i, level in enumerate(levels, start=1):
        run = make_run(seed * 100 + i, factors={
            "decode": level * float(np.exp(rng.normal(0.0, 0.02))),
            "prefill": float(np.exp(rng.normal(0.0, 0.02)))})
        run["commit_info"]["id"] = ("b" if i >= commit_from else "a") * 40
        run["datetime"] = f"2026-01-{i:02d}T10:00:00+00:00"
        for bench in run["benchmarks"]:
            bench["extra_info"]["work"] = {"num_ops": 1000, "flops": 5_000_000, "bytes": 2048}
            bench["extra_info"]["peak_memory_added_bytes"] = 3 * 2**20
        if i == injected_at:
            run["llmbench_injected"] = {"slow_down": {"decode_step": 0.15}}
        write_run(folder / f"{i:04d}_run.json", run)


class _Text(HTMLParser):
    """The visible text of a page, and its links."""

    def __init__(self):
        super().__init__()
        self.text, self.links, self._skip = [], [], 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        if tag == "a":
            self.links.append(dict(attrs).get("href"))

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


def read_page(path: Path) -> tuple[str, list[str]]:
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8"))
    return " ".join(" ".join(parser.text).split()), parser.links


def _rows(index: Path) -> list[str]:
    return re.findall(r'<tr data-name="([^"]*)"', index.read_text(encoding="utf-8"))


@pytest.fixture
def history_site(tmp_path) -> Path:
    write_history(tmp_path / "baselines" / ENV, [1.0] * 6 + [1.4] * 6, injected_at=9)
    build_site(tmp_path / "baselines", tmp_path / "site")
    return tmp_path / "site"


def test_the_index_lists_every_benchmark_with_its_page(history_site):
    text, links = read_page(history_site / "index.html")
    names = [row.rsplit(" ", 1)[0] for row in _rows(history_site / "index.html")]
    assert sorted(names) == sorted(DECODE + PREFILL)
    for link in (f"{ENV}/test_decode_steps-ctx-16.html", f"{ENV}/test_prefill-in-32.html"):
        assert link in links and (history_site / link).is_file()
    assert "tiny on Test CPU (float32)" in text and "12, newest 0012" in text


def test_the_planted_change_point_is_on_the_decode_benchmarks_at_its_run(history_site):
    html = (history_site / "index.html").read_text(encoding="utf-8")
    changes = re.findall(r'<li class="change" data-run="(\d+)">(.*?)</li>', html, flags=re.S)
    assert [run for run, _ in changes] == ["7"], changes
    moved = changes[0][1]
    assert all(name in moved for name in DECODE), moved
    assert not any(name in moved for name in PREFILL), moved
    assert "the code changed here" in moved and "bbbbbbbb" in moved
    text, _ = read_page(history_site / ENV / "test_decode_steps-ctx-16.html")
    assert re.search(r"0007 .*? change point x1\.[34]\d\d", text), text


def test_an_injected_run_is_marked(history_site):
    text, _ = read_page(history_site / ENV / "test_decode_steps-ctx-128.html")
    assert re.search(r"0009 \S+ \S+ bbbbbbbb injected: decode_step x1\.15", text), text
    assert text.count("injected:") == 1
    index = (history_site / "index.html").read_text(encoding="utf-8")
    assert 'fill="#d62728"' in index  # the injected run's dot on each trend line


def test_a_benchmark_page_shows_its_spread_work_memory_and_verdict(history_site):
    page = history_site / ENV / "test_prefill-in-128.html"
    text, _ = read_page(page)
    assert "Newest run: consistent" in text and "prediction interval" in text
    assert "1,000" in text and "5,000,000" in text and "3.0 MiB" in text
    html = page.read_text(encoding="utf-8")
    for figure in re.findall(r'<img class="figure" src="([^"]+)"', html):
        assert (page.parent / figure).is_file(), figure
    assert "test_prefill-in-128-work.svg" in html


def test_a_regression_in_the_newest_run_is_the_history_verdict(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 11 + [1.6], commit_from=12)
    build_site(tmp_path / "b", tmp_path / "site")
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    for name in DECODE:
        row = html.split(f'<tr data-name="{name} decode"', 1)[1].split("</tr>", 1)[0]
        assert 'class="verdict regression"' in row, row
    for name in PREFILL:
        row = html.split(f'<tr data-name="{name} prefill"', 1)[1].split("</tr>", 1)[0]
        assert "regression" not in row, row


def test_few_runs_say_what_a_history_needs(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0, 1.0])
    build_site(tmp_path / "b", tmp_path / "site")
    text, _ = read_page(tmp_path / "site" / "index.html")
    assert "Change points need 6 runs; this environment has 2" in text
    assert "too few runs" in text


def test_several_environments_each_get_their_section(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 3)
    other = make_run(5, environment={**json.loads(json.dumps(
        make_run(0)["llmbench"]["environment"])), "dtype": "bfloat16"})
    write_run(tmp_path / "b" / "tiny-cpu-bfloat16" / "0001_run.json", other)
    record = build_site(tmp_path / "b", tmp_path / "site")
    assert set(record["environments"]) == {ENV, "tiny-cpu-bfloat16"}
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert html.count('<section class="environment"') == 2


def test_bad_runs_are_left_out_and_named(tmp_path):
    folder = tmp_path / "b" / ENV
    write_history(folder, [1.0] * 3)
    (folder / "0004_cut.json").write_text('{"benchmarks": [', encoding="utf-8")
    newer = make_run(9)
    newer["llmbench"]["format"] = 99
    write_run(folder / "0005_newer.json", newer)
    moved = make_run(8, environment={**make_run(0)["llmbench"]["environment"], "threads": 7})
    write_run(folder / "0006_moved.json", moved)
    record = build_site(tmp_path / "b", tmp_path / "site")
    problems = record["environments"][ENV]["problems"]
    assert any("0004_cut.json" in p and "truncated" in p for p in problems), problems
    assert any("0005_newer.json" in p for p in problems), problems
    # The stray run is the newest, yet the folder's other runs stay its history.
    assert any(p.startswith("run 0006: left out: measured in another environment")
               for p in problems), problems
    assert record["environments"][ENV]["runs"] == 3
    text, _ = read_page(tmp_path / "site" / "index.html")
    assert "0004_cut.json: left out" in text


def test_a_run_of_the_older_format_is_shown(tmp_path):
    folder = tmp_path / "b" / ENV
    folder.mkdir(parents=True)
    (folder / "0001_old.json").write_text((DATA / "run_format1.json").read_text())
    record = build_site(tmp_path / "b", tmp_path / "site")
    assert record["environments"][ENV]["runs"] == 1
    assert record["environments"][ENV]["benchmarks"] > 0


def test_no_runs_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([sys.executable, "-m", "llmbench", "dashboard", str(tmp_path / "empty"),
                           "-o", str(tmp_path / "site")], capture_output=True, text=True)
    assert proc.returncode == EXIT_USAGE
    assert proc.stderr.count("\n") == 1 and "holds no saved runs" in proc.stderr
    assert not (tmp_path / "site").exists()


def test_a_folder_holding_other_files_is_never_overwritten(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 2)
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    with pytest.raises(UserError, match="not empty"):
        build_site(tmp_path / "b", target)
    assert (target / "notes.txt").read_text() == "keep me"


def test_an_earlier_dashboard_is_replaced_whole(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 2)
    build_site(tmp_path / "b", tmp_path / "site")
    (tmp_path / "site" / "stale.html").write_text("old")
    build_site(tmp_path / "b", tmp_path / "site")
    assert not (tmp_path / "site" / "stale.html").exists()
    assert (tmp_path / "site" / "index.html").is_file()
    assert not list(tmp_path.glob(".site-*"))  # no half-built folder left beside it


def _kept_ab(folder: Path, slower: float) -> Path:
    for side, seed, factor in (("baseline", 1, 1.0), ("candidate", 2, slower)):
        run = make_run(seed, rounds=30, factors={"decode": factor})
        run["llmbench_pairing"] = {"session": "s1", "side": side,
                                   "design": {"alpha": 0.05, "max_pairs": 120}}
        write_run(folder / side / ENV / "0001_run.json", run)
    (folder / "pairing.json").write_text(json.dumps({"benchmarks": []}))
    return folder


def test_a_kept_ab_gets_its_page(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 2)
    ab = _kept_ab(tmp_path / "ab-decode", slower=1.5)
    record = build_site(tmp_path / "b", tmp_path / "site", ab_folders=[ab])
    assert record["ab"] == [{"folder": str(ab), "problem": ""}]
    page = tmp_path / "site" / "ab-ab-decode.html"
    text, _ = read_page(page)
    assert re.search(r"test_decode_steps\[ctx=128\] 30 1\.[45]\d\d .*? regression", text), text
    for figure in ("ab-ab-decode-verdicts.png", "ab-ab-decode-pairs.svg"):
        assert (tmp_path / "site" / figure).is_file()
    index, links = read_page(tmp_path / "site" / "index.html")
    assert "ab-ab-decode.html" in links


def test_a_folder_that_is_no_kept_ab_is_named(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 2)
    (tmp_path / "notab").mkdir()
    record = build_site(tmp_path / "b", tmp_path / "site", ab_folders=[tmp_path / "notab"])
    assert "no pairing.json" in record["ab"][0]["problem"]
