"""The docs site's reference pages, generated from where the flags are declared.

An MkDocs hook (mkdocs.yml `hooks:`): a page holding a marker line is given, in its place,
the tables built here at every `mkdocs build`:
- `<!-- reference: cli -->`: every `llmbench` subcommand and its arguments, from the argparse
  parser `llmbench.cli.build_parser` builds (the gate's flags come from `gate/options.py`'s
  `Flag`s through it);
- `<!-- reference: pytest -->`: every option of the suite's pytest plugin, from the
  `pytest_addoption` hooks of its modules, on pytest's own parser;
- `<!-- reference: nox -->`: every nox session, with its docstring.

So the reference cannot drift from the code; `tests/test_docs_reference.py` checks it
against `llmbench --help` and `pytest --help` as a user sees them.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- reference: (cli|pytest|nox) -->$", re.M)

# The suite's plugin modules that add options, in the order `pytest --help` lists them.
PYTEST_OPTION_MODULES = ("llmbench.bench.options", "llmbench.bench.gate_hook",
                         "llmbench.bench.work_reference", "llmbench.bench.inject")


def _cell(text: str) -> str:
    """Text safe inside one markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _help_of(action: argparse.Action, prog: str) -> str:
    """An argument's help as --help prints it (%(default)s and %% expanded)."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    formatter = argparse.HelpFormatter(prog)
    return formatter._expand_help(action)  # argparse's own expansion, not a copy of it


def _names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    metavar = ""
    if action.nargs != 0:
        metavar = " " + (action.metavar if isinstance(action.metavar, str)
                         else (action.dest.upper() if not action.choices
                               else "{" + ",".join(map(str, action.choices)) + "}"))
    return ", ".join(f"`{name}{metavar}`" for name in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], ()):
        return ""
    return f"`{action.default}`"


def _arguments_table(actions: list[argparse.Action], prog: str) -> list[str]:
    rows = ["| argument | default | meaning |", "|:--|:--|:--|"]
    for action in actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        rows.append(f"| {_names(action)} | {_default(action)} | "
                    f"{_cell(_help_of(action, prog))} |")
    return rows


def subcommands(parser: argparse.ArgumentParser, prefix: str = ""
                ) -> dict[str, argparse.ArgumentParser]:
    """Every subcommand under `parser`, nested ones too (`store push`), by their words."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                words = f"{prefix}{name}"
                found[words] = command
                found.update(subcommands(command, f"{words} "))
    return found


def cli_reference() -> str:
    """Every `llmbench` subcommand: its usage, description, arguments and docs page."""
    from llmbench.cli import build_parser

    lines = []
    for name, command in subcommands(build_parser()).items():
        usage = command.format_usage().removeprefix("usage: ").strip()
        lines += [f"## `llmbench {name}`", "", "```text", usage, "```", "",
                  _cell(command.description or ""), ""]
        lines += _arguments_table(command._actions, command.prog)
        if command.epilog:
            lines += ["", _cell(command.epilog)]
        lines.append("")
    return "\n".join(lines)


ACTION_KEYWORDS = {"option_strings", "dest", "nargs", "const", "default", "type", "choices",
                   "required", "help", "metavar"}


def pytest_options() -> list[argparse.Action]:
    """The llmbench group's options, as the suite's plugin modules declare them on pytest's
    own parser (each read back as the argparse action pytest would add)."""
    from _pytest.config.argparsing import Parser

    parser = Parser(_ispytest=True)
    for module in PYTEST_OPTION_MODULES:
        importlib.import_module(module).pytest_addoption(parser)
    return [argparse.Action(**{k: v for k, v in option.attrs().items() if k in ACTION_KEYWORDS})
            for group in parser._groups for option in group.options]


def pytest_reference() -> str:
    return "\n".join(_arguments_table(pytest_options(), "pytest")) + "\n"


def nox_reference() -> str:
    import nox

    sys.path.insert(0, str(ROOT))
    try:
        import noxfile  # noqa: F401 - registers the sessions
    finally:
        sys.path.remove(str(ROOT))
    rows = ["| session | what it does |", "|:--|:--|"]
    for name, func in nox.registry.get().items():
        rows.append(f"| `nox -s {name}` | {_cell(func.__doc__ or '')} |")
    return "\n".join(rows) + "\n"


GENERATORS = {"cli": cli_reference, "pytest": pytest_reference, "nox": nox_reference}


def expand(markdown: str) -> str:
    """`markdown` with each reference marker replaced by its generated tables."""
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


def on_page_markdown(markdown: str, **_kwargs) -> str:  # MkDocs hook
    return expand(markdown)
