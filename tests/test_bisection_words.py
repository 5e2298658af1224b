"""What a saved bisection says, in the words the command line, the report and the
dashboard share (`llmbench.history.bisection`)."""

from __future__ import annotations

from llmbench.history import bisection as words
from llmbench.report.bisect_report import render

GOOD, A, B, C, BAD = ("1" * 40, "a" * 40, "b" * 40, "c" * 40, "f" * 40)


def _benchmark(label: str, verdict: str, ratio: float = 1.0) -> dict:
    return {"name": f"benchmarks/x.py::{label}", "label": label, "verdict": verdict,
            "ratio": ratio, "ci_low": ratio - 0.05, "ci_high": ratio + 0.05, "n_pairs": 8}


def _step(baseline: str, commit: str, outcome: str, benchmarks=(), reason: str = "") -> dict:
    return {"baseline": baseline, "commit": commit, "watched": [], "outcome": outcome,
            "seconds": 30.0, "benchmarks": list(benchmarks), "reason": reason, "kind": "time"}


def _document(**ended) -> dict:
    return {"good": GOOD, "bad": BAD, "key": "k", "commits": [A, B, C, BAD],
            "subjects": {GOOD: "start", A: "one", B: "two", C: "three", BAD: "four"},
            "steps": [], "answer": None, "culprit": None, "first_possible": None,
            "last_possible": None, "skipped": [], "reason": "", "watched": [],
            "parent": None, "kind": "time", "counts": {}, **ended}


def test_each_answer_in_words():
    found = _document(answer=words.FOUND, culprit=B, parent=A, first_possible=B,
                      last_possible=B)
    assert words.answer_line(found, quote="") == "the first slower commit: bbbbbbbb two"
    assert words.answer_line(found) == "the first slower commit: `bbbbbbbb` two"
    none = _document(answer=words.NONE_SLOWER)
    assert words.answer_line(none, quote="") == (
        "no commit in this range is slower beyond the threshold: ffffffff (BAD) four is "
        "not slower than 11111111 (GOOD) start")
    assert words.answer_line({**none, "kind": "work"}, quote="").startswith(
        "no commit in this range does more work beyond the work threshold: ffffffff (BAD)")
    stopped = _document(answer=words.STOPPED, first_possible=A, last_possible=C,
                        reason="the budget was spent")
    assert words.answer_line(stopped, quote="") == (
        "the first slower commit lies from aaaaaaaa one to cccccccc three: the budget was "
        "spent")
    narrowed = _document(answer=words.NARROWED, first_possible=B, last_possible=C,
                         skipped=[B])
    assert words.answer_line(narrowed, quote="").endswith(
        "cccccccc three: only skipped commits keep the range open")
    assert words.skipped_words(narrowed, quote="") == (
        "Skipped, as they could not be measured: bbbbbbbb two")
    assert words.answer_line(_document()) == (
        "not finished: interrupted: run the same command again to go on")
    assert words.range_words(_document()) is None


def test_a_step_names_its_slower_benchmarks_first_and_at_most_four():
    many = [_benchmark(f"fast{i}", "unchanged") for i in range(3)] + [
        _benchmark(f"slow{i}", "regression", 1.3) for i in range(6)]
    step = _step(GOOD, B, words.SLOWER, many)
    line = words.step_line(_document(), step)
    assert line.startswith("bbbbbbbb two against 11111111 (GOOD) start: SLOWER (30 s): "
                           "slow0: regression x1.300 [1.250, 1.350]; slow1")
    assert "fast0" not in line and line.endswith("; and 2 more")
    assert words.step_benchmarks(step).count(";") == len(many) - 1  # the report: all of them
    skipped = _step(GOOD, A, words.SKIPPED, reason="it has no test_decode")
    assert words.step_line(_document(), skipped).endswith("SKIPPED (30 s): it has no test_decode")
    assert words.slower_benchmarks(step) == tuple(f"benchmarks/x.py::slow{i}" for i in range(6))


def test_counted_work_has_its_own_outcome_names():
    work = {**_document(), "kind": "work"}
    step = {**_step(GOOD, B, words.SLOWER), "kind": "work",
            "benchmarks": [{"name": "n", "label": "decode", "verdict": "more work",
                            "summary": "+20 aten::clone"}]}
    assert words.outcome_words(work, step) == "more work"
    assert words.step_benchmarks(step) == "decode: more work (+20 aten::clone)"
    assert words.slower_benchmarks(step) == ("n",)


def test_the_report_says_what_the_command_line_printed():
    culprit_pair = _step(A, B, words.SLOWER, [_benchmark("decode", "regression", 1.2)])
    document = _document(answer=words.FOUND, culprit=B, parent=A, first_possible=B,
                         last_possible=B, skipped=[C],
                         steps=[_step(GOOD, BAD, words.SLOWER,
                                      [_benchmark("decode", "regression", 1.2)]),
                                culprit_pair])
    text = render(document, None)
    assert f"**{words.answer_line(document)}**" in text
    assert words.skipped_words(document) in text
    assert (f"Against its parent `aaaaaaaa` one: slower; "
            f"{words.step_benchmarks(culprit_pair)}") in text
    assert words.culprit_step(document) == culprit_pair
