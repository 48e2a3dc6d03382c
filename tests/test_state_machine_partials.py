"""Speculative replies started on partial transcripts, decoded while the user still speaks
(virtual time, tests/machine_timeline.py). Defaults: a candidate 60 ms into a pause, the
endpoint after 300 ms of silence when the text looks complete."""

from __future__ import annotations

from dataclasses import replace

import pytest

from state_machine import actions as A
from state_machine import events as E
from state_machine.options import TurnOptions
from tests.machine_timeline import FakeEngines, Timeline, speech


def approx(x: float) -> object:
    return pytest.approx(x, abs=1e-6)


def test_a_complete_partial_starts_the_reply_and_it_is_heard_at_the_endpoint() -> None:
    tl = Timeline(engines=FakeEngines(reply_audio_after_s=0.3))
    tl.partial_at(1.9, "what time is it?")  # the last word is still being said
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(t_start, start)] = tl.of(A.StartReply)
    assert start.speculative and t_start == approx(1.9)
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert t_commit == approx(2.30)
    assert tl.of(E.Speculative)[0][1].kept is True
    # Ready at 2.20: heard at the endpoint, not 0.3 s after the candidate's start (2.26)
    # as without the partial.
    assert tl.audible[0][0] == approx(2.30)


def test_without_partials_the_same_turn_is_heard_later() -> None:
    tl = Timeline(
        options=TurnOptions(speculate_on_partials=False),
        engines=FakeEngines(reply_audio_after_s=0.3),
    )
    tl.partial_at(1.9, "what time is it?")
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(t_start, _)] = tl.of(A.StartReply)
    assert t_start == approx(2.26)  # the candidate's
    assert tl.audible[0][0] == approx(2.56)


def test_a_partial_start_is_never_heard_before_the_endpoint() -> None:
    tl = Timeline(engines=FakeEngines(reply_audio_after_s=0.05))
    tl.partial_at(1.0, "what time is it?")
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert tl.audible[0][0] == approx(t_commit) and t_commit == approx(2.30)


def test_the_words_after_a_partial_start_do_not_cancel_it_when_they_are_its_words() -> None:
    # "... is it?" said in two voiced runs: the partial that holds them came in the first.
    tl = Timeline(engines=FakeEngines(reply_audio_after_s=0.3))
    tl.partial_at(1.7, "what time is it?")
    tl.run(speech((0.5, 1.72), (1.8, 2.0)), until_s=5.0)
    assert not tl.of(A.CancelReply)
    [(t_start, _)] = tl.of(A.StartReply)
    assert t_start == approx(1.7)
    assert tl.audible[0][0] == approx(2.30)


def test_a_partial_start_that_the_user_talks_past_is_cancelled_and_never_heard() -> None:
    def transcript(start: float, end: float) -> str:
        return "what time is it in Tokyo?"

    tl = Timeline(engines=FakeEngines(reply_audio_after_s=0.1, transcript=transcript))
    tl.partial_at(1.5, "what time is it?")
    tl.partial_at(2.3, "what time is it in")  # reads unfinished: the early reply is stale
    tl.run(speech((0.5, 2.6)), until_s=6.0)
    starts = [a for _, a in tl.of(A.StartReply)]
    assert [a.user_text for a in starts] == ["what time is it?", "what time is it in Tokyo?"]
    [(t_cancel, cancel)] = tl.of(A.CancelReply)
    assert t_cancel == approx(2.3) and cancel.reply_id == starts[0].reply_id
    [(_, commit)] = tl.of(A.CommitUserTurn)
    assert commit.text == "what time is it in Tokyo?"
    [(_, confirm)] = tl.of(A.ConfirmReply)
    assert confirm.reply_id == starts[1].reply_id
    assert tl.machine.counters.speculative_wasted == 1


def test_a_partial_whose_final_differs_is_replaced_at_the_candidate() -> None:
    tl = Timeline(engines=FakeEngines(transcript=lambda s, e: "what is the capital of Peru?"))
    tl.partial_at(1.9, "what is the capital of Spain?")  # the last word misheard
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    starts = [a for _, a in tl.of(A.StartReply)]
    assert starts[0].user_text == "what is the capital of Spain?"
    assert starts[-1].user_text == "what is the capital of Peru?"
    [(_, confirm)] = tl.of(A.ConfirmReply)
    assert confirm.reply_id == starts[-1].reply_id
    assert not any(a.reply_id == starts[0].reply_id for _, a in tl.of(A.ConfirmReply))


def test_an_unfinished_partial_starts_nothing() -> None:
    tl = Timeline()
    tl.partial_at(1.5, "what time is")
    tl.partial_at(1.9, "what time is it")  # no end punctuation
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(t_start, _)] = tl.of(A.StartReply)
    assert t_start == approx(2.26)  # the candidate's, as without partials


def test_partials_are_ignored_while_the_agent_speaks() -> None:
    tl = Timeline(engines=FakeEngines(reply_length_s=3.0))
    tl.partial_at(3.0, "what time is it?")  # the agent speaks from 2.66
    tl.run(speech((0.5, 2.0)), until_s=7.0)
    assert len(tl.of(A.StartReply)) == 1


def test_with_a_model_a_complete_partial_starts_the_reply_before_the_model_reads_it() -> None:
    scored = TurnOptions().scored()  # complete_score 0.03
    tl = Timeline(options=scored, engines=FakeEngines(score=lambda text: 0.5))
    tl.partial_at(1.9, "what time is it?", score=0.2, read_s=0.05)
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(t_start, start)] = tl.of(A.StartReply)
    assert t_start == approx(1.9) and start.speculative  # not at its reading (1.95)
    assert not tl.of(A.CancelReply)
    [(_, confirm)] = tl.of(A.ConfirmReply)
    assert confirm.reply_id == start.reply_id


def test_a_partial_start_the_model_reads_as_unfinished_is_cancelled_unheard() -> None:
    scored = TurnOptions().scored()
    tl = Timeline(
        options=scored, engines=FakeEngines(reply_audio_after_s=0.05, score=lambda text: 0.5)
    )
    tl.partial_at(1.5, "what time is it?", score=0.001, read_s=0.04)
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(_, first), (t_second, second)] = tl.of(A.StartReply)
    assert first.user_text == "what time is it?" and t_second == approx(2.26)  # the candidate's
    [(t_cancel, cancel)] = tl.of(A.CancelReply)
    assert t_cancel == approx(1.54) and cancel.reply_id == first.reply_id
    assert cancel.reason == "partial read as unfinished"
    assert [a.reply_id for _, a in tl.of(A.ConfirmReply)] == [second.reply_id]
    assert tl.audible[0][0] > t_second  # the candidate's reply: the cancelled one is unheard
    assert tl.machine.counters.speculative_wasted == 1


def test_the_reading_of_an_older_partial_never_cancels_a_newer_start() -> None:
    scored = TurnOptions().scored()
    final = "what time is it in Tokyo?"
    tl = Timeline(
        options=scored, engines=FakeEngines(score=lambda text: 0.5, transcript=lambda s, e: final)
    )
    tl.partial_at(1.5, "what time is it?", score=0.001, read_s=0.3)  # read at 1.8
    tl.partial_at(1.7, "what time is it in Tokyo?", score=0.2)
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    starts = [a for _, a in tl.of(A.StartReply)]
    assert [a.user_text for a in starts][:2] == ["what time is it?", "what time is it in Tokyo?"]
    [(t_cancel, cancel)] = tl.of(A.CancelReply)
    assert t_cancel == approx(1.7) and cancel.reply_id == starts[0].reply_id
    assert [a.reply_id for _, a in tl.of(A.ConfirmReply)] == [starts[1].reply_id]


def test_waiting_for_the_reading_only_a_partial_it_scores_complete_starts_the_reply() -> None:
    waits = replace(TurnOptions(), speculate_before_score=False).scored()
    tl = Timeline(options=waits, engines=FakeEngines(score=lambda text: 0.5))
    tl.partial_at(1.5, "what time is it?", score=0.001)  # reads unfinished to the model
    tl.partial_at(1.7, "what time is it?", score=None)  # not read: no start either
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(t_start, _)] = tl.of(A.StartReply)
    assert t_start == approx(2.26)  # the candidate's

    tl = Timeline(options=waits, engines=FakeEngines(score=lambda text: 0.5))
    tl.partial_at(1.9, "what time is it?", score=0.2, read_s=0.05)
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(t_start, start)] = tl.of(A.StartReply)
    assert t_start == approx(1.95) and start.speculative


def test_a_late_partial_never_cancels_the_reply_started_on_the_candidate() -> None:
    tl = Timeline(engines=FakeEngines(reply_audio_after_s=0.3))
    # Decoded from the audio before the last word, published after the candidate (2.26).
    tl.partial_at(2.28, "what time is")
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    assert not tl.of(A.CancelReply)
    [(t_start, _)] = tl.of(A.StartReply)
    assert t_start == approx(2.26)


@pytest.mark.parametrize(
    ("partial", "final"),
    [
        (
            "Could you remind me to call my mother.",
            "Could you remind me to call my mother tomorrow?",
        ),
        ("How many days are there in a year?", "How many days are there in a leap year?"),
    ],
)
def test_a_partial_that_misses_a_word_is_not_the_answer(partial: str, final: str) -> None:
    """Each partial is 0.94 alike with its final, above `similarity_keep`, and the second ends
    as its final does: kept, the answer would lose "tomorrow", or answer another question (365
    days, not 366)."""
    tl = Timeline(engines=FakeEngines(reply_audio_after_s=0.3, transcript=lambda s, e: final))
    tl.partial_at(1.7, partial)
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(_, first), (_, second)] = tl.of(A.StartReply)
    assert first.user_text == partial and second.user_text == final
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == [final]
    heard = [a for _, a in tl.of(A.ConfirmReply)]
    assert [c.reply_id for c in heard] == [second.reply_id]


def test_a_partial_with_a_word_the_final_lacks_is_still_the_answer() -> None:
    """Nothing the user said is missing from the words it was started on: kept."""
    final = "How many days are there in a leap year?"
    tl = Timeline(engines=FakeEngines(reply_audio_after_s=0.3, transcript=lambda s, e: final))
    tl.partial_at(1.7, "How many days are there in a a leap year?")
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(_, only)] = tl.of(A.StartReply)
    assert [c.reply_id for _, c in tl.of(A.ConfirmReply)] == [only.reply_id]


def test_only_a_turn_s_candidate_has_its_end_heard_while_it_is_decoded() -> None:
    """A turn's candidate (`RequestCandidate.turn`) will be scored, so an audio model may read
    the end meanwhile; one asked for while the agent speaks (a sound over the answer) will not."""
    tl = Timeline(engines=FakeEngines(reply_length_s=3.0))
    tl.run(speech((0.5, 2.0), (3.2, 3.5)), until_s=7.0)  # the agent speaks from 2.66
    asks = [a for _, a in tl.of(A.RequestCandidate)]
    assert asks[0].turn
    assert [a.turn for a in asks[1:]] and not any(a.turn for a in asks[1:])
