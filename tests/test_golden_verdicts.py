"""Real saved runs give the verdicts, output and exit code they gave when recorded
(tests/golden_verdicts.py says which runs, and how to regenerate after an intended change)."""

from __future__ import annotations

import pytest
from golden_verdicts import CASES, FORMATS, expected, replay, unpack


@pytest.fixture(scope="module")
def golden_runs(tmp_path_factory):
    return unpack(tmp_path_factory.mktemp("golden"))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASES)
def test_a_recorded_comparison_gives_what_it_gave(golden_runs, case, fmt):
    code, output = replay(golden_runs, case, fmt)
    want_code, want_output = expected(case, fmt)
    assert code == want_code
    assert output == want_output


def test_the_cases_cover_every_exit_and_verdict_kind(golden_runs):
    import json

    from llmbench.errors import Exit

    seen_codes, seen_verdicts, family = set(), set(), False
    for case in CASES:
        code, output = expected(case, "json")
        data = json.loads(output)
        seen_codes.add(code)
        seen_verdicts |= {c["verdict"] for c in data["comparisons"]}
        family |= bool((data["confirmation"] or {}).get("family"))
    assert {Exit.OK, Exit.REGRESSION, Exit.NOT_CONFIRMED} <= seen_codes
    assert {"regression", "inconclusive", "not slower", "not confirmed"} <= seen_verdicts
    assert family
