"""`llmbench report` on a saved `llmbench load` run: a table per level, the capacity, and
the pictures, never overwriting a report it was not told to replace."""

import json

import pytest

from llmbench import cli
from llmbench.engine.config import EngineConfig
from llmbench.engine.models import load_model
from llmbench.load.result import RequestSample
from llmbench.serve.app import ServerSettings, create_app, running_server

PNG = b"\x89PNG"


@pytest.fixture(scope="module")
def saved_load(tmp_path_factory):
    lm = load_model(EngineConfig(model="tiny", device="cpu"))
    out = tmp_path_factory.mktemp("load") / "load.json"
    with running_server(create_app(lm, ServerSettings(max_new_tokens_cap=64))) as url:
        assert cli.main(["load", "--model", "tiny", "--max-new-tokens", "3", "--fixed-length",
                         "--max-lag", "1000", "--url", url, "--rate", "10,20", "--requests",
                         "8", "--slo", "e2e=60000", "--slo-percentile", "50", "--output",
                         str(out)]) == 0
    return out


def test_a_load_run_reports_its_levels_and_pictures(saved_load, tmp_path, capsys):
    out = tmp_path / "report"
    assert cli.main(["report", str(saved_load), "-o", str(out)]) == 0
    assert "and 3 plots: load.png, timeline-1.png, timeline-2.png" in capsys.readouterr().out
    text = (out / "report.md").read_text()
    document = json.loads(saved_load.read_text())
    assert text.startswith(f"# Load run: {document['url']}")
    rows = [line for line in text.splitlines() if line.startswith("| rate ")]
    assert [row.split(" | ")[0] for row in rows] == ["| rate 10 req/s (poisson)",
                                                     "| rate 20 req/s (poisson)"]
    assert all(row.rstrip(" |").endswith("met") for row in rows)
    assert "objectives MET" in text  # each level's summary lines
    for name in ("load.png", "timeline-1.png", "timeline-2.png"):
        assert (out / name).read_bytes()[:4] == PNG and f"]({name})" in text


def test_a_load_report_is_never_overwritten_unasked(saved_load, tmp_path, capsys):
    out = tmp_path / "report"
    assert cli.main(["report", str(saved_load), "-o", str(out)]) == 0
    (out / "timeline-9.png").write_bytes(PNG)  # from a run with more levels
    assert cli.main(["report", str(saved_load), "-o", str(out)]) == 2
    assert "already holds a report: pass --force" in capsys.readouterr().err
    assert cli.main(["report", str(saved_load), "-o", str(out), "--force"]) == 0
    assert not (out / "timeline-9.png").exists()
    assert cli.main(["report", str(saved_load), "-o", str(tmp_path / "b"), "--baseline",
                     "latest"]) == 2
    assert "a load run's report has no baseline" in capsys.readouterr().err


def test_a_sample_saved_by_an_older_llmbench_reads_with_defaults():
    saved = {"latency_s": 1.5, "ttft_s": 0.5, "itl_s": [0.1, 0.3], "tokenizer_tokens": 3,
             "error": None, "an_old_field": 1}
    sample = RequestSample.from_dict(saved)
    assert sample.itl_s == (0.1, 0.3) and sample.session is None and sample.measured
    assert sample.objective_value_s("itl") == pytest.approx(0.5)
