"""The benchmark suite's pytest plugin: the options (`options`), the session record
(`record`), the regression gate (`gate_hook`) and the work reference
(`work_reference`), registered together here; at session
end it builds the run's JSON once and hands it first to the gate, then to the save.

Registration: the suite's conftest.py lists this module in `pytest_plugins`, rather than a
`pytest11` entry point as pytest-benchmark uses. `llmbench ab REV` runs an older revision's
suite with that revision's own conftest and llmbench on PYTHONPATH; an entry point would
load the installed llmbench's plugin into every pytest run in the environment (or fail to
import it from REV), and add the suite's options to unrelated test runs.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["llmbench.bench.options", "llmbench.bench.record", "llmbench.bench.interleave",
                  "llmbench.bench.gate_hook", "llmbench.bench.work_reference"]
# pytest rewrites asserts in plugin modules and warns about one imported before it could;
# these are imported just below, before pytest reaches `pytest_plugins`.
pytest.register_assert_rewrite(*pytest_plugins)

from llmbench.bench import gate_hook, interleave, record, work_reference  # noqa: E402
from llmbench.errors import Exit, session_status  # noqa: E402


def _is_worker(config: pytest.Config) -> bool:
    """An xdist worker: the controller judges and saves the session, once."""
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Judge the run, then save it, from one JSON, once no case is left half-measured (the
    interleaver drops cases stopped before their later passes). Judged first, so that
    `--compare-to latest` finds the newest stored run rather than this one; tryfirst, so
    that the gate's test report reaches JUnit XML before it is written."""
    config = session.config
    if _is_worker(config):
        return
    interleave.finish_session(session)
    output = record.run_json(config) if record.benchmarks_enabled(config) else None
    try:
        gate_hook.judge(session, output)
        work_reference.judge(session, output)
    finally:
        # Whatever became of the gate, the run is kept; where it was meant to go, or, if
        # that folder refuses it, elsewhere (the summary says where), failing the session.
        if not record.save(config, output) and getattr(session, "exitstatus", exitstatus) == 0:
            session.exitstatus = session_status(Exit.USAGE)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The gate's verdict table, then where the run was saved."""
    if _is_worker(config):
        return
    gate_hook.summarize(terminalreporter, config)
    work_reference.summarize(terminalreporter, config)
    record.summarize(terminalreporter, config)
