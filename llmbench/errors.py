"""Exceptions by audience.

`UserError` and its subclasses carry a one-line message that says what is wrong and how
to fix it; the CLI prints that line and exits with `EXIT_USAGE`. Internal invariants use
`assert`; outcomes such as a detected regression have their own named exceptions.
"""

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
# A stored comparison found benchmarks slower that it could neither prove nor clear: not a
# pass, not a regression (`llmbench.gate.stored`). Outside pytest's own 0-5.
EXIT_NOT_CONFIRMED = 6


class UserError(ValueError):
    """Bad input from the user: the message is shown as is, without a traceback."""


class DeviceUnavailable(UserError):
    """The requested device is not present on this machine."""


class ModelNotFound(UserError):
    """The requested model is neither registered, nor a local directory, nor cached."""
