"""Benchmark profiles: how many rounds, and which sweep points each experiment runs.

`quick` fits the whole suite on smollm2-135m into minutes on a 2-core CPU; `full` runs every
sweep point. Each sweep yields (id, value) pairs so the ids read like
`in=128-out=64` or `bs=8` in reports and in `--benchmark-group-by`.
"""

from __future__ import annotations

from dataclasses import dataclass

# The output sweep's fixed prompt. (The input sweep's fixed new tokens are a profile's.)
SWEEP_PROMPT_TOKENS = 128


@dataclass(frozen=True)
class Profile:
    name: str
    rounds: int
    warmup_rounds: int
    # Each case's rounds are taken in this many passes over every case (`bench.interleave`).
    passes: int
    output_lengths: tuple[int, ...]
    input_lengths: tuple[int, ...]
    input_sweep_new_tokens: int  # each input-sweep point's, and the chat passage's
    chat_passage_tokens: int
    kv_prompt_tokens: int
    kv_new_tokens: int
    prefill_lengths: tuple[int, ...]
    decode_contexts: tuple[int, ...]
    decode_steps: int
    batch_sizes: tuple[int, ...]
    batch_prompt_tokens: int
    batch_new_tokens: int
    sequential_batch: int
    engine_batch_sizes: tuple[int, ...]
    # The engines group's configurations by name (benchmarks/test_engines.py); None: all.
    engine_configurations: tuple[str, ...] | None
    engine_prompt_tokens: int
    engine_new_tokens: int
    concurrency: tuple[int, ...]
    server_output_lengths: tuple[int, ...]
    server_new_tokens: int
    # The server's capacity at an objective (benchmarks/test_server_capacity.py): the
    # objective's limit on the median request's time to first token, as a multiple of one
    # request's alone; none, no capacity case (each of its rounds is a whole search, a
    # minute or more on a CPU). `capacity_requests`: the fewest measured requests of each
    # level of the search.
    capacity_slo_factors: tuple[float, ...] = ()
    capacity_requests: int = 16

    def sweep(self, argname: str) -> list[tuple[str, object]]:
        """(id, value) pairs for a benchmark argument named after a sweep."""
        sweeps = {
            "output_case": [(f"in={SWEEP_PROMPT_TOKENS}-out={n}", (SWEEP_PROMPT_TOKENS, n))
                            for n in self.output_lengths],
            "input_case": [(f"in={n}-out={self.input_sweep_new_tokens}",
                            (n, self.input_sweep_new_tokens)) for n in self.input_lengths],
            "prefill_tokens": [(f"in={n}", n) for n in self.prefill_lengths],
            "decode_context": [(f"ctx={n}", n) for n in self.decode_contexts],
            "batch_size": [(f"bs={n}", n) for n in self.batch_sizes],
            "engine_batch": [(f"bs={n}", n) for n in self.engine_batch_sizes],
            "concurrency": [(f"conc={n}", n) for n in self.concurrency],
            "server_output": [(f"out={n}", n) for n in self.server_output_lengths],
            "capacity_slo": [(f"ttft={f:g}x", f) for f in self.capacity_slo_factors],
        }
        return sweeps[argname]


# Benchmark arguments that the plugin (`options.pytest_generate_tests`) parametrizes from the
# active profile.
SWEEP_ARGNAMES = ("output_case", "input_case", "prefill_tokens", "decode_context",
                  "batch_size", "engine_batch", "concurrency", "server_output", "capacity_slo")
# The value a sweep the profile leaves empty is parametrized with: its cases are deselected
# (`options.pytest_collection_modifyitems`), where pytest would list each as a skip.
NOT_IN_PROFILE = "not-in-profile"


PROFILES = {
    "quick": Profile(
        # No per-case warm-up: the session fixture has already run every code path (and
        # the server warms its scheduler), and a warm-up round per case would spend a large
        # share of the budget (docs/measurements/2026-11-29-from-the-code.md).
        name="quick", rounds=10, warmup_rounds=0, passes=10,
        output_lengths=(8, 16, 32, 64), input_lengths=(64, 128, 256, 512),
        input_sweep_new_tokens=16, chat_passage_tokens=256, kv_prompt_tokens=64,
        kv_new_tokens=16, prefill_lengths=(32, 128, 512), decode_contexts=(16, 128),
        decode_steps=10, batch_sizes=(1, 2, 4, 8), batch_prompt_tokens=64, batch_new_tokens=16,
        # What keeps the suite within its 10-minute budget on a 2-core CPU (its timings:
        # docs/measurements/2026-12-01-quick-suite-duration.md) (full runs all of it): the
        # engines group at batch 1 only, without the eager-attention and the uncompiled
        # static-cache `generate` variants; server concurrency 1 and 8, not 4; 16 new tokens
        # for the input sweep and the server's requests (what the input sweep varies is the
        # prompt: decode is the same work at every point). The batch-size sweep still
        # measures the eager loop at batch 8.
        sequential_batch=3, engine_batch_sizes=(1,),
        engine_configurations=(
            "loop", "loop-static", "loop-static-compiled", "hf", "hf-static-compiled",
            "loop-packed", "loop-bf16-packed", "loop-bf16-static-compiled",
            "loop-bf16-int8-static-compiled", "loop-bf16-int4",
            "loop-bf16-int4-static-compiled"),
        engine_prompt_tokens=64, engine_new_tokens=16, concurrency=(1, 8),
        server_output_lengths=(16,), server_new_tokens=16,
    ),
    "full": Profile(
        name="full", rounds=15, warmup_rounds=2, passes=5,
        output_lengths=(10, 50, 100, 200, 250), input_lengths=(64, 128, 256, 512, 1024, 2048),
        input_sweep_new_tokens=32,
        chat_passage_tokens=1024, kv_prompt_tokens=128, kv_new_tokens=64,
        prefill_lengths=(32, 128, 512, 1024, 2048), decode_contexts=(16, 128, 512, 1024),
        decode_steps=10, batch_sizes=(1, 2, 4, 8, 16, 32), batch_prompt_tokens=128,
        batch_new_tokens=32, sequential_batch=8, engine_batch_sizes=(1, 8),
        engine_configurations=None,
        engine_prompt_tokens=128, engine_new_tokens=32, concurrency=(1, 4, 8, 16),
        server_output_lengths=(16, 64, 256), server_new_tokens=32,
        capacity_slo_factors=(3.0,),
    ),
}
DEFAULT_PROFILE = "quick"
