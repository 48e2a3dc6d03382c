"""Typed messages in the conversation state machine, in virtual time (tests/machine_timeline.py
plays the engines). Default options: a spoken turn "what time is it?" said over 0.5-2.0 s is
committed at 2.30, its reply is heard from 2.66 to 4.66."""

from __future__ import annotations

import pytest

from state_machine import actions as A
from state_machine import events as E
from state_machine.options import TurnOptions
from tests.machine_timeline import ANSWERED, FakeEngines, Timeline, speech


def approx(x: float) -> object:
    return pytest.approx(x, abs=1e-6)


def at(tl: Timeline, t: float, kinds: tuple[type, ...]) -> list[type]:
    return [type(a) for when, a in tl.log if when == approx(t) and isinstance(a, kinds)]


def test_a_typed_message_is_committed_and_answered_at_once() -> None:
    tl = Timeline()
    tl.type_at(1.0, "  what is\nthe weather?  ")
    tl.run(lambda t: False, until_s=4.0)
    kinds = (A.StartReply, E.Transcript, A.CommitUserTurn, A.ConfirmReply, A.SetState)
    assert at(tl, 1.0, kinds) == [
        A.StartReply,
        E.Transcript,
        A.CommitUserTurn,
        A.ConfirmReply,
        A.SetState,
    ]
    [(_, start)] = tl.of(A.StartReply)
    assert start.user_text == "what is the weather?" and not start.speculative
    [(_, commit)] = tl.of(A.CommitUserTurn)
    assert commit == A.CommitUserTurn("what is the weather?", None)  # typed: no utterance
    [(t_final, transcript)] = tl.of(E.Transcript)
    assert transcript == E.Transcript(t_final, "what is the weather?", final=True)  # published
    assert t_final == approx(1.0)
    assert tl.states() == [
        (approx(1.0), "THINKING"),
        (approx(1.4), "SPEAKING"),
        (approx(3.4), "LISTENING"),
    ]
    assert tl.machine.counters.typed == 1 and tl.machine.counters.turns == 1


def test_an_empty_message_does_nothing() -> None:
    tl = Timeline()
    tl.type_at(1.0, " \n\t ")
    tl.run(lambda t: False, until_s=2.0)
    assert tl.log == [] and tl.machine.counters.typed == 0


def test_typing_while_the_agent_speaks_cuts_it_like_a_barge_in() -> None:
    tl = Timeline()
    tl.type_at(3.0, "stop, what is the date?")
    tl.run(speech((0.5, 2.0)), until_s=8.0)
    assert tl.audible[0] == (approx(2.66), approx(3.0))  # silent at once
    # Cancelled first (the history cut to what was heard), then the typed turn.
    assert at(tl, 3.0, (A.CancelReply, A.CommitBargeIn, A.CommitUserTurn, A.SetState)) == [
        A.CancelReply,
        A.CommitBargeIn,
        A.CommitUserTurn,
        A.SetState,
    ]
    [(_, cancel)] = tl.of(A.CancelReply)
    [(_, cut)] = tl.of(A.CommitBargeIn)
    assert cut.reply_id == cancel.reply_id and cancel.reason == "typed message"
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == [
        "what time is it?",
        "stop, what is the date?",
    ]
    assert [s for _, s in tl.states()] == [
        "THINKING",
        "SPEAKING",
        "THINKING",
        "SPEAKING",
        "LISTENING",
    ]
    assert tl.audible[1] == (approx(3.4), approx(5.4))  # the typed question's answer
    assert tl.of(E.BargeIn) == [] and tl.machine.counters.barge_ins == 0  # not a spoken one


def test_typing_while_the_agent_thinks_merges_into_the_turn_being_answered() -> None:
    tl = Timeline(engines=FakeEngines(reply_audio_after_s=1.0))
    tl.type_at(2.5, "in Tokyo")
    tl.run(speech((0.5, 2.0)), until_s=6.0)
    [(t_retract, retract)] = tl.of(A.RetractUserTurn)
    assert t_retract == approx(2.5) and retract.text == "what time is it?"
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == [
        "what time is it?",
        "what time is it? in Tokyo",
    ]
    assert [a.user_text for _, a in tl.of(A.StartReply)][-1] == "what time is it? in Tokyo"
    assert tl.audible == [(approx(3.5), approx(5.5))]  # answered once


def test_typing_while_the_user_speaks_joins_the_spoken_turn() -> None:
    """The typed words wait for the utterance being spoken and are answered with its words."""
    tl = Timeline(engines=FakeEngines(transcript=lambda s, e: "and tomorrow?"))
    tl.type_at(1.0, "What is the weather in Oslo?")
    tl.run(speech((0.5, 2.0)), until_s=6.0)
    assert [t for t, _ in tl.of(A.CommitUserTurn)] == [approx(2.30)]  # at the endpoint
    [(_, commit)] = tl.of(A.CommitUserTurn)
    assert commit.text == "What is the weather in Oslo? and tomorrow?" and commit.utterance_id
    assert [a.user_text for _, a in tl.of(A.StartReply)] == [commit.text]  # no words lost
    assert [s for _, s in tl.states()] == ANSWERED


def test_typing_cancels_a_speculative_reply_before_the_endpoint() -> None:
    tl = Timeline(engines=FakeEngines(transcript=lambda s, e: "tell me about the weather"))
    tl.type_at(2.3, "in Oslo")  # speculative start at 2.26, endpoint at 2.50
    tl.run(speech((0.5, 2.0)), until_s=6.0)
    [(t_cancel, cancel)] = tl.of(A.CancelReply)
    assert t_cancel == approx(2.3) and cancel.reason == "typed message"
    [(t_commit, commit)] = tl.of(A.CommitUserTurn)
    assert t_commit == approx(2.5) and commit.text == "in Oslo tell me about the weather"
    assert tl.of(A.StartReply)[-1][1].user_text == commit.text
    assert tl.machine.counters.speculative_wasted == 1


def test_a_cough_while_typing_leaves_the_typed_message_answered_alone() -> None:
    tl = Timeline(engines=FakeEngines(transcript=lambda s, e: "[coughs]"))
    tl.type_at(0.7, "what time is it?")
    tl.run(speech((0.5, 0.9)), until_s=4.0)
    [(_, commit)] = tl.of(A.CommitUserTurn)
    assert commit.text == "what time is it?"
    assert [s for _, s in tl.states()] == ANSWERED


@pytest.mark.parametrize("duck", [True, False])
def test_typing_while_a_sound_pauses_the_agent_cuts_it_and_the_sound_goes_on_as_a_turn(
    duck: bool,
) -> None:
    def transcript(start: float, end: float) -> str:
        return "what time is it?" if start < 2.5 else "and in Paris"

    tl = Timeline(TurnOptions(duck=duck), FakeEngines(transcript=transcript))
    tl.type_at(3.1, "in Tokyo")  # the reply yields at 3.04 for speech that goes on to 3.6
    tl.run(speech((0.5, 1.6), (3.0, 3.6)), until_s=8.0)  # 0.74 s into the answer
    # Ducked, it plays on quieter until the typed message cuts it; paused, it stops at once.
    assert tl.audible[0] == (approx(2.26), approx(3.1 if duck else 3.04))
    assert tl.ducked == ([(approx(3.04), approx(3.1))] if duck else [])
    assert tl.of(A.CommitBargeIn) and tl.of(A.ResumePlayback) == []
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits == ["what time is it?", "in Tokyo and in Paris"]
    assert [s for _, s in tl.states()] == ANSWERED * 2


def test_speech_right_after_a_typed_message_joins_it_before_the_answer() -> None:
    def transcript(start: float, end: float) -> str:
        return "in Tokyo?"

    tl = Timeline(engines=FakeEngines(reply_audio_after_s=1.0, transcript=transcript))
    tl.type_at(0.5, "what time is it?")
    tl.run(speech((0.6, 1.2)), until_s=5.0)
    assert [a.text for _, a in tl.of(A.RetractUserTurn)] == ["what time is it?"]
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == [
        "what time is it?",
        "what time is it? in Tokyo?",
    ]
