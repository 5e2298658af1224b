"""The engines plot: configurations as horizontal bars ranked by ms per output token, the
fastest on top and named, and a title that fits the figure."""

from __future__ import annotations

import json

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from test_report import _bench, make_run

from llmbench.report import plots
from llmbench.report.plot_figures import engines
from llmbench.runs import load_run

# (engine, KV cache, compiled, dtype of its own model copy, weights, ms per token)
CONFIGURATIONS = [
    ("loop", "dynamic", False, None, "native", 49), ("loop", "static", False, None, "native", 52),
    ("loop", "static", True, None, "native", 44), ("hf", "dynamic", False, None, "native", 58),
    ("hf", "static", True, None, "native", 47), ("loop", "dynamic", False, None, "packed", 31),
    ("loop", "dynamic", False, "bfloat16", "packed", 20),
    ("loop", "static", True, "bfloat16", "native", 24),
    ("loop", "static", True, "bfloat16", "int8", 21),
    ("loop", "dynamic", False, "bfloat16", "int4", 35),
    ("loop", "static", True, "bfloat16", "int4", 16)]


def _engines_run(path, seed=1):
    make_run(path, seed=seed, groups={"engines"})
    data = json.loads(path.read_text())
    rng = np.random.default_rng(seed)
    data["benchmarks"] = [
        _bench(rng, "engines", f"test_engine[bs=1-{i}]", {"engine": engine}, ms * 16 / 1000,
               {"input_tokens": 64, "output_tokens": 16, "engine": engine, "batch_size": 1,
                "engine_batch": 1, "kv_cache": cache, "compiled_decode": compiled,
                "weights": weights,
                **({"model_copy": {"dtype": dtype, "weights": weights}} if dtype else {})})
        for i, (engine, cache, compiled, dtype, weights, ms) in enumerate(CONFIGURATIONS)]
    path.write_text(json.dumps(data))
    return load_run(path, summary=True)


def _drawn(tmp_path):
    spec = next(s for s in plots.PLOTS if s.file == "engines.png")
    fig = Figure(figsize=spec.size, dpi=plots.DPI, layout="constrained")
    FigureCanvasAgg(fig)
    engines(fig, _engines_run(tmp_path / "r.json"), _engines_run(tmp_path / "b.json", 2))
    fig.canvas.draw()
    return fig


def test_bars_are_ranked_fastest_first_and_the_fastest_is_named(tmp_path):
    fig = _drawn(tmp_path)
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "loop + static cache + compile + bfloat16 + int4 weights"
    assert labels[-1] == "hf"
    assert ax.get_yticklabels()[0].get_fontweight() == "bold"
    assert ax.get_title().startswith("batch of 1: fastest loop + static cache + compile")
    widths = [bar.get_width() for bar in ax.patches[:len(labels)]]
    assert widths == sorted(widths)


def test_the_title_and_labels_fit_inside_the_figure(tmp_path):
    fig = _drawn(tmp_path)
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    texts = [fig._suptitle, *fig.axes[0].get_yticklabels(), fig.axes[0].title]
    for text in texts:
        extent = text.get_window_extent(renderer)
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1, text.get_text()
