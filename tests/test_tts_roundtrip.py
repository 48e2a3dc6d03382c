"""A regression guard for the TTS -> STT round trip (bench/tts_roundtrip.py): three sentences,
whole and streamed in lookahead chunks with context, must still be heard (WER <= 0.2; the
benchmark's goal over 34 sentences is 0.10). Also the scoring's normalization."""

from __future__ import annotations

import asyncio

import pytest

from bench.tts_roundtrip import (
    SENTENCES,
    Chunk,
    corpus_wer,
    load_engines,
    normalize,
    playout_gaps,
    round_trip,
    stream_chunks,
    word_time,
)


def test_numbers_are_compared_as_words() -> None:
    assert normalize("It costs $19.99, up 8% since the 21st!") == (
        "it costs nineteen dollars ninety nine cents up eight percent since the twenty first"
    )
    assert normalize("Dr. Smith has 2,024 books and 2.5 cats") == normalize(
        "doctor Smith has two thousand and twenty-four books and two point five cats"
    )


def test_chunks_carry_the_context_known_when_released() -> None:
    chunks = stream_chunks("Please send the report to Sarah Johnson before lunch.")
    assert " ".join(c.text for c in chunks) == (
        "Please send the report to Sarah Johnson before lunch."
    )
    first, second = chunks[0], chunks[1]
    assert (first.text, first.left, first.right) == ("Please", "", "send the")
    # Released as "the" (word 2) arrives; synthesized from its guess at "send" (word 1).
    assert (first.word, first.synthesis_from) == (2, 1)
    assert (second.text, second.left, second.word) == ("send the", "Please", 4)
    assert chunks[-1].right == ""


def test_the_playout_timeline_finds_the_voice_running_dry() -> None:
    chunks = [Chunk("One", "", "two three", 2, 1), Chunk("two three", "One", "", 4, 4)]
    gaps, first = playout_gaps(chunks, [0.05, 0.05], [0.1, 0.5])
    # "One": its guess is synthesized from word 1 (217 ms) to 267 ms, released at word 2
    # (283 ms), played to 383 ms; "two three" is released at word 4 (417 ms), ready at 467.
    assert first == pytest.approx(word_time(2))
    assert gaps == pytest.approx([word_time(4) + 0.05 - (word_time(2) + 0.1)])
    # Synthesis is one chunk at a time: the second waits for a slow first, which then plays
    # while it is made, so nothing is silent between them.
    gaps, first = playout_gaps(chunks, [0.5, 0.05], [0.1, 0.5])
    assert first == pytest.approx(word_time(1) + 0.5)
    assert gaps == pytest.approx([0.0])


@pytest.mark.slow
async def test_three_sentences_survive_the_round_trip() -> None:
    tts, stt = await asyncio.to_thread(load_engines)
    picked = [SENTENCES[0], SENTENCES[13], SENTENCES[25]]  # numbers, a question, 22 words
    results = [await round_trip(tts, stt, s, with_espeak=False) for s in picked]
    assert all(len(r.chunks) >= 2 for r in results)
    for variant in ("whole", "chunked"):
        assert corpus_wer(results, variant) <= 0.2, [r.heard[variant] for r in results]
