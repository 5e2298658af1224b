"""A reader that closes `llmbench`'s stdout early (`llmbench compare A B | head -c 10`) ends
only the output: the command still exits with its own code (0, 1 for a regression), and
prints no BrokenPipeError traceback. Real processes on real pipes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from gate_runs import make_run, write_run

from llmbench.ab import child_env
from llmbench.errors import Exit

# Enough benchmarks that the JSON verdicts (~0.7 kB each) overflow a 64 kB pipe buffer: the
# command is still writing when the reader leaves, whatever the timing.
MANY = {f"test_decode_steps[ctx={i}]": "decode" for i in range(300)}


def _llmbench(*argv: str) -> list[str]:
    return [sys.executable, "-m", "llmbench", *argv]


def _read_then_close(cmd: list[str], nbytes: int) -> tuple[int, bytes, str]:
    """`cmd | head -c nbytes`: (cmd's exit code, what was read, cmd's stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=child_env())
    head = proc.stdout.read(nbytes)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(timeout=120), head, err


def assert_quiet(err: str) -> None:
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert "Exception ignored" not in err, err


# Twice as slow with no noise between runs measured: not confirmed (6), a non-zero exit.
@pytest.mark.parametrize("factor, expected", [(1.0, Exit.OK), (2.0, Exit.NOT_CONFIRMED)])
def test_compare_piped_into_head_keeps_its_exit_code(tmp_path, factor, expected):
    base = write_run(tmp_path / "base.json", make_run(1, benchmarks=MANY))
    cand = write_run(tmp_path / "cand.json",
                     make_run(2, benchmarks=MANY, factors={"decode": factor}))
    code, head, err = _read_then_close(
        _llmbench("compare", str(base), str(cand), "--format", "json"), 10)
    assert head == b'{\n  "basel'
    assert_quiet(err)
    assert code == expected


def test_a_reader_gone_before_the_first_write_is_no_error():
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: every write meets a closed pipe
    try:
        proc = subprocess.run(_llmbench("models"), stdout=write_end, stderr=subprocess.PIPE,
                              text=True, env=child_env(), timeout=120)
    finally:
        os.close(write_end)
    assert_quiet(proc.stderr)
    assert proc.returncode == Exit.OK
