"""Whisper tiny.en streaming STT on real speech (beckett.wav, espeak-ng, Piper), plus the
pieces that need no model: the hallucination filters and the shared inference pool."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

from agent.adapters.stt.whisper import WhisperSTT, WhisperSTTStream, threads_per_replica
from agent.adapters.stt.whisper_decoding import (
    agreed_prefix,
    drop_late_segments,
    first_repeated_ngram,
)
from agent.adapters.stt.whisper_options import WhisperOptions, question_options
from agent.engines import FRAME_SAMPLES, INPUT_RATE, Transcript
from agent.inference_pool import PRIORITY_FINAL, PRIORITY_PARTIAL, InferencePool
from bench.measure import wait_until
from bench.speech import espeak, with_silence
from bench.wer import wer

BECKETT_TEXT = "Ever tried. Ever failed. No matter. Try again. Fail again. Fail better."


@pytest.fixture(scope="module")
def beckett() -> np.ndarray:
    import importlib.util

    import soundfile as sf

    spec = importlib.util.find_spec("moonshine_onnx")  # useful-moonshine-onnx ships the file
    assert spec is not None and spec.submodule_search_locations
    path = Path(spec.submodule_search_locations[0]) / "assets" / "beckett.wav"
    pcm, rate = sf.read(str(path), dtype="int16")
    assert rate == INPUT_RATE
    return pcm


@pytest.fixture(scope="module")
def stt() -> WhisperSTT:
    engine = WhisperSTT()
    engine.load()
    engine.warmup()
    return engine


@pytest.fixture
async def stream(stt: WhisperSTT) -> AsyncIterator[WhisperSTTStream]:
    s = stt.stream()
    yield s
    await s.aclose()


async def push_frames(stream: WhisperSTTStream, pcm: np.ndarray, *, realtime: bool) -> None:
    """Push `pcm` in 20 ms frames, paced like a live microphone or as fast as possible."""
    for i in range(0, len(pcm), FRAME_SAMPLES):
        stream.push(pcm[i : i + FRAME_SAMPLES])
        await asyncio.sleep(FRAME_SAMPLES / INPUT_RATE if realtime else 0)


async def next_partial(stream: WhisperSTTStream, timeout_s: float) -> Transcript:
    return await asyncio.wait_for(anext(aiter(stream.partials())), timeout_s)


# --- one-shot transcription -----------------------------------------------------------------


@pytest.mark.slow
async def test_transcribes_beckett(stt: WhisperSTT, beckett: np.ndarray) -> None:
    assert wer(BECKETT_TEXT, await stt.transcribe(beckett)) <= 0.2


@pytest.mark.slow
@pytest.mark.parametrize(
    "sentence",
    [
        "What time is it in Tokyo right now?",
        "Tell me about your experience with databases.",
        "Where is the nearest train station?",
    ],
)
async def test_transcribes_espeak_sentences(stt: WhisperSTT, sentence: str) -> None:
    text = await stt.transcribe(with_silence(espeak(sentence), 0.2, 0.3))
    assert wer(sentence, text) <= 0.25, text


@pytest.mark.slow
async def test_hypotheses_are_the_beams_best_first(stt: WhisperSTT, piper) -> None:
    sentence = "How many people live in New York City?"
    speech = with_silence(await piper.synthesize(sentence), 0.2, 0.3)
    hyps = await stt.hypotheses(speech, 4)
    assert 1 <= len(hyps) <= 4
    scores = [score for _, score in hyps]
    assert scores == sorted(scores, reverse=True)
    assert wer(sentence, hyps[0][0]) <= 0.25, hyps


@pytest.fixture(scope="module")
def piper():
    from tts.piper_tts import PiperTTS

    tts = PiperTTS(output_rate=INPUT_RATE)
    tts.load()
    return tts


@pytest.mark.slow
@pytest.mark.parametrize(
    "sentence",
    [
        "Could you summarize the last meeting for me?",
        "Remind me to call my mother tomorrow morning.",
        "How many people live in New York City?",
    ],
)
async def test_transcribes_piper_sentences(stt: WhisperSTT, piper, sentence: str) -> None:
    speech = await piper.synthesize(sentence)
    text = await stt.transcribe(with_silence(speech, 0.2, 0.3))
    assert wer(sentence, text) <= 0.25, text


@pytest.mark.slow
async def test_silence_transcribes_to_nothing(stt: WhisperSTT) -> None:
    assert await stt.transcribe(np.zeros(INPUT_RATE, np.int16)) == ""


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
async def test_room_noise_transcribes_to_nothing(stt: WhisperSTT, seed: int) -> None:
    # Without the no-speech rule, tiny.en wrote "you" for most of these.
    noise = np.random.default_rng(seed).normal(0, 300, INPUT_RATE).astype(np.int16)
    assert await stt.transcribe(noise) == ""


@pytest.mark.slow
async def test_long_speech_is_decoded_window_by_window(beckett: np.ndarray) -> None:
    # 4 s windows: beckett's 10 s are cut at quiet frames into three decodes and a last one of
    # 0.2 s of breath, which is no speech.
    options = WhisperOptions(max_window_s=4.0, window_cut_search_s=1.5)
    engine = WhisperSTT(options=options)
    engine.load()
    assert wer(BECKETT_TEXT, await engine.transcribe(beckett)) <= 0.25


# --- streaming ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_partials_while_speaking_then_final(
    stream: WhisperSTTStream, beckett: np.ndarray
) -> None:
    partials: list[tuple[Transcript, str]] = []

    async def collect() -> None:
        async for p in stream.partials():
            partials.append((p, stream.stable_text))

    collector = asyncio.create_task(collect())
    pcm = with_silence(beckett, 0.2, 0.3)
    await push_frames(stream, pcm[: 3 * INPUT_RATE], realtime=True)
    await push_frames(stream, pcm[3 * INPUT_RATE :], realtime=False)
    final = await stream.finalize()
    collector.cancel()

    assert partials, "no partial while the user spoke"
    assert all(not p.final and p.text for p, _ in partials)
    assert wer(BECKETT_TEXT, final) <= 0.2, final
    # Committed text only grows, and the final transcript keeps it.
    stables = [s for _, s in partials]
    for earlier, later in itertools.pairwise(stables):
        assert later.startswith(earlier)
    assert final.startswith(stables[-1])
    assert stream.stable_text == ""  # finalize() started the next utterance


class BeamSpy:
    """Records the beam size of every generation of `decoder` (a test double around the real
    decoder's `generate_scored`, which it still calls)."""

    def __init__(self, decoder: object) -> None:
        self.beams: list[int] = []
        real = decoder.generate_scored  # type: ignore[attr-defined]

        def spy(*args: object) -> tuple[tuple[int, ...], float]:
            self.beams.append(int(args[4]) if len(args) > 4 else 1)
            return real(*args)

        decoder.generate_scored = spy  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize(("unsure_logprob", "beams"), [(-99.0, [1]), (0.0, [1, 5])])
async def test_a_final_is_searched_again_only_when_the_decoder_is_unsure(
    unsure_logprob: float, beams: list[int]
) -> None:
    """The final's greedy text stands when its mean log probability reaches
    `unsure_logprob`; below it the same encoder output is decoded again with a beam (every
    real score is below 0, none below -99)."""
    engine = WhisperSTT(options=WhisperOptions(final_beam_size=5, unsure_logprob=unsure_logprob))
    engine.load()
    decoder = engine._loaded()
    sentence = "Where is the nearest train station?"
    pcm = with_silence(espeak(sentence), 0.2, 0.3)
    encoded = decoder.encode(pcm)
    ids, score = decoder.generate_scored(encoded, len(pcm) / INPUT_RATE)
    assert -3.0 < score < 0.0
    spy = BeamSpy(decoder)
    final = decoder.generate_final(encoded, len(pcm) / INPUT_RATE)
    assert spy.beams == beams
    assert wer(sentence, decoder.text(final)) <= 0.25, decoder.text(final)
    if beams == [1]:
        assert final == ids


@pytest.mark.slow
async def test_a_question_s_final_is_the_beam_s_over_the_whole_question() -> None:
    """The question tuning (`question_options`): no greedy pass first."""
    engine = WhisperSTT(options=WhisperOptions(final_beam_size=5))
    engine.load()
    decoder = engine.for_questions()._loaded()
    sentence = "Where is the nearest train station?"
    pcm = with_silence(espeak(sentence), 0.2, 0.3)
    spy = BeamSpy(decoder)
    final = decoder.generate_final(decoder.encode(pcm), len(pcm) / INPUT_RATE)
    assert spy.beams == [5]
    assert wer(sentence, decoder.text(final)) <= 0.25, decoder.text(final)


@pytest.mark.slow
async def test_the_stream_final_takes_the_final_decode_and_partials_stay_greedy() -> None:
    """Partials while the user speaks are greedy; the decode that becomes the final (here
    always unsure) gets the beam."""
    engine = WhisperSTT(options=WhisperOptions(final_beam_size=4, unsure_logprob=0.0))
    engine.load()
    spy = BeamSpy(engine._loaded())
    stream = engine.stream()
    try:
        sentence = "Can you walk me through the steps to reset my password?"
        await push_frames(stream, with_silence(espeak(sentence), 0.2, 0.3), realtime=True)
        final = await stream.finalize()
    finally:
        await stream.aclose()
    assert wer(sentence, final) <= 0.25, final
    assert 4 in spy.beams  # the final's search
    assert spy.beams.count(1) > spy.beams.count(4)  # the partials and each final's first try


@pytest.mark.slow
async def test_paused_stream_decodes_no_partials(
    stream: WhisperSTTStream, beckett: np.ndarray
) -> None:
    stream.set_paused(True)
    await push_frames(
        stream, with_silence(beckett[: int(2.5 * INPUT_RATE)], 0.2, 0.3), realtime=False
    )
    with pytest.raises(TimeoutError):
        await next_partial(stream, timeout_s=1.0)
    stream.set_paused(False)  # resuming decodes what is there
    assert "ever" in (await next_partial(stream, timeout_s=10.0)).text.lower()
    stream.set_paused(True)
    assert wer("Ever tried. Ever failed.", await stream.finalize()) <= 0.25


@pytest.mark.slow
async def test_discard_drops_the_utterance(stream: WhisperSTTStream) -> None:
    await push_frames(
        stream, with_silence(espeak("Tell me a joke about computers."), 0.2, 0.3), realtime=False
    )
    stream.discard()
    sentence = "Where is the nearest train station?"
    await push_frames(stream, with_silence(espeak(sentence), 0.2, 0.3), realtime=False)
    text = await stream.finalize()
    assert wer(sentence, text) <= 0.25, text


@pytest.mark.slow
async def test_flush_at_a_pause_then_the_utterance_goes_on(stream: WhisperSTTStream) -> None:
    first, second = "Tell me about the weather", "in Paris tomorrow morning."
    await push_frames(stream, with_silence(espeak(first), 0.2, 0.3), realtime=False)
    assert wer(first, await stream.flush()) <= 0.25
    await push_frames(stream, with_silence(espeak(second), 0.0, 0.3), realtime=False)
    whole = f"{first} {second}"
    flushed = await stream.flush()
    assert wer(whole, flushed) <= 0.25, flushed
    assert await stream.finalize() == flushed  # nothing new since: the flush's decode is reused


@pytest.mark.slow
async def test_audio_pushed_during_a_flush_starts_no_second_decode(
    stream: WhisperSTTStream, monkeypatch: pytest.MonkeyPatch
) -> None:
    sentence = "Where is the nearest train station?"
    stream.set_paused(True)  # only the flush decodes
    await push_frames(stream, with_silence(espeak(sentence), 0.2, 0.06), realtime=False)
    encodes: list[int] = []
    encode = stream._decoder.encode  # every decode encodes first
    monkeypatch.setattr(stream._decoder, "encode", lambda a: encodes.append(len(a)) or encode(a))
    flushing = asyncio.create_task(stream.flush())
    await asyncio.sleep(0)
    stream.set_paused(False)
    await push_frames(stream, np.zeros(INPUT_RATE // 5, np.int16), realtime=True)  # the pause
    assert wer(sentence, await flushing) <= 0.25
    await asyncio.sleep(0.3)  # time for any decode the pushes would have started
    assert len(encodes) == 1, encodes


@pytest.mark.slow
async def test_cancelled_finalize_leaves_a_working_stream(
    stream: WhisperSTTStream, beckett: np.ndarray
) -> None:
    stream.set_paused(True)  # the final decode is the only job
    await push_frames(stream, beckett, realtime=False)
    finalizing = asyncio.create_task(stream.finalize())
    await asyncio.sleep(0.1)  # the final decode is running in the pool thread
    finalizing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finalizing
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    sentence = "Where is the nearest train station?"
    await push_frames(stream, with_silence(espeak(sentence), 0.2, 0.3), realtime=False)
    text = await stream.finalize()  # the cancelled decode's result never shows up here
    assert wer(sentence, text) <= 0.25, text


@pytest.mark.slow
async def test_aclose_stops_decoding_and_partials(stt: WhisperSTT, beckett: np.ndarray) -> None:
    stream = stt.stream()
    partials = stream.partials()
    await push_frames(stream, beckett[: 2 * INPUT_RATE], realtime=False)  # a partial is due
    assert await wait_until(lambda: not stream._partials.empty(), 30)  # queued, unread
    await stream.aclose()
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    assert [p async for p in partials] == []  # nothing comes out after aclose()
    stream.push(beckett[:FRAME_SAMPLES])  # ignored after close


def agreed(stt: WhisperSTT, older: str, newer: str) -> str:
    """The text `agreed_prefix` commits of two decodes that read `older`, then `newer`."""
    decoder = stt._loaded()

    def ids(text: str) -> tuple[int, ...]:
        return tuple(decoder._tokenizer.encode(text, add_special_tokens=False).ids)

    new = ids(newer)
    return decoder.text(new[: agreed_prefix(ids(older), new, decoder)])


@pytest.mark.slow
def test_agreed_prefix_commits_whole_words_only(stt: WhisperSTT) -> None:
    assert agreed(stt, " Ever tried, ever", " Ever tried, ever failed") == "Ever tried, ever"
    # The newer decode's last word may be cut off mid-word: never committed.
    assert agreed(stt, " Ever tried, ever failed", " Ever tried, ever failed") == "Ever tried, ever"
    assert agreed(stt, " What does serene", " What does serendipity mean") == "What does"


@pytest.mark.slow
def test_agreed_prefix_never_ends_on_a_mark_that_no_word_follows(stt: WhisperSTT) -> None:
    # Decoded at a thinking pause, then just after it: the "?" is the clip's end, not the
    # speaker's, and forced on the whole question's decode it ended the text there.
    assert agreed(stt, " Why does?", " Why does? Bread") == "Why does"
    older, newer = " My flight leaves at, um...", " My flight leaves at, um... six"
    assert agreed(stt, older, newer) == "My flight leaves at, um"
    # A mark with an agreed word after it is the speaker's.
    older, newer = " Ever tried. Ever failed", " Ever tried. Ever failed. No"
    assert agreed(stt, older, newer) == "Ever tried. Ever failed"


@pytest.mark.slow
async def test_the_final_is_never_forced_to_start_with_the_committed_prefix(
    stt: WhisperSTT, tmp_path: Path
) -> None:
    """Two partials that heard only the words before a thinking pause can agree on a wrong
    reading of them; forced on the final, it outlives the decode of the whole utterance.
    The turn corpus's item, as the bench synthesizes it, with the misreading the stream
    committed for it through Opus (whose audio the first assertion checks it on)."""
    from bench.turn_corpus import spoken_with_pause

    decoder = stt._loaded()
    pcm = await spoken_with_pause(
        "Can you help me find",
        0.4,
        "a good place to eat near the station?",
        "espeak-en-us+f3",
        tmp_path,
    )
    wrong = tuple(decoder._tokenizer.encode(" Can you fail me", add_special_tokens=False).ids)
    forced = decoder.text(decoder.generate(decoder.encode(pcm), len(pcm) / INPUT_RATE, wrong))
    assert forced.startswith("Can you fail me"), forced  # what forcing it does
    no_partials = WhisperSTT(options=WhisperOptions(first_partial_s=30.0))
    no_partials._decoder = decoder
    stream = no_partials.stream()
    stream._utt.committed = wrong  # as two partials would have agreed
    try:
        await push_frames(stream, with_silence(pcm, 0.0, 0.3), realtime=False)
        final = await stream.finalize()
    finally:
        await stream.aclose()
    assert "help me find" in final.lower(), final


@pytest.mark.slow
async def test_partials_come_less_often_while_other_decodes_wait(
    stt: WhisperSTT, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With several sessions speaking on one worker, the denser cadence would take the CPU
    their answers need: while the pool has jobs waiting, the stream uses the busy interval."""
    from agent.adapters.stt import whisper

    stream = stt.stream()
    try:
        monkeypatch.setattr(whisper.WHISPER_POOL, "waiting", lambda: 0)
        assert stream._partial_interval() == stt.options.partial_interval_s
        monkeypatch.setattr(whisper.WHISPER_POOL, "waiting", lambda: 2)
        assert stream._partial_interval() == stt.options.busy_partial_interval_s
    finally:
        await stream.aclose()


# --- no model needed ------------------------------------------------------------------------


def test_the_copilot_s_partials_keep_their_slower_cadence() -> None:
    """The voice agent decodes partials often (an answer started on one is heard sooner);
    the copilot's answer reads its prompt on the same cores, so its questions do not."""
    voice = WhisperOptions()
    assert voice.partial_interval_s < question_options(voice).partial_interval_s == 0.4
    slower = WhisperOptions(partial_interval_s=0.6, busy_partial_interval_s=0.8)
    assert question_options(slower).partial_interval_s == 0.6
    assert question_options(slower).busy_partial_interval_s == 0.8


async def test_pool_counts_the_jobs_waiting_for_a_thread(blocked_pool) -> None:
    pool, release = blocked_pool
    assert pool.waiting() == 0
    running = asyncio.create_task(pool.run(release.wait))
    await asyncio.sleep(0.05)
    assert pool.waiting() == 0  # started: it waits for nothing
    queued = asyncio.create_task(pool.run(lambda: None))
    await asyncio.sleep(0.05)
    assert pool.waiting() == 1
    release.set()
    await asyncio.gather(running, queued)
    assert pool.waiting() == 0


def test_first_repeated_ngram() -> None:
    said = "ever tried ever failed no matter try again fail again fail better".split()
    assert first_repeated_ngram(said) is None
    looped = "how many people live in new york city how many people".split()
    assert first_repeated_ngram(looped) == 8
    assert first_repeated_ngram("the the the the".split()) == 1


def test_drop_late_segments() -> None:
    ts, eot = 1000, 900  # timestamp tokens are >= ts, text tokens < eot
    words = {1: "tell", 2: "me", 3: "a", 4: "joke", 5: "more"}

    def normalized(ids) -> str:
        return " ".join(words[i] for i in ids)

    def t(seconds: float) -> int:
        return ts + round(seconds / 0.02)

    restart = [t(0), 1, 2, 3, 4, t(2), t(2), 1, 2, 3, t(4)]
    assert drop_late_segments(restart, ts, eot, 3.4, normalized) == (1, 2, 3, 4)
    late = [t(0), 1, 2, t(2), t(2), 5, t(6)]  # ends 2.6 s after a 3.4 s clip
    assert drop_late_segments(late, ts, eot, 3.4, normalized) == (1, 2)
    fine = [t(0), 1, 2, t(1.5), t(1.5), 3, 4, t(3.2), eot]
    assert drop_late_segments(fine, ts, eot, 3.4, normalized) == (1, 2, 3, 4)


def test_options_reject_a_window_longer_than_the_encoder() -> None:
    with pytest.raises(ValueError):
        WhisperOptions(max_window_s=29.5)
    assert dataclasses.replace(WhisperOptions(), max_window_s=10.0).max_window_s == 10.0


@pytest.fixture
def blocked_pool() -> Iterator[tuple[InferencePool, threading.Event]]:
    """A pool whose thread is held by a job until the event is set."""
    pool, release = InferencePool("test"), threading.Event()
    yield pool, release
    release.set()


async def test_pool_runs_finals_before_queued_partials(blocked_pool) -> None:
    pool, release = blocked_pool
    order: list[str] = []
    blocker = asyncio.create_task(pool.run(release.wait, priority=PRIORITY_PARTIAL))
    await asyncio.sleep(0.05)
    partial = asyncio.create_task(
        pool.run(lambda: order.append("partial"), priority=PRIORITY_PARTIAL)
    )
    final = asyncio.create_task(pool.run(lambda: order.append("final"), priority=PRIORITY_FINAL))
    await asyncio.sleep(0.05)
    release.set()
    await asyncio.gather(blocker, partial, final)
    assert order == ["final", "partial"]


async def test_pool_skips_cancelled_queued_jobs_and_drops_running_results(blocked_pool) -> None:
    pool, release = blocked_pool
    ran: list[str] = []
    running = asyncio.create_task(pool.run(lambda: (release.wait(), ran.append("running"))))
    await asyncio.sleep(0.05)
    queued = asyncio.create_task(pool.run(lambda: ran.append("queued")))
    await asyncio.sleep(0.05)
    running.cancel()
    queued.cancel()
    for task in (running, queued):
        with pytest.raises(asyncio.CancelledError):
            await task
    release.set()
    assert await pool.run(lambda: "after") == "after"
    assert ran == ["running"]  # the running job finished; the queued one never started


async def test_a_two_thread_pool_runs_a_final_beside_a_running_partial() -> None:
    pool, release = InferencePool("test", threads=2), threading.Event()
    try:
        partial = asyncio.create_task(pool.run(release.wait, priority=PRIORITY_PARTIAL))
        await asyncio.sleep(0.05)
        assert await asyncio.wait_for(pool.run(lambda: "final"), 5) == "final"
        assert not partial.done()
    finally:
        release.set()
    await partial


async def test_a_two_thread_pool_never_runs_two_partials_at_once() -> None:
    pool, release = InferencePool("test", threads=2), threading.Event()
    ran: list[str] = []
    try:
        first = asyncio.create_task(pool.run(release.wait, priority=PRIORITY_PARTIAL))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(
            pool.run(lambda: ran.append("second"), priority=PRIORITY_PARTIAL)
        )
        await asyncio.sleep(0.1)
        assert ran == []  # the free thread does not take it
    finally:
        release.set()
    await asyncio.gather(first, second)
    assert ran == ["second"]


async def test_pool_delivers_exceptions() -> None:
    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await InferencePool("test").run(fail)


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 1), (3, 1), (4, 2), (16, 2)])
def test_the_replicas_together_take_no_more_threads_than_the_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int, threads: int
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    assert threads_per_replica() == threads
