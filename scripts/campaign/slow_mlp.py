"""A slowdown from outside llmbench, for the stored-verdict campaign: a pytest plugin that
makes every eager Llama MLP call busy-wait for FACTOR times the time the MLP itself took. A compiled
graph cannot hold a Python busy-wait, so compiled cases keep their speed. The campaign's
`slowmlp` commit copies this file to the repository's root and lists it in the root
conftest's `pytest_plugins`."""

import time

import torch
from transformers.models.llama import modeling_llama

FACTOR = 0.4
_forward = modeling_llama.LlamaMLP.forward


def _slow_forward(self, x):
    if torch.compiler.is_compiling():
        return _forward(self, x)
    start = time.perf_counter()
    out = _forward(self, x)
    until = time.perf_counter() + FACTOR * (time.perf_counter() - start)
    while time.perf_counter() < until:
        pass
    return out


modeling_llama.LlamaMLP.forward = _slow_forward
