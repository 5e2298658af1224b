"""The README's commands must stay true: every `llmbench`, `pytest` and `nox` command shown
parses against the real parsers, so a renamed flag or session fails here, not for a reader.
(CI runs the test command itself; the suite's own options are exercised by the other tests.)
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from llmbench.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> list[str]:
    """Shell commands in the README's bash blocks, continuations joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                commands.extend(part.strip() for part in line.split("&&"))
    return commands


def _of(program: str) -> list[list[str]]:
    return [shlex.split(c)[1:] for c in _commands() if shlex.split(c)[0] == program]


def test_the_first_lines_give_the_two_commands():
    first_block = re.search(r"```bash\n(.*?)```", README, flags=re.S).group(1)
    lines = [line for line in first_block.splitlines() if line.strip()]
    assert len(lines) == 2
    assert "nox -s bench" in lines[0] and "main job" in lines[0]
    assert "nox -s tests" in lines[1] and "tests" in lines[1]
    assert "nox -s tests" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.parametrize("argv", _of("llmbench"), ids=" ".join)
def test_llmbench_commands_parse(argv):
    build_parser().parse_args(argv)  # SystemExit (exit 2) on an unknown flag or value


def test_pytest_options_exist():
    help_text = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout
    used = {arg.split("=", 1)[0] for argv in _of("pytest") for arg in argv
            if arg.startswith("--")}
    assert used, "the README shows no pytest options"
    missing = sorted(opt for opt in used if opt not in help_text)
    assert not missing, f"README uses pytest options that do not exist: {missing}"


def test_nox_sessions_exist():
    nox = pytest.importorskip("nox")
    sys.path.insert(0, str(ROOT))
    try:
        import noxfile  # noqa: F401 - registers the sessions
    finally:
        sys.path.remove(str(ROOT))
    sessions = set(nox.registry.get())
    named = {argv[argv.index("-s") + 1] for argv in _of("nox")}
    assert named and named <= sessions, named - sessions
