"""Multi-turn sessions in `llmbench load`: planned as conversations, sent turn after turn
with the conversation so far, on the schedule a session at a time."""

import json
import threading
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from llmbench import cli
from llmbench.engine.config import EngineConfig, SamplingParams
from llmbench.engine.models import load_model
from llmbench.engine.prompts import passage, questions
from llmbench.errors import UserError
from llmbench.load.client import request_body, run_load, sessions_of, transcript
from llmbench.load.config import SESSION_ENDED, LoadConfig
from llmbench.load.schedule import Arrivals
from llmbench.load.workload import PlannedRequest, Workload, parse_lengths
from llmbench.serve.app import ServerSettings, create_app, running_server


@pytest.fixture(scope="module")
def lm():
    return load_model(EngineConfig(model="tiny", device="cpu"))


def test_a_workload_plans_sessions_of_drawn_turns(lm):
    workload = Workload(turns=parse_lengths("3", "--turns"), prefix_tokens=8, prefix_groups=2)
    plan = workload.plan(7, lm.tokenizer, passage(), questions())
    assert [(r.session, r.turn) for r in plan] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1),
                                                   (1, 2), (2, 0)]
    # The shared prefix opens a session's first turn only; later turns resend it anyway.
    firsts = [r.prompt.split("\n\n")[0] for r in plan if r.turn == 0]
    assert firsts[0] == firsts[2] != firsts[1]
    assert all(r.prompt in questions() for r in plan if r.turn)
    drawn = Workload(turns=parse_lengths("uniform:1:4", "--turns"), seed=3)
    sessions = sessions_of(drawn.plan(40, lm.tokenizer, passage(), questions()), 40)
    assert sum(map(len, sessions)) == 40 and {len(s) for s in sessions[:-1]} <= {1, 2, 3, 4}
    assert len({len(s) for s in sessions}) > 1
    assert drawn.describe() == "sessions of uniform:1:4 turns"


def test_requests_on_their_own_are_sessions_of_one():
    assert sessions_of(["a", "b"], 3) == [[0], [1], [2]]
    plan = [PlannedRequest("a", session=0), PlannedRequest("b", session=0, turn=1),
            PlannedRequest("c", session=1)]
    assert sessions_of(plan, 3) == [[0, 1], [2]]


def test_the_conversation_is_resent_as_messages_or_as_one_transcript():
    history = (("Hi", "Hello!"), ("Name a color.", "Blue."))
    params = SamplingParams(max_new_tokens=4)
    path, body = request_body(LoadConfig(api="openai"), "Why?", params, True, history)
    assert path == "/v1/chat/completions" and body["messages"] == [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Name a color."}, {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Why?"}]
    text = transcript(history, "Why?")
    assert text == "Hi\n\nHello!\n\nName a color.\n\nBlue.\n\nWhy?"
    assert request_body(LoadConfig(api="openai", chat=False), "Why?", params, True,
                        history)[1]["prompt"] == text
    assert request_body(LoadConfig(), "Why?", params, True, history)[1]["prompt"] == text


class Recorder:
    """An OpenAI chat server that answers each request with its turn number, and records
    each body and when it came and went (the client's clock: one process)."""

    def __init__(self, fail_on: str | None = None, answer_s: float = 0.05):
        self.seen: list[tuple[float, float, dict]] = []
        self.fail_on, self.answer_s = fail_on, answer_s
        self.lock = threading.Lock()
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.chat)

    async def chat(self, request: Request):
        import asyncio

        body, came = await request.json(), time.perf_counter()
        last = body["messages"][-1]["content"]
        if self.fail_on is not None and self.fail_on in last:
            with self.lock:
                self.seen.append((came, time.perf_counter(), body))
            return JSONResponse({"error": {"message": "no"}}, status_code=500)

        async def events():
            await asyncio.sleep(self.answer_s)
            turn = len(body["messages"]) // 2
            chunk = {"choices": [{"delta": {"content": f"answer {turn}"}}]}
            yield f"data: {json.dumps(chunk)}\n\n"
            usage = {"choices": [], "usage": {"completion_tokens": 2, "prompt_tokens": 9}}
            yield f"data: {json.dumps(usage)}\n\n"
            with self.lock:
                self.seen.append((came, time.perf_counter(), body))
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


def _plan(sessions: int, turns: int, fail_at: tuple[int, int] | None = None):
    return [PlannedRequest("FAIL" if (s, t) == fail_at else f"s{s} t{t}", session=s, turn=t)
            for s in range(sessions) for t in range(turns)]


def test_turns_follow_their_answers_with_the_conversation_on_the_schedule(lm):
    recorder = Recorder()
    arrivals = Arrivals(rate=30.0, seed=1)
    with running_server(recorder.app) as url:
        config = LoadConfig(url=url, api="openai", num_requests=12, arrivals=arrivals,
                            think_s=0.03)
        result = run_load(config, SamplingParams(max_new_tokens=2), lm.tokenizer,
                          _plan(4, 3))
    assert result.num_errors == 0 and result.summary()["num_sessions"] == 4
    by_turn = {(s.session, s.turn): s for s in result.samples}
    # Sessions begin on the schedule, at the rate that offers 30 requests/s in all.
    starts = [by_turn[(s, 0)].scheduled_s for s in range(4)]
    assert starts == pytest.approx(Arrivals(rate=10.0, seed=1).offsets(4))
    for s in range(4):
        for t in (1, 2):
            before, turn = by_turn[(s, t - 1)], by_turn[(s, t)]
            # Due the think time after the previous answer ended, and sent then.
            assert turn.scheduled_s >= before.sent_s + before.latency_s + 0.03 - 1e-3
            assert turn.lag_s > -1e-3
    # Only the scheduled first turns say whether the client kept the schedule, and the
    # rate offered counts every turn: three requests per session begun.
    assert len(result.lag_s) == 4
    assert result.offered_rate == pytest.approx(3 / (starts[-1] - starts[0]) * 3)
    # Each turn resent the conversation: earlier messages with the answers received.
    bodies = {body["messages"][-1]["content"]: body for _, _, body in recorder.seen}
    assert [m["content"] for m in bodies["s2 t2"]["messages"]] == [
        "s2 t0", "answer 0", "s2 t1", "answer 1", "s2 t2"]


def test_a_turn_without_an_answer_ends_its_session_and_says_so(lm):
    recorder = Recorder(fail_on="FAIL")
    with running_server(recorder.app) as url:
        config = LoadConfig(url=url, api="openai", num_requests=9, concurrency=2)
        result = run_load(config, SamplingParams(max_new_tokens=2), lm.tokenizer,
                          _plan(3, 3, fail_at=(1, 0)))
    reasons = {(s.session, s.turn): s.reason for s in result.samples}
    assert reasons[(1, 0)] == "HTTP 500"
    assert reasons[(1, 1)] == reasons[(1, 2)] == SESSION_ENDED
    assert all(reason is None for (s, _), reason in reasons.items() if s != 1)
    assert len(recorder.seen) == 7  # the two ended turns were never sent
    assert result.summary()["errors_by_reason"] == {SESSION_ENDED: 2, "HTTP 500": 1}


@pytest.fixture(scope="module")
def live(lm):
    with running_server(create_app(lm, ServerSettings(max_new_tokens_cap=64))) as url:
        yield url


def _load(argv: list[str]) -> int:
    return cli.main(["load", "--model", "tiny", "--max-new-tokens", "3", "--fixed-length",
                     "--max-lag", "1000", *argv])


@pytest.mark.parametrize("api", ["native", "openai"])
def test_cli_sends_sessions_to_our_server(live, api, tmp_path, capsys):
    records = tmp_path / "r.jsonl"
    assert _load(["--url", live, "--api", api, "--rate", "20", "--requests", "6", "--turns",
                  "3", "--think-time", "10", "--records", str(records)]) == 0
    err = capsys.readouterr().err
    assert "rate 20 req/s (poisson): 6 ok, 0 errors, in 2 sessions" in err
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(r["session"], r["turn"]) for r in lines] == [(0, 0), (0, 1), (0, 2), (1, 0),
                                                          (1, 1), (1, 2)]
    # Each turn's prompt holds the conversation before it: it only grows.
    for session in (0, 1):
        counts = [r["input_tokens"] for r in lines if r["session"] == session]
        assert counts == sorted(counts) and counts[0] < counts[1] < counts[2]


def test_sessions_refused_by_every_server_are_a_usage_error(capsys):
    assert _load(["--url", "http://127.0.0.1:9", "--requests", "4", "--turns", "2"]) == 2
    assert "no request was accepted" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--think-time", "100"], "--think-time is the pause between a session's turns"),
    (["--turns", "0"], "--turns takes N"),
])
def test_bad_session_flags_are_one_line_and_exit_2(argv, message, capsys):
    assert _load(["--url", "http://127.0.0.1:9", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_negative_think_time_is_refused(capsys):
    with pytest.raises(SystemExit) as exited:
        _load(["--turns", "2", "--think-time", "-1"])
    assert exited.value.code == 2 and "must be >= 0" in capsys.readouterr().err
    with pytest.raises(UserError, match="--think-time"):
        LoadConfig(think_s=float("nan"))
