"""Paired A/B: two suites, one round at a time in turn, judged sequentially within a budget.

`llmbench ab REV` starts REV's benchmark suite (the baseline, in a temporary worktree) and
the working tree's (the candidate) as two long-lived pytest processes. Each loads and
warms its model once (collection runs on both at once; loading in turn). A plugin of
this llmbench (`pair_worker`, loaded with `-p`, so REV needs no pairing code of its own)
makes each process ask before every round and wait, blocked on a socket, for its turn.
This module is the other end: it hands out the turns.

For each benchmark both sides have, in the suite's order, rounds are taken in pairs, A then
B, then B then A (ABBA by pair), so no side always goes first after the other has run.
After each pair the benchmark is judged at the looks of a group-sequential design
(`sequential`) and stopped as soon as it is decided; pairs are spent only on benchmarks
still open. The budget is shared: each benchmark gets an equal share of what is left when
it starts, so an undecidable one cannot starve the rest; one that runs out of its share is
inconclusive, with the pairs that should decide it. A confirmation passes a schedule
instead (`shares`): its candidates in its order, each with the time of its first deciding
look reserved. It also focuses (`focus`): as it needs only one regression decided, a
benchmark whose pairs point at a regression may take the rest of the budget while the look
that should decide it fits.

Both sides start on the same CPUs when the suite runs fewer threads than there are CPUs
(`cpus`): otherwise each process keeps whichever CPU it was given, and the pairs compare
two placements rather than two revisions.

A pair in which either round was disturbed (other processes or the hypervisor took more than
the disturbed share of that side's CPUs while it ran: `llmbench.engine.disturbance`, which
each side reads around its rounds) is dropped on both sides and taken again; the pairing
counts them per benchmark (`disturbed`), and the saved runs hold only the pairs judged.

Each side's rounds are still saved by its own suite as an ordinary run (with the pairing
recorded), so `compare` and `report` read them; `--keep DIR` keeps them with a
`pairing.json` of every pair. A side that fails (pytest error, failed check, crash) ends
both workers and raises `ABError` with one line; so do Ctrl-C (`KeyboardInterrupt`, after
which the caller prints what was decided) and every other exit: workers never outlive this.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from llmbench.ab import cpus, pair_worker, shares
from llmbench.ab.checkout import ABError, Checkout, check_imports, check_pytest_args, side_env
from llmbench.ab.focus import leaving_look, takes_the_rest
from llmbench.ab.pair_worker import Channel
from llmbench.engine import disturbance
from llmbench.gate import sequential

POLL_S = 1.0  # how often a wait checks that the worker is still alive
CONNECT_TIMEOUT_S = 300.0  # starting pytest and importing torch; a slow disk is slow
SIDES = ("baseline", "candidate")
CLEARED = "cleared"  # a record's stop: its pairs rule out a regression (a confirmation's)
FAMILY = "family"  # a record's stop: a family member with its pairs (`gate.family`)


class SideFailed(ABError):
    """One side's suite failed or its process died: both workers are ended."""


@dataclass
class Worker:
    """One side's pytest process and what it has reported."""

    name: str
    checkout: Checkout
    proc: subprocess.Popen
    log_path: Path
    channel: Channel | None = None
    request: list | None = None  # what it is waiting for now
    timed: dict[str, list[float]] = field(default_factory=dict)
    # Each timed round's share of its CPUs that others took (None: no counters there).
    others: dict[str, list[float | None]] = field(default_factory=dict)
    forget: bool = False  # its next reply tells it to drop its last timed round
    last_took: tuple[str, bool, float | None] | None = None  # nodeid, timed, others' share

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no output)"
        kept = [line for line in text.strip().splitlines() if line.strip()]
        return " | ".join(kept[-lines:]) or "(no output)"


@dataclass
class BenchmarkRecord:
    """One benchmark's pairing: its pairs in order and why it stopped."""

    name: str
    group: str | None
    threshold: float
    # The verdict it stopped on, "cleared", "max pairs", "budget", "not reached".
    stopped: str = ""
    seconds: float = 0.0
    # The first look at which its pairs pointed at a regression that the rest of the budget
    # should decide (`focus`), so it might go on past its share; 0: none did.
    focused_at: int = 0
    focused: bool = False  # whether it holds the rest of the budget now
    disturbed: int = 0  # pairs dropped because other work disturbed a round of theirs
    # A family member's pairs when they pointed at a regression the time left should decide,
    # so it left the family to be decided alone (`focus.leaving_look`); 0: it did not.
    left_family_at: int = 0
    # The look of its fresh pairs it may go on to once it left, chosen from the pairs that
    # chose it; 0: it did not leave.
    left_for_look: int = 0

    def to_json(self, workers: dict[str, Worker]) -> dict:
        return {"name": self.name, "group": self.group, "threshold": self.threshold,
                "stopped": self.stopped, "seconds": round(self.seconds, 3),
                "focused_at": self.focused_at, "disturbed": self.disturbed,
                "left_family_at": self.left_family_at, "left_for_look": self.left_for_look,
                **{w.name: w.timed.get(self.name, []) for w in workers.values()}}


@dataclass
class Progress:
    """The stderr progress line: elapsed and budget, pairs, benchmarks decided and open."""

    stream: TextIO | None
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    total: int = 0
    decided: int = 0
    pairs: int = 0
    last_print: float = 0.0

    def show(self, note: str = "", force: bool = False) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        if not force and now - self.last_print < 5:
            return
        self.last_print = now
        line = (f"llmbench ab: {_clock(now - self.started)} of {_clock(self.budget_s)}, "
                f"{self.pairs} pairs, {self.decided} of {self.total} benchmarks decided, "
                f"{self.total - self.decided} open{note}")
        self.stream.write(line + "\n")
        self.stream.flush()


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


class Coordinator:
    """Hands out turns to the two workers; see the module docstring."""

    def __init__(self, workers: dict[str, Worker], design: sequential.Design, budget_s: float,
                 threshold_of: Callable[[str, str | None, str | None], float],
                 progress: Progress, focus: bool = False,
                 disturbed_share: float | None = None,
                 clearing: sequential.Design | None = None,
                 schedule: Mapping[str, float] | None = None):
        self.workers = workers
        # A confirmation's order and reservations (`shares`); None: equal shares.
        self.schedule = schedule
        # A confirmation's unsplit design: a benchmark stops once its pairs rule out a
        # regression (`sequential.clears`), as no further pair can change the run's outcome.
        self.clearing = clearing
        # None: $LLMBENCH_DISTURBED_SHARE, else the default (as the flags' default).
        self.disturbed_share = (disturbance.default_share() if disturbed_share is None
                                else disturbed_share)
        self.focus = focus  # a benchmark that points at a regression may take the rest
        self.design = design
        self.deadline = progress.started + budget_s
        self.threshold_of = threshold_of
        self.progress = progress
        self.records: dict[str, BenchmarkRecord] = {}
        self.only: dict[str, list[str]] = {name: [] for name in SIDES}
        # Benchmarks both collected that one side then did not run (it skipped them):
        # listed as on the other side only, as those it alone collected are.
        self.device_option: str | None = None

    # -- talking to one worker -----------------------------------------------------------
    def grant(self, worker: Worker, reply: list) -> list:
        """Give `worker` the turn with `reply`; return its next request."""
        worker.channel.send(self.with_forget(worker, reply))
        return self.wait(worker)

    @staticmethod
    def with_forget(worker: Worker, reply: list) -> list:
        """`reply`, telling `worker` to drop its last timed round first if its pair was
        disturbed."""
        if not worker.forget:
            return reply
        worker.forget = False
        return [*reply, pair_worker.FORGET]

    def grant_both(self, reply: list) -> dict[str, list]:
        """Give both workers the turn with `reply` at once; return each one's next request.
        Only for collection (imports, single-threaded): nothing is timed, and the
        coordinator waits for both before any round."""
        for worker in self.workers.values():
            worker.channel.send(reply)
        return {worker.name: self.wait(worker) for worker in self.workers.values()}

    def wait(self, worker: Worker) -> list:
        """Read reports until `worker` makes a request (it then waits for its next turn)."""
        while True:
            try:
                message = worker.channel.receive(timeout=POLL_S)
            except (EOFError, OSError):
                message = None
                if worker.proc.poll() is None:
                    worker.proc.wait(timeout=30)
            if message is None:
                if worker.proc.poll() is not None:
                    raise SideFailed(f"{worker.name} stopped (pytest exit "
                                     f"{worker.proc.returncode}) in {worker.checkout.root}: "
                                     f"{worker.log_tail()}")
                continue
            kind = message[0]
            if kind == "took":
                _, nodeid, seconds, timed, others = message
                worker.last_took = (nodeid, bool(timed), others)
                if timed:
                    worker.timed.setdefault(nodeid, []).append(float(seconds))
                    worker.others.setdefault(nodeid, []).append(others)
            elif kind == "failed":
                _, nodeid, when, text = message
                raise SideFailed(f"{worker.name} failed {nodeid} ({when}) in "
                                 f"{worker.checkout.root}: {text}")
            else:
                worker.request = message
                return message

    # -- the comparison -----------------------------------------------------------------
    def connect(self, server: socket.socket) -> None:
        """Accept both workers' connections and their hello; nobody runs yet."""
        pending = dict(self.workers)
        give_up = time.monotonic() + CONNECT_TIMEOUT_S
        server.settimeout(POLL_S)
        while pending:
            for worker in pending.values():
                if worker.proc.poll() is not None:
                    raise SideFailed(f"{worker.name} stopped before it started (pytest exit "
                                     f"{worker.proc.returncode}) in {worker.checkout.root}: "
                                     f"{worker.log_tail()}")
            if time.monotonic() > give_up:
                raise SideFailed(f"{', '.join(pending)} did not start within "
                                 f"{CONNECT_TIMEOUT_S:.0f} s")
            try:
                sock, _ = server.accept()
            except TimeoutError:
                continue
            sock.settimeout(None)
            channel = Channel(sock)
            hello = channel.receive(timeout=CONNECT_TIMEOUT_S)
            if not hello or hello[0] != "hello" or hello[1] not in pending:
                channel.close()
                raise SideFailed(f"an unexpected process connected: {hello!r}")
            worker = pending.pop(hello[1])
            worker.channel = channel
            worker.request = hello

    def collect(self) -> list[str]:
        """Both sides collect (at once: nothing is timed yet); both then run the benchmarks
        they share, in the baseline's order. Returns those."""
        collected = {}
        for name, request in self.grant_both(["go"]).items():
            if request[0] != "collected":
                raise SideFailed(f"{name} sent {request[0]!r} before collecting")
            collected[name] = request[1]
            self.device_option = self.device_option or request[2]
        base, cand = collected["baseline"], collected["candidate"]
        common = [nodeid for nodeid in base if nodeid in set(cand)]
        self.only["baseline"] = [n for n in base if n not in set(cand)]
        self.only["candidate"] = [n for n in cand if n not in set(base)]
        if not common:
            raise ABError("the two sides share no benchmark: "
                          + ("neither selected any (check -k, -m and paths after --)"
                             if not base and not cand else
                             f"baseline has {len(base)}, candidate {len(cand)}, none in both"))
        self.progress.total = len(common)
        return common if self.schedule is None else shares.scheduled(common, self.schedule)

    def run(self, common: Sequence[str]) -> None:
        """Start both suites on the shared list, then pair every benchmark they reach. They
        load and warm their models one after the other: both at once, each with its full
        thread count, oversubscribe a small machine and load many times slower, as OpenMP
        threads wait at barriers for threads that are not running (figures:
        docs/measurements/2026-12-01-from-the-code.md)."""
        for worker in self.workers.values():
            self.grant(worker, ["keep", list(common)])
        order = {nodeid: i for i, nodeid in enumerate(common)}
        base, cand = self.workers["baseline"], self.workers["candidate"]
        while True:
            requests = {w.name: w.request for w in (base, cand)}
            if all(r[0] == "finished" for r in requests.values()):
                return
            # Where each side is: about to set a benchmark up ("item") or to time a round.
            rounds = {name: r[1] for name, r in requests.items() if r[0] in ("item", "round")}
            if not rounds:
                raise SideFailed(f"the sides are out of step: {requests}")
            if len(rounds) == 2 and rounds["baseline"] == rounds["candidate"]:
                kinds = {r[0] for r in requests.values()}
                if len(kinds) != 1:
                    raise SideFailed(f"the sides are out of step: {requests}")
                remaining = len(common) - order.get(rounds["baseline"], 0)
                if kinds == {"item"}:
                    self.admit(rounds["baseline"], base.request[2], remaining)
                else:
                    self.pair(rounds["baseline"], base.request[2], remaining)
                continue
            # One side is at a benchmark the other has passed (skipped or never timed it):
            # the one that is behind skips it too, and the benchmark is listed as such.
            behind = min(rounds, key=lambda name: order.get(rounds[name], -1))
            nodeid = rounds[behind]
            other = "candidate" if behind == "baseline" else "baseline"
            self.only[behind].append(nodeid)
            self.progress.decided += 1
            self.grant(self.workers[behind], ["skip", f"llmbench ab: the {other} side did not "
                                                       "run this benchmark"])

    def admit(self, nodeid: str, group: str | None, remaining: int) -> None:
        """Both sides are about to set `nodeid` up: let them, one after the other, or have
        both skip it before anything of it runs when the budget cannot reach it (a
        compiled engine's setup alone can take longer than its pairs)."""
        if self._share_or_skip(nodeid, group, remaining) is None:
            return
        base, cand = self.workers["baseline"], self.workers["candidate"]
        if self.grant(base, ["go"])[:2] == ["round", nodeid]:
            self.grant(cand, ["go"])
            return
        # The baseline skipped it in its setup or body (a device it lacks, say): the
        # candidate skips it before setting it up, and it is listed as the candidate's only.
        self.only["candidate"].append(nodeid)
        self.progress.decided += 1
        self.grant(cand, ["skip", "llmbench ab: the baseline side did not run this benchmark"])

    def _share_or_skip(self, nodeid: str, group: str | None, remaining: int
                       ) -> float | None:
        """What `nodeid` may take of the budget now; or None, once both sides have been told
        to skip it and its record says it was not reached: the budget is spent (a focused
        benchmark may take it all), or what is left cannot reach the scheduled benchmark's
        first look and pairs would only overrun it."""
        now = time.monotonic()
        share = self._share(nodeid, now, remaining)
        if now < self.deadline and share is not None:
            return share
        record = BenchmarkRecord(nodeid, group,
                                 self.threshold_of(nodeid, group, self.device_option))
        record.stopped = "not reached"  # the verdict lists it with no pair
        self.records[nodeid] = record
        self.progress.decided += 1
        self.progress.show(f"; {nodeid}: not reached, the budget was spent", force=True)
        for worker in self.workers.values():
            self.grant(worker, ["skip", "llmbench ab: the budget was spent before this "
                                        "benchmark's turn"])
        return None

    def pair(self, nodeid: str, group: str | None, remaining: int) -> None:
        """Pairs of rounds for one benchmark until it is decided or out of pairs or time."""
        # Asked again: its setup (after `admit`) took time too.
        share = self._share_or_skip(nodeid, group, remaining)
        if share is None:
            return
        record = BenchmarkRecord(nodeid, group,
                                 self.threshold_of(nodeid, group, self.device_option))
        self.records[nodeid] = record
        base, cand = self.workers["baseline"], self.workers["candidate"]
        started = time.monotonic()
        allowed = share
        m = self.progress.total
        together = nodeid in getattr(self.schedule, "family", frozenset())
        index = n = 0
        while True:
            for worker in ((base, cand) if index % 2 == 0 else (cand, base)):
                request = self.grant(worker, ["go"])
                if request[:2] != ["round", nodeid]:
                    raise SideFailed(f"{worker.name} left {nodeid} in the middle of its rounds")
            index += 1
            if self._drop_if_disturbed(record):
                if time.monotonic() - started <= allowed:
                    continue
                record.stopped = "budget"  # other work took it: what it has is what it gets
                break
            self.progress.pairs += 1
            n = min(len(base.timed.get(nodeid, [])), len(cand.timed.get(nodeid, [])))
            now = time.monotonic()
            spent = now - started
            d = sequential.log_ratios(base.timed.get(nodeid, [])[:n],
                                      cand.timed.get(nodeid, [])[:n])
            per_pair = spent / index
            if together and not record.left_family_at:
                record.stopped = self._member_stop(record, d, allowed - spent, per_pair)
                if record.left_family_at:  # decided alone from now on: the rest of the
                    # budget is open to it up to its first fresh look (`_allowance`)
                    allowed = max(allowed, self.deadline - started)
            else:
                # One that left its family is judged on the pairs after it left, never on
                # those that chose it (`focus.leaving_look`).
                d = d[record.left_family_at:]
                record.stopped = self._alone_stop(record, d, m, per_pair, spent, allowed)
                if not record.stopped and self.focus and self.design.is_look(d.size):
                    allowed = self._allowance(record, d, share, per_pair, started, now)
                    if spent + per_pair * (self.design.next_look(d.size) - d.size) > allowed:
                        record.stopped = "budget"
            self.progress.show(f"; {nodeid}: {n} pairs")
            if record.stopped:
                break
        record.seconds = time.monotonic() - started
        self.progress.decided += 1
        self.progress.show(f"; {nodeid}: {record.stopped} after {n} pairs", force=True)
        for worker in (base, cand):
            self.grant(worker, ["stop"])

    def _alone_stop(self, record: BenchmarkRecord, d, m: int, per_pair: float, spent: float,
                    allowed: float) -> str:
        """Why a benchmark decided alone stops after its latest pair ("" to go on): decided
        at a look (a regression or improvement at alpha / m), cleared, out of pairs, or its
        next look does not fit in what it may take."""
        n = d.size
        found = sequential.stop_decision(d, self.design, record.threshold, m) if n else None
        next_look = self.design.next_look(n)
        if found is not None:
            return found.value
        if (self.clearing is not None and self.design.is_look(n)
                and sequential.clears(d, self.clearing, record.threshold)):
            return CLEARED
        if next_look is None:
            return "max pairs"
        if spent + per_pair * (next_look - n) > allowed and not (
                self.focus and self.design.is_look(n)):
            return "budget"  # its next look would not fit in what it may take
        return ""

    def _member_stop(self, record: BenchmarkRecord, d, left_s: float, per_pair: float) -> str:
        """Why a member of the family (`gate.family`) stops after its latest pair ("" to go
        on). It takes the family's pairs and no more, unless its pairs do not point past
        the threshold: then it goes on to the first look that can clear it while that fits.
        Its pairs never name a regression alone; the family does."""
        n, wanted = d.size, self.schedule.family_pairs
        if n < wanted:
            return "" if per_pair * (wanted - n) <= left_s else "budget"
        if (self.clearing is not None and self.design.is_look(n)
                and sequential.clears(d, self.clearing, record.threshold)):
            return CLEARED
        # What the later members keep is not kept from it: one regression named fails the
        # run, where their pairs, a few each, would only name more.
        look = self.focus and n == wanted and leaving_look(
            d, self.design, record.threshold, self.progress.total, per_pair,
            self.deadline - time.monotonic())
        if look:
            centre, low, high = sequential.walsh_interval(d, self.design.alpha)
            record.left_family_at, record.left_for_look = n, look
            self.progress.show(f"; {record.name}: slower in its family's pairs (x"
                               f"{math.exp(centre):.3f}, CI [{math.exp(low):.3f}, "
                               f"{math.exp(high):.3f}] after {n}): it leaves the family to be "
                               f"decided alone on up to {look} fresh pairs", force=True)
            return ""
        first = self.design.looks[0]
        centre, _, _ = sequential.walsh_interval(d, self.design.look_alpha)
        if (self.clearing is not None and n < first and centre <= math.log1p(record.threshold)
                and per_pair * (first - n) <= left_s):
            return ""
        return FAMILY

    def _share(self, nodeid: str, now: float, remaining: int) -> float | None:
        """What `nodeid` may take of the budget at its turn (`shares`); None: skip it. The
        first benchmark paired is always tried, so a small budget still tries one."""
        left_s = self.deadline - now
        if self.schedule is None:
            return shares.equal_share(left_s, remaining)
        share = shares.share_at_turn(nodeid, left_s, remaining, self.schedule)
        tried = any(r.stopped != "not reached" for r in self.records.values()
                    if r.name != nodeid)
        return share if share is not None or tried else max(0.0, left_s)

    def _drop_if_disturbed(self, record: BenchmarkRecord) -> bool:
        """Drop the pair just taken, on both sides, when other work disturbed either round
        (the budget bounds how often one is taken again)."""
        name = record.name
        # Warm-up rounds are not timed: their disturbance costs nothing.
        timed = [w for w in self.workers.values()
                 if w.last_took is not None and w.last_took[:2] == (name, True)]
        shares = [w.last_took[2] for w in timed]
        if not any(s is not None and s > self.disturbed_share for s in shares):
            return False
        for worker in timed:
            worker.timed[name].pop()
            worker.others[name].pop()
            worker.forget = True
        record.disturbed += 1
        self.progress.show(f"; {name}: a pair disturbed by other work (others took "
                           f"{max(s or 0 for s in shares):.0%} of the CPUs), taken again")
        return True

    def _allowance(self, record: BenchmarkRecord, d, share: float, per_pair: float,
                   started: float, now: float) -> float:
        """What an undecided benchmark may take at a look when focusing: the rest of the
        budget while its pairs point at a regression that should be decided in time
        (`focus`), else its share. The rest is what the family members still to come do not
        keep: they are decided on their pairs alone, and the family may name more than this
        one does; so the look that should decide it must fit in what they leave."""
        if d.size < record.left_for_look:
            # It left its family for this look (`focus.leaving_look`): fewer fresh pairs are
            # too few to re-estimate it from, and it already holds the rest of the budget.
            return max(share, self.deadline - started)
        est = sequential.estimate(d, self.design)
        # A member that left the family (`_member_stop`) is not kept from the later members'
        # time there, nor here.
        kept = 0.0 if record.left_family_at else self._kept_for_family(record.name, now)
        left_s = self.deadline - now - kept
        if not takes_the_rest(est, self.design, record.threshold, per_pair, left_s):
            if record.focused and est is not None:
                # Otherwise a focused benchmark's stop reads as a plain "budget" one.
                self.progress.show(f"; {record.name}: its pairs no longer point at a "
                                   f"regression decided in the time left (x{est.ratio:.3f}, "
                                   f"CI [{est.ci_low:.3f}, {est.ci_high:.3f}] after "
                                   f"{est.n}): back to its share", force=True)
            record.focused = False
            return share
        if not record.focused:  # said when it starts to hold the rest, not at every look
            record.focused, record.focused_at = True, record.focused_at or est.n
            self.progress.show(f"; {record.name}: slower in its pairs (x{est.ratio:.3f}, "
                               f"CI [{est.ci_low:.3f}, {est.ci_high:.3f}] after {est.n}): "
                               "it may take the rest of the budget", force=True)
        return max(share, self.deadline - started - kept)

    def _kept_for_family(self, nodeid: str, now: float) -> float:
        """What the family members after `nodeid` that have not started keep of the time
        left (`shares.reserved_for_family`)."""
        if self.schedule is None:
            return 0.0
        return shares.reserved_for_family(nodeid, self.deadline - now, self.schedule,
                                          set(self.records))

    def finish(self) -> None:
        """Let each side end its session (save its run) in turn."""
        for worker in self.workers.values():
            if worker.request and worker.request[0] != "finished":
                raise SideFailed(f"{worker.name} is still at {worker.request!r}")

    def to_json(self) -> dict:
        return {"design": {"alpha": self.design.alpha, "looks": list(self.design.looks),
                           "clearing_alpha": self.clearing and self.clearing.alpha},
                "order": "ABBA by pair",
                "benchmarks": [r.to_json(self.workers) for r in self.records.values()],
                "only": self.only}


def worker_module_dir(parent: Path) -> Path:
    """A folder holding `pair_worker` under its standalone module name, for PYTHONPATH."""
    folder = parent / "plugin"
    folder.mkdir()
    shutil.copyfile(pair_worker.__file__, folder / f"{pair_worker.MODULE_NAME}.py")
    shutil.copyfile(disturbance.__file__, folder / f"{pair_worker.DISTURBANCE_MODULE}.py")
    return folder


def _start(side: Checkout, args: Sequence[str], out: Path, plugin_dir: Path, address: str,
           session: str, design: sequential.Design, log_dir: Path,
           on: frozenset[int] | None) -> Worker:
    env = side_env(side)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(plugin_dir)])
    env.update({pair_worker.ADDRESS_ENV: address, pair_worker.SIDE_ENV: side.name,
                pair_worker.SESSION_ENV: session,
                pair_worker.DESIGN_ENV: json.dumps({"alpha": design.alpha,
                                                    "max_pairs": design.max_pairs})})
    cmd = [sys.executable, "-m", "pytest", "--benchmark-only", "-q", "-p", "no:cacheprovider",
           "-p", pair_worker.MODULE_NAME, f"--baseline-dir={out}", *args, *side.extra_args]
    log_path = log_dir / f"{side.name}.log"
    with open(log_path, "w") as log:
        # Its own session: Ctrl-C reaches only the coordinator, which ends the workers.
        with cpus.children_on(on):  # both sides on the same CPUs (`cpus`)
            proc = subprocess.Popen(cmd, cwd=side.root, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    return Worker(side.name, side, proc, log_path)


def _end(worker: Worker) -> None:
    """End a worker and everything it started (a server it spawned, say)."""
    if worker.channel is not None:
        worker.channel.close()
    if worker.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.proc.pid, signal.SIGTERM)
        try:
            worker.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait()


def _saved_run(worker: Worker, out: Path) -> Path:
    found = sorted(out.glob("*/*.json"))
    if worker.proc.returncode not in (0, None) or len(found) != 1:
        raise SideFailed(f"{worker.name} saved {len(found)} runs (pytest exit "
                         f"{worker.proc.returncode}) in {worker.checkout.root}: "
                         f"{worker.log_tail()}")
    return found[0]


@dataclass
class PairedRuns:
    """What a paired A/B leaves: each side's saved run, and the pairing."""

    baseline: Path
    candidate: Path
    pairing: dict


def run_paired(baseline: Checkout, candidate: Checkout, *, pytest_args: Sequence[str],
               workdir: Path, design: sequential.Design, budget_s: float,
               threshold_of: Callable[[str, str | None, str | None], float],
               log: TextIO | None = None,
               on_interrupt: Callable[[Coordinator], None] | None = None,
               focus: bool = False,
               disturbed_share: float | None = None,
               clearing: sequential.Design | None = None,
               schedule: Mapping[str, float] | None = None) -> PairedRuns:
    """Run both suites in turn, round by round; see the module docstring. `threshold_of`
    maps (nodeid, group, the suites' --device option) to the benchmark's threshold;
    `schedule` (a confirmation's, `shares`) orders the benchmarks and reserves their time."""
    check_pytest_args(pytest_args)
    for side in (baseline, candidate):
        check_imports(side)
    progress = Progress(log, budget_s)
    with contextlib.ExitStack() as stack:
        # A short path: a Unix socket's address is limited to ~100 bytes.
        private = Path(tempfile.mkdtemp(prefix="llmbench-pair-"))
        stack.callback(shutil.rmtree, private, ignore_errors=True)
        plugin_dir = worker_module_dir(private)
        address = str(private / "turns.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stack.callback(server.close)
        server.bind(address)
        server.listen(2)
        session = uuid.uuid4().hex
        workers = {}
        shared = cpus.shared_cpus(pytest_args)
        for side in (baseline, candidate):
            out = workdir / side.name
            out.mkdir(parents=True, exist_ok=True)
            workers[side.name] = _start(side, pytest_args, out, plugin_dir, address, session,
                                        design, workdir, shared)
            stack.callback(_end, workers[side.name])
        coordinator = Coordinator(workers, design, budget_s, threshold_of, progress, focus,
                                  disturbed_share, clearing, schedule)
        try:
            coordinator.connect(server)
            common = coordinator.collect()
            if log is not None:
                print(f"llmbench ab: {len(common)} benchmarks in both suites; pairing rounds "
                      f"within a budget of {_clock(budget_s)}", file=log, flush=True)
            coordinator.run(common)
            coordinator.finish()
        except KeyboardInterrupt:
            if on_interrupt is not None:
                on_interrupt(coordinator)
            raise
        for worker in workers.values():
            worker.proc.wait()
        pairing = {"session": session, "cpus": None if shared is None else sorted(shared),
                   **coordinator.to_json()}
        (workdir / "pairing.json").write_text(json.dumps(pairing, indent=1))
        return PairedRuns(_saved_run(workers["baseline"], workdir / "baseline"),
                          _saved_run(workers["candidate"], workdir / "candidate"), pairing)
