"""The forest plot of verdicts (`verdicts.png`): drawn headless from real tiny runs, first in
report.md, and kept by `llmbench ab --keep`."""

from __future__ import annotations

import pytest
from gate_runs import tiny_runs

from llmbench.cli import main
from llmbench.report.verdict_plot import FILE

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    return tiny_runs(tmp_path_factory)


def test_a_report_with_a_baseline_shows_the_verdicts_first(real, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", real.slow, "--baseline", real.base, "-o", str(out)]) == 0
    data = (out / FILE).read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    text = (out / "report.md").read_text()
    first_image = text.index("![")
    assert text[first_image:].split(")", 1)[0].endswith(f"({FILE}")
    assert first_image < text.index("**")  # before the summary line and every table


def test_a_report_without_a_baseline_has_no_verdict_plot(real, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", real.base, "-o", str(out)]) == 0
    assert not (out / FILE).exists() and FILE not in (out / "report.md").read_text()


def test_force_removes_a_verdict_plot_the_new_report_does_not_have(real, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", real.slow, "--baseline", real.base, "-o", str(out)]) == 0
    assert main(["report", real.base, "-o", str(out), "--force"]) == 0
    assert not (out / FILE).exists()
