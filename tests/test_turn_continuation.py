"""A user who pauses to think is never cut off and loses no word, in virtual time: the state
machine fed VAD timelines (tests/machine_timeline.py: the STT answers 200 ms after a request,
a confirmed reply is heard 0.4 s after it starts).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from state_machine import actions as A
from state_machine.backchannel import reacts
from state_machine.endpointing import EndpointOptions
from state_machine.options import TurnOptions
from state_machine.similarity import trails_off
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
    # Begun 0.44 s into the answer, before the user can have heard it (`reaction_s`): they
    # are going on, and it pauses at once instead of ducking.
    assert tl.ducked == []
    assert tl.audible[0] == (approx(2.66), approx(3.14))
    [(t_retract, retract)] = tl.of(A.RetractUserTurn)
    assert retract.text == "What time does the library open?"
    # Withdrawn, not cut to what was heard: the retraction comes before the cancel, and no
    # barge-in commit puts the fragment in the history.
    kinds = [type(a) for t, a in tl.log if t == t_retract]
    assert kinds.index(A.RetractUserTurn) < kinds.index(A.CancelReply)
    assert tl.of(A.CommitBargeIn) == []
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits == [
        "What time does the library open?",
        "What time does the library open? On Sundays?",
    ]
    assert [a.user_text for _, a in tl.of(A.StartReply)][-1] == commits[-1]
    assert tl.machine.counters.continued == 1
    assert tl.audible[-1][0] > 3.7  # answered once the user was done


def test_words_that_react_to_the_answer_still_cut_it_to_what_was_heard() -> None:
    # Said 0.74 s after the answer's first audio (2.66): time to have heard it and react.
    tl = Timeline(engines=halves("What time does the library open?", "Wait, on Sundays?", 2.5))
    tl.run(speech((0.5, 2.0), (3.4, 4.1)), until_s=8.0)
    assert tl.of(A.RetractUserTurn) == [] and tl.of(A.CommitBargeIn)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)][-1] == "Wait, on Sundays?"


@pytest.mark.parametrize("onset_s", [2.8, 3.3])
def test_words_that_open_like_a_reaction_before_the_answer_was_heard_go_on(onset_s: float) -> None:
    # A reader's pause: "Ever tried. Ever failed. | No matter. Try again." The answer is heard
    # from 2.66; "No" 0.14 or 0.64 s later cannot react to it (`reaction_s`).
    tl = Timeline(engines=halves("Ever tried. Ever failed.", "No matter. Try again.", 2.5))
    tl.run(speech((0.5, 2.0), (onset_s, onset_s + 1.0)), until_s=8.0)
    assert tl.of(A.CommitBargeIn) == []
    [(_, retract)] = tl.of(A.RetractUserTurn)
    assert retract.text == "Ever tried. Ever failed."
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits[-1] == "Ever tried. Ever failed. No matter. Try again."
    assert tl.machine.counters.continued == 1


def cook_then(rest: str) -> FakeEngines:
    """ "I want to cook something tonight, | um | ...": the first half reads complete; the
    sound over the answer is "um" (Whisper writes nothing for it) and then `rest`, from 3.6."""
    return FakeEngines(
        transcript=lambda start, end: (
            "I want to cook something tonight." if start < 2.5 else (rest if end > 3.6 else "")
        )
    )


def test_a_filler_as_the_answer_begins_pauses_it_for_the_rest_of_the_turn() -> None:
    # The answer is heard from 2.66; the "um" at 2.7 cannot react to it: paused at its onset,
    # it stays paused once its transcript has no words, and the rest, 0.8 s later, goes on
    # with the turn.
    tl = Timeline(engines=cook_then("maybe with fish?"))
    tl.run(speech((0.5, 2.0), (2.7, 2.8), (3.6, 4.3)), until_s=9.0)
    assert tl.ducked == []
    assert tl.of(A.ResumePlayback) == [] and tl.of(A.CommitBargeIn) == []
    assert tl.audible[0] == (approx(2.66), approx(2.74))
    assert tl.audible[1][0] > 4.3  # then nothing until the user was done
    [(_, retract)] = tl.of(A.RetractUserTurn)
    assert retract.text == "I want to cook something tonight."
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits[-1] == "I want to cook something tonight. maybe with fish?"


def test_a_sound_of_no_words_as_the_answer_begins_plays_it_on_after_a_turns_pause() -> None:
    tl = Timeline(engines=cook_then("maybe with fish?"))
    tl.run(speech((0.5, 2.0), (2.7, 2.8)), until_s=9.0)
    [(t_resume, _)] = tl.of(A.ResumePlayback)
    # Quiet for `silence_unfinished_s` after the sound, as a turn that trails off waits.
    assert t_resume == approx(2.8 + EndpointOptions().silence_unfinished_s)
    assert tl.of(A.RetractUserTurn) == [] and tl.of(A.CancelReply) == []
    assert sum(b - a for a, b in tl.audible) == approx(2.0)  # heard whole
    assert tl.machine.counters.false_interruptions == 1


def test_a_hold_on_sounds_of_no_words_ends_within_the_stall_bound() -> None:
    # A hum every second after the "um", never quiet for `silence_unfinished_s`: the answer,
    # paused at 2.74, plays on once it has waited `speaking_stall_s`.
    hums = [(2.7 + k * 1.1, 2.8 + k * 1.1) for k in range(5)]
    tl = Timeline(engines=cook_then(""))
    tl.run(speech((0.5, 2.0), *hums), until_s=12.0)
    [(t_resume, _), *_] = tl.of(A.ResumePlayback)
    assert t_resume == approx(2.74 + TurnOptions().speaking_stall_s)
    assert tl.of(A.CancelReply) == []


def test_a_sound_of_no_words_once_the_answer_can_be_heard_plays_it_on_at_once() -> None:
    tl = Timeline(engines=cook_then("maybe with fish?"))
    tl.run(speech((0.5, 2.0), (3.4, 3.5)), until_s=9.0)  # 0.74 s into the answer
    assert tl.of(A.PausePlayback) == []
    [(t_duck, t_unduck)] = tl.ducked
    assert t_duck == approx(3.44) and t_unduck < 4.0


def test_words_as_the_answer_begins_pause_it_at_once() -> None:
    # "My son wants to learn, hmm | an instrument, ...": Whisper read the first half as a
    # sentence, and the rest came 0.24 s into the answer.
    tl = Timeline(engines=halves("I don't want to learn them.", "an instrument", 2.5))
    tl.run(speech((0.5, 2.0), (2.9, 3.6)), until_s=9.0)
    assert tl.ducked == [] and tl.audible[0] == (approx(2.66), approx(2.94))
    assert [a.text for _, a in tl.of(A.CommitUserTurn)][-1] == (
        "I don't want to learn them. an instrument"
    )


def test_words_long_after_the_turn_ended_are_a_turn_of_their_own() -> None:
    # 1.8 s after the question: an interruption of an answer under way, not a pause.
    tl = Timeline(
        engines=FakeEngines(
            reply_length_s=4.0,
            transcript=lambda start, end: "What time is it?" if start < 2.5 else "In Tokyo?",
        )
    )
    tl.run(speech((0.5, 2.0), (3.8, 4.4)), until_s=10.0)
    assert tl.of(A.RetractUserTurn) == [] and tl.of(A.CommitBargeIn)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == ["What time is it?", "In Tokyo?"]


def test_going_on_retracts_the_turn_as_committed_not_the_partial_its_answer_began_on() -> None:
    # The answer began on the partial "fail again." and was kept for the final "Fail again.":
    # the history holds the final, so that is what is retracted and merged, once.
    tl = Timeline(engines=halves("Fail again.", "Fail better.", 2.5))
    tl.partial_at(1.9, "fail again.")
    tl.run(speech((0.5, 2.0), (3.1, 3.7)), until_s=8.0)
    assert next(a.user_text for _, a in tl.of(A.StartReply)) == "fail again."
    [(_, retract)] = tl.of(A.RetractUserTurn)
    assert retract.text == "Fail again."
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits == ["Fail again.", "Fail again. Fail better."]


@pytest.mark.parametrize(
    ("said", "reaction"),
    [
        ("Wait, stop.", True),
        ("No, in Tokyo.", True),
        ("Okay, and tomorrow?", True),
        ("Sorry, I meant Paris.", True),
        ("Right, but why?", True),
        ("on Sundays?", False),
        ("which bus goes there?", False),
        ("um, something funny?", False),
        ("so what should I pack?", False),
        ("", False),
    ],
)
def test_a_reaction_opens_with_a_stop_cue_or_an_acknowledgement(said: str, reaction: bool) -> None:
    assert reacts(said) is reaction


# ---- a hesitation the STT left out -------------------------------------------------------

SCORED = TurnOptions(endpoint=EndpointOptions(scored=True))
FILM = "Could you recommend a film for tonight?"


def by_end(*texts: tuple[float, str]) -> Callable[[float, float], str]:
    """The transcript of audio up to `end`: the text of the last (since, text) with since <=
    end."""
    return lambda start, end: [text for since, text in texts if since <= end][-1]


def complete_unless_it_trails(text: str) -> float:
    """The text model: what reads complete scores high, whatever was left out of it."""
    return 0.0 if trails_off(text) else 0.9


def test_a_filler_the_stt_left_out_keeps_the_turn_open_through_a_long_pause() -> None:
    # "Could you recommend a film for tonight, uh ... something funny?": Whisper writes the
    # words before the "uh" and nothing for it, and they read complete. The speaker goes on
    # after 1.2 s.
    heard = by_end((0.0, FILM), (4.0, "Could you recommend a film for tonight, something funny?"))
    tl = Timeline(
        options=SCORED, engines=FakeEngines(transcript=heard, score=complete_unless_it_trails)
    )
    tl.run(speech((0.5, 2.0), (2.2, 2.4), (3.6, 4.4)), until_s=9.0)
    assert tl.audible and tl.audible[0][0] > 4.4  # nothing heard before the user was done
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == [
        "Could you recommend a film for tonight, something funny?"
    ]


def test_a_filler_written_then_dropped_is_still_a_hesitation() -> None:
    # Whisper wrote "so..." at the comma, and dropped it once it heard the "um" after it.
    heard = by_end(
        (0.0, "I need a recipe for dinner, so..."),
        (2.5, "I need a recipe for dinner."),
        (4.0, "I need a recipe for dinner, so, something with chicken?"),
    )
    tl = Timeline(
        options=SCORED, engines=FakeEngines(transcript=heard, score=complete_unless_it_trails)
    )
    tl.run(speech((0.5, 2.0), (2.15, 2.5), (3.7, 4.5)), until_s=9.0)
    assert tl.audible and tl.audible[0][0] > 4.5
    assert len(tl.of(A.CommitUserTurn)) == 1


@pytest.mark.parametrize("after", [(), ((2.2, 2.28),)])
def test_a_complete_question_or_a_click_after_it_is_answered_as_soon_as_scored(
    after: tuple[tuple[float, float], ...],
) -> None:
    tl = Timeline(
        options=SCORED,
        engines=FakeEngines(transcript=lambda start, end: FILM, score=complete_unless_it_trails),
    )
    tl.run(speech((0.5, 2.0), *after), until_s=6.0)
    end = after[-1][1] if after else 2.0
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert t_commit <= end + 0.34  # the candidate (60 + 200 ms), the score (60 ms), a frame


def test_words_after_the_hesitation_end_it() -> None:
    # "What time is it, uh, in Tokyo?" said in one go: a candidate at each pause, the last
    # one adds words, and the turn ends on its score.
    heard = by_end((0.0, "What time is it?"), (2.7, "What time is it, in Tokyo?"))
    tl = Timeline(
        options=SCORED, engines=FakeEngines(transcript=heard, score=complete_unless_it_trails)
    )
    tl.run(speech((0.5, 2.0), (2.2, 2.4), (2.6, 3.2)), until_s=7.0)
    [(t_commit, commit)] = tl.of(A.CommitUserTurn)
    assert commit.text == "What time is it, in Tokyo?" and t_commit <= 3.2 + 0.34


def test_an_unfinished_start_waits_through_a_pause_of_1_2_s() -> None:
    heard = by_end((0.0, "Could you tell me"), (2.8, "Could you tell me which bus goes there?"))
    tl = Timeline(
        options=SCORED,
        engines=FakeEngines(
            transcript=heard, score=lambda text: 0.0 if text == "Could you tell me" else 0.8
        ),
    )
    tl.run(speech((0.5, 1.5), (2.7, 3.5)), until_s=8.0)
    assert tl.audible and tl.audible[0][0] > 3.5
    assert len(tl.of(A.CommitUserTurn)) == 1


def test_short_words_that_go_on_after_a_pause_are_not_taken_for_a_backchannel() -> None:
    # "Could you recommend a film for tonight ... something funny": two words without a cue
    # over an answer under way would be a hum's reading; just after the question they go on.
    tl = Timeline(engines=halves("Could you recommend a film for tonight?", "something funny", 2.5))
    tl.run(speech((0.5, 2.0), (3.1, 3.7)), until_s=8.0)
    assert tl.of(A.ResumePlayback) == []
    assert [a.text for _, a in tl.of(A.CommitUserTurn)][-1] == (
        "Could you recommend a film for tonight? something funny"
    )


def test_the_rest_of_a_word_after_a_stop_closure_is_no_hesitation() -> None:
    # A candidate asked in the 0.1 s closure inside "princess" already reads "prince"; the rest
    # of the word adds no word to it, and the question is complete.
    heard = by_end((0.0, "A dragon and a prince?"), (2.1, "A dragon and a princess?"))
    tl = Timeline(
        options=SCORED, engines=FakeEngines(transcript=heard, score=complete_unless_it_trails)
    )
    tl.run(speech((0.5, 1.8), (1.9, 2.1)), until_s=6.0)
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert t_commit <= 2.1 + 0.34


# ---- the answer's first audio, held while the user makes a sound ---------------------------


def test_an_answer_ready_as_the_user_goes_on_is_held_and_never_heard() -> None:
    # The answer's audio would come 0.1 s after the user goes on, before the speech vote
    # (0.16 s) retracts the turn.
    tl = Timeline(
        engines=FakeEngines(
            reply_audio_after_s=0.4,
            transcript=lambda start, end: (
                "I need a recipe for dinner." if start < 2.1 else "so, um, something with chicken?"
            ),
        )
    )
    tl.run(speech((0.5, 2.0), (2.34, 3.4)), until_s=8.0)
    [(t_hold, _)] = [(t, a) for t, a in tl.of(A.PausePlayback)][:1]
    assert t_hold == approx(2.38)  # two voiced frames
    assert tl.of(A.RetractUserTurn)
    assert tl.audible and tl.audible[0][0] > 3.4  # nothing heard until the user was done
    assert [a.text for _, a in tl.of(A.CommitUserTurn)][-1] == (
        "I need a recipe for dinner. so, um, something with chicken?"
    )


def test_a_click_while_the_agent_thinks_lets_the_answer_go_once_quiet() -> None:
    tl = Timeline(engines=FakeEngines(reply_audio_after_s=0.4))
    tl.run(speech((0.5, 2.0), (2.36, 2.42)), until_s=8.0)
    [(t_hold, _)] = tl.of(A.PausePlayback)
    [(t_go, _)] = tl.of(A.ResumePlayback)
    assert t_hold == approx(2.40)
    assert t_go == approx(2.42 + 0.3)  # the vote window quiet since the last voiced frame
    assert tl.of(A.RetractUserTurn) == [] and tl.of(A.CancelReply) == []
    assert tl.audible[0][0] == approx(t_go)  # then heard whole
    assert sum(b - a for a, b in tl.audible) == approx(2.0)


COOK = "I want to cook something tonight."


def test_a_short_um_while_the_agent_thinks_holds_the_answer_for_the_rest() -> None:
    # Piper's "I want to cook something tonight, um | maybe with fish?": the "um" (six voiced
    # frames, too few for the vote) comes while the answer is being made. Let go as a click,
    # the answer began in the thinking pause after it, over the rest of the question.
    heard = by_end((0.0, COOK), (2.3, ""), (3.7, "maybe with fish?"))  # Whisper drops the "um"
    tl = Timeline(
        options=SCORED, engines=FakeEngines(transcript=heard, score=complete_unless_it_trails)
    )
    tl.run(speech((0.5, 2.0), (2.4, 2.52), (3.6, 4.3)), until_s=9.0)
    [(t_hold, _)] = tl.of(A.PausePlayback)
    [(t_retract, retract)] = tl.of(A.RetractUserTurn)
    assert t_hold == approx(2.44) and t_retract == approx(2.50)  # its 2nd and 5th frames
    assert retract.text == COOK
    assert tl.audible and tl.audible[0][0] > 4.3  # nothing heard until the user was done
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits == [COOK, f"{COOK} maybe with fish?"]


def test_a_wordless_sound_while_the_agent_thinks_delays_the_answer_it_had() -> None:
    # A short sound of no words after the question (a cough, or an "um" the user says no more
    # after): they may be thinking on, so the turn waits the unfinished bound, then the
    # question is answered as it was, by the reply begun on it during the wait.
    heard = by_end((0.0, COOK), (2.3, ""))
    tl = Timeline(
        options=SCORED, engines=FakeEngines(transcript=heard, score=complete_unless_it_trails)
    )
    tl.run(speech((0.5, 2.0), (2.4, 2.52)), until_s=9.0)
    assert [a.text for _, a in tl.of(A.RetractUserTurn)] == [COOK]
    [_, (t_commit, commit)] = tl.of(A.CommitUserTurn)
    unfinished = SCORED.endpoint.silence_unfinished_s
    assert commit.text == COOK and t_commit == approx(2.52 + unfinished)
    [(t_started, _)] = [(t, a) for t, a in tl.of(A.StartReply) if t > 2.52]
    assert t_started < t_commit  # ready when the turn ended: heard at once
    assert tl.audible[0][0] == approx(t_commit)


def test_frames_held_up_by_the_network_are_no_pause_before_a_hesitation() -> None:
    # The frames of 1.5-1.8 s come in a bunch at 1.8: a candidate asked in the stall, and the
    # rest of the sentence adding no word to it, is no filler after a pause.
    tl = Timeline(
        options=SCORED,
        engines=FakeEngines(
            transcript=lambda start, end: "What time is it?", score=complete_unless_it_trails
        ),
    )
    tl.run(speech((0.5, 2.0)), until_s=6.0, stalls=((1.5, 1.8),))
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert t_commit <= 2.0 + 0.34
