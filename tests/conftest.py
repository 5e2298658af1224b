"""Shared fixtures for the library's tests: models loaded once per xdist worker.

Run with `pytest -n auto --dist loadgroup tests/` (as `nox -s tests` does): tests marked with
one `xdist_group` then share a worker, one after another. Each worker pins torch to one CPU
thread: xdist already runs one worker per core, and torch's default of one thread per core
on top of that oversubscribes the CPU and makes every forward pass several times slower.
"""

from __future__ import annotations

import pytest
import torch

from llmbench.engine.config import EngineConfig
from llmbench.engine.models import LoadedModel, load_model


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_lm() -> LoadedModel:
    """The seeded random-weight tiny Llama (SmolLM2's tokenizer), on CPU in float32."""
    return load_model(EngineConfig(model="tiny", device="cpu"))


@pytest.fixture(scope="session")
def smollm2_lm() -> LoadedModel:
    """The real SmolLM2-135M-Instruct weights (de-quantized once into ~/.cache/llmbench)."""
    return load_model(EngineConfig(model="smollm2-135m", device="cpu"))


@pytest.fixture(scope="session")
def gpt2_lm() -> LoadedModel:
    """distilgpt2's shapes with random weights: the non-Llama (GPT-2) code path."""
    return load_model(EngineConfig(model="distilgpt2@random", device="cpu"))


@pytest.fixture(params=["tiny", "smollm2"])
def any_lm(request) -> LoadedModel:
    """Each of tiny and the real smollm2-135m, for the agreement tests."""
    return request.getfixturevalue(f"{request.param}_lm")

