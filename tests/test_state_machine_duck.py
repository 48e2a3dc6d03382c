"""The agent ducks under the user's sound instead of pausing (TurnOptions.duck): a backchannel
never silences the answer, an interruption stops it as soon as what is heard of it reads as
one. Virtual time (tests/machine_timeline.py); the first question ends at 2.0 s and its answer
is heard from 2.54 s, the user's sound starts at 3.50 s: later than `continuation_s` after
the question (words said sooner may be the question going on)."""

from __future__ import annotations

import pytest
from pytest import approx

from state_machine import actions as A
from state_machine import events as E
from state_machine.options import TurnOptions
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
    # "Tell me" (4.04) could still be anything; "Tell me about" (4.24) is said to the agent:
    # silent at once. Read once, it ends the answer only at the next read that agrees (4.74).
    [(t_pause, _)] = tl.of(A.PausePlayback)
    [(t_barge, barge)] = tl.of(E.BargeIn)
    assert t_pause == barge.t == approx(4.24) and t_barge == approx(4.74)
    assert tl.audible[0] == (approx(2.54), approx(4.24))
    cancel_first = [
        type(a)
        for t, a in tl.log
        if t == approx(4.74) and isinstance(a, (A.CancelReply, A.CommitBargeIn))
    ]
    assert cancel_first == [A.CancelReply, A.CommitBargeIn]
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


def test_one_read_of_a_sound_going_on_never_ends_the_answer_alone() -> None:
    """Through Opus, Whisper tiny.en read espeak-ng's "that makes sense" as "That's me." and
    then, from 0.6 s of it, "not to make,": a cue and three words, which ended the answer
    from that one read. The two reads agree on no word: the answer pauses, the next read is
    a backchannel, and the whole sound plays the answer on."""

    def transcript(start: float, end: float) -> str:
        if start < 2.5:
            return QUESTION
        heard = end - 3.50
        if heard < 0.4:
            return ""
        if heard < 0.6:
            return "That's me."
        return "not to make," if heard < 0.8 else "That makes sense."

    tl = Timeline(engines=FakeEngines(stt_delay_s=0.08, transcript=transcript, reply_length_s=4.0))
    tl.run(speech((0.5, 2.0), (3.50, 4.55)), until_s=9.0)
    assert tl.of(E.BargeIn) == [] and tl.of(A.CancelReply) == []
    assert tl.of(A.PausePlayback) and tl.of(A.ResumePlayback)
    assert [b.text for _, b in tl.of(E.Backchannel)] == ["That makes sense."]
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == [QUESTION]


def two_sounds_over_answer(
    first: str, second: str, gap_s: float, first_heard: bool = True, **options: float
) -> Timeline:
    """A timeline whose user says `first` from 3.50 s to 3.85 s over the answer, then, `gap_s`
    later, `second` (at 4 words a second), over a 4 s answer. Its STT hears the words said
    between a decode's start (its pre-roll included) and end, as Whisper hears the audio it
    is given; `first_heard` False: none at all in a decode of `first` alone."""
    again = 3.85 + gap_s
    said = [(3.85, w) for w in first.split()]
    said += [(again + (i + 1) / 4.0, w) for i, w in enumerate(second.split())]

    def transcript(start: float, end: float) -> str:
        if start < 2.5:
            return QUESTION
        if not first_heard and end < again:
            return ""
        return " ".join(w for t, w in said if start < t <= end + 1e-9)

    engines = FakeEngines(
        stt_delay_s=0.08, transcript=transcript, hears_pre_roll=True, reply_length_s=4.0
    )
    return Timeline(options=TurnOptions(**options), engines=engines)


@pytest.mark.parametrize(
    ("rejoin_s", "t_pause", "asked"),
    [
        (0.8, 4.64, "Right, and what about the food there?"),
        (0.0, 4.94, "and what about the food there?"),  # without `overlap_rejoin_s`
    ],
)
def test_words_soon_after_a_backchannel_word_are_heard_with_it(
    rejoin_s: float, t_pause: float, asked: str
) -> None:
    """ "Right, | and what about the food there?" with a 0.45 s pause at its comma: longer
    than `duck_quiet_s`, so "Right," is judged alone, a backchannel, and the answer plays on
    at full volume. The words after it are heard with it (`overlap_rejoin_s`): "Right, and"
    (4.64) is an acknowledgement going on, which pauses the answer, and the turn they make
    is all that was said, dated from its first word. Heard alone, the answer plays on until
    "and what" (4.94), and the LLM never hears the "Right,"."""
    tl = two_sounds_over_answer(
        "Right,", "and what about the food there?", gap_s=0.45, overlap_rejoin_s=rejoin_s
    )
    tl.run(speech((0.5, 2.0), (3.50, 3.85), (4.30, 5.80)), until_s=9.0)
    [(t_resume, _)] = tl.of(A.ResumePlayback)
    assert t_resume == approx(4.14)  # "Right," judged once quiet for `duck_quiet_s` after 3.84
    [(_, barge)] = tl.of(E.BargeIn)
    assert tl.of(A.PausePlayback)[0][0] == barge.t == approx(t_pause)
    assert barge.onset == approx(3.50 if rejoin_s else 4.30)
    assert tl.of(A.CommitUserTurn)[-1][1].text == asked


@pytest.mark.parametrize(("rejoin_s", "t_stop"), [(0.8, 4.54), (0.0, 5.18)])
def test_a_sound_heard_as_no_words_is_heard_again_with_the_words_after_it(
    rejoin_s: float, t_stop: float
) -> None:
    """ "Hold on, | something cheap please.": decoded alone, "Hold on," came back as no words
    and the answer played on (through LiveKit, until "something cheap please" stopped it 1.3
    s later). Heard again with the words after it, its stop cue ends the answer at the first
    decode of them."""
    tl = two_sounds_over_answer(
        "Hold on,",
        "something cheap please.",
        gap_s=0.45,
        first_heard=False,
        overlap_rejoin_s=rejoin_s,
    )
    tl.run(speech((0.5, 2.0), (3.50, 3.85), (4.30, 5.05)), until_s=9.0)
    assert [e.text for _, e in tl.of(E.FalseInterruption)] == [""]
    [(_, barge)] = tl.of(E.BargeIn)
    assert barge.t == approx(t_stop)
    said = "Hold on, something cheap please." if rejoin_s else "something cheap please."
    assert tl.of(A.CommitUserTurn)[-1][1].text == said


def test_a_backchannel_heard_with_the_one_before_still_plays_on() -> None:
    tl = two_sounds_over_answer("Yeah.", "Mm-hmm.", gap_s=0.45)
    tl.run(speech((0.5, 2.0), (3.50, 3.85), (4.30, 4.80)), until_s=9.0)
    assert tl.of(A.PausePlayback) == [] and tl.of(E.BargeIn) == []
    assert [b.text for _, b in tl.of(E.Backchannel)] == ["Yeah.", "Yeah. Mm-hmm."]
    assert tl.audible == [(approx(2.54), approx(6.54))]  # the 4 s answer, never silent


def test_a_sound_long_after_a_backchannel_is_heard_alone() -> None:
    tl = two_sounds_over_answer("Yeah.", "Mm-hmm.", gap_s=1.2)
    tl.run(speech((0.5, 2.0), (3.50, 3.85), (5.05, 5.40)), until_s=9.0)
    [_, (_, second)] = tl.of(A.OpenUtterance)[-2:]
    assert second.pre_roll_s == approx(tl.options.pre_roll_s + 0.04)  # from its own onset
    assert [b.text for _, b in tl.of(E.Backchannel)] == ["Yeah.", "Mm-hmm."]


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
