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

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

SHORT_WORDS = 40

_WORD = re.compile(r"[^\W_](?:[\w+#]|['’.\-/](?=[^\W_]))*")
_DIGITS = re.compile(r"\d+(?:\.\d+)?")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n]\s*|\n\s*[-*•]\s*)$")
# Thousands written "30,000", "30 000" or, as the small model does, "30, 000".
_THOUSANDS = re.compile(r"(?<=\d)(?:,\s?|\s)(?=\d{3}\b)")

NUMBER_WORDS = {
    "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
    "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90, "hundred": 100, "thousand": 1000, "million": 1_000_000,
}
"""Spelled numbers an answer may invent ("over ten years"); "one" is left out: "one of"."""

TECH_TERMS = frozenset("""
    java javascript typescript kotlin scala rust ruby php perl haskell elixir erlang clojure
    c++ c# .net dotnet golang python django flask fastapi spring node.js nodejs react angular
    vue svelte jquery aws azure gcp kubernetes k8s docker podman terraform ansible puppet chef
    kafka rabbitmq redis memcached postgresql postgres mysql mariadb sqlite mongodb cassandra
    dynamodb elasticsearch opensearch clickhouse snowflake bigquery redshift hadoop airflow
    dbt tableau looker powerbi grafana prometheus datadog splunk jenkins gitlab github
    circleci graphql grpc protobuf linux windows macos ios android tensorflow pytorch
    sagemaker lambda serverless nginx istio envoy consul vault helm openshift salesforce
    hubspot marketo mailchimp hootsuite semrush sap oracle excel epic cerner meditech
""".split())
"""Technology names an answer may invent even in lower case ("experience with kafka")."""

_ALLOWED_NAMES = frozenset({"i", "i'm", "i’m", "i've", "i’ve", "i'd", "i’d", "i'll", "i’ll"})

_FIRST_PERSON = re.compile(r"\bI\b|\bI['’](?:m|ve|d|ll)\b|\b(?:my|me|mine|myself)\b",
                           re.IGNORECASE)
_OFF_VOICE = tuple(re.compile(p, re.IGNORECASE) for p in (
    # asks for something instead of answering
    r"\b(?:please|kindly)\s+(?:provide|share|send|give|paste|upload|clarify|specify|tell|let)",
    r"\b(?:share|provide|send|give|paste|upload)\s+(?:me\s+)?(?:with\s+)?(?:your|the|a|more)\s+"
    r"(?:resume|cv|question|details|information|context|job description)",
    r"\b(?:could|can|would)\s+you\s+(?:please\s+)?(?:provide|share|clarify|specify|repeat|"
    r"rephrase|tell me more|send|give)",
    r"\bmore (?:information|details|context)\b",
    r"\bwhat (?:is|was) (?:the|your) question\b",
    r"\byour (?:resume|cv)\b",
    # speaks as an assistant, the interviewer or the company
    r"\bas an ai\b", r"\blanguage model\b",
    r"\bI(?:['’]m| am) (?:just )?(?:an? )?(?:ai|assistant|interview copilot|candidate, so)\b",
    r"\bthe candidate\b",
    r"\byou(?:['’]ll| will)\b",
    r"\bwe are (?:a|an)\b",
))


@dataclass(frozen=True)
class Vocabulary:
    """What the documents (and the question) name: lower-case words, and their numbers."""

    words: frozenset[str]
    numbers: frozenset[float]

    def knows_number(self, value: float) -> bool:
        # "95k" for "95,000"; "two hundred" said as "200" in the question
        return value in self.numbers or value * 1000 in self.numbers

    def knows(self, word: str) -> bool:
        w = _possessive(word.lower())
        return w in self.words or w.rstrip(".") in self.words


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
        return {"grounded": self.grounded, "faithful": self.faithful, "voice": self.voice,
                "short": self.short, "facts_found": list(self.facts_found),
                "invented": list(self.invented), "voice_problems": list(self.voice_problems),
                "words": self.words}


def _possessive(word: str) -> str:
    for suffix in ("'s", "’s", "s'", "s’"):
        if word.endswith(suffix) and len(word) > len(suffix) + 1:
            return word[: -len(suffix)] + ("s" if suffix[0] == "s" else "")
    return word


def _normal(text: str) -> str:
    return _THOUSANDS.sub("", " ".join(text.split()))


def _numbers(text: str) -> set[float]:
    """The numbers `text` names: in digits, spelled ("twelve-hour"), or both as a run of
    spelled words ("two hundred": 2, 100 and 200)."""
    found = {float(m) for m in _DIGITS.findall(_normal(text))}
    total = current = 0
    for word in _WORD.findall(text.lower()):
        for part in re.split(r"[\-/]", word):
            value = NUMBER_WORDS.get(part)
            if value is None:
                if total or current:
                    found.add(float(total + current))
                total = current = 0
                continue
            found.add(float(value))
            if value == 100:
                current = max(current, 1) * 100
            elif value >= 1000:
                total, current = total + max(current, 1) * value, 0
            else:
                current += value
    if total or current:
        found.add(float(total + current))
    return found


def vocabulary(texts: Iterable[str]) -> Vocabulary:
    """The vocabulary of the documents (and the question: what the interviewer said)."""
    words: set[str] = set()
    numbers: set[float] = set()
    for text in texts:
        for word in _WORD.findall(_normal(text)):
            lower = word.lower()
            words.add(_possessive(lower))
            words.update(part for part in re.split(r"[\-/.]", lower) if part)
        numbers |= _numbers(text)
    return Vocabulary(frozenset(words), frozenset(numbers))


def invented_terms(answer: str, vocab: Vocabulary) -> list[str]:
    """The answer's names, numbers and technology terms that `vocab` does not hold."""
    text = _normal(answer)
    invented: list[str] = []
    for m in _WORD.finditer(text):
        word = m.group(0).rstrip(".")
        lower = word.lower()
        if lower in _ALLOWED_NAMES or vocab.knows(word):
            continue
        sentence_start = bool(_SENTENCE_START.search(text[: m.start()]))
        acronym_or_camel = any(c.isupper() for c in word[1:])
        is_name = word[0].isupper() and (not sentence_start or acronym_or_camel)
        numbers = [float(d) for d in _DIGITS.findall(word)]
        if lower in NUMBER_WORDS:
            numbers.append(float(NUMBER_WORDS[lower]))
        if numbers:
            if not all(vocab.knows_number(n) for n in numbers):
                invented.append(word)
        elif is_name or lower in TECH_TERMS:
            invented.append(word)
    return list(dict.fromkeys(invented))


def voice_problems(answer: str) -> list[str]:
    """Why the answer is not the candidate speaking (empty: it is)."""
    problems = [m.group(0) for p in _OFF_VOICE if (m := p.search(answer))]
    if not _FIRST_PERSON.search(answer):
        problems.append("not in the first person")
    return problems


def word_count(text: str) -> int:
    return sum(1 for word in text.split() if any(c.isalnum() for c in word))


def score_answer(answer: str, facts: Sequence[str], vocab: Vocabulary) -> AnswerScore:
    """Score `answer` against its question's expected `facts` and the documents' `vocab`
    (build it with the question among the texts)."""
    text = " ".join(_normal(answer).lower().split())
    found = tuple(f for f in facts if " ".join(_normal(f).lower().split()) in text)
    invented = tuple(invented_terms(answer, vocab))
    problems = tuple(voice_problems(answer))
    words = word_count(answer)
    return AnswerScore(grounded=bool(found), faithful=not invented, voice=not problems,
                       short=0 < words <= SHORT_WORDS, facts_found=found, invented=invented,
                       voice_problems=problems, words=words)


RATES = ("grounded", "faithful", "voice", "short")


def rates(scores: Sequence[Mapping[str, object] | None]) -> dict[str, float]:
    """The share of questions whose answer passes each check (`AnswerScore.as_json()`s; an
    unanswered question, None, passes none), and of those that pass grounded, faithful and
    voice together ("good")."""
    n = len(scores)
    if n == 0:
        return {}
    out = {key: sum(1 for s in scores if s is not None and s[key]) / n for key in RATES}
    out["good"] = sum(1 for s in scores
                      if s is not None and s["grounded"] and s["faithful"] and s["voice"]) / n
    return out
