"""The agent ducks under the user's sound instead of pausing (TurnOptions.duck): a backchannel
never silences the answer, an interruption stops it as soon as what is heard of it reads as
one. Virtual time (tests/machine_timeline.py); the first question ends at 2.0 s and its answer
is heard from 2.54 s, the user's sound starts at 3.50 s: later than `continuation_s` after
the question (words said sooner may be the question going on)."""

from __future__ import annotations

from pytest import approx

from state_machine import actions as A
from state_machine import events as E
from tests.machine_timeline import FakeEngines, Timeline, said_by, speech

QUESTION = "what time is it?"


def over_answer(sound: str | None = None, words_per_s: float = 5.0, **engines: float) -> Timeline:
    """A timeline whose user, 3.50 s on, says `sound` (as said word by word) over the answer;
    None: a sound with no words. The STT answers in 80 ms, as Whisper tiny.en does."""
    heard = said_by(sound or "", since=3.50, words_per_s=words_per_s)

    def transcript(start: float, end: float) -> str:
        return QUESTION if start < 2.5 else heard(end)

    return Timeline(engines=FakeEngines(stt_delay_s=0.08, transcript=transcript, **engines))


def test_a_backchannel_ducks_the_answer_and_never_silences_it() -> None:
    tl = over_answer("Mm-hmm.")
    tl.run(speech((0.5, 2.0), (3.50, 4.00)), until_s=7.0)
    assert tl.of(A.PausePlayback) == [] and tl.of(A.CancelReply) == []
    [(t_duck, _)] = tl.of(A.DuckPlayback)
    [(_, ducked)] = tl.of(E.PlaybackDucked)
    assert t_duck == approx(3.54) and ducked.onset == approx(3.50)  # 2 voiced frames
    # Quiet at 4.06, heard whole at 4.14, judged once quiet for `duck_quiet_s` (4.30): it
    # did not go on, and "Mm-hmm." is a backchannel: full volume again.
    assert tl.ducked == [(approx(3.54), approx(4.30))]
    assert tl.audible == [(approx(2.54), approx(4.54))]  # the 2 s answer, never interrupted
    assert [type(a) for _, a in tl.log if isinstance(a, (E.Backchannel, A.ResumePlayback))] == [
        A.ResumePlayback,
        E.Backchannel,
    ]
    assert tl.machine.counters.backchannels == 1 and tl.machine.counters.ducks == 1
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == [QUESTION]


def test_an_interruption_with_a_cue_word_stops_at_the_first_decode_that_hears_it() -> None:
    tl = over_answer("Wait, stop, I meant next winter.")
    tl.run(speech((0.5, 2.0), (3.50, 4.90)), until_s=8.0)
    # Decoded at the vote (3.66: no words yet) and again once that decode is done and 0.1 s
    # has passed (3.76): "Wait," at 3.84.
    [(t_pause, _)] = tl.of(A.PausePlayback)
    assert t_pause == approx(3.84)
    assert tl.audible[0] == (approx(2.54), approx(3.84))
    [(_, barge)] = tl.of(E.BargeIn)
    assert barge.t == approx(3.84) and barge.onset == approx(3.50)  # dated by the pause
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits == [QUESTION, "Wait, stop, I meant next winter."]


def test_an_interruption_without_a_cue_word_stops_once_three_words_are_heard() -> None:
    tl = over_answer("Tell me about Lisbon instead.")
    tl.run(speech((0.5, 2.0), (3.50, 4.70)), until_s=8.0)
    # "Tell me" (4.04) could still be anything; "Tell me about" (4.24) is said to the agent.
    [(t_pause, _)] = tl.of(A.PausePlayback)
    [(t_barge, _)] = tl.of(E.BargeIn)
    assert t_pause == t_barge == approx(4.24)
    assert tl.audible[0] == (approx(2.54), approx(4.24))
    cancel_first = [
        type(a)
        for t, a in tl.log
        if t == approx(4.24) and isinstance(a, (A.PausePlayback, A.CancelReply, A.CommitBargeIn))
    ]
    assert cancel_first == [A.PausePlayback, A.CancelReply, A.CommitBargeIn]
    assert tl.of(A.CommitUserTurn)[-1][1].text == "Tell me about Lisbon instead."


def test_an_interruption_that_begins_with_a_backchannel_word_stops_at_its_cue() -> None:
    tl = over_answer("Okay but what about the price?", words_per_s=4.0)
    tl.run(speech((0.5, 2.0), (3.50, 5.00)), until_s=8.0)
    # "Okay" alone (3.84 to 4.04) is a backchannel: ducked on; "Okay but" (4.14) stops it.
    [(t_pause, _)] = tl.of(A.PausePlayback)
    assert t_pause == approx(4.14)
    assert tl.of(E.BargeIn) and tl.of(A.CommitUserTurn)[-1][1].text == (
        "Okay but what about the price?"
    )


def test_a_backchannel_word_then_a_comma_pause_then_more_words_is_one_interruption() -> None:
    """ "Okay, | but what about the price?": the comma's 0.2 s pause is not the end of the
    sound. Judged there, "Okay" played the answer on at full volume and "but what about ..."
    began a sound of its own, judged from nothing."""
    tl = over_answer("Okay, but what about the price?", words_per_s=4.0)
    tl.run(speech((0.5, 2.0), (3.50, 3.85), (4.05, 5.20)), until_s=8.0)
    assert tl.of(A.ResumePlayback) == [] and tl.of(E.Backchannel) == []
    [(t_duck, _)] = tl.of(A.DuckPlayback)  # one sound, ducked once
    # "Okay," is transcribed in the pause (3.98) and waits; the voice goes on (4.05), is
    # transcribed again once the window's vote is back (4.20), and "Okay, but" (4.28) stops
    # the answer.
    [(t_pause, _)] = tl.of(A.PausePlayback)
    assert t_duck == approx(3.54) and t_pause == approx(4.28)
    [(_, barge)] = tl.of(E.BargeIn)
    assert barge.onset == approx(3.50)
    assert tl.of(A.CommitUserTurn)[-1][1].text == "Okay, but what about the price?"


def test_a_wordless_sound_longer_than_any_backchannel_pauses_then_resumes() -> None:
    tl = over_answer(None, reply_length_s=4.0)
    tl.run(speech((0.5, 2.0), (3.50, 5.10)), until_s=9.0)
    [(t_pause, _)] = tl.of(A.PausePlayback)
    assert t_pause == approx(4.70)  # onset 3.50 + duck_max_s 1.2
    [(t_resume, _)] = tl.of(A.ResumePlayback)
    assert t_resume == approx(5.24)  # quiet at 5.16, and the whole sound has no words
    assert tl.of(E.FalseInterruption) and tl.of(E.BargeIn) == []
    assert tl.ducked == [(approx(3.54), approx(4.70))]


def test_a_backchannel_as_the_answer_ends_is_not_a_turn() -> None:
    tl = over_answer("Uh huh.", reply_length_s=1.1)  # the answer ends at 3.64, under the sound
    tl.run(speech((0.5, 2.0), (3.50, 4.00)), until_s=7.0)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == [QUESTION]
    assert len(tl.of(A.StartReply)) == 1 and tl.of(A.DiscardUtterance)
    assert tl.states()[-1][1] == "LISTENING"


def test_words_going_on_after_the_answer_ended_under_them_are_answered() -> None:
    tl = over_answer("and in Paris", reply_length_s=1.1)
    tl.run(speech((0.5, 2.0), (3.50, 4.10)), until_s=7.0)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == [QUESTION, "and in Paris"]
    assert tl.of(A.PausePlayback) == []  # the answer had ended: nothing to stop
