"""`llmbench doctor`: is this machine fit to measure on? What the suite cannot set for itself
(other processes on the CPUs, the hypervisor's steal, the host's own speed round to round,
frequency scaling, turbo, SMT, isolated cores, huge pages, swap, threads), each with what it
costs and how to change it, as pyperf's `system show` reports. Exit 0 when nothing costs
stability, 1 when something does (so a CI step can refuse to measure on a busy runner), 2
for a usage error."""

from __future__ import annotations

import argparse
import json

from llmbench.errors import Exit


def cmd_doctor(args: argparse.Namespace) -> int:
    import torch

    from llmbench.bench.control import ControlWorkload
    from llmbench.engine import machine_state
    from llmbench.engine.device import set_threads

    threads = set_threads(args.threads)
    control = ControlWorkload(torch.device("cpu"))
    checks = machine_state.machine_checks(threads, sample_s=args.sample,
                                          time_once=control.time_once)
    costly = [c for c in checks if c.status == machine_state.COSTS]
    if args.json:
        print(json.dumps({"checks": [c.to_json() for c in checks],
                          "costs": [c.name for c in costly]}, indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{c.status:>7}  {c.name:<{width}}  {c.state}")
            for label, text in (("costs", c.cost), ("fix", c.fix)):
                if text and c.status != machine_state.OK:
                    print(f"{'':>7}  {'':<{width}}  {label}: {text}")
        print(f"\n{len(costly)} of {len(checks)} items cost stability"
              + (f": {', '.join(c.name for c in costly)}" if costly else "")
              + f" (torch {torch.__version__}; measured costs: {machine_state.STABILITY_PAGE})")
    return Exit.REGRESSION if costly else Exit.OK


def register(subparsers) -> None:
    """Add `doctor` to the `llmbench` command."""
    from llmbench.argtypes import duration
    from llmbench.cli.args import positive_int

    parser = subparsers.add_parser(
        "doctor", help="is this machine fit to measure on? what costs stability, and the fix",
        description="Read the machine's state as it bears on timing: other processes and "
                    "steal on this process's CPUs (watched for --sample seconds), the "
                    "frequency governor, turbo, SMT, isolated CPUs, transparent huge pages, "
                    "address-space randomisation, swap, and torch's threads. Exit 1 when an "
                    "item costs stability.")
    parser.add_argument("--threads", type=positive_int, default=None, metavar="N",
                        help="the torch threads the suite would run with. Default: torch's "
                             "choice")
    parser.add_argument("--sample", type=duration, default=1.0, metavar="DURATION",
                        help="how long to watch other processes. Default: %(default)r")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.set_defaults(func=cmd_doctor)
