"""The pairing coordinator's clock, faked for the scripted-worker tests (`test_focus`,
`test_clearing`, `test_disturbed_pairs`): time moves only when a scripted round says so, so
what those tests assert is where a budget went, never a timing."""

from __future__ import annotations

import pytest

from llmbench.ab import pairing


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def install(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """A fresh fake clock, which `pairing` reads from now on."""
    fake = Clock()
    monkeypatch.setattr(pairing.time, "monotonic", fake.monotonic)
    return fake
