"""The endpointing core in virtual time: the end-of-turn score's effect on the silence that
ends a turn, its bound, and barge-in that tells an interruption from a backchannel.

Timeline defaults (tests/machine_timeline.py): the STT answers 200 ms after a request, the
detector 60 ms after its; a candidate is asked 60 ms into a pause.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pytest

from state_machine import actions as A
from state_machine import events as E
from state_machine.backchannel import interrupts, is_backchannel
from state_machine.barge_in import SoFar, read_going_on
from state_machine.endpointing import EndpointOptions, silence_for_score
from state_machine.options import TurnOptions
from tests.machine_timeline import FakeEngines, Timeline, said_by, speech

SCORED = TurnOptions(endpoint=EndpointOptions(scored=True))
PAUSING = TurnOptions(duck=False)  # a sound over the answer pauses it at once


def approx(x: float) -> object:
    return pytest.approx(x, abs=1e-6)


def scored(transcript, score, **kw) -> Timeline:  # type: ignore[no-untyped-def]
    return Timeline(options=SCORED, engines=FakeEngines(transcript=transcript, score=score, **kw))


def test_the_silence_follows_the_score_between_its_bounds() -> None:
    o = EndpointOptions()
    assert silence_for_score(o, 0.9) == o.silence_complete_s == 0.2
    assert silence_for_score(o, 0.0) == o.silence_unfinished_s == 1.5
    mid = (o.complete_score + o.unfinished_score) / 2
    assert silence_for_score(o, mid) == approx((o.silence_complete_s + o.silence_unfinished_s) / 2)
    scores = [i / 100 for i in range(101)]
    silences = [silence_for_score(o, s) for s in scores]
    assert silences == sorted(silences, reverse=True)  # more sure it is complete: sooner


def test_a_complete_question_ends_as_soon_as_it_is_scored() -> None:
    tl = scored(lambda s, e: "What time is it?", lambda text: 0.9)
    tl.run(speech((0.5, 2.0)), until_s=6.0)
    [(t_score, score)] = tl.of(A.ScoreTurn)
    assert t_score == approx(2.26) and score.text == "What time is it?"  # at the candidate
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert t_commit == approx(2.32)  # the score came 60 ms later; 0.2 s had passed
    [(t_spec, spec)] = tl.of(A.StartReply)
    assert spec.speculative and t_spec == approx(2.26)  # the speculative start is unchanged


def test_an_unfinished_start_waits_through_a_thinking_pause() -> None:
    def transcript(start: float, end: float) -> str:
        return "Could you tell me." if end < 2.5 else "Could you tell me which bus goes there?"

    def score(text: str) -> float:
        return 0.0 if text == "Could you tell me." else 0.8

    tl = scored(transcript, score)
    tl.run(speech((0.5, 1.5), (2.2, 3.5)), until_s=8.0)  # a 0.7 s pause after "tell me"
    [(t_commit, commit)] = tl.of(A.CommitUserTurn)
    assert commit.text == "Could you tell me which bus goes there?"
    assert t_commit == approx(3.82)
    assert tl.audible and tl.audible[0][0] >= 3.82  # nothing heard inside the pause
    assert [a.reason for _, a in tl.of(A.CancelReply)] == ["user resumed speaking"]


@pytest.mark.parametrize(
    ("said", "score"),
    [
        ("Could you tell me.", 0.0),  # scored unfinished, and the speaker never goes on
        ("I need a recipe for dinner, so, um.", 0.9),  # a trailing filler, whatever the score
        # ... however Whisper spells it (tiny.en wrote both for the bench's hesitant cases)
        ("I think the best option is umm.", 0.9),
        ("My question is about... Uhh...", 0.9),
        # A word that may end a sentence, not ended there: the word list decides.
        ("Is it true that", 0.9),
        ("I was thinking that...", 0.9),
        ("Can you tell me about the.", 0.9),  # a word that never ends one, whatever follows
    ],
)
def test_an_unfinished_turn_ends_at_the_bound(said: str, score: float) -> None:
    tl = scored(lambda s, e: said, lambda text: score)
    tl.run(speech((0.5, 1.5)), until_s=5.0)
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert t_commit == approx(1.5 + SCORED.endpoint.silence_unfinished_s)


@pytest.mark.parametrize(
    ("said", "score", "ends_after_s"),
    [
        # Through LiveKit, "I already tried that." said over the answer waited the 1.5 s bound
        # for its last word alone, scored 0.054 by the text model.
        ("I've already tried that.", 0.054, 0.2),
        ("What is it for?", 0.9, 0.2),
        ("Is it true that.", 0.0, 1.5),  # the model tells an unfinished one apart
    ],
)
def test_a_word_that_may_end_a_sentence_ended_there_is_left_to_the_model(
    said: str, score: float, ends_after_s: float
) -> None:
    tl = scored(lambda s, e: said, lambda text: score)
    tl.run(speech((0.5, 1.5)), until_s=5.0)
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert t_commit == approx(max(1.5 + ends_after_s, 1.82))  # the score came at 1.82


def test_frames_held_up_inside_a_sentence_are_no_pause() -> None:
    # The worker's event loop or the network stalls 0.4 s mid-sentence: the timer ticks on
    # while the frames wait, then they come in a bunch. Counted on the clock, the stall was a
    # pause long enough to end a turn the model scored complete.
    tl = scored(lambda s, e: "What time is it?", lambda text: 0.9)
    tl.run(speech((0.5, 3.0)), until_s=6.0, stalls=((1.8, 2.2),))
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert t_commit > 3.0
    assert tl.audible and tl.audible[0][0] > 3.0


def test_a_busy_event_loop_in_a_pause_is_not_the_speakers_silence() -> None:
    # "Could you tell me ... which bus goes to the airport?": the 0.3 s pause is scored
    # unfinished (a 1.2 s wait), and the worker's loop is busy for 1.3 s inside it. The
    # frames of the pause and of the words after it come in a bunch when it frees up;
    # stamped on arrival, the first of them was 1.4 s after the last voiced frame.
    def transcript(start: float, end: float) -> str:
        return "Could you tell me" if end < 1.9 else "Could you tell me which bus goes there?"

    tl = scored(transcript, lambda text: 0.0 if text == "Could you tell me" else 0.9)
    tl.run(speech((0.5, 1.5), (1.8, 3.0)), until_s=6.0, loop_stalls=((1.6, 2.9),))
    [(t_commit, commit)] = tl.of(A.CommitUserTurn)
    assert t_commit > 3.0 and commit.text.endswith("there?")
    assert tl.audible and tl.audible[0][0] > 3.0


def test_an_input_that_stops_sending_frames_ends_its_turn_late_by_the_allowance() -> None:
    tl = scored(lambda s, e: "What time is it?", lambda text: 0.9)
    tl.run(speech((0.5, 1.5)), until_s=5.0, stalls=((1.5, 9.0),))  # muted as the words end
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    e = SCORED.endpoint
    # The candidate is asked once the allowance is spent, and scored after the decode.
    asked = 1.5 + e.late_input_s + e.candidate_silence_s
    assert t_commit == approx(asked + FakeEngines().stt_delay_s + FakeEngines().score_delay_s)


def test_the_same_words_after_more_voice_are_scored_again() -> None:
    # "Could you recommend a film for tonight, uh ... something funny?": the STT drops the
    # "uh", so the candidate after it has the same words; an audio model hears the hesitation.
    first = "Could you recommend a film for tonight?"

    def transcript(start: float, end: float) -> str:
        return first if end < 3.1 else "Could you recommend a film for tonight? Something funny?"

    e = SCORED.endpoint
    unsure = (e.complete_score + e.unfinished_score) / 2  # the words alone: a 0.7 s wait
    scores = iter([unsure, 0.0, 0.9])  # before the "uh", after it, the whole question
    tl = scored(transcript, lambda text: next(scores))
    tl.run(speech((0.5, 2.0), (2.35, 2.6), (3.2, 4.0)), until_s=8.0)
    assert [a.text for _, a in tl.of(A.ScoreTurn)] == [first, first, transcript(0, 4)]
    [(t_commit, commit)] = tl.of(A.CommitUserTurn)
    assert commit.text == transcript(0, 4) and t_commit > 4.0
    assert tl.audible and tl.audible[0][0] >= t_commit  # never heard over the user


def test_a_middling_score_waits_in_between() -> None:
    o = SCORED.endpoint
    mid = (o.complete_score + o.unfinished_score) / 2
    tl = scored(lambda s, e: "Tell me a joke.", lambda text: mid)
    tl.run(speech((0.5, 1.5)), until_s=5.0)
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    silence = (o.silence_complete_s + o.silence_unfinished_s) / 2
    frame = SCORED.frame_s
    assert t_commit == approx(1.5 + math.ceil(silence / frame - 1e-6) * frame)  # the next frame


def test_a_failed_detector_falls_back_to_the_text_cue() -> None:
    tl = scored(lambda s, e: "What time is it?", lambda text: None)
    tl.run(speech((0.5, 2.0)), until_s=6.0)
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert t_commit == approx(2.32)  # cued 0.3 s had passed when the failure came


def test_a_slow_detector_is_waited_for_only_up_to_the_bound() -> None:
    tl = scored(lambda s, e: "What time is it?", lambda text: 0.9, score_delay_s=5.0)
    tl.run(speech((0.5, 2.0)), until_s=6.0)
    [(t_commit, _)] = tl.of(A.CommitUserTurn)
    assert t_commit == approx(2.0 + SCORED.endpoint.silence_unfinished_s)


def test_unscored_options_never_ask_for_a_score() -> None:
    tl = Timeline()
    tl.run(speech((0.5, 2.0)), until_s=4.0)
    assert tl.of(A.ScoreTurn) == []


# ---- barge-in -----------------------------------------------------------------------------


def answer_then(
    interjection: str, early: str = "", heard_whole_at_s: float = 0.0
) -> Callable[[float, float], str]:
    """Transcripts of the question (what starts before 2.5 s), then of `interjection`; of
    only `early`, its start, in a request that ends before `heard_whole_at_s`."""

    def transcript(start: float, end: float) -> str:
        if start < 2.5:
            return "what time is it?"
        return early if end < heard_whole_at_s else interjection

    return transcript


# "and Emma.": how Whisper tiny.en heard a synthesized "mm hmm" through LiveKit.
@pytest.mark.parametrize("duck", [True, False])
@pytest.mark.parametrize(
    "said", ["Mm-hmm.", "Okay.", "Right, right.", "Yeah.", "Ha ha.", "and Emma."]
)
def test_a_backchannel_yields_then_plays_on_and_is_no_turn(said: str, duck: bool) -> None:
    tl = Timeline(
        TurnOptions(duck=duck), FakeEngines(transcript=answer_then(said), reply_length_s=3.0)
    )
    # 1.6 s after the question: over the answer, not the user going on after a pause
    # (TurnOptions.continuation_s), where "and Emma." would be words that go on.
    tl.run(speech((0.5, 1.4), (3.0, 3.4)), until_s=9.0)
    [(t_yield, _)] = tl.of(A.DuckPlayback if duck else A.PausePlayback)
    [(t_resume, _)] = tl.of(A.ResumePlayback)
    assert t_yield == approx(3.04)  # as fast as a real interruption
    assert not duck or tl.of(A.PausePlayback) == []  # ducked, never silenced
    # The transcript asked 60 ms after the sound covers it all; ducked, the sound was also
    # decoded again while it went on (3.36), and that decode is waited for first.
    assert t_resume == approx(3.76 if duck else 3.66)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == ["what time is it?"]
    assert tl.of(A.CancelReply) == [] and tl.of(E.BargeIn) == []
    assert sum(b - a for a, b in tl.audible) == approx(3.0)  # the whole answer was heard
    assert tl.machine.counters.backchannels == 1


@pytest.mark.parametrize("said", ["Mm-mm, mm-mm, mm-mm", "Ha ha ha ha ha ha."])
def test_a_long_hum_or_laugh_as_the_answer_ends_is_no_turn(said: str) -> None:
    # However many hums (how Whisper tiny.en wrote espeak-ng's "mm hmm"; a laugh), it says
    # nothing to the agent: not a turn of its own when it runs past the answer's end, as
    # "Mm-hmm." is not.
    tl = Timeline(engines=FakeEngines(transcript=answer_then(said), reply_length_s=1.5))
    tl.run(speech((0.5, 1.4), (3.0, 4.0)), until_s=9.0)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == ["what time is it?"]
    assert tl.of(A.CancelReply) == [] and tl.of(E.BargeIn) == []


def test_a_real_interruption_stops_the_answer_and_becomes_the_next_turn() -> None:
    interruption = said_by("Wait, stop, I meant Tokyo.", since=3.0)
    tl = Timeline(
        PAUSING,
        FakeEngines(transcript=lambda s, e: "what time is it?" if s < 2.5 else interruption(e)),
    )
    # The answer is heard from 2.26, 0.74 s before the user reacts (`reaction_s`).
    tl.run(speech((0.5, 1.6), (3.0, 4.0)), until_s=8.0)
    [(t_pause, _)] = tl.of(A.PausePlayback)
    [(t_barge, _)] = tl.of(E.BargeIn)
    assert t_pause == approx(3.04)  # silent at once
    assert t_barge == approx(3.86)  # "Wait, stop, I", while the user still talks
    commits = [a.text for _, a in tl.of(A.CommitUserTurn)]
    assert commits == ["what time is it?", "Wait, stop, I meant Tokyo."]


def test_an_interruption_that_starts_like_a_backchannel_still_interrupts() -> None:
    heard = answer_then("Okay, and what about tomorrow?", early="Okay.", heard_whole_at_s=3.5)
    tl = Timeline(engines=FakeEngines(transcript=heard, reply_length_s=4.0))
    # The answer is heard from 2.26, 0.74 s before the user reacts (`reaction_s`).
    tl.run(speech((0.5, 1.6), (3.0, 4.2)), until_s=9.0)
    assert tl.of(A.ResumePlayback) == []  # "Okay." came while the user was still talking
    assert tl.of(E.BargeIn)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)][-1] == "Okay, and what about tomorrow?"


@pytest.mark.parametrize(
    ("said", "early", "heard_whole_at_s", "ends_s", "duck", "resumed_at"),
    [
        ("Thank you.", "Thank.", 3.4, 3.5, False, 3.76),
        ("Thank you.", "Thank.", 3.4, 3.5, True, 3.80),
        # Through Opus, the first 0.4 s of espeak-ng's "that makes sense" was read "Not to
        # me.": a cue and three words, which ended the answer from a decode while the sound
        # went on. So little of a sound may pause it (3.76, ducked), not end it.
        ("That makes sense.", "Not to me.", 3.6, 3.8, False, 4.06),
        ("That makes sense.", "Not to me.", 3.6, 3.8, True, 4.06),
    ],
)
def test_the_first_fragment_of_a_backchannel_does_not_stop_the_answer(
    said: str, early: str, heard_whole_at_s: float, ends_s: float, duck: bool, resumed_at: float
) -> None:
    # The early request hears a fragment; ducked, the sound is decoded again while it goes on
    # (3.36), and that decode is done before the one of the whole sound is asked (3.56);
    # its transcript (3.76) is judged once the sound has been quiet `duck_quiet_s` (3.80).
    # The answer is heard from 2.26, 0.74 s before the sound (`reaction_s`).
    heard = answer_then(said, early=early, heard_whole_at_s=heard_whole_at_s)
    tl = Timeline(TurnOptions(duck=duck), FakeEngines(transcript=heard, reply_length_s=3.0))
    tl.run(speech((0.5, 1.6), (3.0, ends_s)), until_s=9.0)
    assert tl.of(E.BargeIn) == [] and tl.of(A.CancelReply) == []
    [(t_resume, _)] = tl.of(A.ResumePlayback)
    assert t_resume == approx(resumed_at)  # the whole sound, transcribed once it stopped
    assert sum(b - a for a, b in tl.audible) == approx(3.0)
    assert [a.text for _, a in tl.of(A.CommitUserTurn)] == ["what time is it?"]


def test_an_interruption_heard_whole_is_answered_from_that_transcript() -> None:
    heard = answer_then("No, in Tokyo?", early="No.", heard_whole_at_s=3.4)
    tl = Timeline(engines=FakeEngines(transcript=heard))
    # The answer is heard from 2.26, 0.74 s before the user reacts (`reaction_s`).
    tl.run(speech((0.5, 1.6), (3.0, 3.5)), until_s=9.0)
    [(t_barge, _)] = tl.of(E.BargeIn)
    [(t_commit, commit)] = tl.of(A.CommitUserTurn)[1:]
    assert commit.text == "No, in Tokyo?"
    assert t_barge == approx(3.76) and t_commit == approx(3.80)  # no second transcription


def test_a_sentence_made_up_from_a_short_hum_is_no_words() -> None:
    # 0.5 s of sound cannot hold nine words: the STT made them up ("mm hmm" through Opus).
    tl = Timeline(
        engines=FakeEngines(
            transcript=answer_then("and I'm not going to be able to do"), reply_length_s=3.0
        )
    )
    tl.run(speech((0.5, 2.0), (3.0, 3.5)), until_s=9.0)
    assert tl.of(E.BargeIn) == [] and tl.of(A.CancelReply) == []
    assert tl.of(A.ResumePlayback) and sum(b - a for a, b in tl.audible) == approx(3.0)


def test_a_pause_whose_transcript_never_comes_resumes_after_the_stall_bound() -> None:
    engines = FakeEngines(transcript=answer_then(""), stt_hangs_after_s=2.9, reply_length_s=3.0)
    tl = Timeline(PAUSING, engines)  # ducked, the answer plays on to its end meanwhile
    tl.run(speech((0.5, 2.0), (3.0, 3.3)), until_s=12.0)
    [(t_resume, _)] = tl.of(A.ResumePlayback)
    assert t_resume == approx(3.04 + TurnOptions().speaking_stall_s)


def test_without_backchannel_resume_words_stop_the_answer() -> None:
    opts = replace(TurnOptions(), backchannel_resume=False)
    tl = Timeline(options=opts, engines=FakeEngines(transcript=answer_then("Okay.")))
    tl.run(speech((0.5, 2.0), (3.0, 3.4)), until_s=8.0)
    assert tl.of(E.BargeIn) and tl.of(A.ResumePlayback) == []


@pytest.mark.parametrize(
    ("text", "backchannel", "interrupting"),
    [
        ("Mm-hmm.", True, False),
        ("Mhm", True, False),
        ("Uh huh.", True, False),
        ("okay", True, False),
        ("OK, right.", True, False),
        ("Yeah, yeah.", True, False),
        ("I see.", True, False),
        ("Got it.", True, False),
        ("Ha ha ha.", True, False),
        ("Thank you.", True, False),
        ("[coughs]", False, False),
        ("", False, False),
        ("Stop.", False, True),
        ("Wait, what?", False, True),
        ("No.", False, True),
        ("Okay, but what about Tokyo?", False, True),
        ("yeah yeah yeah yeah yeah", False, True),
        ("I see the problem.", False, True),
        ("Hold on.", False, True),
        ("Why?", False, True),
        ("Tokyo?", False, True),
        ("and remember", False, False),
        ("and Emma.", False, False),
        ("Amen.", False, False),
        ("Thank.", False, False),
        ("and then the", False, False),
        ("So, so.", False, False),
        ("and then what?", False, True),
        # How Whisper tiny.en heard Piper's and espeak-ng's "mm hmm" (offline, 2026-12-05).
        ("Mm-mm, mm-mm, mm-mm", True, False),
        ("Ha ha ha ha ha ha.", True, False),
        ("and then love.", False, False),
        ("and momentum.", False, False),
        ("Tell me about Lisbon instead.", False, True),
        # ... and its "ha ha ha" through Opus (offline, 2026-12-06): one word over and over.
        ("Far, far, far", True, False),
        ("Bye, bye, bye.", True, False),
        ("A-ha-ha.", False, False),
        ("No, no, no.", False, True),
        ("Wait, wait.", False, True),
        ("Oh, really?", True, False),
        ("That's right.", True, False),
        ("Really? Why?", False, True),
        # An acknowledgement that goes on with a conjunction takes the turn, before its words.
        ("right and", False, True),
        ("Okay, so", False, True),
        ("Uh, and", False, False),  # a hesitation, no acknowledgement
        ("and right", False, False),
        # An acknowledgement tagged on ends what was said, and says nothing to the agent:
        # Whisper tiny.en's readings of Piper's "uh huh, yeah" and "okay okay" through Opus.
        ("I hope, yeah.", False, False),
        ("We're okay, okay.", False, False),
        ("I see the problem, okay.", False, True),
        ("Is that right?", False, True),
    ],
)
def test_backchannel_words(text: str, backchannel: bool, interrupting: bool) -> None:
    assert is_backchannel(text) is backchannel
    assert interrupts(text) is interrupting


def test_two_words_made_up_from_the_start_of_a_hum_wait_for_the_whole_sound() -> None:
    # Through LiveKit the first half-second of "mm hmm" was heard as "and remember".
    heard = answer_then("Mm-hmm.", early="and remember", heard_whole_at_s=3.4)
    tl = Timeline(engines=FakeEngines(transcript=heard, reply_length_s=3.0))
    tl.run(speech((0.5, 2.0), (3.0, 3.5)), until_s=9.0)
    assert tl.of(E.BargeIn) == [] and tl.of(A.CancelReply) == []
    assert tl.of(A.ResumePlayback) and sum(b - a for a, b in tl.audible) == approx(3.0)


def test_a_stop_cue_stops_the_answer_however_little_of_the_sound_is_heard() -> None:
    heard = answer_then("Wait, I meant Tokyo.", early="Wait,", heard_whole_at_s=3.6)
    tl = Timeline(engines=FakeEngines(transcript=heard, reply_length_s=3.0))
    tl.run(speech((0.5, 2.0), (3.0, 4.0)), until_s=9.0)
    [(t_pause, _)] = tl.of(A.PausePlayback)
    assert t_pause < 3.5  # from a decode of less than words_read_after_s of the sound
    assert tl.of(E.BargeIn)


@pytest.mark.parametrize(
    ("text", "heard_s", "read_before", "so_far"),
    [
        ("not to make,", 0.7, "Not to me.", SoFar.PAUSE),  # agreed: "not to"
        ("not to make,", 0.8, "not to make.", SoFar.END),
        ("Tell me about", 0.7, "Tell me", SoFar.PAUSE),
        ("Tell me about Lisbon", 0.9, "Tell me about", SoFar.END),
        ("Wait, stop, I", 0.4, "", SoFar.END),  # a stop cue: sure this early, and alone
        ("That is not", 0.7, "", SoFar.PAUSE),  # "not" interrupts, but asks nothing to stop
        ("Tell me about", 0.4, "Tell me about", SoFar.PAUSE),  # too little heard to be sure
        ("That makes sense.", 0.8, "not to make,", SoFar.WAIT),
    ],
)
def test_words_without_a_stop_cue_end_the_answer_only_when_two_reads_agree(
    text: str, heard_s: float, read_before: str, so_far: SoFar
) -> None:
    assert read_going_on(text, heard_s, read_before, TurnOptions()) is so_far


def test_a_cough_heard_as_you_is_no_words() -> None:
    tl = Timeline(engines=FakeEngines(transcript=answer_then("you"), reply_length_s=3.0))
    tl.run(speech((0.5, 2.0), (3.0, 3.3)), until_s=9.0)
    assert tl.of(E.BargeIn) == [] and tl.of(A.CancelReply) == []
    assert tl.machine.counters.false_interruptions == 1
    assert sum(b - a for a, b in tl.audible) == approx(3.0)
