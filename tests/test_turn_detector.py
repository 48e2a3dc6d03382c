"""The end-of-turn models behind agent.adapters.turn_detector, loaded from their packages (slow)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import numpy as np
import pytest

from agent.adapters.turn_detector import (
    HESITATION_P,
    HESITATION_TEXT_MAX,
    LiveKitTurnDetector,
    SmartTurnDetector,
    TextTurnDetector,
    TextWithHesitationDetector,
    TurnScorer,
    combined,
    load_detector,
    make_detector,
    normalized_words,
)
from agent.engines import FRAME_SAMPLES
from bench.speech import espeak
from state_machine.endpointing import EndpointOptions

# (an unfinished start with a thinking pause after it, the whole question)
PAIRS = [
    ("What is the name of.", "What is the name of the longest river in Africa?"),
    ("How long does it take to.", "How long does it take to drive from Paris to Lyon?"),
    ("Do you know.", "Do you know when the next train leaves?"),
]


def test_normalized_words_drop_punctuation_and_annotations() -> None:
    assert normalized_words("Could you tell me?  [coughs] Which BUS...") == (
        "could you tell me which bus"
    )


@pytest.fixture(scope="module")
def text_detector() -> TextTurnDetector:
    detector = TextTurnDetector()
    detector.load()
    return detector


@pytest.mark.slow
@pytest.mark.parametrize(("unfinished", "complete"), PAIRS)
def test_the_text_model_tells_an_unfinished_start_from_the_whole_question(
    text_detector: TextTurnDetector, unfinished: str, complete: str
) -> None:
    o = EndpointOptions()
    silence = np.zeros(1600, np.int16)
    assert text_detector.score_now(unfinished, silence) <= o.unfinished_score
    assert text_detector.score_now(complete, silence) >= o.complete_score


@pytest.mark.slow
@pytest.mark.parametrize(
    "request_",
    [
        "Where is the closest pharmacy?",  # "... pharmacy to", "... pharmacy in": it could go on
        "I was hoping you could order me a taxi for six.",
    ],
)
def test_a_complete_request_that_could_go_on_is_scored_complete(
    text_detector: TextTurnDetector, request_: str
) -> None:
    # Read as the first message of a chat, the words looked like the start of a longer text
    # (P(end) 0.1-0.2), and such questions waited 0.6 s or more of silence.
    o = EndpointOptions()
    assert text_detector.score_now(request_, np.zeros(1600, np.int16)) >= o.complete_score


@pytest.mark.slow
async def test_scores_run_off_the_event_loop_one_at_a_time(
    text_detector: TextTurnDetector,
) -> None:
    loop = asyncio.get_running_loop()
    ticks = 0

    async def count() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    counter = loop.create_task(count())
    silence = np.zeros(1600, np.int16)
    # Words no other test read: a score of words read already is not asked of the model.
    fresh = [f"{q} Thanks." for _, q in PAIRS]
    scores = await asyncio.gather(*(text_detector.score(q, silence) for q in fresh))
    counter.cancel()
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert ticks >= 3  # the loop kept running while the model did


@pytest.mark.slow
@pytest.mark.parametrize("detector_class", [SmartTurnDetector, LiveKitTurnDetector])
def test_the_audio_models_load_from_their_packages_and_score(detector_class: type) -> None:
    detector = detector_class()
    score = detector.score_now("", espeak("What time is it in Tokyo?"))
    assert 0.0 <= score <= 1.0


def test_the_voice_overrules_the_text_only_when_it_hears_a_hesitation() -> None:
    assert combined(0.3, 0.3) == 0.3  # the text model decides
    assert combined(0.3, 0.99) == 0.3
    assert combined(0.3, HESITATION_P / 2) == 0.0  # "..., uh": unfinished, it waits
    assert combined(0.001, HESITATION_P / 2) == 0.0
    assert combined(HESITATION_TEXT_MAX, HESITATION_P / 2) == HESITATION_TEXT_MAX  # sure words


@pytest.mark.slow
def test_a_dropped_filler_is_heard_in_the_voice() -> None:
    # Whisper writes "Could you recommend a film for tonight, uh" without the "uh"; the text
    # model alone would end the turn sooner than after an unfinished start.
    detector = TextWithHesitationDetector()
    detector.load()
    o = EndpointOptions()
    text = "Could you recommend a film for tonight?"
    hesitant = espeak("Could you recommend a film for tonight, uh")
    assert detector.text.score_now(text, hesitant) > o.unfinished_score
    assert detector.score_now(text, hesitant) <= o.unfinished_score
    whole = "What time is it in Tokyo right now?"
    assert detector.score_now(whole, espeak(whole)) >= o.complete_score


def test_without_smart_turn_the_text_model_alone_scores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(self: SmartTurnDetector) -> None:
        raise RuntimeError("no pipecat-ai")

    detector = TextWithHesitationDetector()
    monkeypatch.setattr(detector.text, "load", lambda: None)
    monkeypatch.setattr(detector.text, "score_now", lambda text, pcm: 0.42)
    monkeypatch.setattr(SmartTurnDetector, "_load", missing)
    detector.load()
    assert detector.audio is None
    assert detector.score_now("What time is it?", np.zeros(1600, np.int16)) == 0.42


def test_off_is_no_detector_and_an_unknown_name_is_an_error() -> None:
    assert make_detector("off") is None and load_detector("off") is None
    with pytest.raises(ValueError, match="unknown turn detector 'vad'"):
        make_detector("vad")


class CompletionsDouble:
    """TEST DOUBLE of xllamacpp.Server: P(end) `p` for any words, counting the requests."""

    def __init__(self, p: float) -> None:
        self.p, self.prompts = p, []  # type: ignore[var-annotated]

    def handle_completions(self, request: dict) -> dict:  # type: ignore[type-arg]
        self.prompts.append(request["prompt"])
        top = [
            {"token": "?", "logprob": float(np.log(self.p))},
            {"token": " the", "logprob": float(np.log(1 - self.p))},
        ]
        return {"choices": [{"logprobs": {"content": [{"top_logprobs": top}]}}]}


class VoiceDouble:
    """TEST DOUBLE of SmartTurnDetector: a fixed P, recording whether it was asked."""

    def __init__(self, p: float) -> None:
        self.p, self.asked = p, 0

    async def score(self, text: str, pcm: np.ndarray) -> float:
        self.asked += 1
        return self.p


async def _read_ahead(detector: TextTurnDetector, text: str) -> float:
    read = detector.warm(text)
    assert read is not None
    return await asyncio.wrap_future(read)


@pytest.mark.parametrize(("p", "voice_asked"), [(0.6, 0), (0.2, 1)])
async def test_words_read_ahead_are_scored_without_the_model_again(
    p: float, voice_asked: int
) -> None:
    detector = TextWithHesitationDetector()
    server = CompletionsDouble(p)
    detector.text._server, detector.text._loaded = server, True
    voice = VoiceDouble(0.9)
    detector.audio = voice  # type: ignore[assignment]
    assert await _read_ahead(detector.text, "What time is it?") == pytest.approx(p)
    # The candidate at the pause has the same words: the text model is not asked again, and
    # a score sure to end (>= HESITATION_TEXT_MAX) does not wait for Smart Turn either.
    score = await detector.score("what time is it", np.zeros(1600, np.int16))
    assert score == pytest.approx(p) and len(server.prompts) == 1
    assert voice.asked == voice_asked
    await detector.score("What time is it in Oslo?", np.zeros(1600, np.int16))
    assert len(server.prompts) == 2  # other words are read


class HearingDouble(VoiceDouble):
    """TEST DOUBLE of SmartTurnDetector that also reads an end early (`submit`), recording the
    audio it was given."""

    def __init__(self, p: float) -> None:
        super().__init__(p)
        self.heard: list[np.ndarray] = []

    def submit(self, pcm: np.ndarray) -> Future[float]:
        self.heard.append(pcm)
        done: Future[float] = Future()
        done.set_result(self.p)
        return done


def hearing_scorer(
    text_p: float, voice_p: float
) -> tuple[TurnScorer, HearingDouble, list[float | None]]:
    detector = TextWithHesitationDetector()
    detector.text._server, detector.text._loaded = CompletionsDouble(text_p), True
    voice = HearingDouble(voice_p)
    detector.audio = voice  # type: ignore[assignment]
    scores: list[float | None] = []
    scorer = TurnScorer(
        detector, lambda uid, text, score: scores.append(score), lambda e: None, clock=lambda: 0.0
    )
    for level in (3000,) * 20 + (10,) * 3:  # speech, then the 60 ms before the candidate
        scorer.push(np.full(FRAME_SAMPLES, level, np.int16))
    return scorer, voice, scores


async def test_the_hesitation_check_reads_the_end_while_the_candidate_is_decoded() -> None:
    """Smart Turn reads the end when the candidate is asked for, with the quiet still to come
    added (the last frame's, repeated), so the turn's score does not wait for it after the
    words; what it heard decides as it would have (here a hesitation: unfinished)."""
    scorer, voice, scores = hearing_scorer(text_p=0.2, voice_p=HESITATION_P / 2)
    scorer.hear_end(1, quiet_s=0.14)
    [heard] = voice.heard
    assert len(heard) == 23 * FRAME_SAMPLES + round(0.14 * 16_000)
    assert set(heard[-round(0.14 * 16_000) :].tolist()) == {10}
    for _ in range(5):  # the decode's time: more quiet
        scorer.push(np.full(FRAME_SAMPLES, 10, np.int16))
    scorer.request(1, "Could you recommend a film for tonight?")
    await asyncio.gather(*scorer._tasks)
    assert scores == [0.0] and voice.asked == 0


async def test_an_end_heard_early_is_dropped_when_the_speaker_goes_on() -> None:
    scorer, voice, scores = hearing_scorer(text_p=0.2, voice_p=0.9)
    scorer.hear_end(1, quiet_s=0.14)
    scorer.drop_heard()  # the speaker went on: the end is later
    scorer.request(1, "Could you recommend a film for tonight?")
    await asyncio.gather(*scorer._tasks)
    assert scores == [pytest.approx(0.2)] and voice.asked == 1  # read again, at the request
    scorer.hear_end(2, quiet_s=0.14)
    scorer.request(3, "Another utterance?")  # not the one heard
    await asyncio.gather(*scorer._tasks)
    assert voice.asked == 2
