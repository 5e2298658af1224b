"""Measure the regression gate on a real model: false alarms and detection, stored and A/B.

    python scripts/gate_trials.py --model smollm2-135m --trials 10
    python scripts/gate_trials.py --trials 0 --paired-trials 20 \
        -- -k "decode or prefill"

Everything runs from a temporary git worktree of --rev (HEAD by default), so edits made
meanwhile do not leak into the trials. Two measurements, for the closing note of the
regression-gate issue:

1. Stored baseline: one baseline run, then --trials rounds of (a fresh run of the same
   code, a fresh run with decode slowed by --slowdown), each compared to the baseline,
   with and without --normalize. Fresh runs alternate so that drift weighs on both kinds.
   - A/A false-alarm rate: share of unchanged-code comparisons with at least one regression
     (also: with any claimed change, regression or improvement).
   - detection rate: share of --target-group benchmarks called a regression in the slowed
     comparisons (and the share of slowed comparisons that fail the gate at all).
2. Paired A/B (`llmbench ab`, its default): --paired-trials rounds of the --plan, by default
   A/A and a 15% slowdown at a 10% threshold, a 5% slowdown and A/A at a 2% threshold,
   interleaved so that each kind sees the machine's whole afternoon. Each comparison runs
   within --budget, as `llmbench ab` would; its pairs are kept (pairing.json) under --out,
   and paired.md reports, per kind: the realised slowdown the pairs measured, the share of
   comparisons that flag a regression, which benchmarks, wall time and pairs used, and the
   spread of A/A pair log-ratios with the pairs a 5% change needs at that spread.

The slowdown is `-p llmbench.bench.inject --slow-down decode_step=FACTOR`: every decode step takes
1 + FACTOR times as long, so every benchmark that decodes slows, the decode group by the
full factor. Every run is kept under --out; a JSON record and a markdown summary are
written there and the summary is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from llmbench import ab, gate
from llmbench import runs as baselines
from llmbench.errors import UserError
from llmbench.gate.stats import Verdict


@dataclass
class Outcome:
    """One comparison, reduced to what the rates need."""

    kind: str  # "aa" or "slow"
    mode: str  # "stored" or "stored+normalize"
    counts: dict[str, int]
    target: list[str]  # verdicts of the target group's benchmarks
    target_ratio: list[float]
    speed_ratio: float | None
    regressed: list[str] = field(default_factory=list)


def run_suite(root: Path, out: Path, args: list[str]) -> Path:
    """One `pytest --benchmark-only` run in `root`, saved under `out`; its run file."""
    side = ab.Checkout("trial", root)
    before = set(out.glob("*/*.json"))
    cmd = [sys.executable, "-m", "pytest", "--benchmark-only", "-q", "-p", "no:cacheprovider",
           f"--baseline-dir={out}", *args]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=ab.side_env(side), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"gate_trials: pytest failed ({proc.returncode}): {' '.join(cmd)}\n"
                         f"{tail}")
    (new,) = sorted(set(out.glob("*/*.json")) - before)
    print(f"  run {new.name} in {time.perf_counter() - started:.0f} s", flush=True)
    return new


def outcome(kind: str, mode: str, result: gate.GateResult, group: str) -> Outcome:
    target = [c for c in result.comparisons if c.group == group]
    return Outcome(
        kind=kind, mode=mode, counts=result.counts,
        target=[c.verdict.value for c in target], target_ratio=[c.ratio for c in target],
        speed_ratio=result.speed.ratio if result.speed else None,
        regressed=[result.labels[c.name] for c in result.comparisons
                   if c.verdict is Verdict.REGRESSION])


def judge(kind: str, base: baselines.Run, cand: baselines.Run, options: gate.GateOptions,
          group: str, modes: tuple[str, ...]) -> list[Outcome]:
    results = []
    for mode in modes:
        opts = dataclasses.replace(options, normalize=mode == "stored+normalize")
        result = gate.compare_runs(base, cand, opts)
        results.append(outcome(kind, mode, result, group))
        print(f"  {kind:4} {mode:17} {gate.summary_line(result)}", flush=True)
    return results


def rates(outcomes: list[Outcome]) -> dict[str, dict]:
    table: dict[str, dict] = {}
    for mode in sorted({o.mode for o in outcomes}):
        aa = [o for o in outcomes if o.mode == mode and o.kind == "aa"]
        slow = [o for o in outcomes if o.mode == mode and o.kind == "slow"]
        target = [v for o in slow for v in o.target]
        table[mode] = {
            "aa_comparisons": len(aa),
            "aa_false_alarm_rate": _share(o.counts["regression"] > 0 for o in aa),
            "aa_any_claim_rate": _share(o.counts["regression"] + o.counts["improvement"] > 0
                                        for o in aa),
            "aa_inconclusive_share": _share_of_counts(aa, "inconclusive"),
            "slow_comparisons": len(slow),
            "detection_rate": _share(v == "regression" for v in target),
            "slow_gate_failed_rate": _share(o.counts["regression"] > 0 for o in slow),
            "slow_target_median_ratio": _median([r for o in slow for r in o.target_ratio]),
        }
    return table


def _share(flags) -> float | None:
    flags = list(flags)
    return sum(flags) / len(flags) if flags else None


def _share_of_counts(outcomes: list[Outcome], verdict: str) -> float | None:
    total = sum(sum(o.counts.values()) for o in outcomes)
    return sum(o.counts[verdict] for o in outcomes) / total if total else None


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def markdown(table: dict[str, dict], args: argparse.Namespace) -> str:
    def pct(x):
        return "-" if x is None else f"{x:.0%}"

    lines = [f"Gate trials: model {args.model}, rev {args.rev}, slowdown "
             f"{args.slowdown:.0%} of decode_step, target group {args.target_group!r}, "
             f"pytest args {' '.join(args.pytest_args) or '(none)'}, threshold "
             f"{'device default' if args.threshold is None else f'{args.threshold:.0%}'}"
             + (f", rejudged from {args.rejudge}" if args.rejudge else ""), "",
             "| mode | A/A comparisons | A/A false alarms (any regression) | A/A any claim | "
             "A/A inconclusive | slowed comparisons | detection (target benchmarks) | "
             "slowed runs failing | target ratio (median) |",
             "|:--|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for mode, r in table.items():
        ratio = r["slow_target_median_ratio"]
        lines.append(
            f"| {mode} | {r['aa_comparisons']} | {pct(r['aa_false_alarm_rate'])} | "
            f"{pct(r['aa_any_claim_rate'])} | {pct(r['aa_inconclusive_share'])} | "
            f"{r['slow_comparisons']} | {pct(r['detection_rate'])} | "
            f"{pct(r['slow_gate_failed_rate'])} | {'-' if ratio is None else f'{ratio:.3f}'} |")
    return "\n".join(lines)


PAIRED_PLAN = "aa@10%,slow0.15@10%,slow0.05@2%,aa@2%"


@dataclass
class PairedOutcome:
    """One paired comparison, reduced to what the table needs."""

    kind: str  # e.g. "slow0.15@10%"
    slowdown: float
    threshold: float
    counts: dict[str, int]
    flagged: list[str]  # benchmarks called a regression
    ratios: dict[str, float]  # benchmark -> ratio of its pairs
    verdicts: dict[str, str]
    pairs: dict[str, int]  # benchmark -> pairs used
    wall_s: float
    log_sd: dict[str, float]  # benchmark -> sd of its pair log-ratios


def parse_plan(text: str) -> list[tuple[str, float, float]]:
    """'aa@10%,slow0.15@10%' -> [(kind, slowdown, threshold), ...]."""
    plan = []
    for item in text.split(","):
        what, _, threshold = item.strip().partition("@")
        slowdown = 0.0 if what == "aa" else float(what.removeprefix("slow"))
        plan.append((item.strip(), slowdown, gate.parse_fraction(threshold or "10%")))
    return plan


def paired_trial(root: Path, sha: str, folder: Path, kind: str, slowdown: float,
                 threshold: float, common: list[str], budget_s: float) -> PairedOutcome:
    from llmbench.gate import sequential

    inject = ("-p", "llmbench.bench.inject", f"--slow-down=decode_step={slowdown}")
    options = gate.GateOptions(threshold=threshold)
    started = time.perf_counter()
    folder.mkdir(parents=True)
    with open(folder / "progress.log", "w") as progress:
        result = ab.judge_in_turn(
            ab.Checkout("baseline", root, commit=sha),
            ab.Checkout("candidate", root, inject if slowdown else (), commit=sha),
            pytest_args=common, workdir=folder, design=sequential.Design(alpha=options.alpha),
            budget_s=budget_s, options=options, log=progress)
    wall = time.perf_counter() - started
    by_name = {c.name: c for c in result.comparisons}
    label = result.labels
    log_sd = {}
    for record in result.pairing["benchmarks"]:
        d = sequential.log_ratios(record["baseline"], record["candidate"])
        if d.size > 1:
            log_sd[label[record["name"]]] = float(np.std(d, ddof=1))
    outcome = PairedOutcome(
        kind=kind, slowdown=slowdown, threshold=threshold, counts=result.counts,
        flagged=[label[c.name] for c in result.comparisons if c.verdict is Verdict.REGRESSION],
        ratios={label[k]: c.ratio for k, c in by_name.items()},
        verdicts={label[k]: c.verdict.value for k, c in by_name.items()},
        pairs={label[k]: c.n_pairs for k, c in by_name.items()}, wall_s=wall, log_sd=log_sd)
    print(f"  {kind}: {gate.summary_line(result)}; {sum(outcome.pairs.values())} pairs in "
          f"{wall:.0f} s; ratios " + ", ".join(f"{k} {v:.3f}" for k, v in outcome.ratios.items()),
          flush=True)
    return outcome


def paired_table(outcomes: list[PairedOutcome], target_group: str) -> str:
    def target(name: str) -> bool:
        return name.startswith(f"test_{target_group}")

    lines = ["| comparison | n | flag any regression | flag every target | flag a non-target | "
             "target ratio: median [min, max] | non-target ratio: median | inconclusive | "
             "wall s: median (max) | pairs per comparison: median (max) |",
             "|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for kind in dict.fromkeys(o.kind for o in outcomes):
        group = [o for o in outcomes if o.kind == kind]
        tr = [r for o in group for k, r in o.ratios.items() if target(k)]
        nr = [r for o in group for k, r in o.ratios.items() if not target(k)]
        every = sum(bool(t := [k for k in o.ratios if target(k)]) and set(t) <= set(o.flagged)
                    for o in group)
        other = sum(any(not target(k) for k in o.flagged) for o in group)
        anyreg = sum(bool(o.flagged) for o in group)
        incon = sum(o.counts["inconclusive"] for o in group)
        total = sum(sum(o.counts.values()) for o in group)
        walls = [o.wall_s for o in group]
        pairs = [sum(o.pairs.values()) for o in group]
        lines.append(
            f"| {kind} | {len(group)} | {anyreg}/{len(group)} | {every}/{len(group)} | "
            f"{other}/{len(group)} | {_median(tr):.3f} [{min(tr):.3f}, {max(tr):.3f}] | "
            f"{_median(nr):.3f} | {incon}/{total} | {_median(walls):.0f} ({max(walls):.0f}) | "
            f"{_median(pairs):.0f} ({max(pairs)}) |")
    flagged: dict[str, int] = {}
    for o in outcomes:
        for name in o.flagged:
            flagged[f"{o.kind}: {name}"] = flagged.get(f"{o.kind}: {name}", 0) + 1
    lines += ["", "Benchmarks flagged: " + (", ".join(f"{k} ({v})" for k, v in flagged.items())
                                           or "none")]
    aa = [o for o in outcomes if o.slowdown == 0]
    if aa:
        lines += ["", "A/A spread of pair log-ratios (sd, median over comparisons), and the "
                  "pairs a 5% change needs against a 2% threshold at that spread (one look "
                  "at alpha/K, 80% power):", "",
                  "| benchmark | sd of log-ratio | pairs for 5% vs 2% |", "|:--|--:|--:|"]
        from llmbench.gate import sequential

        design = sequential.Design()
        for name in dict.fromkeys(k for o in aa for k in o.log_sd):
            sd = _median([o.log_sd[name] for o in aa if name in o.log_sd])
            n = next((n for n in range(8, 2000)
                      if sequential.power(1.05, sd, n, 0.02, design) >= 0.8), None)
            lines.append(f"| {name} | {sd:.4f} | {n or '>2000'} |")
    return "\n".join(lines)


def run_paired_trials(root: Path, sha: str, out: Path, args: argparse.Namespace,
                      common: list[str]) -> list[PairedOutcome]:
    # An --out that holds earlier paired trials is continued: an afternoon is rarely enough.
    kept = out / "paired.json"
    outcomes = [PairedOutcome(**o) for o in json.loads(kept.read_text())] if kept.exists() else []
    plan = parse_plan(args.plan)
    first = 1 + max((int(p.name.split("-")[1]) for p in out.glob("paired-[0-9][0-9]-*")),
                    default=0)
    for i in range(first, first + args.paired_trials):
        for kind, slowdown, threshold in plan:
            print(f"paired: trial {i} of {first}-{first + args.paired_trials - 1} ({kind})",
                  flush=True)
            folder = out / f"paired-{i:02d}-{kind.replace('%', 'pct').replace('@', '-at-')}"
            outcomes.append(paired_trial(root, sha, folder, kind, slowdown, threshold, common,
                                         args.budget))
            _replace(out / "paired.json", json.dumps([o.__dict__ for o in outcomes], indent=1))
            _replace(out / "paired.md", paired_table(outcomes, args.target_group) + "\n")
    return outcomes


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s [options] [-- PYTEST_ARGS ...]")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rev", default="HEAD", help="the code to measure. Default: HEAD")
    parser.add_argument("--trials", type=int, default=10,
                        help="stored-baseline rounds (one A/A and one slowed run each)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds per benchmark in stored-baseline runs. Default: the "
                             "profile's")
    parser.add_argument("--paired-trials", type=int, default=0,
                        help="paired A/B rounds, each one comparison of every --plan kind")
    parser.add_argument("--plan", default=PAIRED_PLAN,
                        help="paired comparisons per round: aa or slowFACTOR, @threshold. "
                             "Default: %(default)s")
    parser.add_argument("--budget", type=float, default=ab.DEFAULT_BUDGET_S,
                        help="seconds per paired comparison. Default: %(default)s")
    parser.add_argument("--slowdown", type=float, default=0.15)
    parser.add_argument("--target-group", default="decode",
                        help="the benchmark group slowed by the full factor. Default: decode")
    parser.add_argument("--threshold", type=gate.parse_fraction, default=None)
    parser.add_argument("--out", default=None, help="Default: a new temporary folder (kept)")
    parser.add_argument("--rejudge", metavar="DIR", default=None,
                        help="run nothing: judge the runs an earlier call kept under DIR again "
                             "(e.g. at another --threshold); results go to --out, by default "
                             "DIR/rejudge-<threshold>")
    args = parser.parse_args(argv[:cut])
    args.pytest_args = argv[cut + 1:]
    ab.check_pytest_args(args.pytest_args)
    if args.rejudge:
        return rejudge(Path(args.rejudge), args)

    ab.end_on_sigterm()  # a killed trial run removes its worktree, as Ctrl-C does
    out = Path(args.out or tempfile.mkdtemp(prefix="llmbench-trials-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"gate_trials: runs and results under {out}", flush=True)
    options = gate.GateOptions(threshold=args.threshold)
    common = ["--model", args.model, *args.pytest_args]
    stored_args = common + ([f"--rounds={args.rounds}"] if args.rounds else [])
    inject = ["-p", "llmbench.bench.inject", f"--slow-down=decode_step={args.slowdown}"]
    outcomes: list[Outcome] = []
    try:
        with ab.worktree(ab.repo_root(), args.rev) as (root, sha):
            print(f"gate_trials: {args.rev} = {sha[:8]} checked out in {root}", flush=True)
            if args.trials:
                print("stored baseline: the baseline run", flush=True)
                base = baselines.load_run(run_suite(root, out / "stored", stored_args))
                for i in range(1, args.trials + 1):
                    print(f"stored baseline: trial {i}/{args.trials}", flush=True)
                    same = baselines.load_run(run_suite(root, out / "stored", stored_args))
                    outcomes += judge("aa", base, same, options, args.target_group,
                                      ("stored", "stored+normalize"))
                    slow = baselines.load_run(run_suite(root, out / "stored-slow",
                                                        stored_args + inject))
                    outcomes += judge("slow", base, slow, options, args.target_group,
                                      ("stored", "stored+normalize"))
                    save(out, outcomes, args)
            if args.paired_trials:
                paired = run_paired_trials(root, sha, out, args, common)
                print(paired_table(paired, args.target_group))
                if not outcomes:
                    return 0
    except UserError as exc:
        print(f"gate_trials: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: finished comparisons are kept under out
        print(f"gate_trials: interrupted; what finished is under {out}", file=sys.stderr)
        return 130
    print(save(out, outcomes, args))
    return 0


def rejudge(kept: Path, args: argparse.Namespace) -> int:
    """Judge the runs of an earlier call again, in the order that call judged them."""
    def runs(folder: Path) -> list[baselines.Run]:
        return [baselines.load_run(p) for p in sorted(folder.glob("*/*.json"),
                                                      key=baselines.run_number)]

    options = gate.GateOptions(threshold=args.threshold)
    modes = ("stored", "stored+normalize")
    outcomes: list[Outcome] = []
    stored, slowed = runs(kept / "stored"), runs(kept / "stored-slow")
    if stored:
        base = stored[0]
        for same, slow in itertools.zip_longest(stored[1:], slowed):
            if same:
                outcomes += judge("aa", base, same, options, args.target_group, modes)
            if slow:
                outcomes += judge("slow", base, slow, options, args.target_group, modes)
    if not outcomes:
        print(f"gate_trials: error: no kept runs under {kept}", file=sys.stderr)
        return 2
    threshold = "default" if args.threshold is None else f"{args.threshold:g}"
    out = Path(args.out or kept / f"rejudge-{threshold}")
    out.mkdir(parents=True, exist_ok=True)
    print(save(out, outcomes, args, kept))
    return 0


def noise(kept: Path) -> str:
    """Where the noise sits, per benchmark: spread of rounds inside one run against spread
    of the medians of separate runs of the same unchanged code.

    The rank test treats rounds as independent draws. When runs differ far more than rounds
    inside them do, a stored comparison's rounds overstate the evidence: this table shows by
    how much, on the runs at hand. Spreads are standard deviations of log time (~ CV).
    """
    def spread(folders: list[Path]) -> dict[str, tuple[list[float], list[float]]]:
        found: dict[str, tuple[list[float], list[float]]] = {}
        for folder in folders:
            medians: dict[str, list[float]] = {}
            for path in sorted(folder.glob("*/*.json")):
                for bench in baselines.load_run(path).benchmarks.values():
                    logs = np.log(bench.samples)
                    within, between = found.setdefault(bench.name, ([], []))
                    within.append(float(np.std(logs, ddof=1)))
                    medians.setdefault(bench.name, []).append(float(np.median(logs)))
            for name, values in medians.items():
                if len(values) > 1:
                    found[name][1].append(float(np.std(values, ddof=1)))
        return found

    rows = []
    for name, (within, between) in spread([kept / "stored"]).items():
        cells = [f"{np.median(within):.3f}" if within else "-",
                 f"{np.median(between):.3f}" if between else "-"]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join([
        "Noise of unchanged code (sd of log time; medians over runs):", "",
        "| benchmark | rounds within a stored run | medians of stored runs |",
        "|:--|--:|--:|", *rows])


def save(out: Path, outcomes: list[Outcome], args: argparse.Namespace,
         kept: Path | None = None) -> str:
    """Write trials.json and summary.md from the outcomes so far; the summary.

    Called after every trial, so that an interrupted hour of measurements keeps what it got.
    """
    table = rates(outcomes)
    summary = markdown(table, args) + "\n\n" + noise(kept or out)
    _replace(out / "trials.json", json.dumps(
        {"args": vars(args), "rates": table, "outcomes": [o.__dict__ for o in outcomes]},
        indent=2))
    _replace(out / "summary.md", summary + "\n")
    return summary


def _replace(path: Path, text: str) -> None:
    # These two files are this script's own running tally, rewritten after every trial;
    # write-then-rename so a kill mid-write leaves the previous tally, not half a file.
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
