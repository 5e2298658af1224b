"""The benchmark session's settings: engine config, profile and timing, validated once."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from llmbench.bench.profiles import Profile
from llmbench.engine.config import EngineConfig
from llmbench.engine.disturbance import DEFAULT_SHARE
from llmbench.runs import environment_key


@dataclass(frozen=True)
class BenchSettings:
    """Everything the fixtures need from the command line, resolved and checked."""

    engine: EngineConfig
    profile: Profile
    rounds: int
    warmup_rounds: int
    device: str  # concrete: cpu, cuda or mps
    dtype: str  # concrete torch dtype name
    shuffle_seed: int | None = None
    passes: int = 1  # the rounds of each case spread over this many passes (interleave)
    disturbed_share: float = DEFAULT_SHARE  # beyond it a round is disturbed (see disturbance)
    server_url: str | None = None
    server_api: str = "native"
    save: bool = True
    store: str = "baselines"  # where runs are saved and `latest` looks: a folder or a URL
    saved_path_file: str | None = None  # where to tell a script which run was saved

    def __post_init__(self) -> None:
        assert self.rounds >= 1 and self.warmup_rounds >= 0 and self.passes >= 1
        assert self.server_api in ("native", "openai")

    @property
    def environment_key(self) -> str:
        """This environment's runs in the store: its folder's name in a folder store."""
        return environment_key(self.engine.model, self.device, self.dtype, self.engine.variant)


# Where pytest_configure leaves the validated settings for fixtures and hooks to read.
SETTINGS_KEY = pytest.StashKey[BenchSettings]()
