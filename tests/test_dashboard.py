"""`llmbench dashboard`: the static site of saved runs, built from seeded synthetic histories
(the run files `llmbench history`'s tests use, with a planted change point and an injected
run), read back as a reader's browser would get it: the HTML it wrote."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from gate_runs import make_run, write_run

from llmbench.dashboard import build_site
from llmbench.dashboard.site import MARKER
from llmbench.errors import Exit, UserError
from llmbench.history import bisection
from llmbench.runs.model import FORMAT_VERSION

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
        run["llmbench"]["format"] = FORMAT_VERSION
        for bench in run["benchmarks"]:
            bench["extra_info"]["work"] = {"num_ops": 1000, "flops": 5_000_000,
                                           "bytes_read": 1536, "bytes_written": 512}
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
    assert "1,000" in text and "5,000,000" in text and "2,048" in text and "3.0 MiB" in text
    html = page.read_text(encoding="utf-8")
    for figure in re.findall(r'<img class="figure" src="([^"]+)"', html):
        assert (page.parent / figure).is_file(), figure
    assert "fig/test_prefill-in-128.work.svg" in html


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
    # The stray newest run is an environment of its own: it hides no other run's history.
    assert any("holds runs of 2 environments" in p for p in problems), problems
    assert [e["runs"] for e in record["environments"].values()] == [1, 3]
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
    assert proc.returncode == Exit.USAGE
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
    write_history(tmp_path / "b" / ENV, [1.0] * 3)  # a third run since
    build_site(tmp_path / "b", tmp_path / "site")
    assert json.loads((tmp_path / "site" / MARKER).read_text())["environments"][ENV]["runs"] == 3
    assert (tmp_path / "site" / "index.html").is_file()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".site-")]


def test_an_earlier_dashboard_holding_other_files_is_never_replaced(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 2)
    build_site(tmp_path / "b", tmp_path / "site")
    (tmp_path / "site" / "CNAME").write_text("bench.example.com")
    with pytest.raises(UserError, match="did not write .CNAME."):
        build_site(tmp_path / "b", tmp_path / "site")
    assert (tmp_path / "site" / "CNAME").read_text() == "bench.example.com"


def test_a_marker_file_alone_does_not_make_a_folder_replaceable(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 2)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / MARKER).write_text("{}")
    (tmp_path / "site" / "notes.txt").write_text("keep")
    with pytest.raises(UserError, match="holds no earlier dashboard"):
        build_site(tmp_path / "b", tmp_path / "site")
    assert (tmp_path / "site" / "notes.txt").exists()


def test_the_site_can_be_served_by_another_user(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 2)
    old = os.umask(0o022)
    try:
        build_site(tmp_path / "b", tmp_path / "site")
    finally:
        os.umask(old)
    assert (tmp_path / "site").stat().st_mode & 0o777 == 0o755


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
    page = tmp_path / "site" / "ab" / "ab-decode.html"
    text, _ = read_page(page)
    assert re.search(r"test_decode_steps\[ctx=128\] 30 1\.[45]\d\d .*? regression", text), text
    for figure in ("ab-decode-verdicts.png", "ab-decode-pairs.svg"):
        assert (tmp_path / "site" / "ab" / figure).is_file()
    index, links = read_page(tmp_path / "site" / "index.html")
    assert "ab/ab-decode.html" in links


def test_a_folder_that_is_no_kept_ab_is_named(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 2)
    (tmp_path / "notab").mkdir()
    record = build_site(tmp_path / "b", tmp_path / "site", ab_folders=[tmp_path / "notab"])
    assert "no pairing.json" in record["ab"][0]["problem"]


def test_the_pairs_figure_holds_each_benchmarks_pairs(tmp_path):
    from llmbench import runs
    from llmbench.dashboard.figures import pair_ratios

    ab = _kept_ab(tmp_path / "ab", slower=1.5)
    base = runs.load_run(next((ab / "baseline").rglob("*.json")))
    cand = runs.load_run(next((ab / "candidate").rglob("*.json")))
    ratios = dict(pair_ratios(base, cand, list(base.benchmarks)))
    assert sorted(ratios) == sorted(DECODE + PREFILL)
    assert all(len(v) == 30 for v in ratios.values())
    assert 1.3 < float(np.median(ratios["test_decode_steps[ctx=16]"])) < 1.7
    assert 0.9 < float(np.median(ratios["test_prefill[in=32]"])) < 1.1


def _runs_named(folder: Path, names: dict[str, str], count: int = 2) -> None:
    for i in range(1, count + 1):
        write_run(folder / f"{i:04d}_run.json", make_run(i, benchmarks=names))


def test_names_that_slug_alike_get_pages_of_their_own(tmp_path):
    names = {"a b": "g", "a-b": "g", "a-b-2": "g", "A-B": "g"}
    _runs_named(tmp_path / "b" / ENV, names)
    build_site(tmp_path / "b", tmp_path / "site")
    links = [link for link in read_page(tmp_path / "site" / "index.html")[1]
             if link.startswith(ENV)]
    assert len(links) == 4 and len({link.lower() for link in links}) == 4
    titles = {read_page(tmp_path / "site" / link)[0].split(":", 1)[0] for link in links}
    assert titles == set(names)


def test_environment_folders_that_slug_alike_do_not_collide(tmp_path):
    for folder in ("a b", "a-b", "a-b-2"):
        _runs_named(tmp_path / "b" / folder, {"x": "g"})
    record = build_site(tmp_path / "b", tmp_path / "site")
    assert len(record["environments"]) == 3


def test_two_kept_abs_of_one_folder_name_keep_two_pages(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 2)
    first, second = _kept_ab(tmp_path / "x" / "run", 1.5), _kept_ab(tmp_path / "y" / "run", 1.0)
    build_site(tmp_path / "b", tmp_path / "site", ab_folders=[first, second])
    links = [link for link in read_page(tmp_path / "site" / "index.html")[1]
             if link.startswith("ab/")]
    assert len(set(links)) == 2 and all((tmp_path / "site" / link).is_file() for link in links)


def test_names_are_escaped_and_dollar_signs_are_text(tmp_path):
    names = {"test_x[<script>alert(1)</script>]": "g", "test_price[$x^$]": "g"}
    _runs_named(tmp_path / "b" / ENV, names, count=6)
    build_site(tmp_path / "b", tmp_path / "site")
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)" in html
    text, _ = read_page(tmp_path / "site" / "index.html")
    assert "test_price[$x^$]" in text


def test_a_benchmark_the_newest_run_lacks_is_still_shown_with_its_last_run(tmp_path):
    folder = tmp_path / "b" / ENV
    write_history(folder, [1.0] * 6)
    newest = json.loads((folder / "0006_run.json").read_text())
    newest["benchmarks"] = [b for b in newest["benchmarks"]
                            if b["name"] != "test_prefill[in=32]"]
    (folder / "0006_run.json").write_text(json.dumps(newest))
    build_site(tmp_path / "b", tmp_path / "site")
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    row = html.split('<tr data-name="test_prefill[in=32] prefill"', 1)[1].split("</tr>", 1)[0]
    assert "(run 0005)" in row and "not in the newest run" in row


def test_an_ab_names_the_benchmarks_one_side_lacks(tmp_path):
    write_history(tmp_path / "b" / ENV, [1.0] * 2)
    ab = _kept_ab(tmp_path / "ab", slower=1.0)
    cand_file = next((ab / "candidate").rglob("*.json"))
    cand = json.loads(cand_file.read_text())
    cand["benchmarks"] = [b for b in cand["benchmarks"] if b["name"] != "test_prefill[in=32]"]
    cand_file.write_text(json.dumps(cand))
    build_site(tmp_path / "b", tmp_path / "site", ab_folders=[ab])
    text, _ = read_page(tmp_path / "site" / "ab" / "ab.html")
    assert "test_prefill[in=32]: in the baseline run only" in text


def test_uncommitted_changes_never_read_as_the_machine_moving(tmp_path):
    folder = tmp_path / "b" / ENV
    write_history(folder, [1.0] * 6 + [1.5] * 6, commit_from=99)  # one commit throughout
    for path in folder.glob("*.json"):
        run = json.loads(path.read_text())
        run["commit_info"]["dirty"] = True
        path.write_text(json.dumps(run))
    build_site(tmp_path / "b", tmp_path / "site")
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    change = re.search(r'<li class="change" data-run="7">(.*?)</li>', html, flags=re.S).group(1)
    assert "cannot tell code from machine" in change and "machine moved" not in change


@pytest.mark.parametrize("damage", [
    lambda run: run["commit_info"].update(id=12345),
    lambda run: run.update(llmbench_injected={"slow_down": {"decode_step": "fast"}}),
    lambda run: run.update(datetime=20260101),
    lambda run: run["benchmarks"][0]["stats"].update(data=[0.0] * 10, median=0.0),
    lambda run: run["benchmarks"][0]["extra_info"].update(work={"num_ops": "many"}),
    lambda run: run["benchmarks"][0]["extra_info"].update(peak_memory_added_bytes=float("nan")),
], ids=["commit-a-number", "factor-a-word", "datetime-a-number", "median-zero",
        "work-a-word", "memory-nan"])
def test_damaged_fields_are_a_line_or_a_dash_never_a_traceback(tmp_path, damage):
    folder = tmp_path / "b" / ENV
    write_history(folder, [1.0] * 3)
    run = json.loads((folder / "0002_run.json").read_text())
    damage(run)
    (folder / "0002_run.json").write_text(json.dumps(run))
    proc = subprocess.run([sys.executable, "-m", "llmbench", "dashboard", str(tmp_path / "b"),
                           "-o", str(tmp_path / "site")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_index_shows_each_benchmarks_spread_between_runs_of_one_code(history_site):
    index = (history_site / "index.html").read_text(encoding="utf-8")
    assert "<th>between runs</th>" in index
    cells = re.findall(r'title="spread of one code\'s runs[^"]*">([^<]*)</td>', index)
    assert cells and all(re.fullmatch(r"\d+\.\d% \(\d+ A/A\)", c) for c in cells), cells


XEON = {"cpu_model": "Intel Xeon", "logical_cpus": 2, "memory_gib": 24, "gpu_name": None,
        "gpu_count": 0, "gpu_driver": None, "cuda": None, "mps": False}


def test_one_benchmark_across_testbeds_gets_a_page_with_a_line_for_each(tmp_path, monkeypatch):
    """Two CPU models in one environment folder's runs (the team counts them apart by
    default), and a bfloat16 environment: each benchmark's page across testbeds has three
    lines, fastest first, and the index links it."""
    monkeypatch.delenv("LLMBENCH_TESTBED_FIELDS", raising=False)
    folder = tmp_path / "b" / ENV
    for i in range(1, 5):
        run = make_run(i, factors={"decode": 2.0} if i % 2 else {})
        run["datetime"] = f"2026-01-{i:02d}T10:00:00+00:00"
        run["llmbench"]["testbed"] = {**XEON, "cpu_model": "AMD EPYC" if i % 2 else "Intel Xeon"}
        write_run(folder / f"{i:04d}_run.json", run)
    other = make_run(9, environment={**json.loads(json.dumps(
        make_run(0)["llmbench"]["environment"])), "dtype": "bfloat16"})
    write_run(tmp_path / "b" / "tiny-cpu-bfloat16" / "0001_run.json", other)
    record = build_site(tmp_path / "b", tmp_path / "site")
    assert "test_decode_steps[ctx=16]" in record["across"]
    page = tmp_path / "site" / "across" / "test_decode_steps-ctx-16.html"
    text, links = read_page(page)
    assert "AMD EPYC, 2 CPUs, 24 GiB" in text and "Intel Xeon, 2 CPUs, 24 GiB" in text
    assert "unknown testbed (saved before testbeds were recorded)" in text
    rows = re.findall(r"<tr><td>.*?</tr>", page.read_text(encoding="utf-8"), flags=re.S)
    assert len(rows) == 3 and "AMD EPYC" in rows[-1]  # decode twice as slow there: last
    assert 1.9 < float(re.findall(r"x(\d+\.\d+)", rows[-1])[-1]) < 2.1
    assert (page.parent / "test_decode_steps-ctx-16.svg").is_file()
    index, index_links = read_page(tmp_path / "site" / "index.html")
    assert "Across testbeds" in index
    assert "across/test_decode_steps-ctx-16.html" in index_links
    monkeypatch.setenv("LLMBENCH_TESTBED_FIELDS", "logical_cpus")  # one pool of 2-CPU VMs
    build_site(tmp_path / "b", tmp_path / "site")
    assert len(re.findall(r"<tr><td>", page.read_text(encoding="utf-8"))) == 2


def test_the_across_testbeds_figure_takes_dates_with_and_without_a_zone(tmp_path):
    """Runs saved by older pytest-benchmark versions carry naive datetimes; beside aware ones
    they are read as UTC, as everywhere else, not left for matplotlib to refuse."""
    from llmbench.dashboard.collect import Across, Line
    from llmbench.dashboard.figures import across_figure

    lines = (Line("cpu float32", "cpu", "xeon", (("2026-12-01T10:00:00", 0.2),
                                                 ("2026-12-02T10:00:00+00:00", 0.21))),
             Line("cpu bfloat16", "cpu-bf16", "epyc", (("2026-12-01T11:00:00+01:00", 0.1),
                                                       (None, 0.1), ("not a date", 0.1))))
    path = across_figure(Across("test_decode", "test_decode", lines), tmp_path / "a.svg")
    assert path.read_text().lstrip().startswith("<?xml")


def _bisection(culprit: str) -> dict:
    """A saved bisection (as `llmbench bisect` writes it) whose culprit is `culprit`."""
    good, bad = "a" * 40, "c" * 40

    def step(baseline, commit, outcome, ratio):
        verdict = "regression" if outcome == "slower" else "unchanged"
        return {"baseline": baseline, "commit": commit, "watched": [], "outcome": outcome,
                "seconds": 40.0, "reason": "", "kind": "time",
                "benchmarks": [{"name": "benchmarks/x.py::test_decode_steps[ctx=16]",
                                "label": "test_decode_steps[ctx=16]", "verdict": verdict,
                                "ratio": ratio, "ci_low": ratio - 0.02,
                                "ci_high": ratio + 0.02, "n_pairs": 12}]}

    return {"good": good, "bad": bad, "key": "k", "commits": [culprit, bad],
            "subjects": {good: "before", culprit: "the slow one", bad: "after"},
            "steps": [step(good, bad, "slower", 1.4), step(good, culprit, "slower", 1.4),
                      step(good, culprit, "slower", 1.41)],
            "answer": "found", "culprit": culprit, "first_possible": culprit,
            "last_possible": culprit, "skipped": [], "reason": "", "watched": [],
            "parent": good, "kind": "time", "counts": {}}


def test_a_change_point_offers_its_bisect_and_links_the_bisection_of_its_commit(tmp_path):
    baselines = tmp_path / "baselines"
    write_history(baselines / ENV, [1.0] * 6 + [1.4] * 6)
    page = f"{ENV}/test_decode_steps-ctx-16.html"
    build_site(baselines, tmp_path / "site")
    text, _ = read_page(tmp_path / "site" / page)
    assert (f"find its commit: llmbench bisect --change-point {baselines / ENV} "
            "'benchmarks/test_prefill_decode.py::test_decode_steps[ctx=16]'") in text
    saved = tmp_path / "bisect-aaaaaaaa-cccccccc.json"
    saved.write_text(json.dumps(_bisection("b" * 40)))
    build_site(baselines, tmp_path / "site", bisect_files=[saved])
    text, links = read_page(tmp_path / "site" / page)
    assert "bisected: the first slower commit: bbbbbbbb the slow one" in text
    assert "../bisect/bisect-aaaaaaaa-cccccccc.html" in links
    bisect_page = tmp_path / "site" / "bisect" / "bisect-aaaaaaaa-cccccccc.html"
    text, _ = read_page(bisect_page)
    assert "Against its parent aaaaaaaa (GOOD) before: slower" in text
    assert bisection.answer_line(_bisection("b" * 40), quote="") in text  # the CLI's words
    assert (bisect_page.parent / "bisect-aaaaaaaa-cccccccc.png").read_bytes()[:4] == b"\x89PNG"
    index, links = read_page(tmp_path / "site" / "index.html")
    assert "bisect/bisect-aaaaaaaa-cccccccc.html" in links
