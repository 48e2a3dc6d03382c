"""Is a copilot answer worth reading? Pure scoring of one answer against its question's expected
facts and the candidate's documents (no model, no I/O).

- grounded: the answer names at least one of the question's expected facts (case-insensitive
  containment; a fact is a phrase from the documents, such as "Munich" or "180 ms").
- faithful: it names no employer, school, number or technology that is not in the documents
  or the question. The vocabulary is every word and number of the documents; in the answer,
  a name (a capitalised word inside a sentence, or an acronym / CamelCase word anywhere), a
  number (digits or a number word such as "ten") or a known technology term absent from the
  vocabulary is an invention.
- voice: the candidate's own words: first person, and it never asks for the resume, the
  question or more information, never speaks as the interviewer or the company ("You will
  lead ...", "We are a leading ...") or as an assistant.
- short: the answer is at most `SHORT_WORDS` words (what one reads at a glance in a meeting).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from agent.copilot.answer_guard import (
    Vocabulary,
    invented_terms,
    normal_text,
    vocabulary,
    voice_problems,
    word_count,
)

__all__ = ["SHORT_WORDS", "AnswerScore", "rates", "score_answer", "vocabulary", "word_count"]

SHORT_WORDS = 40


@dataclass(frozen=True)
class AnswerScore:
    grounded: bool
    faithful: bool
    voice: bool
    short: bool
    facts_found: tuple[str, ...]
    invented: tuple[str, ...]
    """Names, numbers and technologies the documents do not hold."""
    voice_problems: tuple[str, ...]
    words: int

    def as_json(self) -> dict[str, object]:
        """Every field, its tuples as lists."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def score_answer(answer: str, facts: Sequence[str], vocab: Vocabulary) -> AnswerScore:
    """Score `answer` against its question's expected `facts` and the documents' `vocab`
    (build it with the question among the texts)."""
    text = " ".join(normal_text(answer).lower().split())
    found = tuple(f for f in facts if " ".join(normal_text(f).lower().split()) in text)
    invented = tuple(invented_terms(answer, vocab))
    problems = tuple(voice_problems(answer))
    words = word_count(answer)
    return AnswerScore(
        grounded=bool(found),
        faithful=not invented,
        voice=not problems,
        short=0 < words <= SHORT_WORDS,
        facts_found=found,
        invented=invented,
        voice_problems=problems,
        words=words,
    )


RATES = ("grounded", "faithful", "voice", "short")


def rates(scores: Sequence[Mapping[str, object] | None]) -> dict[str, float]:
    """The share of questions whose answer passes each check (`AnswerScore.as_json()`s; an
    unanswered question, None, passes none), and of those that pass grounded, faithful and
    voice together ("good")."""
    n = len(scores)
    if n == 0:
        return {}
    out = {key: sum(1 for s in scores if s is not None and s[key]) / n for key in RATES}
    out["good"] = (
        sum(1 for s in scores if s is not None and s["grounded"] and s["faithful"] and s["voice"])
        / n
    )
    return out
