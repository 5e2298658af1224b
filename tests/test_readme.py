"""The commands the README and the docs show must stay true.

Every command in a ```bash block of README.md or of a page under docs/ is checked: each
`llmbench` command parses against the real parser, each `pytest` option exists in `pytest
--help`, each `nox -s` session exists, and each `pip install` installs what the project
declares. A renamed flag or session fails here, not for a reader. Commands of other tools
(curl, llama.cpp, vLLM) go in ```sh blocks: examples that are not run. (CI runs the test
command itself; the suite's options are exercised by the other tests.)
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from llmbench.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {"README.md": README} | {
    str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "docs").rglob("*.md"))}
# What a ```bash block may run: everything else belongs in a ```sh block (not run).
CHECKED = {"llmbench", "pytest", "nox", "pip", "python"}
SHELL = {"cd", "export", "git", "ls", "open", "xdg-open", "cat", "mkdir", "source"}


def _commands(text: str) -> list[str]:
    """Shell commands in a text's bash blocks, continuations joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                commands.extend(part.strip() for part in re.split(r"&&|;", line)
                                if part.strip())
    return commands


def _words(command: str) -> list[str]:
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before a command
        words = words[1:]
    if words[:2] == ["python", "-m"]:
        words = words[2:]
    return words


@cache
def _all() -> list[tuple[str, list[str]]]:
    return [(page, _words(c)) for page, text in PAGES.items() for c in _commands(text)]


def _of(program: str) -> list[tuple[str, list[str]]]:
    return [(page, words[1:]) for page, words in _all() if words and words[0] == program]


def test_the_first_lines_give_the_two_commands():
    first_block = re.search(r"```bash\n(.*?)```", README, flags=re.S).group(1)
    lines = [line for line in first_block.splitlines() if line.strip()]
    assert len(lines) == 2
    assert "nox -s bench" in lines[0] and "main job" in lines[0]
    assert "nox -s tests" in lines[1] and "tests" in lines[1]
    assert "nox -s tests" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_readme_stays_a_short_manual():
    assert len(README.splitlines()) <= 160
    # The verdict section comes early: on the first screen a user scrolls to.
    assert README.index("## Reading a verdict") < len(README) // 2


def test_bash_blocks_only_run_what_is_checked():
    unknown = sorted({f"{page}: {' '.join(words)}" for page, words in _all()
                      if words and words[0] not in CHECKED | SHELL})
    assert not unknown, f"put these in ```sh blocks (examples not run), or check them: {unknown}"


@pytest.mark.parametrize("page, argv", _of("llmbench"), ids=lambda v: v if isinstance(v, str)
                         else " ".join(v))
def test_llmbench_commands_parse(page, argv):
    build_parser().parse_args(argv)  # SystemExit (exit 2) on an unknown flag or value


def test_pytest_options_exist():
    help_text = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout
    used = {(page, arg.split("=", 1)[0]) for page, argv in _of("pytest") for arg in argv
            if arg.startswith("--")}
    assert used, "no page shows a pytest option"
    # --slow-down exists with the injector plugin loaded (-p llmbench.bench.inject) only.
    missing = sorted(f"{page}: {opt}" for page, opt in used
                     if opt not in help_text and opt != "--slow-down")
    assert not missing, f"pages use pytest options that do not exist: {missing}"


def test_nox_sessions_exist():
    nox = pytest.importorskip("nox")
    sys.path.insert(0, str(ROOT))
    try:
        import noxfile  # noqa: F401 - registers the sessions
    finally:
        sys.path.remove(str(ROOT))
    sessions = set(nox.registry.get())
    named = {(page, argv[argv.index("-s") + 1]) for page, argv in _of("nox") if "-s" in argv}
    assert named
    unknown = sorted(f"{page}: {name}" for page, name in named if name not in sessions)
    assert not unknown, unknown


def test_pip_installs_name_what_the_project_declares():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    for page, argv in _of("pip"):
        assert argv and argv[0] == "install", f"{page}: pip {' '.join(argv)}"
        for arg in argv[1:]:
            if arg.startswith("-"):
                continue
            if arg.startswith(".["):  # an extra of this project
                for extra in arg[2:-1].split(","):
                    assert f"\n{extra} = [" in pyproject, f"{page}: no extra {extra!r}"
            elif "==" in arg:  # a pin: the one nox installs
                name, version = arg.split("==")
                assert f'"{version}"' in noxfile, f"{page}: {arg} is not noxfile's pin"
