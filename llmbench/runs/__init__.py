"""Saved runs: the one model of a pytest-benchmark run (`model`), reading it back, writing
it atomically and numbering it (`store`), and the environment it was measured in
(`environment`: fingerprint, matching, version differences), and the code it measured
(`code`: commit, clean tree, versions, injected slowdowns). The names below are the
package's API; everything that reads or writes a run goes through them.

May import: `llmbench.errors` only.
"""

from llmbench.runs.code import Code, code_differences, code_of, injected_slowdowns, same_code
from llmbench.runs.environment import (
    FIELD_DEFAULTS,
    MATCHED_FIELDS,
    EnvironmentMismatch,
    environment_differences,
    environment_field,
    environment_key,
    library_versions,
    strip_volatile,
    version_differences,
)
from llmbench.runs.model import (
    FORMAT_VERSION,
    Benchmark,
    Run,
    RunError,
    is_number,
    is_same_run,
    median,
    run_from_json,
)
from llmbench.runs.store import (
    BASELINES_DIR,
    LATEST,
    DamagedRunSkipped,
    NoBaseline,
    check_writable,
    environment_runs,
    latest_comparable,
    latest_run,
    list_runs,
    load_run,
    next_number,
    read_json,
    resolve_run,
    run_file_name,
    run_number,
    save_numbered,
    saved_history,
    write_atomic,
    write_new_json,
)

__all__ = [
    "BASELINES_DIR", "Benchmark", "Code", "DamagedRunSkipped", "EnvironmentMismatch",
    "FIELD_DEFAULTS", "FORMAT_VERSION", "LATEST", "MATCHED_FIELDS", "NoBaseline", "Run",
    "RunError", "check_writable", "code_differences", "code_of", "environment_differences",
    "environment_field",
    "environment_key", "environment_runs", "injected_slowdowns", "is_number", "is_same_run",
    "latest_comparable", "latest_run", "library_versions", "list_runs", "load_run", "median",
    "next_number", "run_file_name",
    "read_json", "resolve_run", "run_from_json", "run_number", "same_code",
    "save_numbered", "saved_history", "strip_volatile", "version_differences", "write_atomic",
    "write_new_json",
]
