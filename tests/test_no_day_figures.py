"""No figure measured on a particular day in a docstring or a code comment.

Docstrings and comments say what the code does and why. A figure one machine gave on one
day (a timing, a rate, a ratio or a spread seen there, a memory move, a count of page
faults) goes to a dated page, docs/measurements/YYYY-MM-DD-topic.md, with the machine, the
commit and the command that reproduces it, and the code points to that page.

This reads every docstring (and any other bare string statement) and every comment of the
package, the suite, its fixtures, the scripts, conftest.py and noxfile.py, with `ast` and
`tokenize`, and fails on the shapes such figures take. It is precise rather than broad: a
rate or a timing after "took" always fails, while a bare ratio, percentage, size or
duration fails only where a word near it in its sentence says it was measured, or on what
machine. A design constant ("a floor of 128 MiB"), a unit, an API fact or arithmetic passes, and
user-facing strings (messages, help texts) are not read at all. Review catches the rest.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("llmbench", "benchmarks", "fixtures", "scripts")
FILES = ("conftest.py", "noxfile.py")

_NUM = r"\d+(?:[.,]\d+)*"
_RANGE = rf"{_NUM}(?:\s*(?:-|–|to)\s*{_NUM})?"
_TIME = r"(?:ms|µs|us|s|secs?|seconds?|mins?|minutes?|h|hours?)"

# Figures that are measurements wherever they appear.
ALWAYS = {
    "a rate per token": re.compile(
        rf"{_RANGE}\s*(?:ms|µs|us|s)\s*(?:/|per)\s*(?:output\s+|prompt\s+)?tok(?:en)?s?\b"),
    "a rate per second": re.compile(
        rf"{_RANGE}\s*k?\s*(?:tokens?|tok|req(?:uest)?s?)\s*(?:/|per)\s*s(?:ec(?:ond)?)?\b"),
    "a time something took": re.compile(
        rf"\b(?:took|lasted|ran\s+(?:for|in)|spent|retries\s+for)\s+"
        rf"(?:about\s+|around\s+|nearly\s+|almost\s+|over\s+|under\s+|~\s*|≈\s*)?"
        rf"{_RANGE}\s*{_TIME}\b"),
    "a count of page faults": re.compile(
        rf"{_RANGE}\s*k?\s+(?:minor\s+|major\s+)?page[- ]faults\b"),
}

# Figures that are measurements where their sentence says so (MEASURED).
FIGURES = {
    "a ratio": re.compile(rf"(?<![\w.]){_RANGE}\s*[x×](?!\w)|(?<!\w)[x×]\s?\d+\.\d+"),
    "a percentage": re.compile(rf"(?<![\w.]){_RANGE}\s*%"),
    "a size": re.compile(rf"(?<![\w.]){_RANGE}\s*(?:KiB|MiB|GiB|kB|KB|MB|GB)\b"),
    "a duration": re.compile(rf"(?<![\w.])~?\s*{_RANGE}\s*{_TIME}(?!\w)"),
    "a count in thousands": re.compile(rf"(?<![\w.]){_NUM}k\b"),
    "a correlation": re.compile(r"(?<![\w.])0\.\d+\s*(?:-|–|to)\s*[01]\.\d+"),
}
MEASURED = re.compile(
    r"\bmeasur(?:ed|ing)\b|\btook\b|\bseen\b|\bsaw\b|\bobserved\b|\bcame out\b|\bhere\b"
    r"|\b(?:moved|drifted|correlated|showed|gave|costs?)\b|\bapart\b"
    r"|\bon (?:a|an|this|our|my|the|one)\s+(?:[\w-]+\s+){0,4}"
    r"(?:box|VM|machine|laptop|host|CPU|GPU|day)\b"
    r"|\b\d+-(?:core|vCPU|thread)\b|\b\d+ cores\b|\bEPYC\b|\bXeon\b|\bAVX2\b",
    re.I)

# How near (in characters) a cue must be to a figure of FIGURES.
NEAR = 80
# Quoted or `code`: an example of output or input ("'slower by 7%-10%'"), not a finding.
QUOTED = re.compile(r"`[^`]*`|(?<!\w)'[^'\n]{1,80}'(?!\w)|(?<!\w)\"[^\"\n]{1,80}\"(?!\w)")
# A sentence ends at . ! ? or ; followed by white space (so decimals stay whole).
SENTENCE = re.compile(r"(?:[^.!?;]|[.!?;](?!\s|$))+")


def scope() -> list[Path]:
    paths = [path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]
    return paths + [ROOT / name for name in FILES]


def prose(source: str) -> list[tuple[int, str]]:
    """(first line, text) of each docstring or other bare string statement, and of each
    run of comments on consecutive lines, in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            found.append((node.value.lineno, node.value.value))
    block: list[str] = []
    start = last = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if block and line != last + 1:
            found.append((start, "\n".join(block)))
            block = []
        if not block:
            start = line
        block.append(token.string.lstrip("#").strip())
        last = line
    if block:
        found.append((start, "\n".join(block)))
    return found


def day_figures(text: str) -> list[tuple[int, str, str]]:
    """(line offset, what, the text matched) of each day's figure in `text`."""
    hits = []
    text = QUOTED.sub(lambda quoted: re.sub(r"[^\n]", " ", quoted.group()), text)
    for sentence in SENTENCE.finditer(text):
        words = sentence.group()
        cues = [cue.start() for cue in MEASURED.finditer(words)]
        taken: list[range] = []  # one finding per figure, under the first shape it fits
        for what, pattern in (ALWAYS | FIGURES).items():
            for match in pattern.finditer(words):
                if what in FIGURES and not any(abs(cue - match.start()) <= NEAR for cue in cues):
                    continue
                if any(match.start() in span or match.end() - 1 in span for span in taken):
                    continue
                taken.append(range(match.start(), match.end()))
                offset = text.count("\n", 0, sentence.start() + match.start())
                hits.append((offset, what, match.group().strip()))
    return hits


def findings(source: str, name: str) -> list[str]:
    return [f"{name}:{line + offset}: {what}: {figure!r}"
            for line, text in prose(source)
            for offset, what, figure in day_figures(text)]


def test_no_day_figures_in_docstrings_or_comments():
    found = [finding for path in scope()
             for finding in findings(path.read_text(encoding="utf-8"),
                                     str(path.relative_to(ROOT)))]
    assert not found, (
        "a figure measured on one day, in a docstring or comment: state the behaviour and "
        "its reason in words, put the figure on a dated page under docs/measurements/ "
        "(machine, commit, command) and point there:\n" + "\n".join(found))


def test_the_scope_is_read():
    paths = scope()
    assert ROOT / "llmbench" / "gate" / "stats.py" in paths
    assert ROOT / "noxfile.py" in paths
    assert all(path.is_file() for path in paths)


PLANTED = [
    ("decode", '"""Decode runs at 46 ms/token on the default model."""'),
    ("throughput", "x = 1  # the server holds 120 tokens/s at concurrency 8"),
    ("took", '"""Compiling is slow (the first call took 170 s)."""'),
    ("took-minutes", "# warming both at once took about 3 minutes"),
    ("ratio", '"""Packed weights decode faster: measured 1.78x eager."""'),
    ("ratio-range", "# a bfloat16 prefill measured 4-7x slower on a 2-core AVX2 EPYC"),
    ("x-ratio", '"""The slowed decode came out x1.23 against the baseline."""'),
    ("percent", '"""On a shared 2-core box, separate runs of the same code land 14-20% apart."""'),
    ("memory", "# two runs of one commit moved a server case by 57 MiB here"),
    ("faults", '"""Four processes took 6.5k, 7.0k and 88k minor page faults."""'),
    ("thousands", "# on this VM a prefill took 88k faults"),
    ("duration", '"""On a 2-vCPU VM a warm-up round costs ~50 s of budget."""'),
    ("correlation", '"""Measured on a 2-core VM, run effects correlated 0.6-0.9."""'),
    ("method", 'class A:\n    def f(self):\n        """Seen here: 0.84x and 1.16x."""\n'),
]


@pytest.mark.parametrize("source", [source for _, source in PLANTED],
                         ids=[name for name, _ in PLANTED])
def test_a_planted_figure_fails(source):
    assert findings(source, "planted.py")


NOT_FIGURES = [
    ("default", '"""A case that grows by more than the threshold (default 10%) fails."""'),
    ("floor", "FLOOR = 128 << 20  # a move must also exceed 128 MiB"),
    ("setting", '"""glibc raises that threshold, up to 32 MiB, whenever it frees a block."""'),
    ("design", "# each look ~1.5x the pairs of the one before"),
    ("maths", '"""8 pairs all one way give p = 2/2^8 = 0.0078."""'),
    ("alpha", '"""Holm over the run keeps false alarms at alpha = 0.05."""'),
    ("budget", "BUDGET_S = 600.0  # ten minutes: the default budget"),
    ("api", "# a Unix socket's address is limited to ~100 bytes"),
    ("machine-words", '"""On a shared machine runs of one code land far apart."""'),
    ("pointer", "# figures: docs/measurements/2026-12-02-stored-verdicts.md"),
    ("example", '"""\'slower by 7%-10%\' when a benchmark still moved significantly."""'),
    ("code", '"""Seen as `3d12a17b+slow decode_step x1.15` in a run\'s title."""'),
    ("message", 'raise SystemExit("decode took 170 s, 46 ms/token")'),
    ("help", 'HELP = "e.g. 10m or 90s; on a 2-core CPU the quick profile took 8 min"'),
]


@pytest.mark.parametrize("source", [source for _, source in NOT_FIGURES],
                         ids=[name for name, _ in NOT_FIGURES])
def test_what_is_no_day_figure_passes(source):
    assert not findings(source, "clean.py")


def test_a_figure_planted_in_a_real_module_fails():
    path = ROOT / "llmbench" / "gate" / "memory.py"
    source = path.read_text(encoding="utf-8")
    assert not findings(source, "memory.py")
    planted = source.replace("# b may be 0: then the floor decides",
                             "# b may be 0 (it was on a 2-core VM, where a case moved 57 MiB)", 1)
    assert planted != source
    assert [finding.split(": ", 1)[1] for finding in findings(planted, "memory.py")] == [
        "a size: '57 MiB'"]


def test_a_finding_names_its_line():
    source = 'def f():\n    """What f does.\n\n    It took 170 s on a 2-core VM."""\n'
    assert findings(source, "planted.py") == [
        "planted.py:4: a time something took: 'took 170 s'"]
