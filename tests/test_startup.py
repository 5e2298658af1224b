"""Commands that only read runs or send HTTP requests start without the engine's or the
server's libraries: parsing their flags (and --help) must not import torch, transformers
or FastAPI. Checked in a fresh interpreter, where nothing is imported yet."""

from __future__ import annotations

import json
import subprocess
import sys

from llmbench.load.config import LoadConfig
from llmbench.serve.settings import ServerSettings

HEAVY = ("torch", "transformers", "fastapi")

PARSE = """
import json, sys
from llmbench.cli import build_parser

for argv in json.loads(sys.argv[1]):
    try:
        build_parser().parse_args(argv)
    except SystemExit:  # --help
        pass
print(json.dumps(sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)))
"""


def test_light_commands_parse_without_torch_transformers_or_fastapi():
    argvs = [["compare", "a.json", "b.json", "--threshold", "10%"],
             ["report", "run.json", "--baseline", "latest", "-o", "out"],
             ["load", "--concurrency", "1,4"], ["compare", "--help"], ["load", "--help"],
             ["history", "baselines", "-k", "decode"], ["history", "--help"], ["--help"]]
    proc = subprocess.run([sys.executable, "-c", PARSE, json.dumps(argvs), json.dumps(HEAVY)],
                          capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout.splitlines()[-1]) == []


def test_the_load_generator_defaults_to_where_the_server_listens():
    settings = ServerSettings()
    assert LoadConfig().url == f"http://{settings.host}:{settings.port}"
