"""A user who pauses to think is never cut off and loses no word, in virtual time: the state
machine fed VAD timelines (tests/machine_timeline.py: the STT answers 200 ms after a request,
a confirmed reply is heard 0.4 s after it starts).
"""

from __future__ import annotations

import pytest

from state_machine import actions as A
from state_machine.backchannel import reacts
from tests.machine_timeline import FakeEngines, Timeline, speech


def approx(x: float) -> object:
    return pytest.approx(x, abs=1e-6)


def halves(first: str, second: str, split_s: float) -> FakeEngines:
    """The STT hears `first` in what starts before `split_s`, `second` after."""
    return FakeEngines(transcript=lambda start, end: first if start < split_s else second)


def test_going_on_after_the_answer_began_asks_the_whole_question() -> None:
    # The first half reads complete: the turn ends 0.3 s into a 1.1 s pause, the answer is
    # heard at 2.66, and the user goes on at 3.10.
    tl = Timeline(engines=halves("What time does the library open?", "On Sundays?", 2.5))
    tl.run(speech((0.5, 2.0), (3.1, 3.7)), until_s=8.0)
    assert tl.audible[0] == (approx(2.66), approx(3.14))  # paused at the onset, as always
    [(t_retract, retract)] = tl.of(A.RetractUserTurn)
    assert retract.text == "What time does the library open?"
    # Withdrawn, not cut to what was heard: the retraction comes before the cancel, and no
    # barge-in commit puts the fragment in the history.
    kinds = [type(a) for t, a in tl.log if t == t_retract]
    assert kinds.index(A.RetractUserTurn) < kinds.index(A.CancelReply)
    assert tl.of(A.CommitBargeIn) == []
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits == ["What time does the library open?",
                       "What time does the library open? On Sundays?"]
    assert [a.user_text for _, a in tl.of(A.StartReply)][-1] == commits[-1]
    assert tl.machine.counters.continued == 1
    assert tl.audible[-1][0] > 3.7  # answered once the user was done


def test_words_that_react_to_the_answer_still_cut_it_to_what_was_heard() -> None:
    tl = Timeline(engines=halves("What time does the library open?", "Wait, on Sundays?", 2.5))
    tl.run(speech((0.5, 2.0), (3.1, 3.8)), until_s=8.0)
    assert tl.of(A.RetractUserTurn) == [] and tl.of(A.CommitBargeIn)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)][-1] == "Wait, on Sundays?"


def test_words_long_after_the_turn_ended_are_a_turn_of_their_own() -> None:
    # 1.8 s after the question: an interruption of an answer under way, not a pause.
    tl = Timeline(engines=FakeEngines(
        reply_length_s=4.0,
        transcript=lambda start, end: "What time is it?" if start < 2.5 else "In Tokyo?"))
    tl.run(speech((0.5, 2.0), (3.8, 4.4)), until_s=10.0)
    assert tl.of(A.RetractUserTurn) == [] and tl.of(A.CommitBargeIn)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == ["What time is it?", "In Tokyo?"]


@pytest.mark.parametrize(("said", "reaction"), [
    ("Wait, stop.", True), ("No, in Tokyo.", True), ("Okay, and tomorrow?", True),
    ("Sorry, I meant Paris.", True), ("Right, but why?", True),
    ("on Sundays?", False), ("which bus goes there?", False), ("um, something funny?", False),
    ("so what should I pack?", False), ("", False),
])
def test_a_reaction_opens_with_a_stop_cue_or_an_acknowledgement(said: str, reaction: bool) -> None:
    assert reacts(said) is reaction
