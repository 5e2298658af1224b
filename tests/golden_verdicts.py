"""Golden verdicts: real saved runs replayed through `llmbench compare`, and what it printed.

The runs (tests/data/golden/runs, gzipped) are nine real runs of SmolLM2-135M on a 2-vCPU
Xeon, quick profile, from the stored-verdicts campaign: five of one commit (the noise
between runs), a comment-only commit that passed, the project's decode injector at 15%
(decided together as a family, and from an older confirmation without one), and a plugin
outside the project that slows every MLP. Each case compares two of them in a folder that
holds exactly these nine, so the noise between runs, the recorded confirmations and every
verdict are fixed; the expected output (tests/data/golden/expected) is what the code gave
when the case was written.

A change that means to change no verdict (moving the verdict pipeline, typing its records)
must leave every case as it was: `test_golden_verdicts`. A change that means to change one
regenerates them, and its diff shows what moved:

    python tests/golden_verdicts.py      # rewrites tests/data/golden/expected
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "data" / "golden"
RUNS = GOLDEN / "runs"
EXPECTED = GOLDEN / "expected"
ENVIRONMENT = "smollm2-135m-cpu-float32"  # the folder the runs were saved in

# name: (baseline run, candidate run, extra flags). Runs by their number in the campaign.
CASES = {
    # Two runs of one commit: no verdict, exit 0.
    "same-code": ("0001", "0002", ()),
    # Comment-only code against a 4-hour-old baseline, confirmed by its recorded A/B.
    "comment-only": ("0005", "0018", ()),
    # The decode injector at 15%: a family of slower benchmarks decided together.
    "decode-injector-family": ("0005", "0019", ()),
    # The injector from an older confirmation, which recorded no family.
    "decode-injector-alone": ("0005", "0013", ()),
    # Every Llama MLP slowed by a plugin outside llmbench.
    "slow-mlp-plugin": ("0005", "0016", ()),
    # The injector against baselines it was not confirmed against: stored verdicts only,
    # beyond the noise between runs against the level of 14bd3a1c's five runs (exit 1), or
    # slower but not proven against the comment-only commit's one run (exit 6).
    "unconfirmed": ("0004", "0019", ()),
    "not-confirmed": ("0018", "0019", ()),
    # Under the flags that change the rule: comment-only code without its confirmation, and
    # the injector at other thresholds.
    "fail-on-inconclusive": ("0003", "0018", ("--fail-on-inconclusive",)),
    "threshold": ("0005", "0019", ("--threshold", "20%", "--threshold-for", "decode=10%")),
}
FORMATS = ("json", "text", "markdown")


def unpack(folder: Path) -> Path:
    """The golden runs, unzipped under their saved names into `folder`/ENVIRONMENT."""
    env = folder / ENVIRONMENT
    env.mkdir(parents=True, exist_ok=True)
    for packed in sorted(RUNS.glob("*.json.gz")):
        with gzip.open(packed, "rb") as src, open(env / packed.name[:-3], "wb") as dst:
            shutil.copyfileobj(src, dst)
    return env


def _path(env: Path, number: str) -> Path:
    (path,) = env.glob(f"{number}_*.json")
    return path


def replay(env: Path, case: str, fmt: str) -> tuple[int, str]:
    """`llmbench compare` of one case in one format: its exit code and its stdout, with the
    folder's path written as <runs> so that the output does not depend on where it ran."""
    from llmbench.cli import main

    baseline, candidate, flags = CASES[case]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["compare", str(_path(env, baseline)), str(_path(env, candidate)),
                     "--format", fmt, *flags])
    return int(code), out.getvalue().replace(str(env), "<runs>")


def expected_path(case: str, fmt: str) -> Path:
    return EXPECTED / f"{case}.{ {'json': 'json', 'text': 'txt', 'markdown': 'md'}[fmt] }"


def expected(case: str, fmt: str) -> tuple[int, str]:
    """The recorded exit code and output of one case in one format."""
    codes = json.loads((EXPECTED / "exit_codes.json").read_text(encoding="utf-8"))
    return codes[case], expected_path(case, fmt).read_text(encoding="utf-8")


def regenerate(folder: Path) -> None:
    """Rewrite every expected output from the code as it is now."""
    env = unpack(folder)
    EXPECTED.mkdir(parents=True, exist_ok=True)
    codes = {}
    for case in CASES:
        for fmt in FORMATS:
            code, text = replay(env, case, fmt)
            codes.setdefault(case, code)
            assert codes[case] == code, (case, fmt, code)
            expected_path(case, fmt).write_text(text, encoding="utf-8")
    (EXPECTED / "exit_codes.json").write_text(json.dumps(codes, indent=2) + "\n",
                                              encoding="utf-8")


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(HERE.parent))
    with tempfile.TemporaryDirectory() as tmp:
        regenerate(Path(tmp))
    print(f"rewrote {EXPECTED}")
