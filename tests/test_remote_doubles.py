"""The remote speech TEST DOUBLES of agent/testing/ (deepgram_server_double.py,
tts_server_double.py): the Deepgram double recognises real (espeak) speech it was given,
through the real adapter (agent/adapters/stt/deepgram.py), also after the level and resampling
changes of a WebRTC path; the speech double speaks each text once."""

from __future__ import annotations

import numpy as np
import soxr

from agent.adapters.stt.deepgram import DeepgramSTT
from agent.testing.deepgram_double_recognisers import Utterance, utterance_recogniser
from agent.testing.deepgram_server_double import DeepgramServerDouble
from agent.testing.tts_server_double import TTSServerDouble
from bench.speech import espeak, with_silence

SENTENCES = (
    "What is the capital of Australia?",
    "Can you set a timer for ten minutes?",
    "Why is the sky blue?",
    "Sorry, stop, that is enough.",
)


def _as_heard(pcm: np.ndarray) -> np.ndarray:
    """The audio as an agent hears it through a room: 2 dB quieter, through 48 kHz and back."""
    audio = pcm.astype(np.float32) * 10 ** (-2 / 20)
    audio = soxr.resample(soxr.resample(audio, 16_000, 48_000), 48_000, 16_000)
    return np.clip(np.round(audio), -32768, 32767).astype(np.int16)


async def test_the_deepgram_double_recognises_the_speech_it_was_given() -> None:
    speech = [espeak(s) for s in SENTENCES]
    given = [Utterance(t, p) for t, p in zip(SENTENCES, speech, strict=True)]
    async with DeepgramServerDouble(utterance_recogniser(given), delay_ms=(20, 60)) as double:
        stt = DeepgramSTT("test-key", base_url=double.url)
        async with stt.stream() as stream:
            heard = []
            for k in (2, 0, 3, 1):  # not in the order given
                stream.push(_as_heard(with_silence(speech[k], 0.2, 0.1)))
                heard.append(await stream.finalize())
        async with stt.stream() as stream:  # a fresh stream: no partials of earlier speech
            partials = []
            stream.push(_as_heard(with_silence(speech[1], 0.2, 0.5)))
            async for partial in stream.partials():
                partials.append(partial)
                if partial.final:
                    break
            last = await stream.finalize()
    assert heard == [SENTENCES[k] for k in (2, 0, 3, 1)]
    assert last == SENTENCES[1]
    interim = [p.text for p in partials if not p.final and p.text]
    assert interim and all(SENTENCES[1].startswith(t) for t in interim)
    assert len(double.connections) == 2
    assert double.recognised == [SENTENCES[k] for k in (2, 0, 3, 1, 1)]


async def test_the_deepgram_double_answers_only_with_the_right_key() -> None:
    from agent.adapters.stt.deepgram import DeepgramAuthError

    given = [Utterance(SENTENCES[0], espeak(SENTENCES[0]))]
    async with DeepgramServerDouble(utterance_recogniser(given)) as double:
        stt = DeepgramSTT("wrong-key", base_url=double.url)
        async with stt.stream() as stream:
            stream.push(np.zeros(3200, np.int16))
            try:
                await stream.finalize()
            except DeepgramAuthError:
                pass
            else:
                raise AssertionError("a wrong key must be refused")


async def test_the_speech_double_speaks_each_text_once() -> None:
    spoken: list[str] = []

    async def speaker(text: str) -> np.ndarray:
        spoken.append(text)
        return np.full(2400, 1000, np.int16)

    async with TTSServerDouble(speaker, ttfb_ms=(0, 0)) as double:
        await double.prepare(["One.", "Two.", "One."])
        from tts.openai_tts import OpenAITTS

        tts = OpenAITTS(base_url=double.url, output_rate=24_000)
        try:
            await tts.synthesize("Two.")
            await tts.synthesize("Three.")
        finally:
            await tts.aclose()
    assert spoken == ["One.", "Two.", "Three."]
