"""The conversation state machine in virtual time (tests/machine_timeline.py plays the engines).

Frames end at multiples of 20 ms; with the default options speech is voted in after 8 voiced
frames of a 15-frame window, a candidate is requested after 60 ms of silence, and the endpoint
comes after 300 ms (text that looks complete) or 500 ms of silence.
"""

from __future__ import annotations

import pytest

from state_machine import actions as A
from state_machine import events as E
from state_machine.options import TurnOptions
from tests.machine_timeline import ANSWERED, FakeEngines, Timeline, said_by, speech


def approx(x: float) -> object:
    return pytest.approx(x, abs=1e-6)


def test_one_turn_cycles_listening_thinking_speaking_listening() -> None:
    tl = Timeline()
    tl.run(speech((0.5, 2.0)), until_s=6.0)
    assert tl.states() == [
        (approx(2.30), "THINKING"),
        (approx(2.66), "SPEAKING"),
        (approx(4.66), "LISTENING"),
    ]
    [(t_start, start)] = tl.of(E.SpeechStart)
    assert t_start == approx(0.66) and start.t == approx(0.50)  # vote after 8 frames; its onset
    [(t_req, _)] = tl.of(A.RequestCandidate)
    assert t_req == approx(2.06)  # 60 ms of silence
    [(t_spec, spec)] = tl.of(A.StartReply)
    assert spec.speculative and t_spec == approx(2.26)  # candidate ends with '?': start at once
    [(t_commit, commit)] = tl.of(A.CommitUserTurn)
    assert commit.text == "what time is it?" and t_commit == approx(2.30)  # cued endpoint
    assert tl.of(E.Speculative)[0][1].kept is True
    assert tl.machine.counters.speculative_kept == 1 and tl.machine.counters.speculative_wasted == 0


def test_the_pre_roll_counts_back_from_the_speech_onset_not_the_vote() -> None:
    tl = Timeline()
    tl.run(speech((0.5, 2.0)), until_s=1.0)
    [(t_open, open_)] = tl.of(A.OpenUtterance)
    # Voted in at 0.66 on a run that started at 0.50: 0.3 s before 0.50.
    assert t_open == approx(0.66) and open_.pre_roll_s == approx(0.3 + 0.16)


def test_uncued_text_waits_the_long_endpoint_and_is_never_heard_before_it() -> None:
    engines = FakeEngines(
        reply_audio_after_s=0.1, transcript=lambda s, e: "tell me about the weather"
    )
    tl = Timeline(engines=engines)
    tl.run(speech((0.5, 2.0)), until_s=5.0)
    [(t_spec, _)] = tl.of(A.StartReply)
    assert t_spec == approx(2.26)  # stable after 250 ms of silence (candidate at 2.26)
    [(t_confirm, _)] = tl.of(A.ConfirmReply)
    assert t_confirm == approx(2.50)  # 500 ms endpoint without a cue
    assert tl.audible[0][0] == approx(2.50)  # audio was ready at 2.36 but held until confirmed
    assert tl.states()[:2] == [(approx(2.50), "THINKING"), (approx(2.50), "SPEAKING")]


def test_pause_inside_a_sentence_does_not_end_the_turn_and_wastes_the_speculative_start() -> None:
    def transcript(start: float, end: float) -> str:
        return "what is the" if end < 2.0 else "what is the capital of France?"

    tl = Timeline(engines=FakeEngines(transcript=transcript))
    tl.run(speech((0.5, 1.5), (1.8, 2.5)), until_s=6.0)
    starts = tl.of(A.StartReply)
    assert [a.user_text for _, a in starts] == ["what is the", "what is the capital of France?"]
    [(t_cancel, cancel)] = tl.of(A.CancelReply)
    assert cancel.reason == "user resumed speaking" and t_cancel == approx(1.84)  # 2 voiced frames
    [(_, commit)] = tl.of(A.CommitUserTurn)
    assert commit.text == "what is the capital of France?"
    assert tl.machine.counters.speculative_wasted == 1
    assert [s for _, s in tl.states()] == ANSWERED


def test_barge_in_pauses_within_three_frames_and_the_interruption_is_the_next_turn() -> None:
    interruption = said_by("stop, what is the date?", since=3.4)

    def transcript(start: float, end: float) -> str:
        return "what time is it?" if start < 2.5 else interruption(end)

    tl = Timeline(TurnOptions(duck=False), FakeEngines(transcript=transcript))
    tl.run(speech((0.5, 2.0), (3.4, 4.4)), until_s=8.0)
    [(t_pause, _)] = tl.of(A.PausePlayback)
    assert t_pause == approx(3.44)  # onset 3.40 + 2 frames
    assert tl.audible[0] == (approx(2.66), approx(3.44))  # silent 40 ms after the onset
    # Asked at the vote (3.56: no words yet), again 0.5 s later: "stop, what is" at 4.26.
    [(t_barge, barge)] = tl.of(E.BargeIn)
    assert t_barge == approx(4.26) and barge.t == approx(3.44)  # dated by the pause
    cancel_then_commit = [
        type(a)
        for t, a in tl.log
        if t == approx(4.26) and isinstance(a, (A.CancelReply, A.CommitBargeIn, A.SetState))
    ]
    assert cancel_then_commit == [A.CancelReply, A.CommitBargeIn, A.SetState]  # cancel first
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits == ["what time is it?", "stop, what is the date?"]
    assert [s for _, s in tl.states()] == ANSWERED * 2
    assert tl.machine.counters.barge_ins == 1


def test_a_click_shorter_than_the_threshold_does_not_pause() -> None:
    tl = Timeline(TurnOptions(duck=False))
    tl.run(speech((0.5, 2.0), (3.0, 3.02)), until_s=6.0)  # one voiced frame
    assert tl.of(A.PausePlayback) == []
    assert tl.audible == [(approx(2.66), approx(4.66))]


def test_a_cough_pauses_then_resumes_where_it_stopped() -> None:
    def transcript(start: float, end: float) -> str:
        return "what time is it?" if start < 2.5 else "[coughs]"

    tl = Timeline(TurnOptions(duck=False), FakeEngines(transcript=transcript))
    # 0.84 s into the answer (heard from 2.66): time to have heard it, so no "..., um" going on.
    tl.run(speech((0.5, 2.0), (3.5, 3.8)), until_s=7.0)
    [(t_pause, _)] = tl.of(A.PausePlayback)
    [(t_resume, _)] = tl.of(A.ResumePlayback)
    # The transcript asked 60 ms after the cough (3.86) covers all of it and has no words.
    assert t_pause == approx(3.54) and t_resume == approx(4.06)
    assert tl.audible == [(approx(2.66), approx(3.54)), (approx(4.06), approx(5.18))]  # 2 s total
    assert tl.machine.counters.false_interruptions == 1 and tl.machine.counters.barge_ins == 0
    assert tl.of(E.BargeIn) == []


def test_thinking_too_long_plays_the_filler_then_the_canned_phrase() -> None:
    tl = Timeline(engines=FakeEngines(reply_audio_after_s=30.0))
    tl.run(speech((0.5, 2.0)), until_s=12.0)
    [(t_filler, _)] = tl.of(A.PlayFiller)
    assert t_filler == approx(4.30)  # THINKING at 2.30 + 2 s
    [(t_canned, canned)] = tl.of(A.PlayCanned)
    assert t_canned == approx(10.30) and canned.text
    cancels = [t for t, a in tl.of(A.CancelReply)]
    assert cancels == [approx(10.30)]
    assert tl.states()[-2:] == [(approx(10.35), "SPEAKING"), (approx(11.35), "LISTENING")]


def test_talking_on_before_the_answer_merges_the_turns() -> None:
    def transcript(start: float, end: float) -> str:
        return "what time is it?" if start < 2.2 else "in Tokyo?"

    tl = Timeline(engines=FakeEngines(reply_audio_after_s=1.0, transcript=transcript))
    tl.run(speech((0.5, 2.0), (2.4, 3.0)), until_s=7.0)
    [(t_retract, retract)] = tl.of(A.RetractUserTurn)
    # The held answer's sound is speech at its fifth voiced frame (`hold_voice_frames`),
    # before the vote (2.56).
    assert retract.text == "what time is it?" and t_retract == approx(2.50)
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits == ["what time is it?", "what time is it? in Tokyo?"]
    replies = [a.user_text for _, a in tl.of(A.StartReply)]
    assert replies[-1] == "what time is it? in Tokyo?"


def test_silence_only_utterance_is_discarded() -> None:
    tl = Timeline(engines=FakeEngines(transcript=lambda s, e: ""))
    tl.run(speech((0.5, 1.0)), until_s=3.0)
    assert tl.of(A.DiscardUtterance) and tl.of(A.CommitUserTurn) == []
    assert tl.states() == []


def test_speculative_start_can_be_disabled() -> None:
    tl = Timeline(options=TurnOptions(speculative_start=False))
    tl.run(speech((0.5, 2.0)), until_s=6.0)
    [(t_start, start)] = tl.of(A.StartReply)
    assert not start.speculative and t_start == approx(2.30)
    assert tl.states()[1] == (approx(2.70), "SPEAKING")


def test_a_greeting_is_a_confirmed_reply_said_first_and_never_over_the_user() -> None:
    from state_machine.machine import ConversationStateMachine
    from state_machine.states import AgentState

    m = ConversationStateMachine(TurnOptions())
    out = m.say_first("Hello, how can I help?", 0.0)
    [play] = [a for a in out if isinstance(a, A.PlayCanned)]
    assert play.text == "Hello, how can I help?" and m.state is AgentState.THINKING
    out = m.on_reply_audio_started(play.reply_id, 0.1)
    assert A.SetState(AgentState.SPEAKING) in out
    assert m.say_first("Hello again.", 0.2) == []  # one reply at a time
    m.on_reply_done(play.reply_id, 1.0)
    assert m.state is AgentState.LISTENING

    busy = ConversationStateMachine(TurnOptions())
    for i in range(10):  # the user starts talking before the greeting
        busy.on_frame(True, 0.02 * (i + 1))
    assert busy.say_first("Hello.", 0.3) == []


def test_the_thinking_timeout_counts_from_the_replys_last_progress() -> None:
    from state_machine.machine import ConversationStateMachine
    from state_machine.states import AgentState

    options = TurnOptions()
    m = ConversationStateMachine(options)
    [play] = [a for a in m.say_first("Hello.", 0.0) if isinstance(a, A.PlayCanned)]
    assert m.state is AgentState.THINKING
    m.on_reply_progress(play.reply_id, options.thinking_timeout_s - 1)  # a tool call ended
    assert not any(isinstance(a, A.PlayCanned) for a in m.tick(options.thinking_timeout_s + 1))
    late = m.tick(2 * options.thinking_timeout_s)
    assert any(isinstance(a, A.PlayCanned) for a in late)  # stuck since its last progress
