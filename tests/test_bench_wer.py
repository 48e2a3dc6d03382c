"""The word error rate `voxroom bench` reports (bench/wer.py): the normalization, the
counts, a lost first word, the item's final transcript from what the agent published, the
report's per-kind figures; (slow) two listening-corpus items through the simulate path."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.measure import ItemResult, RunResult
from bench.wer import (
    final_transcript,
    first_word_lost,
    normalize,
    number_words,
    wer_by_kind,
    wer_summary,
    word_errors,
)
from tests.test_bench import bench_cli, by_kind, corpus_run, saved_report


def test_numbers_are_spelled_out_without_and() -> None:
    assert number_words(0) == "zero"
    assert number_words(144) == "one hundred forty four"
    assert number_words(2026) == "two thousand twenty six"
    assert number_words(380_000) == "three hundred eighty thousand"


def test_normalization_makes_the_same_words_alike() -> None:
    assert normalize("It's 144.") == normalize("it is one hundred and forty-four")
    assert normalize("Set a timer for 10 minutes!") == "set a timer for ten minutes"
    assert normalize("Um, what's 3.5?") == "what is three point five"
    assert normalize("Rock and roll") == "rock and roll"  # "and" only goes between numbers


def test_word_errors_count_each_kind_of_edit() -> None:
    e = word_errors(
        "What is the tallest mountain in the world?", "What is not all is mounted in the world?"
    )
    assert e["words"] == 8
    assert e["substitutions"] + e["deletions"] + e["insertions"] == 4
    assert word_errors("Why do cats purr?", "") == {
        "words": 4,
        "substitutions": 0,
        "deletions": 4,
        "insertions": 0,
    }


def test_a_lost_first_word_is_told_apart_from_a_later_one() -> None:
    assert first_word_lost("Who wrote Pride and Prejudice?", "wrote pride and prejudice")
    # misheard, not lost: a substitution
    assert not first_word_lost("Who wrote Pride and Prejudice?", "Do wrote Pride and Prejudice?")
    assert not first_word_lost("Who wrote Pride and Prejudice?", "Who wrote pride and")
    assert not first_word_lost("Who wrote it?", "Well, who wrote it?")  # an insertion before
    assert first_word_lost("Who wrote it?", "")


def test_the_corpus_rate_weighs_items_by_their_words() -> None:
    s = wer_summary(
        [
            ("one two three four five six seven eight", "one two three four five six seven eight"),
            ("why not", ""),
        ]
    )
    assert (s["items"], s["words"], s["deletions"], s["wer"]) == (2, 10, 2, 0.2)
    assert s["first_word_lost"] == 1


def test_the_item_transcript_merges_a_withdrawn_turn() -> None:
    assert final_transcript([]) == ""
    assert final_transcript(["What is the", "What is the tallest mountain?"]) == (
        "What is the tallest mountain?"
    )
    assert final_transcript(["Why do", "cats purr?"]) == "Why do cats purr?"


def item(kind: str, said: str, heard: str | None, v2v: float = 600.0) -> ItemResult:
    return ItemResult(
        f"{kind}-x", "v", kind, {}, voice_to_voice_ms=v2v, said=said, transcript=heard
    )


def test_the_summary_reports_wer_per_kind_and_overall() -> None:
    run = RunResult(
        "voxroom",
        "livekit",
        "script",
        [
            item("clean", "Why is the sky blue?", "Why is the sky blue?"),
            item("noise", "Why is the sky blue?", "is the sky glue"),
            item("noise", "How do rainbows form?", None),  # no transcript recorded: not scored
            item("question", "", "whatever"),  # nothing known to be said: not scored
        ],
    )
    wer = run.summary()["wer"]
    assert set(wer) == {"clean", "noise", "overall"}
    assert wer["clean"]["wer"] == 0.0 and wer["noise"]["wer"] == 0.4
    assert wer["noise"]["first_word_lost"] == 1
    assert wer["overall"]["words"] == 10 and wer["overall"]["wer"] == 0.2
    assert wer_by_kind([item("question", "", "x")]) is None


def test_saved_listening_results_print_the_wer_table(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    ours = RunResult(
        "voxroom",
        "livekit",
        "script",
        [
            item("phone", "Why do cats purr?", "Why do cats pour?", 610.0),
            item("quiet_start", "Who painted the Mona Lisa?", "painted the Mona Lisa", 590.0),
        ],
    )
    saved = saved_report(tmp_path / "saved.json", [ours])
    assert bench_cli("--from-json", str(saved)) == 0
    out = capsys.readouterr().out
    assert "word error rate by kind" in out
    assert "0.250 (1/4, 0) 610 ms" in out  # phone: one substitution in four words
    assert "0.200 (1/5, 1) 590 ms" in out  # quiet start: the first word lost
    assert "0.222 (2/9, 1) 600 ms" in out  # overall


@pytest.mark.slow
def test_simulate_path_scores_what_the_agent_heard(tmp_path: Path) -> None:
    """--corpus listen: a phone-line and a quiet-start item of the held-out half through the
    engine; each item's transcript is the final the engine published, scored under its
    condition (how well Whisper hears them is the bench's figure, not this test's)."""
    voxroom = corpus_run(tmp_path, "listen", "phone,quiet_start", "--split", "held-out")
    items = by_kind(voxroom)
    assert set(items) == {"phone", "quiet_start"}
    for i in items.values():
        assert i["said"] == "What is the tallest mountain in the world?"
        assert i["transcript"], i  # the engine published a final transcript
        assert i["voice_to_voice_ms"] is not None
    wer = voxroom["summary"]["wer"]
    assert set(wer) == {"phone", "quiet_start", "overall"}
    assert wer["overall"]["words"] == 16
