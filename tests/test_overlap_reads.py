"""`voxroom bench overlap-reads`' verdicts (bench/overlap_reads.py), on hand-made decodes: the
state machine's barge-in rules over a sound's partial transcripts and its whole one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.overlap_reads import Sound, judge, run, summary
from state_machine.options import TurnOptions


def sound(kind: str, *decodes: tuple[int, str]) -> Sound:
    return Sound(kind, "said", "v", decodes[-1][0], list(decodes))


def test_a_misread_first_half_second_pauses_the_answer_and_the_whole_sound_decides() -> None:
    v = judge(
        sound("backchannel", (300, ""), (400, "Not to me."), (800, "That makes sense.")),
        TurnOptions(),
    )
    assert (v.paused_ms, v.ended) == (400, False)


def test_a_stop_cue_ends_the_answer_from_the_first_decode_that_has_it() -> None:
    v = judge(
        sound("interruption", (400, "Wait, stop, I"), (1200, "Wait, stop, I meant Tokyo.")),
        TurnOptions(),
    )
    assert (v.paused_ms, v.ended, v.ended_on, v.ended_ms) == (400, True, "Wait, stop, I", 400)


def test_words_without_a_stop_cue_end_the_answer_at_the_second_decode_that_has_them() -> None:
    v = judge(
        sound(
            "interruption",
            (600, "Tell me about"),
            (800, "Tell me about Lisbon"),
            (1200, "Tell me about Lisbon instead."),
        ),
        TurnOptions(),
    )
    assert (v.paused_ms, v.ended, v.ended_on, v.ended_ms) == (
        600,
        True,
        "Tell me about Lisbon",
        800,
    )


def test_one_decode_that_reads_as_an_interruption_only_pauses_the_answer() -> None:
    v = judge(
        sound(
            "backchannel", (600, "That's me."), (700, "not to make,"), (1000, "That makes sense.")
        ),
        TurnOptions(),
    )
    assert (v.paused_ms, v.ended) == (700, False)


def test_a_sound_heard_whole_as_an_interruption_ends_the_answer_at_its_end() -> None:
    v = judge(sound("interruption", (300, ""), (500, "Why?")), TurnOptions())
    assert (v.paused_ms, v.ended) == (500, True)


def test_the_summary_counts_what_went_wrong_and_a_saved_run_replays(tmp_path: Path) -> None:
    sounds = [
        sound("backchannel", (300, "Mm"), (500, "Mm-hmm.")),
        sound("backchannel", (300, "Far, far."), (700, "Far, far, far")),
        sound("backchannel", (300, ""), (600, "I see the problem.")),
        sound("interruption", (400, "How much?"), (900, "How much does it cost?")),
        sound("interruption", (400, ""), (900, "")),
    ]
    s = summary(sounds, TurnOptions())
    assert (s["backchannels_pausing"], s["backchannels_ending"]) == (1, 1)
    assert (s["interruptions_missed"], s["interruption_paused_ms_p50"]) == (1, 400)
    assert [w["said"] for w in s["wrong"]] == ["said", "said"]
    saved = tmp_path / "decodes.json"
    saved.write_text(json.dumps({"sounds": [vars(x) for x in sounds]}))
    out = tmp_path / "replayed.json"
    assert run(argparse.Namespace(decodes=saved, json=out, cache_dir=tmp_path)) == 0
    assert json.loads(out.read_text())["backchannels_ending"] == 1
