"""The end-of-turn models behind agent.voice.turn_detector, loaded from their packages (slow)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agent.voice.turn_detector import (
    LiveKitTurnDetector,
    SmartTurnDetector,
    TextTurnDetector,
    load_detector,
    make_detector,
    normalized_words,
)
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
        "could you tell me which bus")


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
    scores = await asyncio.gather(*(text_detector.score(q, silence) for _, q in PAIRS))
    counter.cancel()
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert ticks >= 3  # the loop kept running while the model did


@pytest.mark.slow
@pytest.mark.parametrize("detector_class", [SmartTurnDetector, LiveKitTurnDetector])
def test_the_audio_models_load_from_their_packages_and_score(detector_class: type) -> None:
    detector = detector_class()
    score = detector.score_now("", espeak("What time is it in Tokyo?"))
    assert 0.0 <= score <= 1.0


def test_off_is_no_detector_and_an_unknown_name_is_an_error() -> None:
    assert make_detector("off") is None and load_detector("off") is None
    with pytest.raises(ValueError, match="unknown turn detector 'vad'"):
        make_detector("vad")
