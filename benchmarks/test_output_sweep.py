"""Latency against output length at a fixed 128-token prompt: latency should grow
linearly in output tokens and tokens/s should plateau."""

import pytest

from fixtures.timing import Work
from llmbench.engine.config import SamplingParams
from llmbench.engine.loop import generate


@pytest.mark.benchmark(group="output-sweep")
def test_output_sweep(measure, model, prompt_ids, output_case):
    num_input, num_output = output_case
    prompt = prompt_ids(num_input)
    params = SamplingParams(max_new_tokens=num_output, ignore_eos=True)
    measure(lambda: generate(model, prompt, params), expect=Work(num_input, num_output))
