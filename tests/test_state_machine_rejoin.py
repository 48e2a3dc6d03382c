"""Speech heard as no words is heard again with the user's next speech (TurnOptions.rejoin_s):
Whisper can write nothing for a whole half-question said before a thinking pause, and the
words after the pause alone are then all the LLM is asked. Virtual time
(tests/machine_timeline.py)."""

from __future__ import annotations

from pytest import approx

from state_machine import actions as A
from tests.machine_timeline import FakeEngines, Timeline, speech

WHOLE = "Is there a pharmacy that is open near the old town tonight?"
SECOND_HALF = "open near the old town tonight?"


def pharmacy(start: float, end: float) -> str:
    """An STT that hears nothing in the first half (0.5-1.5 s) alone, and all of it when the
    audio it is given begins before it."""
    if start < 0.5:
        return WHOLE if end > 3.0 else ""
    return SECOND_HALF if start > 1.5 else ""


def test_a_first_half_heard_as_no_words_is_decoded_again_with_the_second() -> None:
    tl = Timeline(engines=FakeEngines(transcript=pharmacy, hears_pre_roll=True))
    tl.run(speech((0.5, 1.5), (3.2, 4.5)), until_s=8.0)  # a 1.7 s pause: the first is dropped
    [first, second] = [a for _, a in tl.of(A.OpenUtterance)]
    assert [a.utterance_id for _, a in tl.of(A.DiscardUtterance)] == [first.utterance_id]
    # The second is given the audio from before the first's onset: both halves.
    [(t_open, _)] = [(t, a) for t, a in tl.of(A.OpenUtterance) if a is second]
    assert t_open - second.pre_roll_s == approx(0.5 - tl.options.pre_roll_s)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == [WHOLE]
    assert tl.machine.counters.rejoined == 1


def test_speech_after_the_window_or_a_short_click_is_heard_alone() -> None:
    late = Timeline(engines=FakeEngines(transcript=pharmacy, hears_pre_roll=True))
    late.run(speech((0.5, 1.5), (4.0, 5.3)), until_s=9.0)  # 2.5 s later: another turn
    assert [a.text for _, a in late.of(A.CommitUserTurn)] == [SECOND_HALF]
    assert late.machine.counters.rejoined == 0

    def after_a_click(start: float, end: float) -> str:
        return "" if end < 1.0 else "what time is it?"

    click = Timeline(engines=FakeEngines(transcript=after_a_click, hears_pre_roll=True))
    click.run(speech((0.5, 0.7), (1.6, 2.5)), until_s=6.0)  # 0.2 s: no words were lost
    [_, second] = [a for _, a in click.of(A.OpenUtterance)]
    assert second.pre_roll_s < 1.0
    assert click.machine.counters.rejoined == 0
