"""The report's figures, one function each: what every figure plots from a run (and its
baseline), and how it is titled."""

from __future__ import annotations

from llmbench.report.plot_layouts import Panel, Series, bar_figure, line_figure, ranked_figure
from llmbench.report.plot_parts import (
    WHISKERS,
    Skip,
    add_legend,
    add_title,
    draw_series,
    fixed_note,
    latency,
    log_y,
    named,
    per_token_ms,
    points,
    sides,
    sweep_axis,
    throughput,
)

LATENCY = Panel(latency, "latency ({unit})", "end-to-end latency", is_time=True)
THROUGHPUT = Panel(throughput, "output tokens/s", "output throughput")


def output_sweep(fig, run, baseline):
    line_figure(fig, run, baseline, group="output-sweep", x_of=lambda b: b.value(
        "output_tokens"), x_label="output tokens", panels=(LATENCY, THROUGHPUT), log_x=False,
        what="Latency and tokens/s against output length",
        note=fixed_note(run.group("output-sweep"), "input_tokens", "prompt tokens"))


def input_sweep(fig, run, baseline):
    chat = [b for b in run.group("input-sweep") if b.extra_info.get("chat")]
    chat_name = f"chat passage, {chat[0].value('input_tokens')} tokens" if chat else "chat"
    line_figure(fig, run, baseline, group="input-sweep", x_of=lambda b: b.value(
        "input_tokens"), x_label="input (prompt) tokens", panels=(LATENCY, THROUGHPUT),
        log_x=True, what="Latency and tokens/s against prompt length",
        note=fixed_note(run.group("input-sweep"), "output_tokens", "output tokens"),
        series=(Series("", lambda b: not b.extra_info.get("chat")),
                Series(chat_name, lambda b: bool(b.extra_info.get("chat")), "C3", "*", False)))


def batch_size(fig, run, baseline):
    per = {b.value("output_tokens") / b.value("batch_size") for b in run.group("batch-size")
           if b.value("output_tokens") and b.value("batch_size")}
    line_figure(fig, run, baseline, group="batch-size", x_of=lambda b: b.value("batch_size"),
                x_label="batch size (prompts)", log_x=True,
                panels=(Panel(throughput, "total output tokens/s", "throughput"),
                        Panel(latency, "latency of the whole batch ({unit})", "latency",
                              is_time=True)),
                what="Throughput against batch size (static batching)",
                note=f"; {next(iter(per)):g} new tokens per prompt" if len(per) == 1 else "")


def server_generate(fig, run, baseline):
    line_figure(fig, run, baseline, group="server-generate",
                x_of=lambda b: b.value("output_tokens"), x_label="output tokens", log_x=True,
                panels=(LATENCY, THROUGHPUT),
                what="One request at a time: through the server against the engine directly",
                series=(Series("through the server", lambda b: "server" in b.name),
                        Series("engine directly", lambda b: "server" not in b.name, "C2",
                               "s")))


def server_concurrency(fig, run, baseline):
    line_figure(fig, run, baseline, group="server-concurrency",
                x_of=lambda b: b.value("concurrency"), x_label="concurrent requests",
                log_x=True,
                panels=(Panel(lambda b: b.metric("ttft_ms"), "time to first token (ms)",
                              "TTFT"),
                        Panel(lambda b: b.metric("itl_ms"), "inter-token latency (ms)", "ITL"),
                        Panel(throughput, "total output tokens/s", "throughput")),
                what="Server: TTFT, ITL and throughput against concurrency",
                legend_title=f"{WHISKERS} (TTFT, ITL: lowest to highest percentile recorded)")


def prefill_decode(fig, run, baseline):
    if not run.group("prefill") and not run.group("decode"):
        raise Skip("the run has neither prefill nor decode benchmarks")
    ax = fig.subplots()
    every = []
    for side in sides(run, baseline):
        pre = points(side.run.group("prefill"), lambda b: b.value("input_tokens"),
                     per_token_ms("input_tokens"))
        dec = points(side.run.group("decode"), lambda b: b.value("decode_context")
                     or b.value("input_tokens"), per_token_ms("output_tokens"))
        draw_series(ax, pre, side, color="C0", label=named("prefill, per prompt token", side))
        draw_series(ax, dec, side, color="C1", marker="s",
                    label=named("decode, per generated token", side))
        every += [pre, dec]
    sweep_axis(ax, [x for p in every for x in p.x], "tokens in context (prompt length for "
               "prefill, cached tokens for decode)", log=True)
    log_y(ax, "cost per token (ms, log scale)")
    add_title(fig, "Prefill against decode: cost per token", run)
    add_legend(fig)


def kv_cache(fig, run, baseline):
    benches = run.group("kv-cache")
    bar_figure(fig, run, baseline, group="kv-cache",
               category_of=lambda b: "KV cache on" if b.value("use_cache") else "KV cache off",
               series_of=lambda b: "", what="KV cache on against off",
               note=fixed_note(benches, "input_tokens", "prompt tokens")
               + fixed_note(benches, "output_tokens", "new tokens"))


def sequential_vs_batched(fig, run, baseline):
    bar_figure(fig, run, baseline, group="sequential-vs-batched",
               category_of=lambda b: str(b.value("mode")), series_of=lambda b: "",
               what="The same prompts one after another against one static batch",
               note=fixed_note(run.group("sequential-vs-batched"), "batch_size", "prompts"))


def engines(fig, run, baseline):
    ranked_figure(fig, run, baseline, group="engines",
                  panel_of=lambda b: f"batch of {b.value('engine_batch') or b.value('batch_size')}",
                  label_of=engine_configuration, value_of=per_token_ms("output_tokens"),
                  xlabel="ms per output token",
                  what="Engine configurations on the same work, fastest first")


def engine_configuration(bench) -> str:
    """A case's configuration as its legend says it: `loop`, `hf + static cache + compile`. Cases
    saved before the KV cache was recorded ran on a dynamic one."""
    cache = bench.value("kv_cache") or "dynamic"
    label = str(bench.value("engine"))
    if cache != "dynamic":
        label += f" + {cache} cache"
    if bench.value("compiled_decode"):
        label += " + compile"
    if (bench.value("attn") or "sdpa") != "sdpa":
        label += f" + {bench.value('attn')} attention"
    copy = bench.value("model_copy") or {}  # a case run on its own copy of the model
    if copy.get("dtype"):
        label += f" + {copy['dtype']}"
    if (bench.value("weights") or "native") != "native":
        label += f" + {bench.value('weights')} weights"
    return label


