"""The copilot's question endpointing alone (state_machine.question_endpointing), in virtual
time: every call carries the time, frame by frame."""

from __future__ import annotations

from dataclasses import replace

from state_machine import actions as A
from state_machine import events as E
from state_machine.endpointing import EndpointOptions
from state_machine.options import CopilotOptions
from state_machine.question_endpointing import (
    NotAQuestion,
    QuestionEndpointer,
    QuestionTranscript,
)

FRAME_S = 0.02


def _frames(ep: QuestionEndpointer, voiced: bool, start: float, seconds: float) -> list[A.Action]:
    out = []
    for i in range(1, round(seconds / FRAME_S) + 1):
        out += ep.on_frame(voiced, round(start + i * FRAME_S, 6))
    return out


def _question_heard(ep: QuestionEndpointer) -> A.RequestCandidate:
    """A second of question, then 60 ms of quiet: the candidate transcript it asks for."""
    _frames(ep, True, 0.0, 1.0)
    [req] = [a for a in _frames(ep, False, 1.0, 0.06) if isinstance(a, A.RequestCandidate)]
    return req


def test_endpointer_restarts_the_answer_when_the_final_question_differs():
    ep = QuestionEndpointer()
    out = _frames(ep, True, 0.0, 1.0)
    [open_] = [a for a in out if isinstance(a, A.OpenUtterance)]
    out = _frames(ep, False, 1.0, 0.1)
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    # A candidate without a cue: the speculative start waits for 250 ms of silence.
    out = ep.on_candidate(req.utterance_id, "What was the hardest bug", 1.0, 1.1)
    assert not [a for a in out if isinstance(a, A.StartReply)]
    out = _frames(ep, False, 1.1, 0.16)
    [spec] = [a for a in out if isinstance(a, A.StartReply)]
    assert spec.speculative and spec.user_text == "What was the hardest bug"
    # Speech again: the speculative answer goes; then a new candidate with other words.
    out = _frames(ep, True, 1.26, 0.3)
    assert A.CancelReply(spec.reply_id, "the interviewer went on") in out
    out = _frames(ep, False, 1.56, 0.06)
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    _frames(ep, False, 1.62, 0.08)
    out = ep.on_candidate(req.utterance_id, "What was the hardest bug you fixed?", 1.56, 1.7)
    [final] = [a for a in out if isinstance(a, A.StartReply)]
    assert final.user_text == "What was the hardest bug you fixed?"
    assert open_.utterance_id == req.utterance_id
    out = _frames(ep, False, 1.7, 0.3)  # 0.4 s of silence after the question
    assert A.ConfirmReply(final.reply_id) in out
    assert A.CommitUserTurn(final.user_text, req.utterance_id) in out


def test_endpointer_keeps_a_nearly_identical_speculative_answer():
    ep = QuestionEndpointer(
        CopilotOptions(endpoint=EndpointOptions(silence_s=0.7, silence_cued_s=0.5))
    )
    req = _question_heard(ep)
    _frames(ep, False, 1.06, 0.14)  # the quiet goes on while it is decoded
    out = ep.on_candidate(req.utterance_id, "What is your biggest weakness?", 1.0, 1.2)
    [spec] = [a for a in out if isinstance(a, A.StartReply)]
    out = _frames(ep, False, 1.2, 0.4)
    assert A.ConfirmReply(spec.reply_id) in out
    assert not [a for a in out if isinstance(a, A.StartReply | A.CancelReply)]
    [kept] = [a for a in out if isinstance(a, E.Speculative)]
    assert kept.kept is True


def test_endpointer_waits_for_a_fresh_transcript_at_the_endpoint():
    # The decode is slower than the endpoint: the turn ends when the transcript arrives.
    ep = QuestionEndpointer(CopilotOptions(speculative_start=False))
    _frames(ep, True, 0.0, 1.0)
    out = _frames(ep, False, 1.0, 1.0)
    assert len([a for a in out if isinstance(a, A.RequestCandidate)]) == 1
    notices = E.Notice | NotAQuestion | QuestionTranscript
    assert [type(a) for a in out if isinstance(a, notices)] == [E.SpeechEnd]
    assert not [a for a in out if isinstance(a, A.ConfirmReply)]
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    out = ep.on_candidate(req.utterance_id, "Where did you study?", 1.0, 2.2)
    [start] = [a for a in out if isinstance(a, A.StartReply)]
    assert not start.speculative
    assert A.ConfirmReply(start.reply_id) in out


def test_endpointer_drops_a_candidate_asked_at_a_pause_when_the_interviewer_goes_on():
    # Without the drop, the end of the question would wait for the stale transcript of the
    # pause, and only then ask for one that covers the question.
    ep = QuestionEndpointer()
    req = _question_heard(ep)
    out = _frames(ep, True, 1.06, 0.06)
    assert A.DropCandidate(req.utterance_id) in out
    out = _frames(ep, True, 1.12, 0.5) + _frames(ep, False, 1.62, 0.06)
    [again] = [a for a in out if isinstance(a, A.RequestCandidate)]
    assert again.utterance_id == req.utterance_id
    out = ep.on_candidate(again.utterance_id, "Where did you study?", 1.62, 1.7)
    assert [a for a in out if isinstance(a, A.StartReply)]


def test_endpointer_keeps_a_candidate_through_a_single_voiced_frame():
    ep = QuestionEndpointer()
    _frames(ep, True, 0.0, 1.0)
    out = _frames(ep, False, 1.0, 0.06)
    assert [a for a in out if isinstance(a, A.RequestCandidate)]
    out = _frames(ep, True, 1.06, 0.02) + _frames(ep, False, 1.08, 0.1)
    assert not [a for a in out if isinstance(a, A.DropCandidate | A.RequestCandidate)]


def _scored() -> QuestionEndpointer:
    return QuestionEndpointer(
        CopilotOptions(endpoint=replace(CopilotOptions().endpoint, scored=True))
    )


def test_endpointer_waits_through_a_pause_the_model_scores_unfinished():
    # The same core as the voice agent: "Tell me about a time when." scores unfinished, so
    # the question waits past its 0.7 s plain silence for the rest of it.
    ep = _scored()
    req = _question_heard(ep)
    out = ep.on_candidate(req.utterance_id, "Tell me about a time when.", 1.0, 1.2)
    [score] = [a for a in out if isinstance(a, A.ScoreTurn)]
    assert score.text == "Tell me about a time when."
    out = ep.on_turn_score(req.utterance_id, score.text, 0.0, 1.25)
    out += _frames(ep, False, 1.26, 0.9)  # 1.16 s of silence in all
    assert not [a for a in out if isinstance(a, A.ConfirmReply | A.CommitUserTurn)]
    out = _frames(ep, True, 2.16, 1.0) + _frames(ep, False, 3.16, 0.06)
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    question = "Tell me about a time when you disagreed with a manager."
    _frames(ep, False, 3.22, 0.08)  # the quiet goes on while it is decoded and scored
    out = ep.on_candidate(req.utterance_id, question, 3.16, 3.3)
    [score] = [a for a in out if isinstance(a, A.ScoreTurn)]
    _frames(ep, False, 3.3, 0.06)
    out = ep.on_turn_score(req.utterance_id, question, 0.9, 3.36)
    assert not [a for a in out if isinstance(a, A.CommitUserTurn)]
    out = _frames(ep, False, 3.36, 0.2)
    [commit] = [a for a in out if isinstance(a, A.CommitUserTurn)]
    assert commit.text == question  # scored complete: ended at 0.4 s of silence


def test_endpointer_asks_for_the_score_after_starting_the_answer_it_may_hold_it_behind():
    # The engine holds a score behind the first token of an answer reading its prompt
    # (`CopilotOptions.score_hold_s`): the answer must have started when the score is asked.
    ep = _scored()
    req = _question_heard(ep)
    out = ep.on_candidate(req.utterance_id, "What is your biggest weakness?", 1.0, 1.1)
    kinds = [type(a) for a in out if isinstance(a, A.StartReply | A.ScoreTurn)]
    assert kinds == [A.StartReply, A.ScoreTurn]


def test_a_question_mark_starts_the_answer_at_once_but_does_not_end_the_question():
    # "...looking for?" reads as trailing off to the question check (it ends on a
    # preposition), and waited for the 250 ms speculative silence; Whisper's question mark
    # says it asks, so its answer starts with the candidate, and is shown after 0.2 s.
    ep = QuestionEndpointer()
    req = _question_heard(ep)
    out = ep.on_candidate(req.utterance_id, "What salary are you looking for?", 1.0, 1.1)
    [start] = [a for a in out if isinstance(a, A.StartReply)]
    out = _frames(ep, False, 1.06, 0.14)
    assert A.ShowReply(start.reply_id) in out
    out = _frames(ep, False, 1.2, 0.3)  # 0.5 s of silence: not the cued 0.4 s
    assert not [a for a in out if isinstance(a, A.CommitUserTurn)]
    out = _frames(ep, False, 1.5, 0.2)  # the plain 0.7 s
    assert A.ConfirmReply(start.reply_id) in out


def test_endpointer_lets_a_comma_pause_pass_when_the_model_scores_the_half_complete():
    ep = _scored()
    req = _question_heard(ep)
    text = "Where did you go to university?"
    ep.on_candidate(req.utterance_id, text, 1.0, 1.1)
    out = ep.on_turn_score(req.utterance_id, text, 0.9, 1.15)
    out += _frames(ep, False, 1.06, 0.3)  # a comma's pause
    assert not [a for a in out if isinstance(a, A.ConfirmReply | A.CommitUserTurn)]
    out = _frames(ep, False, 1.36, 0.06)  # had it gone on: 0.4 s of silence ends it
    assert [a for a in out if isinstance(a, A.CommitUserTurn)]


def test_endpointer_ends_a_question_at_the_bound_when_the_model_says_unfinished():
    ep = _scored()
    req = _question_heard(ep)
    _frames(ep, False, 1.06, 0.14)  # the quiet goes on while it is decoded and scored
    out = ep.on_candidate(req.utterance_id, "What did you do at", 1.0, 1.2)
    _frames(ep, False, 1.2, 0.04)
    ep.on_turn_score(req.utterance_id, "What did you do at", 0.0, 1.25)
    bound = CopilotOptions().endpoint.silence_unfinished_s
    out = _frames(ep, False, 1.26, bound - 0.3)
    assert not [a for a in out if isinstance(a, A.CommitUserTurn)]
    out = _frames(ep, False, 1.26 + bound - 0.3, 0.1)
    assert [a for a in out if isinstance(a, A.CommitUserTurn)]


def test_endpointer_counts_no_pause_while_the_frames_are_held_up():
    # The same core as the voice agent: 0.38 s of timer ticks with no frame (the worker or
    # the network stalled mid-question) is not 0.38 s of silence.
    ep = _scored()
    _frames(ep, True, 0.0, 1.0)
    out = [a for i in range(1, 20) for a in ep.tick(round(1.0 + i * FRAME_S, 6))]
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    text = "What is your biggest weakness?"
    out += ep.on_candidate(req.utterance_id, text, 1.0, 1.3)
    out += ep.on_turn_score(req.utterance_id, text, 0.9, 1.36)
    out += _frames(ep, True, 1.38, 0.5)  # the held-up frames, and more of the question
    assert not [a for a in out if isinstance(a, A.ConfirmReply | A.CommitUserTurn)]


def test_quiet_frames_that_come_in_a_bunch_count_the_audio_they_hold():
    # The worker's event loop stalls 0.8 s in a 0.14 s pause mid-question, its candidate
    # already scored complete: the frames of the stall come together, stamped on arrival.
    # The pause is their 0.14 s of quiet, not the 0.9 s since the last voiced frame.
    ep = _scored()
    _frames(ep, True, 0.0, 1.0)
    out = _frames(ep, False, 1.0, 0.1)
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    text = "What is your biggest weakness?"
    out += ep.on_candidate(req.utterance_id, text, 1.0, 1.1)
    out += ep.on_turn_score(req.utterance_id, text, 0.9, 1.12)
    for voiced in [False] * 2 + [True] * 38:  # 1.1-1.14 quiet, then more of the question
        out += ep.on_frame(voiced, 1.9)
    assert not [a for a in out if isinstance(a, A.ConfirmReply | A.CommitUserTurn)]


def test_with_an_end_of_turn_model_the_question_keeps_its_own_silences_scored() -> None:
    options = CopilotOptions().scored()
    assert isinstance(options, CopilotOptions) and options.endpoint.scored
    assert options.endpoint.silence_s == CopilotOptions().endpoint.silence_s == 0.7


# ---- an answer shown before the endpoint ------------------------------------------------------


def _shown(out: list[A.Action]) -> list[int]:
    return [a.reply_id for a in out if isinstance(a, A.ShowReply)]


def test_endpointer_shows_the_answer_of_a_complete_looking_question_before_its_endpoint():
    ep = QuestionEndpointer()
    req = _question_heard(ep)  # the last voiced frame at 1.0 s
    out = ep.on_candidate(req.utterance_id, "What is your biggest weakness?", 1.0, 1.1)
    [spec] = [a for a in out if isinstance(a, A.StartReply)]
    assert not _shown(out)
    # (silence counts from the end of the last voiced frame's VAD window, 1.04 s)
    out = _frames(ep, False, 1.1, 0.12)
    assert not _shown(out)  # 0.18 s of silence
    out = _frames(ep, False, 1.22, 0.02)
    assert _shown(out) == [spec.reply_id]  # 0.2 s: on the screen, unconfirmed
    out = _frames(ep, False, 1.24, 0.18)
    assert not [a for a in out if isinstance(a, A.ConfirmReply | A.ShowReply)]
    out = _frames(ep, False, 1.42, 0.02)  # the endpoint, 0.4 s: confirmed, shown once
    assert A.ConfirmReply(spec.reply_id) in out
    assert not [a for a in out if isinstance(a, A.CancelReply | A.StartReply | A.ShowReply)]


def test_endpointer_withdraws_a_shown_answer_when_the_interviewer_goes_on():
    ep = QuestionEndpointer()
    req = _question_heard(ep)
    out = ep.on_candidate(req.utterance_id, "Where did you go to university?", 1.0, 1.1)
    out += _frames(ep, False, 1.1, 0.14)
    [spec] = [a for a in out if isinstance(a, A.StartReply)]
    assert _shown(out) == [spec.reply_id]
    out = _frames(ep, True, 1.24, 0.1)  # "..., and what did you study?"
    assert A.CancelReply(spec.reply_id, "the interviewer went on") in out
    out = _frames(ep, True, 1.34, 0.9) + _frames(ep, False, 2.24, 0.06)
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    whole = "Where did you go to university, and what did you study?"
    out = ep.on_candidate(req.utterance_id, whole, 2.24, 2.3)
    out += _frames(ep, False, 2.3, 0.4)
    [final] = [a for a in out if isinstance(a, A.StartReply)]
    assert final.user_text == whole and _shown(out) == [final.reply_id]
    assert A.ConfirmReply(final.reply_id) in out


def test_endpointer_shows_nothing_early_of_a_question_that_does_not_look_complete():
    ep = QuestionEndpointer()
    req = _question_heard(ep)
    out = ep.on_candidate(req.utterance_id, "What was the hardest bug", 1.0, 1.1)
    out += _frames(ep, False, 1.1, 0.62)
    assert [a for a in out if isinstance(a, A.StartReply)]  # speculated at 0.25 s, unseen
    assert not _shown(out)
    out = _frames(ep, False, 1.72, 0.02)  # its endpoint, 0.7 s: confirmed, never shown early
    assert [a for a in out if isinstance(a, A.ConfirmReply)] and not _shown(out)


def test_endpointer_shows_a_question_the_words_leave_open_once_the_model_scores_it_complete():
    ep = _scored()
    req = _question_heard(ep)
    text = "Tell me about your last role"  # no end in the words
    out = ep.on_candidate(req.utterance_id, text, 1.0, 1.1)
    out += _frames(ep, False, 1.1, 0.26)  # 0.32 s of silence, the score still on its way
    assert [a for a in out if isinstance(a, A.StartReply)] and not _shown(out)
    out = ep.on_turn_score(req.utterance_id, text, 0.9, 1.36)
    assert len(_shown(out)) == 1


def test_endpointer_shows_a_question_whole_by_its_words_though_the_model_scores_it_low():
    ep = _scored()
    req = _question_heard(ep)
    text = "How many people are on the team you run?"
    out = ep.on_candidate(req.utterance_id, text, 1.0, 1.1)
    out += ep.on_turn_score(req.utterance_id, text, 0.0, 1.15)
    out += _frames(ep, False, 1.1, 0.14)
    [spec] = [a for a in out if isinstance(a, A.StartReply)]
    assert _shown(out) == [spec.reply_id]  # at 0.2 s, by its words
    out = _frames(ep, False, 1.24, 0.5)
    assert not [a for a in out if isinstance(a, A.ConfirmReply)]  # the low score still waits


def test_endpointer_shows_a_question_the_model_scores_unfinished_by_its_question_mark():
    ep = _scored()
    req = _question_heard(ep)
    text = "What salary are you looking for?"
    out = ep.on_candidate(req.utterance_id, text, 1.0, 1.1)
    out += ep.on_turn_score(req.utterance_id, text, 0.0, 1.15)  # unfinished: the endpoint waits
    out += _frames(ep, False, 1.1, 0.2)  # started at 0.25 s of silence, as words left open are
    [spec] = [a for a in out if isinstance(a, A.StartReply)]
    assert _shown(out) == [spec.reply_id]
    out = _frames(ep, False, 1.3, 0.5)
    assert not [a for a in out if isinstance(a, A.ConfirmReply)]


def test_endpointer_never_shows_early_what_neither_words_nor_model_call_complete():
    ep = _scored()
    req = _question_heard(ep)
    text = "Describe a project you are proud of"  # no end in the words, scored unfinished
    out = ep.on_candidate(req.utterance_id, text, 1.0, 1.1)
    out += ep.on_turn_score(req.utterance_id, text, 0.0, 1.15)
    out += _frames(ep, False, 1.1, 1.0)
    assert [a for a in out if isinstance(a, A.StartReply)] and not _shown(out)


def test_endpointer_without_the_early_show_confirms_at_the_endpoint_only():
    ep = QuestionEndpointer(CopilotOptions(show_after_s=None))
    req = _question_heard(ep)
    out = ep.on_candidate(req.utterance_id, "What is your biggest weakness?", 1.0, 1.1)
    out += _frames(ep, False, 1.1, 0.4)
    assert not _shown(out) and [a for a in out if isinstance(a, A.ConfirmReply)]
