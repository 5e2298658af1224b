"""`llmbench report`: report.md tables, PNG plots, baseline verdicts, and refusals.

Runs are synthetic pytest-benchmark JSON in the suite's format (raw samples, extra_info, the
`llmbench` section), built with a fixed seed, so these tests need no model and run in
parallel: every test writes only under its own tmp_path.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmbench import gate
from llmbench.cli import main
from llmbench.errors import Exit
from llmbench.report import plots
from llmbench.report import write as report
from llmbench.runs import Benchmark

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CORE_PLOTS = ("output_sweep.png", "input_sweep.png", "prefill_decode.png", "kv_cache.png",
              "batch_size.png", "sequential_vs_batched.png", "engines.png")
ENVIRONMENT = {"model": "tiny", "fingerprint": {"name": "tiny", "num_parameters": 1234},
               "device": "cpu", "device_name": "Test CPU", "dtype": "float32", "threads": 2,
               "versions": {"python": "3.11", "torch": "2.13.0"}, "thread_env": {}}


def _bench(rng, group, name, params, seconds, extra, rounds=10, cv=0.03):
    data = seconds * rng.lognormal(0.0, cv, rounds)
    q1, q3 = np.percentile(data, [25, 75])
    out_tokens = extra.get("output_tokens")
    median = float(np.median(data))
    if out_tokens:
        extra = {**extra, "tokens_per_second": out_tokens / median,
                 "ms_per_token": 1e3 * median / out_tokens}
    return {"group": group, "name": name, "fullname": f"benchmarks/x.py::{name}",
            "params": params, "param": name.partition("[")[2].rstrip("]") or None,
            "extra_info": {"peak_memory_bytes": 1000, **extra},
            "stats": {"min": float(data.min()), "max": float(data.max()), "median": median,
                      "mean": float(data.mean()), "stddev": float(data.std(ddof=1)),
                      "q1": float(q1), "q3": float(q3), "iqr": float(q3 - q1),
                      "rounds": rounds, "iterations": 1, "data": [float(x) for x in data]}}


def make_run(path, *, seed=0, slow=1.0, server=False, device="cpu", groups=None, commit=None):
    """A run of every suite group (and the server groups when asked); `slow` scales decode.
    Each seed is its own commit unless `commit` names one."""
    rng = np.random.default_rng(seed)
    b = []
    for n in (8, 16, 32, 64):
        b.append(_bench(rng, "output-sweep", f"test_output_sweep[in=128-out={n}]",
                        {"output_case": [128, n]}, 0.02 + 0.004 * n * slow,
                        {"input_tokens": 128, "output_tokens": n, "ttft_ms": 20.0}))
    for n in (64, 128, 256, 512):
        b.append(_bench(rng, "input-sweep", f"test_input_sweep[in={n}-out=32]",
                        {"input_case": [n, 32]}, 0.0001 * n + 0.13 * slow,
                        {"input_tokens": n, "output_tokens": 32, "ttft_ms": 0.1 * n}))
    b.append(_bench(rng, "input-sweep", "test_input_chat_passage", {}, 0.17 * slow,
                    {"input_tokens": 270, "output_tokens": 32, "chat": True, "ttft_ms": 30.0}))
    for n in (32, 128, 512):
        b.append(_bench(rng, "prefill", f"test_prefill[in={n}]", {"prefill_tokens": n},
                        0.002 + 0.0001 * n, {"input_tokens": n, "output_tokens": 1}))
    for n in (16, 128):
        b.append(_bench(rng, "decode", f"test_decode_steps[ctx={n}]", {"decode_context": n},
                        (0.04 + 0.00005 * n) * slow,
                        {"input_tokens": n, "output_tokens": 10, "first_step_context": n + 1}))
    for on in (True, False):
        b.append(_bench(rng, "kv-cache", f"test_kv_cache[cache={'on' if on else 'off'}]",
                        {"use_cache": on}, 0.08 if on else 0.19,
                        {"input_tokens": 64, "output_tokens": 16}))
    for n in (1, 2, 4, 8):
        b.append(_bench(rng, "batch-size", f"test_batch_size[bs={n}]", {"batch_size": n},
                        0.07 * n ** 0.4, {"input_tokens": 64 * n, "output_tokens": 16 * n,
                                          "batch_size": n}))
    for mode, s in (("sequential", 0.3), ("batched", 0.1)):
        b.append(_bench(rng, "sequential-vs-batched", f"test_sequential_vs_batched[{mode}]",
                        {"mode": mode}, s, {"input_tokens": 256, "output_tokens": 64,
                                            "batch_size": 4}))
    for engine in ("loop", "hf"):
        for n in (1, 8):
            b.append(_bench(rng, "engines", f"test_engine[{engine}-bs={n}]",
                            {"engine": engine, "engine_batch": n},
                            (0.13 if engine == "loop" else 0.16) * n ** 0.3,
                            {"input_tokens": 128 * n, "output_tokens": 32 * n, "engine": engine,
                             "batch_size": n}))
    if server:  # as benchmarks/test_server.py records them
        for n in (16, 64):
            for fn, s in (("test_server_generate", 0.012), ("test_engine_generate", 0.01)):
                b.append(_bench(rng, "server-generate", f"{fn}[out={n}]", {"server_output": n},
                                s * n, {"input_tokens": 30, "output_tokens": n}))
        for n in (1, 4, 8):
            b.append(_bench(rng, "server-concurrency", f"test_server_concurrency[conc={n}]",
                            {"concurrency": n}, 0.2 * n ** 0.5,
                            {"input_tokens": 30 * n, "output_tokens": 32 * n, "concurrency": n,
                             "ttft_ms": 15.0 * n, "itl_ms": 5.0 + n, "itl_p90_ms": 7.0 + n,
                             "tpot_ms": 5.5 + n}))
    if groups is not None:
        b = [x for x in b if x["group"] in groups]
    payload = {"machine_info": {"node": "test"}, "commit_info": {"id": commit or f"{seed:040x}"},
               "benchmarks": b, "datetime": "2025-01-01T00:00:00", "version": "5.2.3",
               "llmbench": {"environment": {**ENVIRONMENT, "device": device}, "profile": "quick",
                            "rounds": 10, "warmup_rounds": 1, "load_s": 0.5, "warmup_s": 0.1,
                            "control_s": list(0.01 * rng.lognormal(0, 0.02, 12))}}
    path.write_text(json.dumps(payload))
    return path


def quiet_runs(folder, count=3, **kw):
    """Earlier runs of one commit in `folder` (NNNN_quiet.json from 0001): the noise between
    runs measured, and as small as the rounds' own."""
    folder.mkdir(parents=True, exist_ok=True)
    return [make_run(folder / f"{i:04d}_quiet.json", seed=100 + i, commit="feed" * 10, **kw)
            for i in range(1, count + 1)]


def _run(capsys, *argv):
    code = main(["report", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """One report of a run without server benchmarks and without a baseline (drawn once)."""
    root = tmp_path_factory.mktemp("plain")
    code = main(["report", str(make_run(root / "run.json")), "-o", str(root / "r")])
    return code, root / "r"


@pytest.fixture(scope="module")
def with_baseline(tmp_path_factory):
    """One report of a run with server benchmarks and decode 1.5x slower than its baseline."""
    root = tmp_path_factory.mktemp("baseline")
    quiet_runs(root, server=True)
    base = make_run(root / "0004_base.json", seed=1, server=True)
    run = make_run(root / "run.json", seed=2, slow=1.5, server=True)
    code = main(["report", str(run), "--baseline", str(base), "-o", str(root / "r")])
    return code, root / "r"


def _section(text: str, group: str) -> str:
    return text.split(f"\n## {group}\n", 1)[1].split("\n## ", 1)[0]


def test_report_has_a_table_per_group_and_the_environment(plain):
    code, out = plain
    assert code == 0
    text = (out / "report.md").read_text()
    for group in ("output-sweep", "input-sweep", "prefill", "decode", "kv-cache", "batch-size",
                  "sequential-vs-batched", "engines"):
        head = _section(text, group).lstrip().splitlines()[0]
        assert head.startswith("| benchmark | rounds | median | IQR | "), group
        assert "tokens/s" in head and "ms/" in head, group
    assert "| `test_output_sweep[in=128-out=64]` | 10 |" in text
    assert "TTFT (ms)" in _section(text, "output-sweep")
    assert "| prompt tokens/s | ms/prompt token |" in _section(text, "prefill")
    assert "| verdict |" not in text
    env = text.split("\n## Environment\n", 1)[1]
    assert "| model | tiny |" in env and "| device_name | Test CPU |" in env
    assert "| version: torch | 2.13.0 |" in env
    assert "| fingerprint | 1.23k parameters, sha256 " in env


def test_sweep_rows_are_in_numeric_order(plain):
    text = (plain[1] / "report.md").read_text()
    positions = [text.index(f"out={n}]") for n in (8, 16, 32, 64)]
    assert positions == sorted(positions)


def test_every_expected_plot_is_a_png(plain, with_baseline):
    server = ("server_generate.png", "server_concurrency.png")
    for folder, names in ((plain[1], CORE_PLOTS), (with_baseline[1], (*CORE_PLOTS, *server))):
        for name in names:
            data = (folder / name).read_bytes()
            assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
            assert f"]({name})" in (folder / "report.md").read_text()


def test_missing_server_benchmarks_skip_that_plot_and_say_so(plain, with_baseline):
    assert not (plain[1] / "server_concurrency.png").exists()
    text = (plain[1] / "report.md").read_text()
    assert ("- `server_concurrency.png` (Server under concurrency): the run has no "
            "server-concurrency benchmarks") in text
    assert "- `server_generate.png` (Server overhead): the run has no server-generate" in text
    assert "Not drawn" not in (with_baseline[1] / "report.md").read_text()


def test_server_tables_show_ttft_and_itl(with_baseline):
    served = _section((with_baseline[1] / "report.md").read_text(), "server-concurrency")
    assert "| TTFT (ms) | ITL (ms) |" in served and "| 15.0 | 6.0 |" in served  # ITL: its p50


def test_baseline_adds_the_verdict_column(with_baseline):
    code, out = with_baseline
    assert code == 0
    text = (out / "report.md").read_text()
    decode = _section(text, "decode")
    assert "| baseline median | ratio [CI] | verdict |" in decode
    assert decode.count("**regression**") == 2
    prefill = _section(text, "prefill")
    assert "regression" not in prefill and prefill.count("| unchanged |") == 3
    assert "machine speed (control, candidate/baseline)" in text
    assert "**REGRESSION: 11 regression, 0 improvement, 22 unchanged" in text
    assert "| field | run | baseline |" in text
    assert "MISMATCH" not in text


def test_a_partial_run_draws_only_what_it_has(tmp_path, capsys):
    run = make_run(tmp_path / "run.json", groups={"decode"})
    assert _run(capsys, run, "-o", tmp_path / "r")[0] == 0
    assert sorted(p.name for p in (tmp_path / "r").glob("*.png")) == ["prefill_decode.png"]


def test_a_case_that_did_other_work_is_named_so_and_not_drawn_beside_the_run(tmp_path,
                                                                             monkeypatch):
    quiet_runs(tmp_path, groups={"decode"})
    base = make_run(tmp_path / "base.json", seed=1, groups={"decode"})
    run = make_run(tmp_path / "run.json", seed=2, slow=2.0, groups={"decode"})
    data = json.loads(run.read_text())
    for bench in data["benchmarks"]:  # twice the tokens at twice the time: another profile's
        if bench["name"] == "test_decode_steps[ctx=128]":
            bench["extra_info"]["output_tokens"] = 20
    run.write_text(json.dumps(data))
    drawn_beside = []
    real_draw_all = plots.draw_all

    def draw_all(run, baseline, out):
        drawn_beside.append(sorted(b.name for b in baseline.benchmarks.values()))
        return real_draw_all(run, baseline, out)

    monkeypatch.setattr(plots, "draw_all", draw_all)
    result = report.write_report(run, tmp_path / "r", base)
    decode = _section((tmp_path / "r" / "report.md").read_text(), "decode")
    assert "| did other work: output_tokens 10 vs 20 |" in decode
    assert decode.count("**regression**") == 1  # ctx=16, the one judged
    assert drawn_beside == [["test_decode_steps[ctx=16]"]]
    assert list(result.gate.other_work) == [
        "benchmarks/x.py::test_decode_steps[ctx=128]"]


def test_baseline_from_another_environment_is_refused_unless_allowed(tmp_path, capsys):
    base = make_run(tmp_path / "b.json", seed=1, device="cuda", groups={"kv-cache"})
    run = make_run(tmp_path / "c.json", seed=2, groups={"kv-cache"})
    err = _one_line_exit_2(*_run(capsys, run, "--baseline", base, "-o", tmp_path / "r"))
    assert "different environments" in err and "--allow-mismatch" in err
    assert _run(capsys, run, "--baseline", base, "-o", tmp_path / "r", "--allow-mismatch")[0] == 0
    text = (tmp_path / "r" / "report.md").read_text()
    assert "ENVIRONMENT MISMATCH" in text and "| device **≠** | cpu | cuda |" in text


def _on_another_cpu(path):
    payload = json.loads(path.read_text())
    payload["llmbench"]["environment"]["device_name"] = "Another CPU"
    path.write_text(json.dumps(payload))
    return path


def test_baseline_latest_is_the_newest_other_run_of_the_environment(tmp_path, capsys):
    folder = tmp_path / "tiny-cpu-float32"
    quiet_runs(folder, groups={"decode"})
    mine = make_run(folder / "0004_a.json", seed=1, groups={"decode"})
    _on_another_cpu(make_run(folder / "0005_b.json", seed=3, groups={"decode"}))
    run = make_run(folder / "0006_c.json", seed=2, slow=1.5, groups={"decode"})
    code, out, err = _run(capsys, run, "--baseline", "latest", "-o", tmp_path / "r")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"baseline: {mine} (the latest run of this environment)"
    assert out.splitlines()[-1].startswith("REGRESSION: 2 regression")
    assert "| baseline median | ratio [CI] | verdict |" in (tmp_path / "r" / "report.md"
                                                             ).read_text()


def test_a_folder_means_its_newest_run_as_in_compare(tmp_path, capsys):
    folder = tmp_path / "tiny-cpu-float32"
    quiet_runs(folder, groups={"decode"})
    older = make_run(folder / "0004_a.json", seed=1, groups={"decode"})
    newest = make_run(folder / "0005_b.json", seed=2, slow=1.5, groups={"decode"})
    code, out, err = _run(capsys, folder, "--baseline", "latest", "-o", tmp_path / "r")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"baseline: {older} (the latest run of this environment)"
    assert f"- candidate: {newest} (" in (tmp_path / "r" / "report.md").read_text()
    assert main(["compare", str(older), str(folder)]) == 1  # the same newest run, judged


def test_an_unmeasured_ttft_shows_as_unknown(tmp_path):
    path = make_run(tmp_path / "run.json", groups={"engines"})
    payload = json.loads(path.read_text())
    for bench in payload["benchmarks"]:  # as the suite records them: hf batches unmeasured
        unmeasured = bench["params"] == {"engine": "hf", "engine_batch": 8}
        bench["extra_info"]["ttft_ms"] = None if unmeasured else 20.0
    path.write_text(json.dumps(payload))
    assert main(["report", str(path), "-o", str(tmp_path / "r")]) == 0
    table = _section((tmp_path / "r" / "report.md").read_text(), "engines")
    rows = {cells[0]: cells for line in table.splitlines() if line.startswith("| `")
            for cells in [line.strip("| ").split(" | ")]}
    head = next(line for line in table.splitlines() if line.startswith("| benchmark"))
    column = head.strip("| ").split(" | ").index("TTFT (ms)")
    assert rows["`test_engine[hf-bs=8]`"][column] == "–"
    assert rows["`test_engine[loop-bs=8]`"][column] == rows["`test_engine[hf-bs=1]`"][column]
    assert rows["`test_engine[loop-bs=8]`"][column] == "20.0"


@pytest.mark.parametrize("others, why", [
    (0, "holds no other run"),
    (1, "holds 1 other run, none of this environment and testbed (the newest, 0001_x.json, "
        "differs: device_name 'Another CPU' vs 'Test CPU')"),
])
def test_baseline_latest_without_one_writes_the_report_and_says_so(tmp_path, capsys, others,
                                                                   why):
    for number in range(1, others + 1):
        _on_another_cpu(make_run(tmp_path / f"{number:04d}_x.json", seed=number))
    run = make_run(tmp_path / f"{others + 1:04d}_run.json", seed=9)
    code, out, err = _run(capsys, run, "--baseline", "latest", "-o", tmp_path / "r")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"no baseline: {tmp_path} {why}; the report has no comparison"
    text = (tmp_path / "r" / "report.md").read_text()
    assert "| verdict |" not in text and "Another CPU" not in text


def test_verdicts_come_from_the_gate(tmp_path):
    quiet_runs(tmp_path)
    base = report.load_run(make_run(tmp_path / "b.json", seed=1))
    run = report.load_run(make_run(tmp_path / "c.json", seed=2, slow=1.5))
    result = report.compare(base, run)
    assert {c.name for c in result.comparisons} == set(run.benchmarks)
    decode = {c.name: c for c in result.comparisons}["benchmarks/x.py::test_decode_steps[ctx=16]"]
    assert decode.verdict.value == "regression" and decode.threshold == pytest.approx(0.10)
    strict = report.compare(base, run, gate.GateOptions(threshold=0.6))
    assert all(c.verdict.value != "regression" for c in strict.comparisons)


def _one_line_exit_2(code, out, err):
    assert code == Exit.USAGE
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("content, message", [
    (None, "no such run file"),
    ('{"benchmarks": [', "is truncated JSON"),
    ("[1, 2]", "not a pytest-benchmark run"),
    ('{"benchmarks": []}', "holds no benchmarks"),
    ('{"benchmarks": [{"name": "x", "stats": {"min": 1}}]}', "lacks stats"),
])
def test_bad_run_files_exit_2_with_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    err = _one_line_exit_2(*_run(capsys, path, "-o", tmp_path / "r"))
    assert err.startswith("llmbench report: error: ") and message in err
    assert not (tmp_path / "r" / "report.md").exists()


def test_bad_baseline_exits_2(tmp_path, capsys):
    run = make_run(tmp_path / "run.json")
    (tmp_path / "base.json").write_text("{")
    err = _one_line_exit_2(*_run(capsys, run, "--baseline", tmp_path / "base.json",
                                 "-o", tmp_path / "r"))
    assert "base.json is truncated JSON" in err


def test_baseline_without_common_benchmarks_or_samples_exits_2(tmp_path, capsys):
    run = make_run(tmp_path / "run.json", groups={"decode"})
    base = make_run(tmp_path / "base.json", groups={"prefill"})
    err = _one_line_exit_2(*_run(capsys, run, "--baseline", base, "-o", tmp_path / "r"))
    assert "no benchmarks in common" in err
    payload = json.loads(run.read_text())
    for bench in payload["benchmarks"]:
        del bench["stats"]["data"]
    (tmp_path / "nodata.json").write_text(json.dumps(payload))
    err = _one_line_exit_2(*_run(capsys, tmp_path / "nodata.json", "--baseline", run,
                                 "-o", tmp_path / "r2"))
    assert "--benchmark-save-data" in err


def test_rule_flags_without_a_baseline_exit_2(tmp_path, capsys):
    err = _one_line_exit_2(*_run(capsys, make_run(tmp_path / "run.json"), "-o", tmp_path / "r",
                                 "--threshold", "20%", "--normalize"))
    assert "--threshold, --normalize only apply with --baseline" in err
    assert not (tmp_path / "r").exists()


def test_missing_output_flag_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(make_run(tmp_path / "run.json"))])
    assert exit_info.value.code == Exit.USAGE
    assert capsys.readouterr().err.count("\n") == 1


def test_refuses_to_overwrite_a_report_unless_forced(tmp_path, capsys):
    run = make_run(tmp_path / "run.json", groups={"kv-cache"})
    assert _run(capsys, run, "-o", tmp_path / "r")[0] == 0
    before = (tmp_path / "r" / "report.md").read_text()
    (tmp_path / "r" / "report.md").write_text("mine")
    err = _one_line_exit_2(*_run(capsys, run, "-o", tmp_path / "r"))
    assert "already holds a report" in err and "--force" in err
    assert (tmp_path / "r" / "report.md").read_text() == "mine"
    # --force replaces it, and drops a plot the new run cannot draw.
    other = make_run(tmp_path / "other.json", groups={"decode"})
    assert _run(capsys, other, "-o", tmp_path / "r", "--force")[0] == 0
    after = (tmp_path / "r" / "report.md").read_text()
    assert after != "mine" and after.splitlines()[0] == before.splitlines()[0]
    assert sorted(p.name for p in (tmp_path / "r").glob("*.png")) == ["prefill_decode.png"]


def test_output_path_that_is_a_file_exits_2(tmp_path, capsys):
    (tmp_path / "r").write_text("")
    err = _one_line_exit_2(*_run(capsys, make_run(tmp_path / "run.json"), "-o", tmp_path / "r"))
    assert "not a folder" in err


def test_metric_reads_numbers_summaries_and_flat_keys():
    def bench(extra):
        return Benchmark("k", "b", "g", samples=(1.0,), extra_info=extra)

    assert bench({"ttft_ms": 5}).metric("ttft_ms") == (5.0, 5.0, 5.0)
    assert bench({"itl_ms": {"p50": 4, "p99": 9, "min": 2}}).metric("itl_ms") == (4.0, 2.0, 9.0)
    assert bench({"itl_ms_p50": 4, "itl_ms_p90": 6}).metric("itl_ms") == (4.0, 4.0, 6.0)
    # what benchmarks/test_server.py records: the p50 as the number, the p90 beside it
    assert bench({"itl_ms": 4, "itl_p90_ms": 7, "tpot_ms": 9}).metric("itl_ms") == (4.0, 4.0, 7.0)
    assert bench({"itl_ms": [3, 1, 2]}).metric("itl_ms") == (2.0, 1.0, 3.0)
    assert bench({"itl_ms": None}).metric("itl_ms") is None  # the client's empty summary
    assert bench({"ttft_ms": None}).metric("ttft_ms") is None  # recorded as not measured
    assert bench({}).metric("itl_ms") is None


def test_plot_files_match_the_specs():
    assert plots.PLOT_FILES == (*CORE_PLOTS, "server_generate.png", "server_concurrency.png")
