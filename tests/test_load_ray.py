"""`llmbench load --workers N --ray ADDRESS`: one open-loop schedule sent by the actors of
a real Ray cluster, started here on this machine with `ray start --head` (a one-machine
cluster: the same actors, calls and clocks as across machines), against a live tiny server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray  # the test extras install it (llmbench[cluster])

from llmbench import cli
from llmbench.engine.config import SamplingParams
from llmbench.errors import UserError
from llmbench.load.client import run_load
from llmbench.load.config import LoadConfig
from llmbench.load.schedule import Arrivals

# Every test here shares one cluster, and `ray stop` ends every Ray process on the machine:
# one xdist worker runs them all.
pytestmark = pytest.mark.xdist_group("ray-cluster")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_command() -> list[str]:
    found = shutil.which("ray", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "ray.scripts.scripts"]


PORT_FLAGS = ("--port", "--node-manager-port",
              "--object-manager-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")
STARTED = "block forever"  # what `ray start --block` prints once the head is up


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A Ray head on loopback with two CPUs: room for two load workers. It runs as
    `ray start --block` in a process group of its own, on free ports, and is ended by
    ending that group: `ray stop` would end every Ray cluster of this user on the machine.
    Session-scoped: xdist may run other modules' tests between these, and a cluster is slow
    to start."""
    temp = tmp_path_factory.mktemp("ray")
    ports = {flag: _free_port() for flag in PORT_FLAGS}
    log = temp / "head.log"
    with log.open("w") as out:
        head = subprocess.Popen(
            [*_ray_command(), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
             *(f"{flag}={port}" for flag, port in ports.items()), "--num-cpus=2",
             "--include-dashboard=false", "--object-store-memory=100000000",
             f"--temp-dir={temp}", "--disable-usage-stats"],
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while STARTED not in log.read_text(errors="replace"):
            assert head.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        yield f"127.0.0.1:{ports['--port']}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _end_group(head)


def _end_group(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def test_the_cluster_sends_one_schedule_from_one_moment(cluster, tiny_server, tiny_lm):
    """Two actors send the even and the odd requests of one seeded schedule; every request
    comes back to the coordinator at its own offset, counted by its tokenizer, and the same
    seed on one process sends the same requests at the same offsets."""
    arrivals = Arrivals(rate=20.0, seed=3)
    params = SamplingParams(max_new_tokens=3, ignore_eos=True)
    prompts = ["Hi", "Name a color.", "What is a cache?"]
    done = []
    spread = run_load(LoadConfig(url=tiny_server, num_requests=12, arrivals=arrivals,
                                 workers=2, ray_address=cluster),
                      params, tiny_lm.tokenizer, prompts, progress=lambda: done.append(1))
    alone = run_load(LoadConfig(url=tiny_server, num_requests=12, arrivals=arrivals),
                     params, tiny_lm.tokenizer, prompts)
    assert len(done) == 12 and spread.num_errors == 0
    assert [s.index for s in spread.samples] == list(range(12))
    assert [s.scheduled_s for s in spread.samples] == pytest.approx(arrivals.offsets(12))
    assert [s.scheduled_s for s in spread.samples] == [s.scheduled_s for s in alone.samples]
    assert [s.input_tokens for s in spread.samples] == [s.input_tokens for s in alone.samples]
    assert all(s.output_tokens == 3 for s in spread.samples)
    # Each request left no earlier than due on its worker's clock.
    assert all(s.lag_s > -1e-3 for s in spread.samples)


def test_the_cli_spreads_over_the_cluster_and_records_every_request(cluster, tiny_server,
                                                                    tmp_path, capsys):
    records = tmp_path / "requests.jsonl"
    code = cli.main(["load", "--url", tiny_server, "--model", "tiny", "--max-new-tokens", "3",
                     "--fixed-length", "--max-lag", "1000", "--rate", "10", "--requests",
                     "8", "--seed", "1", "--workers", "2", "--ray", cluster, "--records",
                     str(records)])
    assert code == 0, capsys.readouterr()
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert sorted(line["index"] for line in lines) == list(range(8))
    assert all(line["output_tokens"] == 3 for line in lines)


def test_more_workers_than_the_cluster_has_cpus_is_one_line(cluster, tiny_server, tiny_lm):
    config = LoadConfig(url=tiny_server, num_requests=4, arrivals=Arrivals(rate=10.0),
                        workers=3, ray_address=cluster)
    from llmbench.load import cluster as ray_cluster

    short = pytest.MonkeyPatch.context()
    with short as patch, pytest.raises(UserError, match="did not start 3 load worker"):
        patch.setattr(ray_cluster, "READY_TIMEOUT_S", 5.0)
        run_load(config, SamplingParams(max_new_tokens=1), tiny_lm.tokenizer, ["Hi"])


def test_ray_needs_an_open_loop():
    with pytest.raises(UserError, match="--ray spreads an open-loop schedule"):
        LoadConfig(ray_address="auto")


def test_an_address_where_nothing_answers_is_one_line_and_exit_2():
    # A fresh process: one that joined a cluster already stays joined.
    port = _free_port()  # nothing listens there
    proc = subprocess.run(
        [sys.executable, "-m", "llmbench", "load", "--url", "http://127.0.0.1:9", "--model",
         "tiny", "--rate", "1", "--workers", "2", "--ray", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"llmbench load: error: cannot join the Ray cluster at "
                                  f"'127.0.0.1:{port}': nothing answers there")
    assert len(proc.stderr.strip().splitlines()) == 1
