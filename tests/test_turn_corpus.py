"""The turn-taking corpus (bench/turn_corpus.py) and its verdicts (bench/measure.py):
cut-offs, backchannels that ended the answer, missed interruptions, decided on hand-made
listener timelines; (slow) the synthesized corpus itself, its voices and its pauses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.corpus import BargeIn, Utterance, quiet_gaps
from bench.measure import (
    HeardAudio,
    ItemResult,
    RunResult,
    cut_in_ms,
    cut_off,
    false_barge_in,
    measure_overlay,
    missed_interruption,
)
from bench.turn_corpus import (
    FILLERS,
    KINDS,
    MIN_PAUSE_S,
    PAUSED,
    cough,
    insert_silence,
    select,
    set_pause,
)
from tests.test_bench import RATE, quiet, tone


def heard(*parts: tuple[str, float]) -> HeardAudio:
    """The agent's audio from t = 0: ("talk" | "quiet", seconds) in turn."""
    return HeardAudio(
        RATE,
        [(0.0, np.concatenate([tone(s) if what == "talk" else quiet(s) for what, s in parts]))],
    )


def item(kind: str, turns: int = 1) -> ItemResult:
    return ItemResult("x", "v", kind, {}, turns=turns)


def overlaid(
    kind: str, turns: int, answer: list[tuple[str, float]], start_s: float, end_s: float
) -> ItemResult:
    """An item of `kind` whose user spoke from `start_s` to `end_s` over the agent's `answer`
    (as `heard` takes it), begun at 2.0 s; measured as the bench measures overlays."""
    result = item(kind, turns)
    measure_overlay(result, heard(("quiet", 2.0), *answer), start_s, end_s)
    return result


def test_a_cut_off_is_agent_audio_inside_the_users_speech_pause_included() -> None:
    # the user speaks 0.5-2.0 s with a pause at 1.0-1.6 s; the agent talks 1.2-1.5 s
    early = heard(("quiet", 1.2), ("talk", 0.3), ("quiet", 2.0))
    assert cut_off(early, 0.5, 2.0)
    waited = heard(("quiet", 2.3), ("talk", 1.0))
    assert not cut_off(waited, 0.5, 2.0)
    # How long the agent was heard before the user was done: the 0.3 s it talked.
    assert cut_in_ms(early, 0.5, 2.0) == pytest.approx(300, abs=10)
    assert cut_in_ms(heard(("quiet", 1.9), ("talk", 1.0)), 0.5, 2.0) == pytest.approx(100, abs=10)
    assert cut_in_ms(waited, 0.5, 2.0) == 0


@pytest.mark.parametrize(
    ("answer", "turns", "false"),
    [
        # talking from 2.0 s, paused for the backchannel (3.5-3.9 s) at 3.6 s, went on at 4.6 s
        ([("talk", 1.6), ("quiet", 1.0), ("talk", 3.0)], 1, False),
        # never stopped
        ([("talk", 8.0)], 1, False),
        # went on, but as a reply to "okay" taken as a turn
        ([("talk", 1.6), ("quiet", 1.0), ("talk", 3.0)], 2, True),
        # stopped for good
        ([("talk", 1.6), ("quiet", 5.0)], 1, True),
        # came back too late: 2.7 s after the backchannel's end
        ([("talk", 1.6), ("quiet", 3.0), ("talk", 1.0)], 1, True),
    ],
)
def test_a_backchannel_is_a_false_barge_in_unless_the_answer_goes_on(
    answer: list[tuple[str, float]], turns: int, false: bool
) -> None:
    result = overlaid("backchannel", turns, answer, 3.5, 3.9)
    assert false_barge_in(result) is false
    assert result.barge_in_stop_ms is None  # not a barge-in figure
    assert false_barge_in(item("question")) is None


@pytest.mark.parametrize(
    ("answer", "turns", "missed"),
    [
        # talking from 2.0 s, stopped 150 ms after the onset (3.0 s), answered at 4.5 s
        ([("talk", 1.15), ("quiet", 1.35), ("talk", 1.0)], 2, False),
        # talked on through it to 8 s
        ([("talk", 6.0), ("quiet", 1.0)], 2, True),
        # stopped, never answered
        ([("talk", 1.15), ("quiet", 4.0)], 2, True),
        # stopped and went on, but no turn was taken for the interruption
        ([("talk", 1.15), ("quiet", 1.35), ("talk", 1.0)], 1, True),
        # the turn count unknown (0): the audio decides
        ([("talk", 1.15), ("quiet", 1.35), ("talk", 1.0)], 0, False),
    ],
)
def test_a_missed_interruption_is_one_talked_through_or_not_answered(
    answer: list[tuple[str, float]], turns: int, missed: bool
) -> None:
    result = overlaid("interruption", turns, answer, 3.0, 4.0)
    assert missed_interruption(result) is missed
    if not missed:
        assert result.barge_in_stop_ms == pytest.approx(150, abs=11)


def test_the_summary_and_the_report_have_a_section_per_kind() -> None:
    from bench.cli import format_kinds

    run = RunResult(
        "voxroom",
        "simulate",
        "script",
        [
            ItemResult("q", "v", "question", {}, voice_to_voice_ms=600),
            ItemResult("p", "v", "paused", {}, voice_to_voice_ms=5, premature=True),
            ItemResult("p", "v", "paused", {}, voice_to_voice_ms=700),
            ItemResult("b", "v", "backchannel", {}, turns=2, heard_after_backchannel=True),
            ItemResult(
                "i",
                "v",
                "interruption",
                {},
                turns=2,
                barge_in_stop_ms=140,
                answered_interruption=True,
            ),
        ],
    )
    kinds = run.summary()["kinds"]
    assert list(kinds) == ["question", "paused", "backchannel", "interruption"]
    assert (kinds["paused"]["cut_offs"], kinds["paused"]["voice_to_voice"]["n"]) == (1, 1)
    assert kinds["backchannel"]["false_barge_ins"] == 1
    assert kinds["interruption"]["missed_interruptions"] == 0
    assert kinds["question"]["false_barge_ins"] is None
    assert run.summary()["stages"]["barge_in_stop"]["n"] == 1
    text = format_kinds([run])
    assert "1 of 2" in text and "false barge-ins" in text and "140 / 140 (1)" in text


def test_items_are_chosen_by_kind_and_count() -> None:
    pcm = tone(0.3)
    q = [Utterance(f"q{i}", "v", "Q?", "A.", pcm) for i in range(3)]
    p = [Utterance(f"p{i}", "v", "P?", "A.", pcm, kind="paused") for i in range(2)]
    b = [BargeIn("b", q[0], q[1], 1.0, kind="backchannel")]
    items = [*q, *p, *b]
    assert [i.id for i in select(items, per_kind=1)] == ["q0", "p0", "b"]
    assert [i.id for i in select(items, ["paused", "backchannel"])] == ["p0", "p1", "b"]
    with pytest.raises(ValueError, match="unknown kinds"):
        select(items, ["pasued"])


def test_a_pause_is_set_to_the_length_asked() -> None:
    speech = np.concatenate([tone(0.5), quiet(0.23), tone(0.6)])
    for asked in (0.3, 0.8, 0.1):
        [(a, b)] = quiet_gaps(set_pause(speech, asked), MIN_PAUSE_S if asked > 0.15 else 0.05)
        assert (b - a) / RATE == pytest.approx(asked, abs=0.001)


def test_silence_goes_in_at_the_quietest_point_near_the_boundary() -> None:
    rate = 22_050
    audio = np.full(rate, 0.5, np.float32)
    audio[10_500:10_700] = 0.0  # a quiet spot 20 ms from the boundary asked at 10 200
    out = insert_silence(audio, 10_200, 0.5, rate)
    assert out.size == audio.size + rate // 2
    silent = np.flatnonzero(np.abs(out) < 1e-6)
    assert 10_450 < silent[0] and silent[-1] < 10_750 + rate // 2


def test_the_first_items_of_each_kind_keep_their_voices() -> None:
    """Older runs stay comparable: a kind's first items cycle through the five voices they
    always had; the appended ones start with voices the first ones do not have."""
    from bench.turn_corpus import ORIGINAL, TURN_VOICES, voice_of

    assert [voice_of("paused", i) for i in range(7)] == [*TURN_VOICES, *TURN_VOICES[:2]]
    appended = {voice_of(kind, n + j) for kind, n in ORIGINAL.items() for j in range(4)}
    assert len(appended - set(TURN_VOICES)) == 4


def test_a_cough_is_two_short_noise_bursts() -> None:
    pcm = cough()
    assert pcm.dtype == np.int16 and 0.5 < pcm.size / RATE < 0.8
    [(a, b)] = quiet_gaps(pcm, 0.05)  # the breath between the bursts
    assert 0.05 < (b - a) / RATE < 0.3


@pytest.mark.slow
async def test_the_corpus_has_every_kind_in_enough_voices_and_real_pauses(
    tmp_path: Path,
) -> None:
    """Synthesized for real (Piper and espeak-ng, ~20 s): every paused or filler item has
    its pause of the length asked (within 50 ms) at the break, the only pause as long in a
    paused question; the grown corpus's kinds, voices and backchannels are all there."""
    from bench.turn_corpus import BACKCHANNELS, INTERRUPTIONS, load_turn_corpus

    items = await load_turn_corpus(tmp_path, recordings=False)
    assert len(items) >= 55
    assert {i.kind for i in items} == set(KINDS)
    assert len({getattr(i, "question", i).voice for i in items}) >= 9
    overs = {i.interruption.text for i in items if isinstance(i, BargeIn)}
    assert {o for _, o, _ in (*BACKCHANNELS, *INTERRUPTIONS)} <= overs
    assert max(pause for _, pause, _, _ in (*PAUSED, *FILLERS)) == 1.2
    asked = {f"{before} {after}": pause for before, pause, after, _ in (*PAUSED, *FILLERS)}
    for i in items:
        if i.kind not in ("paused", "filler"):
            continue
        gaps = [(b - a) / RATE for a, b in quiet_gaps(i.pcm, MIN_PAUSE_S)]
        assert 0.3 <= max(gaps) <= 1.25, (i.id, gaps)
        assert max(gaps) == pytest.approx(asked[i.text], abs=0.05), (i.id, gaps)
        if i.kind == "paused":
            assert len(gaps) == 1, (i.id, gaps)


def test_the_held_out_half_shares_no_sentence_voice_or_pause_with_any_tuning_corpus() -> None:
    """What the held-out half measures is speech no rule was tuned on: none of its sentences
    (questions, pauses' halves, sounds over the answer) is in a corpus the rules were measured
    on, its voices are new but for the one Piper voice installed, and so are its pauses."""
    from bench import corpus, listen_corpus, overlap_reads, tool_corpus, turn_corpus
    from bench.turn_corpus_held_out import HELD_OUT, HELD_OUT_VOICES

    tuned_texts = {
        *(q for q, _ in corpus.QUESTIONS),
        *(t for pair in corpus.BARGE_INS for t in pair[:2]),
        *(f"{before} {after}" for before, _, after, _ in (*PAUSED, *FILLERS)),
        *(t for pair in (*turn_corpus.BACKCHANNELS, *turn_corpus.INTERRUPTIONS) for t in pair[:2]),
        *overlap_reads.HELD_OUT_BACKCHANNELS,
        *overlap_reads.HELD_OUT_INTERRUPTIONS,
        *(text for _, text, _ in tool_corpus.ITEMS),
    }
    sounds = {turn_corpus.COUGH, turn_corpus.LAUGH}  # kinds of sound, not sentences
    held_out = {
        *(q for q, _ in HELD_OUT.questions),
        *(f"{before} {after}" for before, _, after, _ in (*HELD_OUT.paused, *HELD_OUT.fillers)),
        *(t for pair in (*HELD_OUT.backchannels, *HELD_OUT.interruptions) for t in pair[:2]),
    } - sounds
    assert not held_out & tuned_texts
    tuned_voices = {
        *turn_corpus.MORE_VOICES,
        *overlap_reads.VOICES,
        *(v.split("@")[0] for v in listen_corpus.VOICES),
    }
    assert set(HELD_OUT_VOICES) & tuned_voices == {"piper-joe"}
    tuned_pauses = {pause for _, pause, _, _ in (*PAUSED, *FILLERS)}
    assert not {pause for _, pause, _, _ in (*HELD_OUT.paused, *HELD_OUT.fillers)} & tuned_pauses
    kinds = {"question", "paused", "filler", "backchannel", "interruption"}
    assert len({HELD_OUT.voice_of(kind, 0) for kind in kinds}) == len(kinds)


@pytest.mark.slow
async def test_the_held_out_half_is_synthesized_with_its_pauses(tmp_path: Path) -> None:
    """Synthesized for real (~15 s): every kind in every held-out voice, each pause of the
    length asked at its break."""
    from bench.turn_corpus import load_turn_corpus
    from bench.turn_corpus_held_out import HELD_OUT, HELD_OUT_VOICES

    items = await load_turn_corpus(tmp_path, turn_set=HELD_OUT)
    assert {i.kind for i in items} == set(KINDS)
    assert {getattr(i, "question", i).voice for i in items} == set(HELD_OUT_VOICES)
    asked = {f"{b} {a}": pause for b, pause, a, _ in (*HELD_OUT.paused, *HELD_OUT.fillers)}
    for i in items:
        if i.kind in ("paused", "filler"):
            gaps = [(b - a) / RATE for a, b in quiet_gaps(i.pcm, MIN_PAUSE_S)]
            assert max(gaps) == pytest.approx(asked[i.text], abs=0.05), (i.id, gaps)
