"""The Deepgram streaming adapter against the test double of Deepgram's websocket
(agent/testing/deepgram_server_double.py, hearing word codes): results, events, Finalize,
keep-alive, reconnect with replay, errors, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import numpy as np
import pytest

from agent.adapters.stt.deepgram import (
    DeepgramAuthError,
    DeepgramConnectionError,
    DeepgramEvent,
    DeepgramOptions,
    DeepgramSTT,
    DeepgramSTTStream,
    SpeechFinal,
    SpeechStarted,
    UtteranceEnd,
)
from agent.engines import FRAME_SAMPLES, Transcript
from agent.testing.deepgram_double_recognisers import silence, speech, word_code_recogniser
from agent.testing.deepgram_server_double import FRAME_BYTES, DeepgramServerDouble

SCRIPT = ["hello there general kenobi", "what time is it in paris", "ignore this please"]
FAST = DeepgramOptions(
    reconnect_backoff_s=0.01,
    reconnect_backoff_max_s=0.05,
    finalize_timeout_s=2.0,
    close_timeout_s=0.5,
)


@pytest.fixture
async def fake() -> AsyncIterator[DeepgramServerDouble]:
    async with scripted_deepgram() as server:
        yield server


def scripted_deepgram(**options: bool) -> DeepgramServerDouble:
    """The Deepgram double hearing SCRIPT in word codes, keeping the audio it receives."""
    return DeepgramServerDouble(word_code_recogniser(SCRIPT), keep_audio=True, **options)


def make_stt(url: str, key: str = "test-key", **options: float) -> DeepgramSTT:
    return DeepgramSTT(key, base_url=url, options=replace(FAST, **options))


def push(stream: DeepgramSTTStream, pcm: np.ndarray) -> None:
    for i in range(0, len(pcm), FRAME_SAMPLES):
        stream.push(pcm[i : i + FRAME_SAMPLES])


async def next_final(partials: AsyncIterator[Transcript]) -> list[Transcript]:
    seen = []
    async with asyncio.timeout(2.0):
        async for t in partials:
            seen.append(t)
            if t.final:
                return seen
    raise AssertionError(f"the partials ended without a final: {seen}")


def stream_tasks() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if "DeepgramSTTStream" in t.get_coro().__qualname__}


async def test_interim_then_final_results(fake: DeepgramServerDouble) -> None:
    async with make_stt(fake.url).stream() as stream:
        # 4 words, then 600 ms of silence: Deepgram's endpoint comes after 300 ms.
        push(stream, np.concatenate([speech(0, 4), silence(600)]))
        assert await next_final(stream.partials()) == [
            Transcript("hello", False),
            Transcript("hello there", False),
            Transcript("hello there general", False),
            Transcript("hello there general kenobi", False),
            Transcript("hello there general kenobi", True),
        ]
        # After speech_final with no speech since, the tail is silence: no round trip.
        assert await stream.finalize() == SCRIPT[0]
    conn = fake.connection()
    assert conn.count("Finalize") == 0
    assert conn.params == {
        "model": "nova-3",
        "encoding": "linear16",
        "sample_rate": "16000",
        "channels": "1",
        "interim_results": "true",
        "endpointing": "300",
        "utterance_end_ms": "1000",
        "vad_events": "true",
        "smart_format": "true",
    }


async def test_finalize_flushes_the_tail_and_starts_a_new_utterance(
    fake: DeepgramServerDouble,
) -> None:
    async with make_stt(fake.url).stream() as stream:
        push(stream, speech(1, 6))  # no trailing silence: only Finalize makes it final
        assert await stream.finalize() == SCRIPT[1]
        push(stream, speech(0, 2))
        assert await stream.finalize() == "hello there"
    assert fake.connection().count("Finalize") == 2


async def test_flush_gives_the_text_so_far_and_the_utterance_goes_on(
    fake: DeepgramServerDouble,
) -> None:
    async with make_stt(fake.url).stream() as stream:
        words = speech(1, 6)
        push(stream, words[: len(words) // 2])
        assert await stream.flush() == "what time is"
        push(stream, words[len(words) // 2 :])
        assert await stream.flush() == SCRIPT[1]
        assert await stream.finalize() == SCRIPT[1]  # nothing new since: no third Finalize
        push(stream, speech(0, 2))
        assert await stream.finalize() == "hello there"
    assert fake.connection().count("Finalize") == 3


async def test_transcribe_one_shot(fake: DeepgramServerDouble) -> None:
    pcm = np.concatenate([speech(1, 3), silence(100)])
    assert await make_stt(fake.url).transcribe(pcm) == "what time is"
    conn = fake.connection()
    assert bytes(conn.audio) == pcm.tobytes()
    assert [k for k, _ in conn.controls] == ["Finalize", "CloseStream"]


async def test_speech_events(fake: DeepgramServerDouble) -> None:
    async with make_stt(fake.url).stream() as stream:
        # 10 frames of speech, 55 of silence, then speech again.
        push(stream, np.concatenate([speech(0, 2), silence(1100), speech(1, 1)]))
        events: list[DeepgramEvent] = []
        async with asyncio.timeout(2.0):
            async for event in stream.events():
                events.append(event)
                if len(events) == 4:
                    break
    assert events == [
        SpeechStarted(at_s=0.0),
        SpeechFinal(text="hello there", at_s=pytest.approx(0.5)),  # 10 + 15 frames
        UtteranceEnd(last_word_end_s=pytest.approx(0.2)),
        SpeechStarted(at_s=pytest.approx(1.3)),
    ]


async def test_discard_drops_the_false_start(fake: DeepgramServerDouble) -> None:
    async with make_stt(fake.url).stream() as stream:
        push(stream, speech(2, 2))
        stream.discard()
        push(stream, speech(1, 3))
        assert await stream.finalize() == "what time is"
    # The discard cut Deepgram's segment right after the false start.
    assert fake.connection().controls[0] == ("Finalize", speech(2, 2).nbytes)


async def test_discard_after_deepgrams_endpoint(fake: DeepgramServerDouble) -> None:
    async with make_stt(fake.url).stream() as stream:
        push(stream, np.concatenate([speech(2, 2), silence(400)]))
        await next_final(stream.partials())  # speech_final for the false start
        stream.discard()
        push(stream, speech(1, 3))
        # Deepgram has not heard the new speech yet: its old endpoint must not count.
        assert await stream.finalize() == "what time is"


async def test_keepalive_only_while_idle(fake: DeepgramServerDouble) -> None:
    async with make_stt(fake.url, keepalive_interval_s=0.25).stream() as stream:
        await fake.wait_until(lambda: fake.last_count("KeepAlive") >= 2)
        pcm = speech(0, 4)
        for i in range(0, len(pcm), FRAME_SAMPLES):  # 400 ms of audio in real time
            stream.push(pcm[i : i + FRAME_SAMPLES])
            await asyncio.sleep(0.02)
        await fake.wait_until(lambda: len(fake.connection().audio) == pcm.nbytes)
    during_audio = [
        n for kind, n in fake.connection().controls if kind == "KeepAlive" and 0 < n < pcm.nbytes
    ]
    assert during_audio == []


async def test_dropped_connection_resends_unconfirmed_audio(fake: DeepgramServerDouble) -> None:
    first = np.concatenate([speech(0, 4), silence(600)])  # final at frame 20 + 15
    second = np.concatenate([speech(1, 6), silence(100)])
    async with make_stt(fake.url).stream() as stream:
        push(stream, first)
        await next_final(stream.partials())
        assert await stream.finalize() == SCRIPT[0]
        fake.drop_after_bytes = first.nbytes + 12 * FRAME_BYTES  # in the middle of "time"
        push(stream, second)
        assert await stream.finalize() == SCRIPT[1]  # whole, and without the first utterance
        assert stream.reconnects == 1
    # Finalize was resent on the new connection after the replayed audio, and answered.
    assert [kind for kind, _ in fake.connection().controls[:1]] == ["Finalize"]
    pushed = np.concatenate([first, second]).tobytes()
    dropped, resumed = fake.connections
    assert dropped.dropped
    assert pushed.startswith(dropped.audio) and pushed.endswith(resumed.audio)
    confirmed = 35 * FRAME_BYTES  # covered by the first connection's final result
    replayed = len(dropped.audio) - confirmed
    assert len(dropped.audio) + len(resumed.audio) - replayed == len(pushed)


async def test_bad_key_is_a_clear_error(fake: DeepgramServerDouble) -> None:
    stt = make_stt(fake.url, key="wrong-key")
    with pytest.raises(DeepgramAuthError, match=r"rejected the API key \(HTTP 401"):
        await stt.transcribe(speech(0, 2))
    assert fake.rejected == 1  # not retried
    async with stt.stream() as stream:
        with pytest.raises(DeepgramAuthError):
            async with asyncio.timeout(2.0):
                async for _ in stream.partials():
                    pass


async def test_unreachable_host_is_a_clear_error(dead_port: int) -> None:
    port = dead_port
    stt = make_stt(f"ws://127.0.0.1:{port}", max_reconnect_attempts=1)
    with pytest.raises(DeepgramConnectionError, match=f"cannot reach Deepgram at 127.0.0.1:{port}"):
        await stt.transcribe(speech(0, 2))
    assert stream_tasks() == set()


async def test_connect_timeout() -> None:
    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stt = make_stt(f"ws://127.0.0.1:{port}", connect_timeout_s=0.2, max_reconnect_attempts=0)
    try:
        with pytest.raises(DeepgramConnectionError, match=r"no answer within 0\.2 s"):
            await stt.transcribe(speech(0, 2))
    finally:
        server.close()
        await server.wait_closed()


async def test_finalize_timeout_falls_back_to_interim_text() -> None:
    async with scripted_deepgram(answer_finalize=False) as fake:
        async with make_stt(fake.url, finalize_timeout_s=0.3).stream() as stream:
            push(stream, speech(1, 3))
            assert await stream.finalize() == "what time is"
            push(stream, speech(0, 1))  # the next utterance starts clean
            fake.answer_finalize = True
            assert await stream.finalize() == "hello"


async def test_cancellation_leaves_no_tasks() -> None:
    async with scripted_deepgram(answer_finalize=False) as fake:
        stt = make_stt(fake.url, finalize_timeout_s=30.0)
        stream = stt.stream()
        push(stream, speech(1, 3))
        waiting = asyncio.create_task(stream.finalize())
        await fake.wait_until(lambda: fake.last_count("Finalize") == 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        fake.answer_finalize = True  # a cancelled finalize leaves the utterance intact
        assert await stream.finalize() == "what time is"
        await stream.aclose()
        assert stream_tasks() == set()

        fake.answer_finalize = False
        one_shot = asyncio.create_task(stt.transcribe(speech(0, 2)))
        await fake.wait_until(
            lambda: len(fake.connections) == 2 and fake.last_count("Finalize") == 1
        )
        one_shot.cancel()
        with pytest.raises(asyncio.CancelledError):
            await one_shot
        assert stream_tasks() == set()
        assert fake.connection().count("CloseStream") == 1


async def test_aclose_when_the_server_ignores_closestream() -> None:
    async with scripted_deepgram(honour_close_stream=False) as fake:
        stream = make_stt(fake.url, close_timeout_s=0.2).stream()
        push(stream, speech(0, 1))
        await fake.wait_until(lambda: len(fake.connections) == 1)
        async with asyncio.timeout(2.0):
            await stream.aclose()
        assert stream_tasks() == set()
        assert fake.last_count("CloseStream") == 1
