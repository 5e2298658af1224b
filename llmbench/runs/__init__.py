"""Saved runs: the one model of a pytest-benchmark run (`model`), reading it back, writing
it atomically and numbering it in a folder (`store`) or a database (`database`), where a
command's runs live and the searches made there (`location`), and the environment it was
measured in
(`environment`: fingerprint, matching, version differences), and the code it measured
(`code`: commit, clean tree, versions, injected slowdowns). The names below are the
package's API; everything that reads or writes a run goes through them.

May import: `llmbench.errors` only.
"""

from llmbench.runs import testbed
from llmbench.runs.code import Code, code_differences, code_of, injected_slowdowns, same_code
from llmbench.runs.database import DatabaseStore, StoreError, is_database_url
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
from llmbench.runs.location import (
    STORE_ENV,
    STORE_HELP,
    NoBaseline,
    Store,
    environment_runs,
    latest_before,
    latest_comparable,
    load_address,
    open_store,
    saved_history,
    store_location,
)
from llmbench.runs.model import (
    FORMAT_VERSION,
    Benchmark,
    Run,
    RunError,
    RunRef,
    is_number,
    is_same_run,
    median,
    run_from_json,
)
from llmbench.runs.store import (
    BASELINES_DIR,
    LATEST,
    DamagedRunSkipped,
    FolderStore,
    check_writable,
    latest_run,
    list_runs,
    load_run,
    next_number,
    read_json,
    resolve_run,
    run_file_name,
    run_number,
    save_numbered,
    write_atomic,
    write_new_json,
)

__all__ = [
    "BASELINES_DIR", "Benchmark", "Code", "DamagedRunSkipped", "DatabaseStore",
    "EnvironmentMismatch", "FIELD_DEFAULTS", "FORMAT_VERSION", "FolderStore", "LATEST",
    "MATCHED_FIELDS", "NoBaseline", "Run", "RunError", "RunRef", "STORE_ENV", "STORE_HELP",
    "Store", "StoreError", "check_writable", "code_differences", "code_of",
    "environment_differences", "environment_field", "environment_key", "environment_runs",
    "injected_slowdowns", "is_database_url", "is_number", "is_same_run", "latest_before",
    "latest_comparable", "latest_run", "library_versions", "list_runs", "load_address",
    "load_run", "median", "next_number", "open_store", "read_json", "resolve_run",
    "run_file_name", "run_from_json", "run_number", "same_code", "save_numbered",
    "saved_history", "store_location", "strip_volatile", "testbed", "version_differences",
    "write_atomic", "write_new_json",
]
