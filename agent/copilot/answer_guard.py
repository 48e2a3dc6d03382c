"""Is an answer the candidate's, and only what the documents say? The checks the copilot's
answers go through before they stay on the candidate's screen (and that the bench scores them
with, bench/copilot_quality.py), and the answer built from the documents' own pieces when the
model's fails them.

- voice: the candidate's own words: first person, and never asking for the resume, the
  question or more information, never speaking as the interviewer or the company ("You will
  lead ...", "We are a leading ...") or as an assistant.
- invented terms: a name (a capitalised word inside a sentence, or an acronym / CamelCase word
  anywhere), a number (digits or a number word such as "ten") or a known technology term that
  the documents (and the question) do not hold: an employer, school, figure or skill the small
  model made up.
- grounded: the answer names something particular to a piece retrieved for the question
  (`grounded_in`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

_WORD = re.compile(r"[^\W_](?:[\w+#]|['’.\-/](?=[^\W_]))*")
_DIGITS = re.compile(r"\d+(?:\.\d+)?")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s*|\n\s*)(?:[-*•]\s*)?$")
# Thousands written "30,000", "30 000" or, as the small model does, "30, 000".
_THOUSANDS = re.compile(r"(?<=\d)(?:,\s?|\s)(?=\d{3}\b)")

NUMBER_WORDS = {
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "hundred": 100,
    "thousand": 1000,
    "million": 1_000_000,
}
"""Spelled numbers an answer may invent ("over ten years"); "one" is left out: "one of"."""

TECH_TERMS = frozenset(
    """
    java javascript typescript kotlin scala rust ruby php perl haskell elixir erlang clojure
    c++ c# .net dotnet golang python django flask fastapi spring node.js nodejs react angular
    vue svelte jquery aws azure gcp kubernetes k8s docker podman terraform ansible puppet chef
    kafka rabbitmq redis memcached postgresql postgres mysql mariadb sqlite mongodb cassandra
    dynamodb elasticsearch opensearch clickhouse snowflake bigquery redshift hadoop airflow
    dbt tableau looker powerbi grafana prometheus datadog splunk jenkins gitlab github
    circleci graphql grpc protobuf linux windows macos ios android tensorflow pytorch
    sagemaker lambda serverless nginx istio envoy consul vault helm openshift salesforce
    hubspot marketo mailchimp hootsuite semrush sap oracle excel epic cerner meditech
""".split()
)
"""Technology names an answer may invent even in lower case ("experience with kafka")."""

NOT_FIRST_PERSON = "not in the first person"
_ALLOWED_NAMES = frozenset({"i", "i'm", "i’m", "i've", "i’ve", "i'd", "i’d", "i'll", "i’ll"})

_FIRST_PERSON = re.compile(r"\bI\b|\bI['’](?:m|ve|d|ll)\b|\b(?:my|me|mine|myself)\b", re.IGNORECASE)
_OFF_VOICE = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
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
        r"\bas an ai\b",
        r"\blanguage model\b",
        r"\bI(?:['’]m| am) (?:just )?(?:an? )?(?:ai|assistant|interview copilot|candidate, so)\b",
        r"\bthe candidate\b",
        r"\byou(?:['’]ll| will)\b",
        r"\bwe are (?:a|an)\b",
        # the employer's description said in the first person ("I am a 200-bed hospital in
        # Leeds"): the noun ends the phrase ("I am a bank teller" is the candidate) and no
        # preposition comes before it ("I am a nurse at the hospital" is the candidate too)
        r"\bI(?:['’]m| am) (?:an?|the) (?:(?!(?:at|in|on|of|for|with|from|to)\b)[\w-]+ ){0,3}?"
        r"(?:hospital|clinic|company|firm|agency|"
        r"startup|platform|bank|school|university|employer|organi[sz]ation|business|provider|"
        r"retailer|charity)(?=\s*(?:$|[.,;:!]|(?:that|with|in|based|serving|of|and|for)\b))",
    )
)


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


def _possessive(word: str) -> str:
    for suffix in ("'s", "’s", "s'", "s’"):
        if word.endswith(suffix) and len(word) > len(suffix) + 1:
            return word[: -len(suffix)] + ("s" if suffix[0] == "s" else "")
    return word


def normal_text(text: str) -> str:
    """One space between the words of a line; thousands without their separator."""
    return _THOUSANDS.sub("", re.sub(r"[^\S\n]+", " ", text).strip())


def _numbers(text: str) -> set[float]:
    """The numbers `text` names: in digits, spelled ("twelve-hour"), or both as a run of
    spelled words ("two hundred": 2, 100 and 200)."""
    found = {float(m) for m in _DIGITS.findall(normal_text(text))}
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
        for word in _WORD.findall(normal_text(text)):
            lower = word.lower()
            words.add(_possessive(lower))
            words.update(part for part in re.split(r"[\-/.]", lower) if part)
        numbers |= _numbers(text)
    return Vocabulary(frozenset(words), frozenset(numbers))


def _is_name(text: str, m: re.Match[str]) -> bool:
    """Whether the word `m` of `text` is a name: capitalised inside a sentence, or an acronym
    or CamelCase word anywhere."""
    word = m.group(0)
    sentence_start = bool(_SENTENCE_START.search(text[: m.start()]))
    acronym_or_camel = any(c.isupper() for c in word[1:])
    return word[0].isupper() and (not sentence_start or acronym_or_camel)


def names(text: str) -> set[str]:
    """The lower-case names of `text` (`_is_name`; "I" and its forms are none)."""
    text = normal_text(text)
    return {
        w
        for m in _WORD.finditer(text)
        if _is_name(text, m) and (w := m.group(0).rstrip(".").lower()) not in _ALLOWED_NAMES
    }


def invented_terms(answer: str, vocab: Vocabulary) -> list[str]:
    """The answer's names, numbers and technology terms that `vocab` does not hold."""
    text = normal_text(answer)
    invented: list[str] = []
    for m in _WORD.finditer(text):
        word = m.group(0).rstrip(".")
        lower = word.lower()
        if lower in _ALLOWED_NAMES or vocab.knows(word):
            continue
        is_name = _is_name(text, m)
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
        problems.append(NOT_FIRST_PERSON)
    return problems


def word_count(text: str) -> int:
    return sum(1 for word in text.split() if any(c.isalnum() for c in word))


# ---- the guard and its fallback ------------------------------------------------------------

_STOP = frozenset(
    """
    about after also and are been before being but can could did does doing for from had has
    have her here him his how into its just like more most much not now our out over own same
    she should some such than that the their them then there these they this those through
    too under very was were what when where which while who whom why will with would you your
    yours yourself tell time any one work working worked job role
""".split()
)


def content_words(text: str) -> set[str]:
    """Lower-case words of four or more letters that say what the text is about."""
    return {w for w in re.findall(r"[^\W\d_]{4,}", text.lower()) if w not in _STOP}


GROUNDING_PIECES = 3
"""An answer must say something particular to one of the nearest this many retrieved pieces
(the nearest alone for a question of a common kind, whose section retrieval puts first:
agent.copilot.context.retrieval.common_kind)."""
SPECIFICS_NEEDED = 2
"""What an answer must share with one of those pieces, beyond the question's own words: this
many of its words, a name or a number counting for two. One shared word lets a generic answer
through ("I work with the sales team to test everything" shares "team" and "test" with half
the resume); a grounded answer names the thing ("Yoruba", "Prometheus", "180 ms") or says what
was done and what came of it ("four junior engineers ... promoted")."""
_SUFFIXES = ("ing", "ed", "es", "s", "e")


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


_LETTERS_AND_DIGITS = re.compile(r"\b(?=[^\W_]*[^\W\d_])(?=[^\W_]*\d)[^\W_]+\b")
"""A word of letters and digits ("B2B", "p99", "GA4"): a name, not a number."""


def specifics(text: str) -> set[str]:
    """The content words (stemmed: "tests" and "test" are one) and the numbers of `text`."""
    words = {_stem(w) for w in content_words(text)}
    numbers = _numbers(_LETTERS_AND_DIGITS.sub(" ", text))
    return words | {f"#{n:g}" for n in numbers}


_TITLE_HEADING = re.compile(r"\s[—–]\s|\(\s*\d{4}")
"""A heading that names who or what, not a section: "Northwind Bank — Senior Backend Engineer
(2021–present)", "Dana Whitfield — Senior Backend Engineer", "Staff Engineer — Lumen Pay",
"Team Leader, Veldhaven Logistics (2014–2020)"."""


def _piece_body(piece: Any) -> str:
    """A piece's text without a title heading (`_TITLE_HEADING`), which every piece of that
    role or document shares: naming the employer, the candidate's title or the job's is not
    naming what was done there or what the job is."""
    heading, sep, body = piece.text.partition(": ")
    return body if sep and _TITLE_HEADING.search(heading) else piece.text


def grounded_in(answer: str, pieces: Sequence[Any], asked: str = "") -> bool:
    """Whether `answer` names `SPECIFICS_NEEDED` words or numbers of one of `pieces` that the
    question (`asked`) does not hold (`SPECIFICS_NEEDED` says how they count)."""
    said = specifics(answer) - specifics(asked)
    named = {_stem(w) for w in names(answer)}

    def weight(body: str) -> int:
        strong = named & {_stem(w) for w in names(body)}  # a name in both
        return sum(2 if w in strong or w.startswith("#") else 1 for w in said & specifics(body))

    return any(weight(_piece_body(p)) >= SPECIFICS_NEEDED for p in pieces)


@dataclass(frozen=True)
class Grounding:
    """What an answer to the question `asked` must name something particular to
    (`grounded_in`): the nearest `nearest` of the `pieces` retrieved for it (nearest first),
    leaving out the `general` ones (chunk ids: the resume's opening and summary, which hold the
    candidate's title and years, and the sections of other kinds of question, such as
    "Professional development: ...": what a generic answer echoes to any question)."""

    pieces: Sequence[Any]
    asked: str = ""
    nearest: int = GROUNDING_PIECES
    general: frozenset[int] = frozenset()
    figure_from: float | None = None
    """The question asks for a figure ("How long did that take?": 0; "What are your salary
    expectations?": 1,000, an amount of money): the answer must name one of those pieces'
    numbers of at least this size, when they hold any."""

    def particular(self) -> list[Any]:
        return [p for p in self.pieces if p.chunk_id not in self.general][: self.nearest]


def answer_problems(answer: str, vocab: Vocabulary, grounding: Grounding) -> list[str]:
    """Why `answer` should not stay on the candidate's screen (empty: it may): not the
    candidate's voice, a name or figure the documents do not hold, or nothing particular to
    the `grounding` pieces (when some were retrieved)."""
    problems = voice_problems(answer)
    problems += [f"invented {term!r}" for term in invented_terms(answer, vocab)]
    if grounding.pieces and not grounded_in(answer, grounding.particular(), grounding.asked):
        problems.append("not grounded in the retrieved pieces")
    elif grounding.figure_from is not None and not names_a_figure(answer, grounding):
        problems.append("names none of the figures asked for")
    if grounding.pieces:
        problems += [f"{n:g} from elsewhere" for n in figures_from_elsewhere(answer, grounding)]
    return problems


def names_a_figure(answer: str, grounding: Grounding) -> bool:
    """Whether `answer` names a number of the pieces it must be grounded in; true when they
    hold none."""
    least = grounding.figure_from or 0.0
    figures: set[float] = set()
    for piece in grounding.particular():
        figures |= {n for n in _numbers(_piece_body(piece)) if n >= least}
    return not figures or bool(figures & _numbers(answer))


def figures_from_elsewhere(answer: str, grounding: Grounding) -> list[float]:
    """The numbers `answer` writes in digits that neither the retrieved pieces nor the
    question hold: true of the documents, but of something else ("How many people report to
    you?" answered with the employer's "420 employees")."""
    known = _numbers(grounding.asked)
    for piece in grounding.pieces:
        known |= _numbers(piece.text)
    said = {float(d) for d in _DIGITS.findall(normal_text(_LETTERS_AND_DIGITS.sub(" ", answer)))}
    return sorted(n for n in said if n not in known and n * 1000 not in known)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def passing_sentences(text: str, vocab: Vocabulary) -> str:
    """`text`'s sentences up to the first that is not the candidate's or names something the
    documents do not hold ("I know Lumen Pay processes card payments. You will lead ..." ->
    its first sentence); empty when the first fails. Its first sentence is judged as the
    answer's start (in the first person); the others only for what they ask or invent."""
    kept: list[str] = []
    for sentence in sentences(text):
        problems = [p for p in voice_problems(sentence) if not kept or p != NOT_FIRST_PERSON]
        if problems or invented_terms(sentence, vocab):
            break
        kept.append(sentence)
    return " ".join(kept)


def guarded_answer(
    answer: str,
    vocab: Vocabulary,
    grounding: Grounding,
    *,
    first_resume_id: int | None = None,
    job_lead: JobLead | None = None,
) -> tuple[str, list[str]]:
    """What replaces `answer` on the screen, and why (("", []) when it may stay): its
    sentences up to the first that fails, when they pass; else an answer made of the retrieved
    pieces (`fallback_answer`, the job's pieces introduced by `job_lead`)."""
    problems = answer_problems(answer, vocab, grounding)
    if not problems:
        return "", []
    kept = passing_sentences(answer, vocab)
    if kept and kept != answer.strip() and not answer_problems(kept, vocab, grounding):
        return kept, problems
    fallback = fallback_answer(
        grounding.pieces, vocab, first_resume_id=first_resume_id, job_lead=job_lead
    )
    return fallback, problems


MIN_PART_WORDS = 12
"""A piece that does not fit whole in what is left of an answer built from the pieces is cut
to fit ("... is a comprehensive school…") when this many words are left: enough to name what
it is about ("Why do you want to work at our school?" needs the school after the candidate's
own piece)."""
_ROLE_HEADING = re.compile(
    r"^(?:(?P<employer>[^—:]+?)\s+[—–-]\s+[^:]*|[^:,]+,\s*(?P<employer_after>[^:]+?)\s*)\(\s*\d{4}"
)
"""An experience heading: "Northwind Bank — Senior Backend Engineer (2021–present)", or the
title first, "Team Leader, Veldhaven Logistics (2014–2020)"."""


@dataclass(frozen=True)
class JobLead:
    """How the candidate brings in the job description's own words, which fit a question of
    some kinds only when introduced as what it is: the first such piece of an answer after
    `first`, the others after `more` (each a first-person phrase, as the voice check wants
    of every piece's first sentence)."""

    first: str = "I read in the job description:"
    more: str = "I also read:"
    alone: bool = False
    """The job's first piece answers alone: nothing follows it ("What are your salary
    expectations?": the job's pay, not its requirements after it)."""


def first_person(
    piece: Any, *, first_of_resume: bool = False, job_lead: str = JobLead.first
) -> str:
    """One piece of the documents as the candidate would say it: "Northwind Bank — Senior
    Backend Engineer (2021–present): Led the rewrite ..." as "At Northwind Bank, I led the
    rewrite ...", "Education: MSc ..." as "My education: MSc ...", the resume's opening line as
    "I'm Dana Whitfield — ...", a job description's after `job_lead` ("I read in the job
    description: ...")."""
    heading, sep, body = piece.text.partition(": ")
    if not sep:
        heading, body = "", piece.text
    body = body.strip()
    if piece.source != "resume":
        return f"{job_lead} {body}"
    if first_of_resume and heading:
        return f"I'm {heading}. {body}"
    if (m := _ROLE_HEADING.match(heading)) is not None:
        verb = body[:1].lower() + body[1:] if body[1:2].islower() else body
        return f"At {(m.group('employer') or m.group('employer_after')).strip()}, I {verb}"
    lower = heading[:1].lower() + heading[1:]
    if re.match(r"[a-z]+ing (?:on|to|towards)\b", lower):  # "Working on:", not "Training:"
        return f"I'm {lower}: {body}"
    if heading:
        return f"My {lower}: {body}"
    return f"I can say: {body}"


def fallback_answer(
    pieces: Sequence[Any],
    vocab: Vocabulary,
    *,
    max_words: int = 40,
    first_resume_id: int | None = None,
    job_lead: JobLead | None = None,
) -> str:
    """An answer built from the retrieved `pieces` themselves (nearest first), in the first
    person, at most `max_words` words: what the candidate's screen shows when the model's
    answer fails `answer_problems`. The job description's pieces come after `job_lead`'s
    phrases. A piece's sentences that still fail the checks (a job description's "You will
    ...") are left out, and the rest of that piece; empty when nothing is left."""
    lead = job_lead or JobLead()
    sentences: list[str] = []
    words = 0
    job_said = False
    for piece in pieces:
        is_job = piece.source != "resume"
        said = passing_sentences(
            first_person(
                piece,
                first_of_resume=piece.chunk_id == first_resume_id,
                job_lead=lead.more if job_said else lead.first,
            ),
            vocab,
        )
        if not said:
            continue
        job_said = job_said or is_job
        n = word_count(said)
        room = max_words - words
        if sentences and n > room and room < MIN_PART_WORDS:
            break
        if n > room:
            said = " ".join(said.split()[:room]).rstrip(",;:") + "…"
            n = room
        sentences.append(said if said.endswith((".", "…", "!", "?")) else said + ".")
        words += n
        if is_job and lead.alone:
            break
    return " ".join(sentences)
