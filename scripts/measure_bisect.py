"""Measure `llmbench bisect` as issue 45 asks: throwaway clones of this project with a slowdown
planted in one commit of a range, bisected with the command a user runs.

  python scripts/measure_bisect.py tiny OUT      # 16 commits, one doubles decode (tiny)
  python scripts/measure_bisect.py broken OUT    # the same, and one commit cannot import
  python scripts/measure_bisect.py smollm2 OUT   # 8 commits, one slows decode 15% (SmolLM2)
  python scripts/measure_bisect.py comment OUT   # 8 comment-only commits (SmolLM2)
  python scripts/measure_bisect.py work OUT      # 16 commits, one clones every MLP's input

OUT is a folder (made, must not exist) holding the clone, the saved bisection and the
command's output; the figures go to stdout, one line each, for docs/measurements/. Run it
with nothing else on the machine: every step is a paired A/B.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOOP = Path("llmbench/engine/loop.py")
INIT = Path("llmbench/__init__.py")
DECODE_CALL = "    call = lm.compiled_decoder if is_static(cache) else None\n"


def _git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=clone, check=True, capture_output=True,
                          text=True).stdout.strip()


def slow_decode(factor: float):
    """Every decode step sleeps `factor` times its own time on top (a slower decode, as
    code that did more work per step would be)."""
    def plant(clone: Path) -> None:
        text = (clone / LOOP).read_text()
        start = text.index("def decode_step(")
        end = text.index("\n\n\n", start)
        body = text[start:end].replace(
            "    return _forward(", "    started = time.perf_counter()\n    out = _forward(")
        body += (f"\n    time.sleep({factor} * (time.perf_counter() - started))"
                 "\n    return out")
        text = text[:start] + body + text[end:]
        (clone / LOOP).write_text(text.replace("import functools\n",
                                               "import functools\nimport time\n", 1))
    return plant


def clone_every_mlp_input(clone: Path) -> None:
    """One more aten::clone in every Llama MLP forward: more counted work, same result."""
    with open(clone / LOOP, "a") as fh:
        fh.write("\n\nfrom transformers.models.llama import modeling_llama as _llama\n"
                 "_mlp_forward = _llama.LlamaMLP.forward\n"
                 "_llama.LlamaMLP.forward = lambda self, x: _mlp_forward(self, x.clone())\n")


def break_import(clone: Path) -> None:
    with open(clone / INIT, "a") as fh:
        fh.write("\nimport llmbench_has_no_such_module  # noqa\n")


def mend_import(clone: Path) -> None:
    text = (clone / INIT).read_text()
    (clone / INIT).write_text(text.replace("\nimport llmbench_has_no_such_module  # noqa\n",
                                           "\n"))


def note(number: int):
    def plant(clone: Path) -> None:
        with open(clone / "docs" / "index.md", "a") as fh:
            fh.write(f"\n<!-- bisect measurement: comment-only change {number} -->\n")
    return plant


def make_range(out: Path, count: int, planted: dict[int, tuple[str, object]]) -> Path:
    """A clone of this project's HEAD with `count` commits on top: commit i applies
    `planted[i]` (subject, change) or adds a comment."""
    clone = out / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    for number in range(1, count + 1):
        subject, change = planted.get(number, (f"comment-only change {number}", note(number)))
        change(clone)
        _git(clone, "add", "-A")
        _git(clone, "-c", "user.name=m", "-c", "user.email=m@m", "commit", "-qm", subject)
    return clone


def bisect(out: Path, clone: Path, count: int, budget: str, *args: str) -> None:
    """Run the bisection as a user does, from the clone; print its figures."""
    command = ["llmbench", "bisect", f"HEAD~{count}", "HEAD", "--budget", budget, *args]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=clone, capture_output=True, text=True)
    took = time.monotonic() - started
    (out / "stdout.txt").write_text(proc.stdout)
    (out / "stderr.txt").write_text(proc.stderr)
    saved = json.loads(next(clone.glob("bisect-*.json")).read_text())
    subjects = saved["subjects"]
    print(f"command: {' '.join(command)}")
    print(f"exit {proc.returncode}; {len(saved['steps'])} steps; {took:.0f} s wall; answer: "
          f"{proc.stdout.splitlines()[0] if proc.stdout else proc.stderr[-300:]}")
    for step in saved["steps"]:
        shown = "; ".join(
            f"{b['label']} {b['verdict']}"
            + (f" x{b['ratio']:.3f} [{b['ci_low']:.3f}, {b['ci_high']:.3f}] {b['n_pairs']} pairs"
               if "ratio" in b else f" ({b['summary']})")
            for b in step["benchmarks"]) or step["reason"][:160]
        print(f"  {subjects.get(step['commit'], '?')!r} against "
              f"{subjects.get(step['baseline'], '?')!r}: {step['outcome']} in "
              f"{step['seconds']:.0f} s; {shown}")
    if saved.get("skipped"):
        print(f"  skipped: {[subjects[s] for s in saved['skipped']]}")


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True)
    tiny = ("--", "--model", "tiny", "--threads", "1", "-k", "test_decode_steps")
    smollm2 = ("--", "-k", "test_decode_steps")
    if mode == "tiny":
        clone = make_range(out, 16, {11: ("decode sleeps as long again", slow_decode(1.0))})
        bisect(out, clone, 16, "15m", *tiny)
    elif mode == "broken":
        clone = make_range(out, 16, {8: ("llmbench cannot import", break_import),
                                     9: ("llmbench imports again", mend_import),
                                     11: ("decode sleeps as long again", slow_decode(1.0))})
        bisect(out, clone, 16, "15m", *tiny)
    elif mode == "smollm2":
        clone = make_range(out, 8, {6: ("decode sleeps 15% on top", slow_decode(0.15))})
        bisect(out, clone, 8, "40m", *smollm2)
    elif mode == "comment":
        clone = make_range(out, 8, {})
        bisect(out, clone, 8, "15m", *smollm2)
    elif mode == "work":
        clone = make_range(out, 16, {11: ("clone every MLP input", clone_every_mlp_input)})
        bisect(out, clone, 16, "15m", "--work", "--work-threshold", "0", *tiny)
    else:
        raise SystemExit(f"unknown mode {mode!r}: tiny, broken, smollm2, comment or work")


if __name__ == "__main__":
    main()
