"""Faults between the agent's LLM client and an OpenAI-compatible server, injected by a TCP
proxy (tests/fault_proxy.py) in front of the scripted LLM server (a test double): a stall
before the first token, a stream cut mid-reply, a refused connection, added latency.

First the client alone (agent/adapters/llm/openai_chat.py, agent/adapters/llm/fallback.py),
then a whole turn in real time (the turn engine with STT/TTS doubles,
tests/test_turn_engine_faults.py) to measure what the user hears: the silence after their
question and what the agent said.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import pytest

from agent.adapters.llm.fallback import FallbackLLM
from agent.adapters.llm.openai_chat import DEFAULT_REPLY, LLMError, OpenAIChatLLM, ReplySettings
from agent.testing.scripted_llm import ScriptedLLM
from agent.testing.scripted_llm_server import scripted_llm_server
from state_machine.machine import CANNED_APOLOGY
from tests.fault_proxy import FaultProxy
from tests.test_turn_engine_faults import Said, ToneTTS, converse

REPLY = "The capital of France is Paris, a city on the river Seine, famous for its museums."
LOCAL_REPLY = "Paris is the capital."
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
BUDGET_S = 1.5  # agent.config LLMSettings.first_token_budget_s default


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    async with (
        scripted_llm_server(ScriptedLLM([REPLY], ttft_ms=100, words_per_s=20)) as url,
        FaultProxy("127.0.0.1", urlparse(url).port or 0) as p,
    ):
        yield p


def client(proxy: FaultProxy, reply: ReplySettings = DEFAULT_REPLY) -> OpenAIChatLLM:
    return OpenAIChatLLM(model="scripted", base_url=proxy.url(path="/v1"), reply=reply)


def local_double() -> ScriptedLLM:
    """Stands in for the bundled local model of the fallback chain."""
    return ScriptedLLM([LOCAL_REPLY], ttft_ms=100, words_per_s=20)


async def read(
    llm: object, *, cut: FaultProxy | None = None, after: int = 0
) -> tuple[str, float | None, float, BaseException | None]:
    """(text, first delta after s, total s, error); `cut` resets the proxy's connections
    once `after` deltas have arrived."""
    start = time.monotonic()
    first: float | None = None
    parts: list[str] = []
    try:
        async for delta in llm.stream(MESSAGES):  # type: ignore[attr-defined]
            first = first if first is not None else time.monotonic() - start
            parts.append(delta)
            if cut is not None and len(parts) == after:
                cut.cut_all()
    except Exception as e:  # what the reply pipeline would see
        return "".join(parts), first, time.monotonic() - start, e
    return "".join(parts), first, time.monotonic() - start, None


async def test_the_proxy_forwards_a_whole_reply_and_delays_it(proxy: FaultProxy) -> None:
    llm = client(proxy)
    text, _, _, err = await read(llm)
    assert text == REPLY and err is None
    proxy.delay_s = 0.3
    text, delayed_first, _, err = await read(llm)
    assert text == REPLY and err is None
    assert delayed_first is not None and delayed_first >= 0.1 + 2 * 0.3  # request and reply
    await llm.aclose()


async def test_stall_before_the_first_token_times_out_without_a_fallback(
    proxy: FaultProxy,
) -> None:
    proxy.blackhole = True
    llm = client(proxy, ReplySettings(stall_timeout_s=1.0))
    text, _, took, err = await read(llm)
    assert text == "" and isinstance(err, LLMError) and "timed out" in str(err)
    assert 0.9 <= took < 2.0  # the read timeout, not a hang
    await llm.aclose()


async def test_stall_before_the_first_token_falls_back_within_the_budget(
    proxy: FaultProxy,
) -> None:
    proxy.blackhole = True
    reasons: list[str] = []
    primary = client(proxy)
    llm = FallbackLLM(
        primary, local_double(), first_token_budget_s=BUDGET_S, on_fallback=reasons.append
    )
    text, first, _, err = await read(llm)
    assert text == LOCAL_REPLY and err is None
    assert first is not None and BUDGET_S <= first < BUDGET_S + 0.5
    assert reasons == ["primary slow to first token"]
    await primary.aclose()


async def test_a_stream_cut_mid_reply_ends_at_once_with_what_was_said(proxy: FaultProxy) -> None:
    llm = client(proxy)
    text, _, took, err = await read(llm, cut=proxy, after=3)
    assert text == "The capital of "  # the three deltas that arrived are kept
    assert isinstance(err, LLMError) and took < 1.0  # no hang: the reset is seen at once
    await llm.aclose()


async def test_a_refused_connection_hands_over_to_the_fallback_at_once(
    proxy: FaultProxy,
) -> None:
    proxy.refuse = True
    primary = client(proxy)
    text, _, took, err = await read(primary)
    assert isinstance(err, LLMError) and took < 0.5
    reasons: list[str] = []
    llm = FallbackLLM(
        primary, local_double(), first_token_budget_s=BUDGET_S, on_fallback=reasons.append
    )
    text, first, _, err = await read(llm)
    assert text == LOCAL_REPLY and first is not None and first < 0.5
    assert reasons and reasons[0].startswith("primary failed")
    await primary.aclose()


# ---- what the user hears -----------------------------------------------------------------

QUESTION = [Said(0.5, 1.5, "what is the capital of France?")]


def turn_through_proxy(
    fault: str, *, fallback: bool, cut_after_bytes: int = 0
) -> dict[str, object]:
    """One question answered through the proxy in real time with `fault` applied; returns the
    silence after the question, what TTS was asked to say, and the turn record."""
    tts = ToneTTS()

    def llm_stack(primary: OpenAIChatLLM) -> object:
        return (
            FallbackLLM(primary, local_double(), first_token_budget_s=BUDGET_S)
            if fallback
            else primary
        )

    async def main() -> dict[str, object]:
        async with (
            scripted_llm_server(ScriptedLLM([REPLY], ttft_ms=100, words_per_s=20)) as url,
            FaultProxy("127.0.0.1", urlparse(url).port or 0) as p,
        ):
            p.blackhole = fault == "stall"
            p.refuse = fault == "refused"
            p.cut_after_bytes = cut_after_bytes or None
            primary = client(p)
            # Closed on converse's loop, which its connections are bound to: left to the GC,
            # the openai client would close itself on whatever loop runs then (a later test's).
            conv = await asyncio.to_thread(
                converse,
                QUESTION,
                until_s=14.0 if fault == "stall" else 7.0,
                llm=llm_stack(primary),
                tts=tts,
                real_time=True,
                finally_=primary.aclose,
            )
            said = [d["text"] for d in conv.of("tts_chunk")]  # the reply's or the apology
            return {
                "silence": conv.silence_after(1.5),
                "said": said,
                "turns": conv.turns,
                "leftover": conv.leftover_tasks,
                "errors": conv.errors,
            }

    return asyncio.run(main())


@pytest.mark.slow  # real time: a socket cannot run on the virtual clock
@pytest.mark.parametrize(
    ("fault", "fallback", "said", "max_silence_s"),
    [
        ("none", True, REPLY, 1.0),
        ("stall", True, LOCAL_REPLY, 1.0 + BUDGET_S),
        ("refused", True, LOCAL_REPLY, 1.0),
        ("refused", False, CANNED_APOLOGY, 1.0),
        ("stall", False, CANNED_APOLOGY, 2.6),  # the filler at 2 s of THINKING, then the apology
    ],
)
def test_what_the_user_hears_when_the_llm_fails(
    fault: str, fallback: bool, said: str, max_silence_s: float
) -> None:
    out = turn_through_proxy(fault, fallback=fallback)
    print(f"\n{fault} (fallback={fallback}): silence {out['silence']:.2f} s, said {out['said']}")
    assert out["silence"] is not None and out["silence"] <= max_silence_s
    spoken = [t for t in out["said"] if t != "Let me think."]  # type: ignore[attr-defined]
    assert " ".join(spoken).replace(" ,", ",") == said
    assert out["leftover"] == [] and out["errors"] == []


@pytest.mark.slow
def test_a_reply_cut_before_its_first_words_is_replaced_by_the_canned_phrase() -> None:
    out = turn_through_proxy("cut", fallback=True, cut_after_bytes=620)  # the HTTP head + 2 words
    print(f"\ncut early: silence {out['silence']:.2f} s, said {out['said']}")
    assert out["said"] == [CANNED_APOLOGY]
    assert out["silence"] is not None and out["silence"] <= 2.0
    assert out["leftover"] == [] and out["errors"] == []


@pytest.mark.slow
def test_a_reply_cut_mid_stream_ends_cleanly_with_what_was_said() -> None:
    out = turn_through_proxy("cut", fallback=True, cut_after_bytes=2000)  # about 10 words
    print(f"\ncut: silence {out['silence']:.2f} s, said {out['said']}, turns {out['turns']}")
    [turn] = out["turns"]  # type: ignore[misc]
    assert out["silence"] is not None and out["silence"] <= 1.0
    spoken = " ".join(out["said"])  # type: ignore[arg-type]
    assert spoken and REPLY.startswith(spoken.split(",")[0])  # a prefix of the reply...
    assert turn["heard_text"] == spoken  # ...and the record says exactly what was heard
    assert out["leftover"] == [] and out["errors"] == []
