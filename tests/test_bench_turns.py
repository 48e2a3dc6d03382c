"""The turn corpus's figures (bench/measure.py, bench/livekit_path.py), decided on hand-made
listener timelines, requests and agent records: the silence a backchannel causes, an
interruption's yield at the listener and at the agent, words lost against words misheard."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.measure import (
    HeardAudio,
    ItemResult,
    ReferenceAnswer,
    RunResult,
    asked_text,
    backchannel_silence,
    measure_overlay,
    score_words,
    yielded_after,
)
from tests.test_bench import RATE, quiet, tone


def samples(parts: tuple[tuple[str, float], ...], amp: int = 3000) -> np.ndarray:
    """The agent's audio: ("talk" | "soft" | "quiet", seconds) in turn; "soft" is the voice
    9.5 dB down (a duck)."""
    pcm = {"talk": lambda s: tone(s, amp), "soft": lambda s: tone(s, amp // 3), "quiet": quiet}
    return np.concatenate([pcm[what](s) for what, s in parts])


def heard(*parts: tuple[str, float], amp: int = 3000) -> HeardAudio:
    """`samples(parts)` heard from t = 0."""
    return HeardAudio(RATE, [(0.0, samples(parts, amp))])


# The long answer with nobody over it: talk, its own 0.2 s pause at 2.5 s, talk to 6 s.
REFERENCE = ReferenceAnswer(heard(("talk", 2.5), ("quiet", 0.2), ("talk", 3.3)), 0.0)


def test_the_answers_own_pauses_and_level_are_read_off_the_reference() -> None:
    [(at, length)] = REFERENCE.pauses()
    assert (at, length) == (pytest.approx(2.5, abs=0.011), pytest.approx(0.2, abs=0.011))
    assert REFERENCE.level(1.0) == pytest.approx(3000, abs=5)
    assert REFERENCE.level(2.6) == 0


def test_a_ducked_voice_under_the_talking_threshold_is_still_no_silence() -> None:
    # Its soft sounds at 200 (under AUDIBLE, 300) are sound: silence is under SILENT (100).
    answer = heard(
        ("talk", 1.6), ("soft", 0.4), ("talk", 0.5), ("quiet", 0.2), ("talk", 3.3), amp=600
    )
    assert backchannel_silence(answer, 0.0, 1.5, 1.8, REFERENCE.pauses()) == 0


@pytest.mark.parametrize(
    ("answer", "caused_ms"),
    [
        # paused 1.6-1.9 s for a backchannel said 1.5-1.8 s, then on (its own pause now at 2.8 s)
        ([("talk", 1.6), ("quiet", 0.3), ("talk", 0.9), ("quiet", 0.2), ("talk", 3.3)], 300),
        # ducked instead: never silent but for the answer's own pause
        ([("talk", 1.6), ("soft", 0.4), ("talk", 0.5), ("quiet", 0.2), ("talk", 3.3)], 0),
        # the answer's own pause stretched by 0.3 s
        ([("talk", 2.5), ("quiet", 0.5), ("talk", 3.3)], 300),
        # stopped for good: silent to the end of the window (2.5 s after the backchannel),
        # less the answer's own pause in it
        ([("talk", 1.6), ("quiet", 6.0)], 2500),
    ],
)
def test_a_backchannel_is_charged_the_silence_beyond_the_answers_own_pauses(
    answer: list[tuple[str, float]], caused_ms: float
) -> None:
    got = backchannel_silence(heard(*answer), 0.0, 1.5, 1.8, REFERENCE.pauses())
    assert got == pytest.approx(caused_ms, abs=21)
    result = ItemResult("b", "v", "backchannel", {})
    measure_overlay(result, heard(*answer), 1.5, 1.8, answered=0.0, reference=REFERENCE)
    assert result.backchannel_silence_ms == got
    unreferenced = ItemResult("b", "v", "backchannel", {})
    measure_overlay(unreferenced, heard(*answer), 1.5, 1.8)
    assert unreferenced.backchannel_silence_ms is None  # no reference: not measured


def arrived(*parts: tuple[str, float], jitter_s: float) -> HeardAudio:
    """`samples(parts)` as the listener's frames bring it: 20 ms each, every other one
    stamped `jitter_s` late (its arrival time), which leaves a hole before it."""
    pcm, frame = samples(parts), RATE // 50
    return HeardAudio(
        RATE,
        [
            (i * 0.02 + jitter_s * (i % 2), pcm[i * frame : (i + 1) * frame])
            for i in range(len(pcm) // frame)
        ],
    )


def test_the_holes_between_frames_arrival_times_are_neither_pauses_nor_caused() -> None:
    # Ducked from 1.6 to 2.0 s, never silent but for the answer's own pause, a 4 ms hole
    # every 40 ms: counted, the holes moved the place of that pause by ~100 ms, and it was
    # charged whole.
    reference = ReferenceAnswer(
        arrived(("talk", 2.5), ("quiet", 0.2), ("talk", 3.3), jitter_s=0.004), 0.0
    )
    assert [round(at, 1) for at, _ in reference.pauses()] == [2.5]
    answer = arrived(
        ("talk", 1.6), ("soft", 0.4), ("talk", 0.5), ("quiet", 0.2), ("talk", 3.3), jitter_s=0.004
    )
    assert backchannel_silence(answer, 0.0, 1.5, 1.8, reference.pauses()) == 0


def test_an_early_pause_that_ran_long_moves_the_answers_own_pauses_with_it() -> None:
    # The reference: its own pauses at 0.3 s (a chunk came late) and 2.5 s. Heard with a
    # backchannel at 1.5-1.8 s, the early pause ran 0.12 s longer: the rest came that late.
    reference = ReferenceAnswer(
        heard(("talk", 0.3), ("quiet", 0.25), ("talk", 1.95), ("quiet", 0.2), ("talk", 3.3)), 0.0
    )
    late = heard(("talk", 0.3), ("quiet", 0.37), ("talk", 1.95), ("quiet", 0.2), ("talk", 3.3))
    assert backchannel_silence(late, 0.0, 1.5, 1.8, reference.pauses()) == 0
    # the same, and the pause at 2.62 s held 0.15 s longer: that much was caused
    held = heard(("talk", 0.3), ("quiet", 0.37), ("talk", 1.95), ("quiet", 0.35), ("talk", 3.3))
    assert backchannel_silence(held, 0.0, 1.5, 1.8, reference.pauses()) == pytest.approx(
        150, abs=11
    )


@pytest.mark.parametrize(
    ("answer", "yield_ms", "stop_ms"),
    [
        # onset at 3.0 s: ducked at 3.1 s, stopped at 3.4 s
        ([("talk", 3.1), ("soft", 0.3), ("quiet", 2.0)], 100, 400),
        # no duck: the stop is the yield
        ([("talk", 3.25), ("quiet", 2.0)], 250, 250),
    ],
)
def test_an_interruption_yields_at_its_duck_or_its_stop(
    answer: list[tuple[str, float]], yield_ms: float, stop_ms: float
) -> None:
    result = ItemResult("i", "v", "interruption", {})
    measure_overlay(result, heard(*answer), 3.0, 3.6, answered=0.0, reference=REFERENCE)
    assert result.yield_ms == pytest.approx(yield_ms, abs=11)
    assert result.barge_in_stop_ms == pytest.approx(stop_ms, abs=11)
    unreferenced = ItemResult("i", "v", "interruption", {})
    measure_overlay(unreferenced, heard(*answer), 3.0, 3.6)
    assert unreferenced.yield_ms is None  # no reference: a duck cannot be told
    assert unreferenced.barge_in_stop_ms == result.barge_in_stop_ms


def test_a_backchannel_said_after_the_answer_ended_is_not_measured() -> None:
    from bench.cli import format_kinds

    # The question was misheard and answered in a few words, over before the "mm hmm" at
    # 3.0 s; the agent then answered that as a turn. Nothing was barged into.
    short = heard(("talk", 1.3), ("quiet", 2.2), ("talk", 1.0))
    after = ItemResult("b1", "v", "backchannel", {}, turns=2)
    measure_overlay(after, short, 3.0, 3.5, answered=0.0, reference=REFERENCE)
    assert after.heard_after_backchannel is None and after.backchannel_silence_ms is None
    over = ItemResult("b2", "v", "backchannel", {}, turns=2)  # said over the answer
    measure_overlay(over, heard(("talk", 6.0)), 3.0, 3.5, answered=0.0, reference=REFERENCE)
    assert over.heard_after_backchannel is True
    run = RunResult("voxroom", "livekit", "script", [after, over])
    summary = run.summary()["kinds"]["backchannel"]
    assert (summary["false_barge_ins"], summary["false_barge_ins_measured"]) == (1, 1)
    assert "1 of 1" in format_kinds([run])


def test_a_quiet_word_the_answer_has_anyway_a_small_dip_or_a_short_one_is_no_yield() -> None:
    # the answer has a quiet word at 3.2-3.5 s of its own: the same there is no duck
    quiet_word = ReferenceAnswer(heard(("talk", 3.2), ("soft", 0.3), ("talk", 2.5)), 0.0)
    same = heard(("talk", 3.2), ("soft", 0.3), ("talk", 2.5))
    assert yielded_after(same, 3.0, 5.0, 0.0, quiet_word) is None
    # 3.5 dB down for 0.5 s, then 16 dB down for only 0.1 s
    dips = HeardAudio(
        RATE,
        [(0.0, np.concatenate([tone(3.1), tone(0.5, 2000), tone(0.5), tone(0.1, 500), tone(1.8)]))],
    )
    assert yielded_after(dips, 3.0, 5.0, 0.0, REFERENCE) is None
    # the same duck heard 30 ms late (jitter) is found 30 ms late
    late = heard(("quiet", 0.03), ("talk", 3.1), ("soft", 0.3), ("talk", 2.0))
    assert yielded_after(late, 3.0, 5.0, 0.03, REFERENCE) == pytest.approx(3.13, abs=0.011)


@pytest.mark.parametrize(
    ("said", "asked", "lost", "misheard"),
    [
        # the first half never reached the LLM
        (
            "Could you tell me which bus goes to the airport?",
            "which bus goes to the airport?",
            4,
            0,
        ),
        # all of it, one word misheard by Whisper
        (
            "Could you tell me which bus goes to the airport?",
            "Could you tell me which bus goes to the harbour?",
            0,
            1,
        ),
        # fillers are no words; punctuation and case do not matter
        (
            "I need a recipe for dinner, so, um something with chicken?",
            "i need a recipe for dinner so something with chicken",
            0,
            0,
        ),
        # nothing asked: every word lost
        ("Tell me about Lisbon instead.", "", 5, 0),
    ],
)
def test_words_lost_are_said_words_deleted_and_misheard_ones_substituted(
    said: str, asked: str, lost: int, misheard: int
) -> None:
    result = ItemResult("x", "v", "paused", {})
    score_words(result, said, asked)
    assert (result.words_lost, result.words_misheard) == (lost, misheard)
    assert result.asked == asked


def test_what_the_llm_was_asked_is_the_user_text_since_its_last_answer() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Could you tell me"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
        {"role": "user", "content": [{"type": "text", "text": "which bus goes there?"}]},
    ]
    assert asked_text(messages) == "Could you tell me which bus goes there?"
    assert asked_text([{"role": "assistant", "content": "Hi."}]) == ""


def test_the_request_behind_an_answer_is_the_last_one_before_it() -> None:
    from bench.livekit_path import RequestLog

    log = RequestLog()
    for text in ("old question", "Could you tell me", "Could you tell me which bus?"):
        log.append({"messages": [{"role": "user", "content": text}]})
    (t0, _), (t1, _), (t2, _) = log
    assert log.asked_before(t1, 1) == "Could you tell me"
    assert log.asked_before(None, 1) == "Could you tell me which bus?"
    assert log.asked_before(t2, 0, after=t2) == "Could you tell me which bus?"
    assert log.asked_before(t0, 1) == ""  # none since the item began


@pytest.mark.parametrize("onset_ms_logged", [False, True])
def test_voxroom_stop_and_yield_at_the_agent_come_from_its_logged_events(
    tmp_path: Path, onset_ms_logged: bool
) -> None:
    from bench.livekit_path import Overlay, _attach_voxroom_yields

    session_wall = 1_700_000_000.0  # the wall clock's lead on the monotonic one
    onset = 5000.0  # the worker's VAD heard the interruption start (monotonic)

    def line(event: str, after_s: float, at: float = onset) -> str:
        record = {
            "session": "s",
            "turn_id": 3,
            "event": event,
            "t_ms": round((at + after_s + session_wall) * 1000),
            "onset": at,
        }
        if onset_ms_logged:
            record["onset_ms"] = round((at + session_wall) * 1000)
        return f"2026-01-01 00:00:00,000 INFO voxroom.turns: {json.dumps(record)}"

    log = tmp_path / "worker.log"
    log.write_text(
        "\n".join(
            [
                line("playback_paused", 0.3, at=onset - 20.0),  # an earlier item's
                "2026-01-01 00:00:00,000 INFO livekit.agents: not an event",
                line("playback_ducked", 0.04),
                line("playback_paused", 0.13),
            ]
        )
        + "\n"
    )
    items = [
        ItemResult("q", "v", "question", {}),
        ItemResult("i", "v", "interruption", {}),
        ItemResult("j", "v", "interruption", {}),
    ]
    user = Overlay(onset - 0.03, onset + 1.0, 0.0)  # the user's sound, as the bench sent it
    _attach_voxroom_yields(
        items, [None, user, user._replace(onset=onset + 50, end=onset + 51)], log, session_wall
    )
    assert items[1].agent_yield_ms == pytest.approx(40, abs=1)
    assert items[1].agent_stop_ms == pytest.approx(130, abs=1)
    assert items[2].agent_stop_ms is None  # no pause of the agent's during that sound
    # the bench's reading of the session's clocks 30 s off (a clock that jumped): left out,
    # unless the worker logged the onset on its own wall clock too
    jumped = ItemResult("k", "v", "interruption", {})
    _attach_voxroom_yields([jumped], [user], log, session_wall + 30)
    if onset_ms_logged:
        assert jumped.agent_stop_ms == pytest.approx(130, abs=1)
    else:
        assert jumped.agent_stop_ms is None
    # "Right, | and what ...": the agent ducked under "Right," and played on; the words after
    # it, from 0.9 s, paused it 0.13 s later. The stop counts from "Right,", and a stop over
    # a second is kept: it is late, not a clock that jumped.
    log.write_text(
        "\n".join(
            [
                line("playback_ducked", 0.04),
                line("playback_ducked", 0.04, at=onset + 0.9),
                line("playback_paused", 0.13, at=onset + 0.9),
            ]
        )
        + "\n"
    )
    two = ItemResult("r", "v", "interruption", {})
    _attach_voxroom_yields([two], [user], log, session_wall)
    assert two.agent_yield_ms == pytest.approx(40, abs=1)
    assert two.agent_stop_ms == pytest.approx(1030, abs=1)


def test_agentsession_stop_at_the_agent_comes_from_its_state_changes(tmp_path: Path) -> None:
    from bench.livekit_path import Overlay, _attach_agentsession_yields

    rows = [
        {
            "collected_at": 100.0,
            "type": "agent_state_changed",
            "old_state": "thinking",
            "new_state": "speaking",
        },
        {
            "collected_at": 101.06,
            "type": "user_state_changed",
            "old_state": "listening",
            "new_state": "speaking",
        },
        {
            "collected_at": 101.3,
            "type": "agent_state_changed",
            "old_state": "speaking",
            "new_state": "listening",
        },
        {"collected_at": 101.3, "type": "llm_metrics", "speech_id": "x", "ttft": 0.1},
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    item = ItemResult("i", "v", "interruption", {})
    _attach_agentsession_yields([item], [Overlay(1.0, 2.0, 100.0)], path)
    assert item.agent_stop_ms == pytest.approx(240, abs=1)
    assert item.agent_yield_ms == item.agent_stop_ms


def test_the_new_figures_are_in_the_summary_and_the_printed_table() -> None:
    from bench.cli import format_kinds, format_words_lost

    run = RunResult(
        "voxroom",
        "livekit",
        "script",
        [
            ItemResult(
                "p",
                "v",
                "paused",
                {},
                voice_to_voice_ms=700,
                words_said=9,
                words_lost=4,
                words_misheard=1,
                asked="which bus goes to the airport",
            ),
            ItemResult(
                "p2",
                "v",
                "paused",
                {},
                voice_to_voice_ms=650,
                words_said=6,
                words_lost=0,
                words_misheard=0,
            ),
            ItemResult(
                "b",
                "v",
                "backchannel",
                {},
                turns=1,
                heard_after_backchannel=True,
                backchannel_silence_ms=310,
            ),
            ItemResult(
                "i",
                "v",
                "interruption",
                {},
                turns=2,
                barge_in_stop_ms=220,
                yield_ms=90,
                agent_stop_ms=130,
                agent_yield_ms=40,
                answered_interruption=True,
            ),
        ],
    )
    kinds = run.summary()["kinds"]
    assert (
        kinds["paused"]["words_lost"],
        kinds["paused"]["words_misheard"],
        kinds["paused"]["words_said"],
        kinds["paused"]["items_losing_words"],
    ) == (4, 1, 15, 1)
    assert kinds["backchannel"]["backchannel_silence"]["p50"] == 310
    assert kinds["interruption"]["agent_yield"]["p50"] == 40
    assert kinds["question" if "question" in kinds else "paused"]["yield"] is None
    text = format_kinds([run])
    assert "4 + 1 of 15 (1)" in text and "310 / 310 (1)" in text and "40 / 40 (1)" in text
    assert "p: 4 of 9 lost, 1 misheard" in format_words_lost([run])
