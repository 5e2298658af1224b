"""Exceptions by audience.

`UserError` and its subclasses carry a one-line message that says what is wrong and how
to fix it; the CLI prints that line and exits with `Exit.USAGE`. Internal invariants use
`assert`; outcomes such as a detected regression have their own named exceptions.
"""

import enum


class Exit(enum.IntEnum):
    """Every exit code llmbench's commands, its pytest plugin and nox give, by outcome; which
    command gives which: docs/verdicts.md. Under pytest a usage error is pytest's own 4
    (`session_status`)."""

    OK = 0
    # A regression (of time, counted work or peak memory), an inconclusive benchmark under
    # --fail-on-inconclusive, a failed request or check: what a script must stop on.
    REGRESSION = 1
    USAGE = 2  # bad input, said in one line (`UserError`)
    # A stored comparison found benchmarks slower that it could neither prove nor clear: not
    # a pass, not a regression (`llmbench.gate.stored`). Outside pytest's own 0-5.
    NOT_CONFIRMED = 6
    INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports it


def session_status(code: Exit) -> int:
    """The pytest session status that says `code`: pytest's own codes where it has one (a
    usage error is its 4), ours above its 0-5 otherwise."""
    return {Exit.OK: 0, Exit.REGRESSION: 1, Exit.USAGE: 4}.get(code, int(code))


class UserError(ValueError):
    """Bad input from the user: the message is shown as is, without a traceback."""


class DeviceUnavailable(UserError):
    """The requested device is not present on this machine."""


class ModelNotFound(UserError):
    """The requested model is neither registered, nor a local directory, nor cached."""
