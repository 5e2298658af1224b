"""What each request of a load level asks: its prompt and how many tokens it wants.

By default request i asks the i-th of the short questions shipped with llmbench, cycled,
for the run's `--max-new-tokens`. Production traffic is not that uniform, so lengths can
be drawn from a distribution instead (`--input-tokens`, `--output-tokens`):
  - `N`: always N;
  - `uniform:LOW:HIGH`: whole numbers from LOW to HIGH, each as likely;
  - `normal:MEAN:SD`: rounded, and clipped to at least 1;
  - `file:PATH`: drawn from the lengths in PATH, one whole number per line (a trace's
    lengths, say), each line as likely.
A prompt of N input tokens is cut from the passage llmbench ships (token ids, decoded to
text), each request from its own place in it (distinct places while the passage has
enough), so no two requests share a prefix by accident. `--shared-prefix N
--prefix-groups G` gives request i the N-token prefix of group i mod G before its own
text, as a system prompt or a few-shot preamble repeated by many users is: what a
server's prefix cache is for.

Multi-turn sessions (`--turns`, a distribution as above): consecutive requests form a
conversation of that many turns, each turn a planned request as above (the shared prefix
on its first turn only); the client sends a turn after the previous one's answer, with the
conversation so far (`client`), so each turn's prompt is longer than the last and begins
with what the server has just seen.

Lengths are drawn from the run's seed, so two runs with the same flags send the same
requests. A prompt's token count is the tokenizer's before any chat template; servers
re-tokenize text, so the count they report can differ by a token at a seam.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmbench.errors import UserError

KINDS = ("fixed", "uniform", "normal", "file")


@dataclass(frozen=True)
class Lengths:
    """A distribution of token counts, parsed from `N`, `uniform:A:B`, `normal:M:S` or
    `file:PATH`."""

    kind: str
    low: float = 0.0  # fixed: the length; uniform: the lowest; normal: the mean
    high: float = 0.0  # uniform: the highest; normal: the standard deviation
    values: tuple[int, ...] = ()  # file: the lengths listed

    def draw(self, rng: np.random.Generator, n: int) -> list[int]:
        if self.kind == "fixed":
            drawn = np.full(n, self.low)
        elif self.kind == "uniform":
            drawn = rng.integers(int(self.low), int(self.high), endpoint=True, size=n)
        elif self.kind == "normal":
            drawn = np.rint(rng.normal(self.low, self.high, size=n))
        else:
            drawn = rng.choice(np.asarray(self.values), size=n)
        return [max(1, int(v)) for v in drawn]

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"{self.low:g}"
        if self.kind == "file":
            return f"file ({len(self.values)} lengths, mean {np.mean(self.values):.0f})"
        return f"{self.kind}:{self.low:g}:{self.high:g}"


def parse_lengths(text: str, flag: str, unit: str = "tokens") -> Lengths:
    """`text` as Lengths of `unit`; one line naming `flag` when it is not one of the forms."""
    usage = (f"{flag} takes N, uniform:LOW:HIGH, normal:MEAN:SD or file:PATH (counts of "
             f"{unit}), got {text!r}")
    kind, _, rest = text.partition(":")
    if kind == "file":
        return _from_file(Path(rest), flag, unit)
    try:
        numbers = [float(part) for part in (rest.split(":") if rest else [kind])]
    except ValueError:
        raise UserError(usage) from None
    if not all(math.isfinite(n) for n in numbers):
        raise UserError(usage)
    if not rest and len(numbers) == 1 and numbers[0] >= 1 and numbers[0] == int(numbers[0]):
        return Lengths("fixed", numbers[0])
    if kind == "uniform" and len(numbers) == 2 and 1 <= numbers[0] <= numbers[1] and all(
            n == int(n) for n in numbers):
        return Lengths("uniform", *numbers)
    if kind == "normal" and len(numbers) == 2 and numbers[0] >= 1 and numbers[1] >= 0 and all(
            math.isfinite(n) for n in numbers):
        return Lengths("normal", *numbers)
    raise UserError(usage)


def _from_file(path: Path, flag: str, unit: str) -> Lengths:
    try:
        lines = [line.strip() for line in path.read_text("utf-8").splitlines()]
    except OSError as exc:
        raise UserError(f"{flag}: cannot read {path}: {exc.strerror}") from None
    values = []
    for number, line in enumerate(lines, 1):
        if not line:
            continue
        if not line.isdigit() or int(line) < 1:
            raise UserError(f"{flag}: {path}, line {number}: {line!r} is not a whole number "
                            f"of {unit} of at least 1")
        values.append(int(line))
    if not values:
        raise UserError(f"{flag}: {path} lists no lengths")
    return Lengths("file", values=tuple(values))


@dataclass(frozen=True)
class PlannedRequest:
    """One request as the workload plans it: its prompt (a session's turn: its new
    message), its own token limit (None: the run's `--max-new-tokens`), and the session
    and turn it belongs to (None: a request on its own)."""

    prompt: str
    max_new_tokens: int | None = None
    session: int | None = None
    turn: int = 0


@dataclass(frozen=True)
class Workload:
    """How a level's requests are made; the default asks the shipped questions."""

    input_tokens: Lengths | None = None
    output_tokens: Lengths | None = None
    prefix_tokens: int = 0
    prefix_groups: int = 1
    turns: Lengths | None = None  # turns per session; None: every request on its own
    seed: int = 0

    def __post_init__(self) -> None:
        if self.prefix_tokens < 0 or self.prefix_groups < 1:
            raise UserError("--shared-prefix must be >= 0 and --prefix-groups >= 1")
        if self.prefix_groups > 1 and not self.prefix_tokens:
            raise UserError("--prefix-groups groups requests by a shared prefix: add "
                            "--shared-prefix N")

    @property
    def is_default(self) -> bool:
        return self == Workload(seed=self.seed)

    def plan(self, n: int, tokenizer, passage: str, questions: tuple[str, ...]
             ) -> list[PlannedRequest]:
        """The `n` requests of a level, the same for the same workload and seed."""
        rng = np.random.default_rng([self.seed, 44])  # apart from the schedule's stream
        outputs = (self.output_tokens.draw(rng, n) if self.output_tokens is not None
                   else [None] * n)
        ids = list(tokenizer(passage, add_special_tokens=False)["input_ids"])
        if self.input_tokens is not None:
            lengths = self.input_tokens.draw(rng, n)
            # Distinct places while the passage has enough of them: two requests from one
            # place would share a prefix, which a server's prefix cache would serve.
            starts = rng.choice(len(ids), size=n, replace=n > len(ids))
            bodies = [tokenizer.decode(_cut(ids, int(start), length))
                      for start, length in zip(starts, lengths, strict=True)]
        else:
            bodies = [questions[i % len(questions)] for i in range(n)]
        prefixes = [tokenizer.decode(_cut(ids, group * self.prefix_tokens, self.prefix_tokens))
                    + "\n\n" if self.prefix_tokens else ""
                    for group in range(self.prefix_groups)]
        if self.turns is None:
            return [PlannedRequest(prefixes[i % self.prefix_groups] + bodies[i], outputs[i])
                    for i in range(n)]
        places = _sessions(self.turns.draw(rng, n), n)
        return [PlannedRequest((prefixes[session % self.prefix_groups] if not turn else "")
                               + bodies[i], outputs[i], session, turn)
                for i, (session, turn) in enumerate(places)]

    def describe(self) -> str:
        parts = []
        if self.input_tokens is not None:
            parts.append(f"input tokens {self.input_tokens.describe()}")
        if self.output_tokens is not None:
            parts.append(f"output tokens {self.output_tokens.describe()}")
        if self.prefix_tokens:
            parts.append(f"a {self.prefix_tokens}-token prefix shared in "
                         f"{self.prefix_groups} group(s)")
        if self.turns is not None:
            parts.append(f"sessions of {self.turns.describe()} turns")
        return ", ".join(parts) or "the shipped questions"


def _sessions(lengths: list[int], n: int) -> list[tuple[int, int]]:
    """(session, turn) of each of `n` requests, sessions taking their drawn numbers of
    turns in order; the last one ends where the requests do."""
    places: list[tuple[int, int]] = []
    for session, length in enumerate(lengths):
        places.extend((session, turn) for turn in range(length))
        if len(places) >= n:
            break
    return places[:n]


def _cut(ids: list[int], start: int, length: int) -> list[int]:
    """`length` ids from `start`, going round the passage as often as needed."""
    repeats = -(-(start + length) // len(ids))
    return (ids * repeats)[start:start + length]
