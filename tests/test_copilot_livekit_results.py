"""`voxroom bench copilot-livekit`'s reading of one question's answer streams, as the
candidate's client received them: a withdrawn answer is not the question's answer."""

from __future__ import annotations

from agent.protocol import ATTR_ANSWER_STATUS, ATTR_QUESTION
from bench.copilot_livekit import answer_result
from bench.room_client import CopilotAnswer, kept_answers


def _stream(status: str, question: str, chunks: list[tuple[float, str]]) -> CopilotAnswer:
    attributes = {ATTR_QUESTION: question, ATTR_ANSWER_STATUS: status}
    return CopilotAnswer(attributes, chunks, done_at=chunks[-1][0] if chunks else None)


def test_an_answer_withdrawn_before_the_question_ended_is_counted_not_timed():
    half = _stream("withdrawn", "Where did you go to university?", [(0.9, "I studied")])
    empty = _stream("withdrawn", "Where did you go to university?", [])
    whole = _stream(
        "complete",
        "Where did you go to university, and what did you study?",
        [(1.35, "- "), (1.4, "I studied physics"), (2.0, " at Leeds.")],
    )
    streams = [half, empty, whole]
    assert kept_answers(streams) == [whole]

    result = answer_result("Where did you go to university, and what did you study?", 1.0, streams)

    assert result["first_words_ms"] == 400  # the kept answer's first letters, not the bullet
    assert result["whole_answer_ms"] == 1000
    assert result["answer"] == "- I studied physics at Leeds."
    assert result["heard"] == "Where did you go to university, and what did you study?"
    assert result["withdrawn"] == 2 and result["withdrawn_with_words"] == 1


def test_a_replaced_answer_times_the_first_words_and_keeps_the_replacement():
    model = _stream("replaced", "What is your biggest weakness?", [(1.3, "Please share")])
    guard = _stream("complete", "What is your biggest weakness?", [(2.5, "I delegate late.")])

    result = answer_result("What is your biggest weakness?", 1.0, [model, guard])

    assert result["first_words_ms"] == 300
    assert result["replaced"] and result["llm_answer"] == "Please share"
    assert result["answer"] == "I delegate late." and result["withdrawn"] == 0
