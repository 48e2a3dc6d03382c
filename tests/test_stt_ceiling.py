"""`voxroom bench stt-ceiling`'s pieces: the Opus round trip, the n-best oracle, the summary."""

from __future__ import annotations

import numpy as np

from agent.engines import INPUT_RATE
from bench.stt_ceiling import opus_round_trip, oracle, summary


def test_the_opus_round_trip_keeps_the_length_and_the_tone() -> None:
    t = np.arange(INPUT_RATE) / INPUT_RATE
    tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    coded = opus_round_trip(tone)
    assert coded.dtype == np.int16
    assert abs(len(coded) - len(tone)) <= INPUT_RATE // 50
    spectrum = np.abs(np.fft.rfft(coded[:INPUT_RATE].astype(np.float64)))
    assert abs(np.argmax(spectrum) * INPUT_RATE / len(coded[:INPUT_RATE]) - 440) < 5
    assert not np.array_equal(coded[: len(tone)], tone)  # it was coded, not passed through


def test_the_oracle_is_the_hypothesis_nearest_to_what_was_said() -> None:
    said = "Why do cats purr?"
    assert oracle(said, ["Why do cats earth?", "Why do cats purr", "Why do you care?"]) == (
        "Why do cats purr"
    )
    assert oracle(said, ["Why do cats earth?", "Why do cats burn?"]) == "Why do cats earth?"


def test_the_summary_gives_best_and_oracle_per_kind_and_overall() -> None:
    rows = [
        {
            "kind": "clean",
            "said": "Why do cats purr?",
            "best": "Why do cats earth?",
            "oracle": "Why do cats purr?",
        },
        {
            "kind": "phone",
            "said": "Who painted the Mona Lisa?",
            "best": "who painted by the leader",
            "oracle": "who painted the Middle East",
        },
    ]
    figures = summary(rows)
    assert list(figures) == ["clean", "phone", "overall"]
    assert figures["clean"]["best"]["wer"] == 0.25 and figures["clean"]["oracle"]["wer"] == 0
    assert figures["phone"]["oracle"]["wer"] == 0.4
    assert figures["overall"]["best"]["words"] == 9
    assert figures["overall"]["oracle"]["wer"] == round(2 / 9, 4)
