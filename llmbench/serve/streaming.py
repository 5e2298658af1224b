"""Streamed output: text deltas for a growing token sequence, and Server-Sent Events."""

import json
from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from llmbench.serve.request import Request


class IncrementalDetokenizer:
    """Text deltas for a growing token sequence.

    Each push decodes a short window twice, the tokens already shown plus the new ones and
    the same window without them, and emits the difference; while the new tokens end in an
    incomplete UTF-8 sequence (a U+FFFD at the end) nothing is emitted and they are held
    back. `flush` emits whatever the whole decode has beyond the deltas sent.
    """

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._prefix = 0  # start of the context window
        self._read = 0  # end of what has been emitted
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        delta = after[len(before):]
        self._prefix, self._read = self._read, len(self._ids)
        self.text += delta
        return delta

    def flush(self) -> str:
        full = self._decode(self._ids)
        delta = full[len(self.text):] if full.startswith(self.text) else ""
        self.text += delta
        return delta


def sse(data: dict | str, event: str | None = None) -> str:
    """One Server-Sent Event frame.

    Written here rather than through sse-starlette, whose frames end lines with CRLF and
    which interleaves keep-alive comments: these are the bytes the small servers our users
    compare against write (`data: ...` and a blank line, LF only), so a client written for
    them reads ours unchanged (tests/test_server_clients.py). Reading is the library's
    (httpx-sse, `llmbench.load.client`)."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "") + f"data: {payload}\n\n"


def event_stream(frames: AsyncIterator[str], request: Request) -> StreamingResponse:
    # The background task cancels the request even when the client leaves before the
    # first frame, when the frame generator never starts and so never cleans up. No-cache:
    # a proxy or browser must not store one stream and replay it for another request.
    return StreamingResponse(frames, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"},
                             background=BackgroundTask(request.cancel))
