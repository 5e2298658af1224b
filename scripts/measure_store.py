"""Measure the stores as issue 43 asks, on a PostgreSQL server this script starts itself
(Debian's postgresql, as the tests start it) and a folder beside it:

  python scripts/measure_store.py concurrent RUN.json   # 2 processes x 50 saves at once
  python scripts/measure_store.py pushpull RUN.json     # a folder of 200 runs: push, push, pull
  python scripts/measure_store.py scale RUN.json [T N]  # T testbeds x N runs x 40 benchmarks
                                                        # (10 x 500)

RUN.json is a real saved run (the payload every save copies, each copy made unique by its
datetime); figures go to stdout, one line each, for docs/measurements/.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from postgres import server  # noqa: E402  (the tests' real server, started the same way)

from llmbench import runs  # noqa: E402
from llmbench.runs.store import run_document  # noqa: E402
from llmbench.runs.transfer import copy_runs  # noqa: E402

ENV = "smollm2-135m-cpu-float32"


def _variant(template: dict, i: int, *, testbed: int = 0) -> dict:
    """A copy of a real run made unique (its datetime) and, for the scale test, one of
    several machines (its CPU name and testbed)."""
    payload = copy.deepcopy(template)
    payload["datetime"] = f"2026-{1 + i // 28000:02d}-{1 + i // 1000 % 28:02d}T" \
                          f"{i // 60 % 17:02d}:{i % 60:02d}:{testbed:02d}+00:00"
    if testbed:
        env = payload["llmbench"]["environment"]
        env["device_name"] = f"{env['device_name']} #{testbed}"
        payload["llmbench"]["testbed"] = {**(payload["llmbench"].get("testbed") or {}),
                                          "cpu_model": env["device_name"]}
    return payload


def _saver(args) -> list[tuple[int, str]]:
    url, template, offset, count = args
    store = runs.open_store(url)
    saved = []
    for i in range(count):
        payload = _variant(template, offset + i)
        ref = store.save(payload, ENV, f"p{offset}_{i}")
        saved.append((ref.number, run_document(payload)))
    return saved


def concurrent(template: dict) -> None:
    url = server().database()
    runs.open_store(url).check_writable(ENV)  # the schema, once, before the race
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(_saver, [(url, template, 0, 50), (url, template, 1000, 50)])
    took = time.perf_counter() - started
    saved = [s for r in results for s in r]
    store = runs.open_store(url)
    listing = store.listing(ENV)
    numbers = [r.number for r in listing]
    identical = sum(store.document(ENV, n) == doc for n, doc in saved)
    first = sorted(n for n, _ in results[0])
    # How the two writers' saves interleaved: turns of one writer between the other's.
    owner = {n: 0 for n, _ in results[0]} | {n: 1 for n, _ in results[1]}
    order = sorted(owner)
    turns = sum(owner[a] != owner[b] for a, b in zip(order, order[1:], strict=False))
    print(f"concurrent: 2 processes x 50 saves in {took:.1f} s: {len(listing)} runs, "
          f"{len(set(numbers))} unique numbers ({min(numbers)}..{max(numbers)}), "
          f"{identical} of {len(saved)} read back identical; the first writer's numbers "
          f"{first[0]}..{first[-1]}, {turns} changes of writer along the numbers")


def pushpull(template: dict) -> None:
    url = server().database()
    with tempfile.TemporaryDirectory() as tmp:
        folder = runs.FolderStore(Path(tmp) / "baselines")
        for i in range(200):
            folder.save(_variant(template, i), ENV, f"r{i}")
        store = runs.open_store(url)
        started = time.perf_counter()
        first = copy_runs(folder, store)
        pushed = time.perf_counter() - started
        second = copy_runs(folder, store)
        back = runs.FolderStore(Path(tmp) / "pulled")
        started = time.perf_counter()
        pulled = copy_runs(store, back)
        took = time.perf_counter() - started
        same = sum((Path(tmp) / "baselines" / ENV / p.name).read_bytes() == p.read_bytes()
                   for p in (Path(tmp) / "pulled" / ENV).iterdir()
                   if p.suffix == ".json")
        print(f"push 200: {first.summary()} in {pushed:.1f} s; second push: "
              f"{second.summary()}; pull: {pulled.summary()} in {took:.1f} s; "
              f"{same} of 200 files byte-identical to the pushed ones")


def _timed(what: str, call) -> object:
    started = time.perf_counter()
    out = call()
    print(f"  {what}: {time.perf_counter() - started:.2f} s")
    return out


def scale(template: dict, testbeds: int = 10, per: int = 500) -> None:
    from llmbench.dashboard import build_site
    from llmbench.history.series import history_of  # noqa: F401  (warm the import)

    bench = template["benchmarks"]
    while len(bench) < 40:  # 40 benchmarks: the quick suite's 37 and copies named apart
        extra = copy.deepcopy(bench[len(bench) % 37])
        extra["name"] += "-copy"
        extra["fullname"] += "-copy"
        bench.append(extra)
    url = server().database()
    with tempfile.TemporaryDirectory() as tmp:
        stores = {"postgresql": runs.open_store(url),
                  "folder": runs.FolderStore(Path(tmp) / "baselines")}
        payloads = [(_variant(template, i, testbed=t + 1), t) for t in range(testbeds)
                    for i in range(per)]
        for name, store in stores.items():
            started = time.perf_counter()
            for payload, t in payloads:
                store.save(payload, f"{ENV}-{t}", f"r{t}")
            print(f"scale, {name}: {len(payloads)} runs saved in "
                  f"{time.perf_counter() - started:.0f} s")
        env = payloads[0][0]["llmbench"]["environment"]
        bed = payloads[0][0]["llmbench"].get("testbed")
        key = bench[4]["fullname"]
        for name, store in stores.items():
            print(f"scale, {name}:")
            _timed("--compare-to=latest resolves", lambda s=store: runs.latest_comparable(
                s, f"{ENV}-0", env, bed=bed))
            _timed(f"history of {key.split('::')[-1]}", lambda s=store: _history(s, key))
            source = url if name == "postgresql" else str(Path(tmp) / "baselines")
            _timed("dashboard builds", lambda src=source, n=name: build_site(
                src, Path(tmp) / f"site-{n}"))


def _history(store, key: str):
    """`llmbench history` of one benchmark (-k), as a user types it, output discarded."""
    import contextlib
    import io

    from llmbench.cli import main

    name = key.split("::")[-1]
    argv = (["history", "--store", store.name, f"{ENV}-0", "-k", name] if store.is_database
            else ["history", str(Path(store.name) / f"{ENV}-0"), "-k", name])
    with contextlib.redirect_stdout(io.StringIO()):
        return main(argv)


if __name__ == "__main__":
    what, source = sys.argv[1], json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
    sizes = [int(a) for a in sys.argv[3:]]  # scale: testbeds, runs each (10, 500)
    {"concurrent": concurrent, "pushpull": pushpull, "scale": scale}[what](source, *sizes)
