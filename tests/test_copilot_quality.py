"""The copilot bench's answer scorer (bench/copilot_quality.py) and its document sets: it must
catch an ungrounded, an unfaithful and an off-voice answer, and pass a good one."""

from __future__ import annotations

import json

import pytest

from agent.copilot.answer_guard import voice_problems
from bench.copilot_bench import DATA, document_sets
from bench.copilot_quality import SHORT_WORDS, rates, score_answer, vocabulary

SETS = tuple(document_sets())
# teacher, accountant and warehouse: held out (written before anything of the copilot was tried
# on them; warehouse with headings of its own: "Work history", "Tools", "Working on")
QUESTION = "Where did you go to university, and what did you study?"
FACTS = ["Munich", "Computer Science"]


@pytest.fixture(scope="module")
def vocab():
    docs = [
        (DATA / name).read_text(encoding="utf-8") for name in ("resume.md", "job_description.md")
    ]
    return vocabulary([*docs, QUESTION])


def test_a_grounded_faithful_answer_in_the_candidates_voice_passes(vocab) -> None:
    score = score_answer(
        "I studied computer science at the Technical University of Munich, graduating in 2017.",
        FACTS,
        vocab,
    )
    assert score.grounded and score.faithful and score.voice and score.short, score
    assert score.facts_found == ("Munich", "Computer Science")


def test_an_answer_without_the_questions_facts_is_ungrounded(vocab) -> None:
    score = score_answer(
        "I have always loved learning new things and working in teams.", FACTS, vocab
    )
    assert not score.grounded and score.faithful and score.voice


def test_invented_employers_schools_numbers_and_technologies_are_unfaithful(vocab) -> None:
    score = score_answer(
        "I studied computer science at Stanford, then spent 15 years at "
        "Google working with kafka and rust.",
        FACTS,
        vocab,
    )
    assert score.grounded and not score.faithful
    assert set(score.invented) == {"Stanford", "15", "Google", "rust"}


def test_document_names_numbers_and_spellings_are_faithful(vocab) -> None:
    answer = (
        "Northwind Bank's checkout went from 900 ms to 180 ms; Lumen Pay serves "
        "30, 000 shops, and I expect €95k. Eight years of Go, and Kafka too."
    )
    assert score_answer(answer, ["180 ms"], vocab).invented == ()
    assert score_answer(
        "I took twelve hours and 2 years at Northwind.", ["Northwind"], vocab
    ).faithful
    # the question's own words are the interviewer's: "two hundred" is said back as 200
    asked = vocabulary(["Keep it under two hundred milliseconds?"])
    assert score_answer("I would keep it under 200 ms.", [], asked).faithful
    assert not score_answer("I would keep it under 300 ms.", [], asked).faithful


@pytest.mark.parametrize(
    "answer",
    [
        "Absolutely, I can. Please provide me with the resume.",
        "Yes, I can. Please share the relevant information.",
        "Could you clarify the question?",
        "You will lead the design of our next-generation payments platform.",
        "We are a leading payment processing platform for 30,000 online shops.",
        "Tidewater Games built the matchmaking service in Go for 2 million daily players.",
        "As an AI, I do not have a university degree.",
        "The candidate studied at the Technical University of Munich.",
        "I am a 200-bed teaching hospital in Leeds.",
        "I'm a payments platform for 30,000 online shops.",
        "I am the leading digital marketing agency, and I am hiring.",
    ],
)
def test_answers_not_in_the_candidates_voice_are_caught(vocab, answer: str) -> None:
    assert not score_answer(answer, FACTS, vocab).voice


@pytest.mark.parametrize(
    "answer",
    [
        "I am a bank teller turned backend engineer, and I built payments at Northwind.",
        "I'm a business analyst at heart: I measure everything.",
        "I am a team player, and I studied computer science in Munich.",
        "I am the engineer who led the platform rewrite at Northwind.",
        "I'm a nurse at the hospital, on the cardiac ward for six years.",
        "I am a product marketer for a fintech company.",
    ],
)
def test_a_role_named_after_an_employer_is_the_candidates_voice(vocab, answer: str) -> None:
    assert voice_problems(answer) == []


def test_long_answers_are_not_short(vocab) -> None:
    answer = "I studied computer science in Munich. " * 8
    score = score_answer(answer, FACTS, vocab)
    assert score.words > SHORT_WORDS and not score.short


def test_rates_count_unanswered_questions_as_failing(vocab) -> None:
    good = score_answer("I studied computer science in Munich.", FACTS, vocab)
    bad = score_answer("Please share your resume.", FACTS, vocab)
    assert rates([good.as_json(), bad.as_json(), None]) == {
        "grounded": 1 / 3,
        "faithful": 2 / 3,
        "voice": 1 / 3,
        "short": 2 / 3,
        "good": 1 / 3,
    }


def test_the_bench_finds_every_document_set() -> None:
    names = {p.name for p in SETS[1:]}
    assert SETS[0] == DATA
    assert names == {"nurse", "marketing", "teacher", "accountant", "warehouse"}


@pytest.mark.parametrize("folder", SETS, ids=lambda p: p.name)
def test_each_document_set_has_15_questions_whose_facts_are_in_its_documents(folder) -> None:
    docs = " ".join(
        (folder / name).read_text(encoding="utf-8").lower()
        for name in ("resume.md", "job_description.md")
    )
    questions = json.loads((folder / "questions.json").read_text(encoding="utf-8"))
    assert len(questions) >= 15
    for q in questions:
        assert q["question"].strip() and q["facts"], q
        # every question can be grounded: one of its facts, at least, is in the documents
        assert any(" ".join(f.lower().split()) in " ".join(docs.split()) for f in q["facts"]), q


def test_the_stt_bench_can_ask_every_set_s_questions() -> None:
    """`voxroom bench stt --sentences copilot` (the copilot's question tuning is measured on
    these)."""
    from bench.stt_bench import copilot_questions

    asked = copilot_questions()
    every = [
        q["question"]
        for folder in SETS
        for q in json.loads((folder / "questions.json").read_text(encoding="utf-8"))
    ]
    assert asked == every
