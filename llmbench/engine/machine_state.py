"""The machine's state as it bears on timing: what `llmbench doctor` reports, and what every
saved run records of the machine it ran on.

What the suite can set for itself it sets (glibc's malloc thresholds, one OpenMP pool per
process, its threads); the rest only the user can change, so it is read here and reported
with what it costs and how to change it, as pyperf's `system show` does: other processes on
the CPUs, the hypervisor's steal, frequency scaling and turbo, SMT siblings, isolated cores,
transparent huge pages, address-space randomisation, swap, and torch's threads against the
CPUs this process may use. Each check reads files under /proc and /sys; one the platform does
not expose is "unknown", never guessed.
"""

from __future__ import annotations

import glob
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from llmbench.engine import disturbance

# A note costs nothing measured, but says what a dedicated benchmark machine does otherwise.
OK, NOTE, COSTS, UNKNOWN = "ok", "note", "costs", "unknown"
HOST_SPREAD = 0.05  # the control workload's round-to-round spread beyond which the host costs
SAMPLE_S = 1.0  # how long `others` watches the CPUs
STABILITY_PAGE = "docs/measurements/2026-12-03-stable-measurements.md"


@dataclass(frozen=True)
class Check:
    name: str
    state: str  # what was read, in words
    status: str  # OK, NOTE, COSTS or UNKNOWN
    cost: str = ""  # what it does to timings (measured where the docs page says so)
    fix: str = ""  # how to change it; "" where nothing needs to change

    def to_json(self) -> dict:
        return asdict(self)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _selected(text: str | None) -> str | None:
    """The bracketed choice of a /sys multiple-choice file: 'always [madvise] never'."""
    if text is None or "[" not in text:
        return text
    return text.split("[", 1)[1].split("]", 1)[0]


def _top_processes(seconds: float) -> tuple[disturbance.Window | None, list[tuple[str, float]]]:
    """Over `seconds`: our CPUs' window, and the other processes that used them most
    (name, share of one CPU)."""
    def cpu_by_pid() -> dict[int, tuple[str, int]]:
        found = {}
        for path in glob.glob("/proc/[0-9]*/stat"):
            text = _read(path)
            if not text:
                continue
            pid = int(path.split("/")[2])
            name = text.partition(" (")[2].rpartition(")")[0]
            if pid != os.getpid():
                try:
                    found[pid] = (name, disturbance.cpu_ticks(text))
                except (IndexError, ValueError):
                    continue  # a process that ended while it was read
        return found

    cpus = disturbance.our_cpus()
    before, procs = disturbance.read(cpus), cpu_by_pid()
    started = time.perf_counter()
    time.sleep(seconds)
    after, later = disturbance.read(cpus), cpu_by_pid()
    wall = time.perf_counter() - started
    if before is None or after is None:
        return None, []
    busiest = sorted(((later[p][0], (later[p][1] - procs[p][1]) * disturbance.TICK_S / wall)
                      for p in later if p in procs), key=lambda item: -item[1])
    return (disturbance.window(before, after, wall, len(cpus)),
            [(name, share) for name, share in busiest[:3] if share > 0])


def others_check(seconds: float = SAMPLE_S) -> list[Check]:
    """Other processes and the hypervisor on our CPUs, watched for `seconds`."""
    window, busiest = _top_processes(seconds)
    if window is None:
        return [Check("other processes", "not exposed (no /proc/stat)", UNKNOWN)]
    share = window.others_s / window.capacity_s
    who = ", ".join(f"{name} {cpu:.0%} of a CPU" for name, cpu in busiest)
    others = Check(
        "other processes", f"{share:.1%} of this process's CPUs over {window.wall_s:.1f} s"
        + (f" ({who})" if who else ""),
        COSTS if share > disturbance.DEFAULT_SHARE else OK,
        "OpenMP's barriers wait for a descheduled thread: a co-runner at the lowest priority "
        "taking a few percent of a CPU can multiply a case's time; the suite re-measures "
        "disturbed rounds, at the cost of time and of the rounds left out",
        "stop them, or run the suite on CPUs they do not use (taskset -c CPUS)"
        if share > disturbance.DEFAULT_SHARE else "")
    steal = window.steal_s / window.capacity_s
    stolen = Check("steal", f"{steal:.1%} of this process's CPUs over {window.wall_s:.1f} s",
                   COSTS if steal > disturbance.DEFAULT_SHARE else OK,
                   "the hypervisor ran other guests on these CPUs: every thread of a round "
                   "waits for the one it paused", "a dedicated or less busy host"
                   if steal > disturbance.DEFAULT_SHARE else "")
    return [others, stolen]


def frequency_checks() -> list[Check]:
    governors = {_read(p) for p in glob.glob(
        "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")} - {None}
    if not governors:
        governor = Check("frequency governor", "not exposed (a VM, or no cpufreq driver): the "
                         "host decides the frequency", UNKNOWN)
    else:
        fixed = governors == {"performance"}
        governor = Check("frequency governor", ", ".join(sorted(governors)),
                         OK if fixed else COSTS,
                         "" if fixed else "the clock follows the load: a round that starts "
                         "after idle runs slower at first",
                         "" if fixed else "cpupower frequency-set -g performance")
    no_turbo = _read("/sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = _read("/sys/devices/system/cpu/cpufreq/boost")
    if no_turbo is None and boost is None:
        turbo = Check("turbo", "not exposed", UNKNOWN)
    else:
        on = no_turbo == "0" if no_turbo is not None else boost == "1"
        turbo = Check("turbo", "on" if on else "off", COSTS if on else OK,
                      "turbo follows temperature and the other cores' load" if on else "",
                      "echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo (or pyperf "
                      "system tune)" if on else "")
    return [governor, turbo]


def topology_checks() -> list[Check]:
    smt = _read("/sys/devices/system/cpu/smt/active")
    checks = [Check("SMT", "not exposed" if smt is None else ("on" if smt == "1" else "off"),
                    UNKNOWN if smt is None else COSTS if smt == "1" else OK,
                    "a sibling hardware thread shares the core's caches and units"
                    if smt == "1" else "",
                    "run on one thread per core, or disable SMT" if smt == "1" else "")]
    isolated = _read("/sys/devices/system/cpu/isolated")
    checks.append(Check(
        "isolated CPUs", isolated or "none",
        OK if isolated else NOTE,
        "" if isolated else "the scheduler may run other work on the benchmark's CPUs",
        "" if isolated else "boot with isolcpus=… and run with taskset -c on them"))
    return checks


def memory_checks() -> list[Check]:
    thp = _selected(_read("/sys/kernel/mm/transparent_hugepage/enabled"))
    checks = [Check("transparent huge pages", thp or "not exposed",
                    UNKNOWN if thp is None else OK,
                    "torch's allocator asks for huge pages for its large tensors "
                    "(THP_MEM_ALLOC_ENABLE, which the suite sets) under madvise or always"
                    if thp in ("madvise", "always") else
                    "no huge pages: the weights' TLB misses vary with their layout"
                    if thp == "never" else "")]
    aslr = _read("/proc/sys/kernel/randomize_va_space")
    checks.append(Check("address-space randomisation",
                        {"0": "off", "1": "partial", "2": "on"}.get(aslr or "", "not exposed"),
                        UNKNOWN if aslr is None else OK,
                        "every process lays out its memory anew: part of why separate runs "
                        "differ, which the noise between runs measures" if aslr == "2" else ""))
    meminfo = _read("/proc/meminfo") or ""
    fields = {line.split(":")[0]: int(line.split()[1]) for line in meminfo.splitlines()
              if len(line.split()) >= 2 and line.split()[1].isdigit()}
    if "SwapTotal" in fields:
        used = fields["SwapTotal"] - fields.get("SwapFree", 0)
        checks.append(Check("swap in use", f"{used // 1024} MiB",
                            COSTS if used > 0 else OK,
                            "pages of a run may have to come back from disk" if used else "",
                            "free memory before measuring" if used else ""))
    return checks


def threads_check(torch_threads: int) -> Check:
    cpus = len(disturbance.our_cpus())
    over = torch_threads > cpus
    return Check("torch threads", f"{torch_threads} on {cpus} CPUs this process may use",
                 COSTS if over else OK,
                 "more threads than CPUs: OpenMP's barriers wait for threads that are not "
                 "running" if over else "", f"--threads {cpus}" if over else "")


def openmp_check() -> Check:
    names = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES",
             "KMP_BLOCKTIME", "THP_MEM_ALLOC_ENABLE")
    set_ = {n: os.environ[n] for n in names if n in os.environ}
    return Check("OpenMP and allocator environment",
                 ", ".join(f"{k}={v}" for k, v in set_.items()) or "none set", OK)


def host_check(time_once: Callable[[], float], seconds: float = SAMPLE_S) -> Check:
    """How far a fixed workload's rounds spread while nothing else runs here: the host's own
    noise (a neighbour guest, the host's frequency), which no counter inside the guest sees.
    A median of n rounds cannot hold stiller than about this spread over the root of n."""
    time_once()  # page in and pick kernels
    logs, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(logs) < 5:
        logs.append(math.log(time_once()))
    spread = statistics.stdev(logs)
    noisy = spread > HOST_SPREAD
    return Check("host speed", f"the control workload's rounds spread {spread:.1%} over "
                 f"{len(logs)} rounds", COSTS if noisy else OK,
                 "each round takes the host's speed of its moment: medians of ten rounds "
                 f"spread about {spread * 1.25 / math.sqrt(10):.1%} on that alone, and the "
                 "host's speed also drifts over minutes" if noisy else "",
                 "a quieter or dedicated host; more --rounds; `llmbench ab` for a change"
                 if noisy else "")


def machine_checks(torch_threads: int, sample_s: float = SAMPLE_S,
                   time_once: Callable[[], float] | None = None) -> list[Check]:
    """Every check, in reading order (`time_once`: one round of a fixed workload, to watch
    the host with)."""
    host = [host_check(time_once, sample_s)] if time_once is not None else []
    return [*others_check(sample_s), *host, *frequency_checks(), *topology_checks(),
            *memory_checks(), threads_check(torch_threads), openmp_check()]


def snapshot(torch_threads: int) -> dict:
    """What a saved run records of the machine: each check's state and status, without the
    sampling of other processes (the rounds' own accounting does that)."""
    checks = [*frequency_checks(), *topology_checks(), *memory_checks(),
              threads_check(torch_threads), openmp_check()]
    return {c.name: {"state": c.state, "status": c.status} for c in checks}
