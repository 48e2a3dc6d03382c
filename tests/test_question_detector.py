"""The question check the copilot uses as its endpoint cue (state_machine.question_detector)."""

from __future__ import annotations

import pytest

from state_machine.question_detector import check_question, is_complete_question

COMPLETE = [
    "What is your biggest weakness?",
    "Why?",
    "How do you handle conflict in a team.",  # Whisper often ends questions with a period
    "Can you describe your last project?",
    "Have you ever worked with Kafka.",
    "Is there anything you would like to ask us?",
    "Tell me about yourself.",
    "So, tell me about a time you disagreed with your manager.",
    "Walk me through your resume.",
    "Describe your experience with Kubernetes.",
    "Okay, great. Explain how you would design a rate limiter.",
    "I'd like to hear about your biggest failure.",
    "Do you prefer working alone or in a team?",
    # a statement and the question after it, joined by Whisper with a comma
    "We use Postgres, which databases have you run in production.",
    "Our team is remote, how do you keep in touch with colleagues.",
    "The role is hybrid, would you be able to come in twice a week.",
]
INCOMPLETE = [
    "Tell me about a time when you",  # no end punctuation
    "Tell me about a time when you had to.",  # dangling "to"
    "What would you do if",
    "Tell me about.",  # nothing to ask about
    "Describe.",
    "Can you walk me through your last project",
    "How did you handle the outage and",
]
STATEMENTS = [
    "Thanks for joining us today.",
    "Great answer.",
    "I see you worked at Northwind Bank.",
    "Let me share my screen.",
    # a relative clause is no question
    "We use Kafka, which is the backbone of our platform.",
    "I worked in Berlin, where I led a team.",
    "We moved to Go, which we use everywhere.",
    "",
    "[music]",
]


@pytest.mark.parametrize("text", COMPLETE)
def test_complete_questions(text: str) -> None:
    check = check_question(text)
    assert check.is_question and check.complete, check
    assert is_complete_question(text)


@pytest.mark.parametrize("text", INCOMPLETE)
def test_questions_that_have_not_ended(text: str) -> None:
    check = check_question(text)
    assert check.is_question and not check.complete, check


@pytest.mark.parametrize("text", STATEMENTS)
def test_statements_ask_nothing(text: str) -> None:
    check = check_question(text)
    assert check == check.__class__(False, False, "")


def test_the_question_starts_at_its_first_asking_sentence() -> None:
    check = check_question("Thanks for that. Okay. What did you do at Northwind? Take your time.")
    assert check.question == "What did you do at Northwind? Take your time."
    assert check.complete


def test_non_speech_annotations_are_ignored() -> None:
    assert check_question("[coughs] What is your notice period?").question == (
        "What is your notice period?"
    )
