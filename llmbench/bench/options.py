"""The suite's options, in one group, validated once into `BenchSettings` at configure time;
sweeps parametrized from the active profile; benchmarks refused under xdist (where
pytest-benchmark silently stops timing); cases shuffled on request.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from llmbench import runs
from llmbench.argtypes import one_of, parsed_by, whole_number
from llmbench.bench.profiles import DEFAULT_PROFILE, NOT_IN_PROFILE, PROFILES, SWEEP_ARGNAMES
from llmbench.bench.settings import SETTINGS_KEY, BenchSettings
from llmbench.engine import disturbance
from llmbench.engine.compiled import check_compile_supported
from llmbench.engine.config import (
    ATTENTIONS,
    DEVICES,
    DTYPES,
    KV_CACHES,
    WEIGHTS,
    EngineConfig,
    default_of,
)
from llmbench.engine.device import resolve_device, resolve_dtype
from llmbench.engine.quantized import check_weights_supported
from llmbench.errors import UserError
from llmbench.gate.compare import parse_fraction
from llmbench.load.config import APIS as SERVER_APIS


def pytest_addoption(parser: pytest.Parser) -> None:
    """The suite's options, in one group, each with its default in --help."""
    group = parser.getgroup("llmbench", "llmbench: LLM inference benchmarks")
    d = lambda name: default_of(EngineConfig, name)  # noqa: E731
    group.addoption("--model", default=d("model"), metavar="NAME",
                    help="registered name, hub id or local directory. Default: %(default)r")
    group.addoption("--device", default=d("device"), type=one_of(*DEVICES), metavar="DEVICE",
                    help=f"one of {', '.join(DEVICES)}. Default: %(default)r")
    group.addoption("--dtype", default=d("dtype"), type=one_of(*DTYPES), metavar="DTYPE",
                    help=f"one of {', '.join(DTYPES)}. Default: %(default)r")
    group.addoption("--threads", default=d("threads"), type=whole_number(1), metavar="N",
                    help="torch CPU threads. Default: %(default)r (torch's choice)")
    group.addoption("--attn", default=d("attn"), type=one_of(*ATTENTIONS), metavar="IMPL",
                    help=f"attention implementation, one of {', '.join(ATTENTIONS)} (auto: "
                         "the model's own choice; the engines group measures its "
                         "configurations on this one, and eager beside them). "
                         "Default: %(default)r")
    group.addoption("--cache", dest="kv_cache", default=d("kv_cache"),
                    type=one_of(*KV_CACHES), metavar="KIND",
                    help=f"the KV cache of every generation on our loop, model.generate and "
                         f"the in-process server, one of {', '.join(KV_CACHES)} (the engines "
                         "group measures both side by side whatever this says). "
                         "Default: %(default)r")
    group.addoption("--weights", default=d("weights"), type=one_of(*WEIGHTS), metavar="KIND",
                    help=f"the linear layers' weights, one of {', '.join(WEIGHTS)} (packed: "
                         "prepacked for oneDNN, CPU, eager; int8/int4: weight-only through "
                         "torchao; the engines group measures them beside "
                         "native whatever this says). Default: %(default)r")
    group.addoption("--compile", action="store_true", default=d("compile"),
                    help="torch.compile the decode step (needs --cache static): each case "
                         "compiles its shapes in an untimed call first, reported apart, and "
                         "fails if anything compiles during its rounds. Default: %(default)r")
    group.addoption("--profile", default=DEFAULT_PROFILE, type=one_of(*PROFILES),
                    metavar="NAME", help=f"one of {', '.join(PROFILES)}. Default: %(default)r")
    group.addoption("--rounds", default=None, type=whole_number(1), metavar="N",
                    help="timed rounds per benchmark. Default: %(default)r (the profile's)")
    group.addoption("--warmup-rounds", default=None, type=whole_number(0), metavar="N",
                    help="untimed rounds per benchmark. Default: %(default)r (the profile's)")
    group.addoption("--passes", default=None, type=whole_number(1), metavar="N",
                    help="take each benchmark's rounds in N passes over every benchmark, so "
                         "that each samples the whole run rather than a few seconds of it "
                         "(1: one after another). Default: %(default)r (the profile's)")
    group.addoption("--shuffle-seed", default=None, type=whole_number(0), metavar="N",
                    help="run cases in an order shuffled with this seed, spreading machine "
                         "drift across conditions. Default: %(default)r (file order)")
    group.addoption("--disturbed-share", default=disturbance.default_share_text(),
                    type=parsed_by(parse_fraction, "share"), metavar="PCT",
                    help="a round is disturbed when other processes (or the hypervisor) "
                         "took more than this share of the CPUs it ran on: it is measured "
                         "again and left out of every verdict, and the run counts it; 100%% "
                         f"keeps every round. Default: %(default)r (${disturbance.SHARE_ENV} "
                         "sets it)")
    group.addoption("--server-url", default=None, metavar="URL",
                    help="point the server benchmarks at this external server instead of "
                         "a live in-process one. Default: %(default)r")
    group.addoption("--server-api", default="native", type=one_of(*SERVER_APIS),
                    metavar="API", help=f"one of {', '.join(SERVER_APIS)}. "
                                        "Default: %(default)r")
    group.addoption("--store", default=None, metavar="PATH|URL", help=runs.STORE_HELP)
    group.addoption("--baseline-dir", default=None, metavar="DIR",
                    help="where runs are saved, one folder per environment: --store for a "
                         "folder. Default: --store's")
    group.addoption("--no-save", action="store_true", default=False,
                    help="do not save this run. Default: %(default)r")
    group.addoption("--saved-path-file", default=None, metavar="FILE",
                    help="write the saved run's path to FILE, for a script that goes on "
                         "with it (nox -s bench writes its report from it); no run saved, "
                         "no FILE written. Default: %(default)r")


def _settings_from(config: pytest.Config) -> BenchSettings:
    opt = config.getoption
    try:
        engine = EngineConfig(model=opt("model"), device=opt("device"), dtype=opt("dtype"),
                              threads=opt("threads"), kv_cache=opt("kv_cache"),
                              compile=opt("compile"), attn=opt("attn"),
                              weights=opt("weights"))
        device = resolve_device(engine.device)
        if engine.compile:
            check_compile_supported(device)
        dtype = resolve_dtype(engine.dtype, device)
        check_weights_supported(engine.weights, device, dtype)
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None
    if opt("server_api") != "native" and not opt("server_url"):
        raise pytest.UsageError("--server-api applies to an external server: pass --server-url "
                                "too, or drop --server-api")
    if opt("store") and opt("baseline_dir"):
        raise pytest.UsageError("--store and --baseline-dir both say where runs are saved: "
                                "pass one")
    saved_path_file = opt("saved_path_file")
    if saved_path_file and not Path(saved_path_file).parent.is_dir():
        raise pytest.UsageError(f"--saved-path-file {saved_path_file}: its folder does not "
                                "exist; create it or pick a file in an existing folder")
    profile = PROFILES[opt("profile")]
    rounds, warmup, passes = opt("rounds"), opt("warmup_rounds"), opt("passes")
    return BenchSettings(
        engine=engine, profile=profile,
        rounds=profile.rounds if rounds is None else rounds,
        warmup_rounds=profile.warmup_rounds if warmup is None else warmup,
        device=device.type, dtype=str(dtype).removeprefix("torch."),
        passes=profile.passes if passes is None else passes,
        shuffle_seed=opt("shuffle_seed"), disturbed_share=opt("disturbed_share"),
        server_url=opt("server_url"),
        server_api=opt("server_api"), save=not opt("no_save"),
        store=runs.store_location(opt("store") or opt("baseline_dir")),
        saved_path_file=saved_path_file,
    )


SERIAL_ONLY = ("benchmarks must run serially: drop -n, or pass --benchmark-disable for a "
               "smoke run")


def _may_collect_benchmarks(config: pytest.Config) -> bool:
    """Whether the paths pytest was given (or its testpaths) reach the benchmarks folder."""
    benchmarks = config.rootpath / "benchmarks"
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::", 1)[0]).resolve()
        if path == benchmarks or benchmarks in path.parents or path in benchmarks.parents:
            return True
    return False


def _refuse_parallel_benchmarks(config: pytest.Config) -> None:
    """Under xdist pytest-benchmark silently stops timing, and a green run that measured
    nothing is worse than an error. Refused here, in the controller, before any worker
    starts (a worker's usage error is only an xdist INTERNALERROR). The library's own tests
    (`pytest -n auto tests`) and smoke runs (--benchmark-disable) stay parallel."""
    if (hasattr(config, "workerinput") or config.getoption("dist", default="no") == "no"
            or config.getoption("collectonly")):
        return
    if config.getoption("benchmark_disable") or config.getoption("benchmark_skip"):
        return
    if _may_collect_benchmarks(config):
        raise pytest.UsageError(SERIAL_ONLY)


def _refuse_unwritable_store(config: pytest.Config, settings: BenchSettings) -> None:
    """A run that cannot be saved is refused before its first benchmark, not lost after
    the last one (the controller checks; a session that times nothing saves nothing). A
    database store is reached, and its schema brought to this llmbench's, here."""
    if (not settings.save or hasattr(config, "workerinput")
            or config.getoption("collectonly") or config.getoption("benchmark_disable")
            or config.getoption("benchmark_skip")):
        return
    flag = "--baseline-dir" if config.getoption("baseline_dir") else "--store"
    try:
        runs.open_store(settings.store).check_writable(settings.environment_key)
    except UserError as exc:
        raise pytest.UsageError(f"{flag}: {exc}; fix it, pass another {flag}, or "
                                "--no-save") from None


def _refuse_bad_testbed_fields() -> None:
    """`$LLMBENCH_TESTBED_FIELDS` names fields a run records (`runs.testbed`), or the run
    is refused before it measures anything."""
    try:
        runs.testbed.chosen_fields()
    except UserError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Validate the options once, before any fixture or benchmark sees them."""
    _refuse_parallel_benchmarks(config)
    _refuse_bad_testbed_fields()
    settings = _settings_from(config)
    _refuse_unwritable_store(config, settings)
    config.stash[SETTINGS_KEY] = settings


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize sweep arguments from the active profile, with readable ids. First, so
    their ids lead (`bs=1-loop`), before those a test module parametrizes itself."""
    profile = metafunc.config.stash[SETTINGS_KEY].profile
    for argname in SWEEP_ARGNAMES:
        if argname in metafunc.fixturenames:
            pairs = profile.sweep(argname) or [(NOT_IN_PROFILE, NOT_IN_PROFILE)]
            metafunc.parametrize(argname, [v for _, v in pairs], ids=[i for i, _ in pairs])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the cases of sweeps the profile leaves empty; refuse benchmarks under xdist
    unless explicitly disabled; apply --shuffle-seed."""
    outside = [item for item in items if NOT_IN_PROFILE in getattr(
        getattr(item, "callspec", None), "params", {}).values()]
    if outside:
        items[:] = [item for item in items if item not in outside]
        config.hook.pytest_deselected(items=outside)
    uses_benchmark = any("benchmark" in getattr(i, "fixturenames", ()) for i in items)
    if (uses_benchmark and hasattr(config, "workerinput")
            and not config.getoption("benchmark_disable")):
        # A backstop for paths the controller could not see reaching benchmarks (e.g.
        # --pyargs): crashing the run is still better than timing nothing.
        raise pytest.UsageError(SERIAL_ONLY)
    seed = config.stash[SETTINGS_KEY].shuffle_seed
    if seed is not None:
        random.Random(seed).shuffle(items)
