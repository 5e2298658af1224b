"""The generated reference (scripts/mkdocs_reference.py, an MkDocs hook) lists every flag a
user can pass: each `llmbench` subcommand's, as its --help prints them, and each option of
the suite's pytest plugin, as `pytest --help` prints them. A flag added to the code without
reaching the reference fails here, not for a reader."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmbench.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import mkdocs_reference  # noqa: E402

DOCS = ROOT / "docs"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand, nested ones by their words (`store push`)."""
    return mkdocs_reference.subcommands(build_parser())


@pytest.fixture(scope="module")
def cli_reference() -> str:
    return mkdocs_reference.cli_reference()


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_subcommand_flag_is_in_the_cli_reference(cli_reference, name):
    help_text = _subcommands()[name].format_help()
    # The flags --help lists, each at the start of its own line (not those its texts mention).
    flags = set(re.findall(r"^ {2}(?:-\w[ ,\w{}.]*, )?(--[a-z][\w-]*)", help_text, flags=re.M))
    flags -= {"--help"}
    # Those that only hold subcommands (`store`) have flags only in them.
    assert flags or name in ("models", "store"), help_text
    section = cli_reference.split(f"## `llmbench {name}`", 1)[1].split("\n## ", 1)[0]
    missing = sorted(f for f in flags if f"`{f}" not in section and f"{f} " not in section)
    assert not missing, f"llmbench {name}: not in the reference: {missing}"


def test_every_pytest_option_is_in_the_pytest_reference():
    help_text = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout
    group = help_text.split("llmbench: LLM inference benchmarks:", 1)[1]
    group = re.split(r"\n\S", group, maxsplit=1)[0]  # up to the next section's heading
    flags = set(re.findall(r"^\s{2}(--[a-z][\w-]*)", group, flags=re.M))
    assert len(flags) > 20, group[:500]
    reference = mkdocs_reference.pytest_reference()
    missing = sorted(f for f in flags if f"`{f}" not in reference)
    assert not missing, f"pytest options not in the reference: {missing}"


def test_every_nox_session_is_in_the_nox_reference():
    nox = pytest.importorskip("nox")
    reference = mkdocs_reference.nox_reference()
    for name in nox.registry.get():
        assert f"`nox -s {name}`" in reference


def test_reference_pages_carry_their_markers():
    for page, kind in (("cli", "cli"), ("pytest", "pytest"), ("nox", "nox")):
        text = (DOCS / "reference" / f"{page}.md").read_text(encoding="utf-8")
        expanded = mkdocs_reference.expand(text)
        assert f"<!-- reference: {kind} -->" in text and "<!-- reference:" not in expanded


def test_a_flag_left_out_is_caught():
    """The check itself can fail: a reference missing one flag is reported."""
    cli = mkdocs_reference.cli_reference().replace("`--budget", "`--gone")
    section = cli.split("## `llmbench ab`", 1)[1].split("\n## ", 1)[0]
    assert "`--budget" not in section


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_subcommand_help_ends_with_its_docs_page(name):
    help_text = _subcommands()[name].format_help()
    last = " ".join(help_text.strip().split("\n\n")[-1].split())
    page = re.match(r"Explained in docs/(\S+);", last)
    assert page, last
    assert (DOCS / page.group(1)).is_file(), page.group(1)
