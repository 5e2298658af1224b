"""The report's PNG plots: which there are, and drawing each into a folder (or saying why it
is not drawn). Medians with min-max whiskers, the baseline overlaid when given.

Drawn on matplotlib's object API (``Figure`` + the Agg canvas), never pyplot: headless by
construction, no global state, safe in parallel tests. Each plot reads its groups from a run
(``llmbench.runs.Run``); a plot whose groups the run lacks is skipped with the reason, not drawn
empty. The figures are in ``plot_figures``, built from ``plot_layouts`` and ``plot_parts``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from llmbench.report.plot_figures import (
    batch_size,
    engines,
    input_sweep,
    kv_cache,
    output_sweep,
    prefill_decode,
    sequential_vs_batched,
    server_concurrency,
    server_generate,
)
from llmbench.report.plot_parts import Skip

if TYPE_CHECKING:
    from llmbench.runs import Run

DPI = 120


@dataclass(frozen=True)
class PlotOutcome:
    file: str
    title: str
    description: str
    path: Path | None  # None: skipped
    skipped: str | None = None


@dataclass(frozen=True)
class PlotSpec:
    file: str
    title: str
    description: str
    draw: Callable
    size: tuple[float, float] = (10.0, 4.6)


PLOTS = (
    PlotSpec("output_sweep.png", "Output-length sweep",
             "End-to-end latency and output tokens/s against the number of generated tokens "
             "at a fixed prompt: latency should grow linearly and tokens/s level off.",
             output_sweep),
    PlotSpec("input_sweep.png", "Prompt-length sweep",
             "End-to-end latency and output tokens/s against prompt length at a fixed number "
             "of new tokens (log-scale x); the chat-formatted passage is the star.",
             input_sweep),
    PlotSpec("prefill_decode.png", "Prefill against decode",
             "Milliseconds per token of prefill (per prompt token, one parallel pass) and of "
             "decode (per generated token, one step at a time), against the tokens in context.",
             prefill_decode, (8.0, 5.0)),
    PlotSpec("kv_cache.png", "KV cache on and off",
             "Latency and tokens/s of the same generation with the KV cache and without it.",
             kv_cache),
    PlotSpec("batch_size.png", "Batch size",
             "Total output tokens/s and whole-batch latency of static batches against the "
             "batch size.", batch_size),
    PlotSpec("sequential_vs_batched.png", "Sequential against batched",
             "The same prompts generated one after another, and together as one static batch.",
             sequential_vs_batched),
    PlotSpec("engines.png", "Engines",
             "Engine configurations on the same work, ranked by ms per output token, the "
             "fastest on top: our prefill/decode loop and transformers' generate, each eager on "
             "a dynamic KV cache and compiled on a static one, and the loop eager on a static "
             "one; the loop on weights packed for oneDNN, and in bfloat16 with native, int8 and "
             "int4 weights. One prompt; the full profile adds a batch of 8 (a panel of its "
             "own), the loop with eager attention and generate eager on a static cache.",
             engines, (12.0, 5.6)),
    PlotSpec("server_generate.png", "Server overhead",
             "Latency and tokens/s of one non-streamed request through the HTTP server and of "
             "the same generation straight through the engine, against output length.",
             server_generate),
    PlotSpec("server_concurrency.png", "Server under concurrency",
             "Time to first token, inter-token latency and total output tokens/s through the "
             "server against the number of concurrent requests.", server_concurrency,
             (13.0, 4.6)),
)
PLOT_FILES = tuple(spec.file for spec in PLOTS)


def draw_all(run: Run, baseline: Run | None, out_dir: Path) -> tuple[PlotOutcome, ...]:
    """Draw every plot the run has data for into out_dir; say why each other one is not."""
    outcomes = []
    for spec in PLOTS:
        fig = Figure(figsize=spec.size, dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        try:
            spec.draw(fig, run, baseline)
        except Skip as why:
            outcomes.append(PlotOutcome(spec.file, spec.title, spec.description, None, str(why)))
            continue
        path = out_dir / spec.file
        fig.savefig(path, dpi=DPI)
        outcomes.append(PlotOutcome(spec.file, spec.title, spec.description, path))
    return tuple(outcomes)

