"""A saved bisection (`llmbench bisect`) in words: its outcome and answer names, and the
sentences the command line, the report and the dashboard all say about it.

It reads the saved JSON document only (a dict: `good`, `bad`, `subjects`, `steps`, ...), so
the report and the dashboard, which never import the A/B machinery, say exactly what the
command printed.
"""

from __future__ import annotations

from llmbench.gate.stats import Verdict
from llmbench.gate.work import WorkStatus

# What one step decided about a commit against its baseline.
SLOWER = "slower"  # slower on some benchmark (or, with --work, more counted work)
NOT_SLOWER = "not slower"  # ruled out on every benchmark it watched
UNDECIDED = "undecided"  # its A/B did not decide within its share of the budget
SKIPPED = "skipped"  # the commit could not be measured

# How a bisection ended.
FOUND = "found"  # one commit, measured against its parent
NONE_SLOWER = "none slower"  # BAD is not slower than GOOD beyond the threshold
NARROWED = "narrowed"  # to a range only skipped commits keep open
STOPPED = "stopped"  # a step undecided, or the budget spent: the range reached so far

# What the outcomes are called when counted work is bisected (`--work`).
WORK_WORDS = {SLOWER: "more work", NOT_SLOWER: "no more work"}
# A step's verdicts that make it slower: a timed regression, or more counted work.
WORSE = (Verdict.REGRESSION.value, WorkStatus.MORE.value)


def is_bisection(document: object) -> bool:
    return isinstance(document, dict) and {"good", "bad", "commits", "steps"} <= set(document)


def _work(document: dict) -> bool:
    return document.get("kind") == "work"


def commit_name(document: dict, sha: str | None, quote: str = "`") -> str:
    """A commit as a reader knows it: its short id (in `quote`s), GOOD or BAD, its subject."""
    if sha is None:
        return "–"
    label = " (GOOD)" if sha == document["good"] else " (BAD)" if sha == document["bad"] else ""
    return f"{quote}{sha[:8]}{quote}{label} {document['subjects'].get(sha, '')}".rstrip()


def outcome_words(document: dict, step: dict) -> str:
    return WORK_WORDS.get(step["outcome"], step["outcome"]) if _work(document) else (
        step["outcome"])


def benchmark_words(benchmark: dict) -> str:
    """One benchmark of a step: its verdict, with the ratio and interval a pairing gave."""
    if "ratio" in benchmark:
        return (f"{benchmark['label']}: {benchmark['verdict']} x{benchmark['ratio']:.3f} "
                f"[{benchmark['ci_low']:.3f}, {benchmark['ci_high']:.3f}]")
    return f"{benchmark['label']}: {benchmark['verdict']} ({benchmark['summary']})"


def slower_benchmarks(step: dict) -> tuple[str, ...]:
    """The benchmarks a step found slower (or doing more work)."""
    return tuple(b["name"] for b in step["benchmarks"] if b["verdict"] in WORSE)


def step_benchmarks(step: dict, most: int | None = None) -> str:
    """What decided a step: why it was skipped, or its benchmarks' verdicts (with `most`,
    the slower ones first shown, at most that many)."""
    if step["outcome"] == SKIPPED or not step["benchmarks"]:
        return step.get("reason") or "–"
    shown = list(step["benchmarks"])
    if most is not None:
        slower = slower_benchmarks(step)
        shown = [b for b in shown if b["name"] in slower] or shown
    words = "; ".join(map(benchmark_words, shown[:most]))
    if most is not None and len(shown) > most:
        words += f"; and {len(shown) - most} more"
    return words


def step_line(document: dict, step: dict, quote: str = "") -> str:
    """A step in a line: what against what, its outcome and time, and what decided it."""
    return (f"{commit_name(document, step['commit'], quote)} against "
            f"{commit_name(document, step['baseline'], quote)}: "
            f"{outcome_words(document, step).upper()} ({step['seconds']:.0f} s): "
            f"{step_benchmarks(step, most=4)}")


def _first(document: dict) -> str:
    return "the first commit doing more work" if _work(document) else "the first slower commit"


def range_words(document: dict, quote: str = "`") -> str | None:
    """Where the culprit is known to lie so far, or None before any step narrowed it."""
    if document.get("first_possible") is None:
        return None
    first, last = (commit_name(document, document[end], quote)
                   for end in ("first_possible", "last_possible"))
    return f"{_first(document)} lies from {first} to {last}"


def answer_words(document: dict, quote: str = "`") -> tuple[str, str]:
    """(the answer, what follows it): the culprit, no commit worse, or the range reached
    and why it stopped there."""
    def name(sha: str | None) -> str:
        return commit_name(document, sha, quote)

    answer = document.get("answer")
    if answer == FOUND:
        return f"{_first(document)}: {name(document['culprit'])}", ""
    if answer == NONE_SLOWER:
        if _work(document):
            return ("no commit in this range does more work beyond the work threshold",
                    f"{name(document['bad'])} does no more than {name(document['good'])}")
        return ("no commit in this range is slower beyond the threshold",
                f"{name(document['bad'])} is not slower than {name(document['good'])}")
    if answer is None:
        return "not finished", "interrupted: run the same command again to go on"
    return (range_words(document, quote) or "",
            document.get("reason") or "only skipped commits keep the range open")


def answer_line(document: dict, quote: str = "`") -> str:
    answer, more = answer_words(document, quote)
    return answer + (f": {more}" if more else "")


def skipped_words(document: dict, quote: str = "`") -> str | None:
    if not document.get("skipped"):
        return None
    return ("Skipped, as they could not be measured: "
            + ", ".join(commit_name(document, sha, quote) for sha in document["skipped"]))


def culprit_step(document: dict) -> dict | None:
    """The step that paired the culprit with its parent, when there was one."""
    pair = (document.get("parent"), document.get("culprit"))
    if None in pair:
        return None
    return next((s for s in reversed(document["steps"])
                 if (s["baseline"], s["commit"]) == pair), None)
