"""Is this transcript a question, and has the question ended? Pure text rules, no model.

The copilot hears an interviewer through the meeting's audio. Not everything said there needs
an answer ("Great, thanks."), and an interviewer pauses inside long questions ("Tell me about
a time when... you disagreed with your manager."), so the end of a question is decided on the
text as well as on silence:

- a sentence *asks* when it ends with "?", opens with a wh-word ("what", "how", ...), an
  inverted auxiliary ("can you", "have you", "is there", ...), or a request for an answer
  ("tell me about", "walk me through", "describe", ...), after any lead-in ("so", "okay");
- the question is *complete* when the text ends like a finished sentence (end punctuation,
  no dangling "and"/"the"), its last asking sentence has something to ask about ("Tell me
  about." is not enough), and nothing after it trails off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from state_machine.similarity import looks_complete, normalize_words, spoken_words

_WH = {
    "what",
    "what's",
    "whats",
    "why",
    "how",
    "how's",
    "when",
    "where",
    "where's",
    "who",
    "who's",
    "whom",
    "whose",
    "which",
}
_AUX = {
    "can",
    "could",
    "would",
    "will",
    "do",
    "does",
    "did",
    "have",
    "has",
    "had",
    "is",
    "are",
    "was",
    "were",
    "should",
    "shall",
    "may",
    "might",
    "must",
    "won't",
    "wouldn't",
    "can't",
    "couldn't",
    "don't",
    "doesn't",
    "didn't",
    "haven't",
    "isn't",
    "aren't",
}
# What may follow an inverted auxiliary: "can you", "is there", "have the team"...
_SUBJECT = {
    "you",
    "i",
    "we",
    "they",
    "he",
    "she",
    "it",
    "there",
    "that",
    "this",
    "your",
    "the",
    "anyone",
    "someone",
    "somebody",
}
# Requests that ask for an answer without being grammatical questions, by their first words.
_REQUESTS = (
    ("tell", "me"),
    ("tell", "us"),
    ("walk", "me", "through"),
    ("walk", "us", "through"),
    ("talk", "me", "through"),
    ("take", "me", "through"),
    ("talk", "about"),
    ("describe",),
    ("explain",),
    ("give", "me"),
    ("give", "us"),
    ("share",),
    ("name",),
    ("list",),
    ("define",),
    ("compare",),
    ("i'd", "like", "to", "hear"),
    ("i'd", "love", "to", "hear"),
    ("i'm", "curious"),
    ("i", "wonder"),
    ("i'm", "wondering"),
    ("talk", "us", "through"),
)
# Words that the opener itself uses up: what is left must name something to answer about.
_REQUEST_FILLER = {
    "me",
    "us",
    "a",
    "an",
    "the",
    "about",
    "through",
    "how",
    "your",
    "bit",
    "little",
    "more",
    "of",
    "on",
    "to",
}
# Lead-ins that may come before the asking words.
_LEAD_IN = {
    "so",
    "and",
    "okay",
    "ok",
    "alright",
    "right",
    "well",
    "now",
    "great",
    "good",
    "then",
    "next",
    "um",
    "uh",
    "also",
    "but",
    "cool",
    "thanks",
    "perfect",
    "yeah",
    "yes",
    "sure",
    "fine",
    "interesting",
    "lastly",
    "finally",
    "first",
}

_SENTENCE = re.compile(r"[^.?!]+[.?!]*")


@dataclass(frozen=True)
class QuestionCheck:
    is_question: bool
    """Some sentence of the text asks something."""
    complete: bool
    """The question has ended: see the module docstring."""
    question: str
    """The text from the first asking sentence on ("" when nothing asks)."""


def check_question(transcript: str) -> QuestionCheck:
    text = spoken_words(transcript)
    sentences = [s.strip() for s in _SENTENCE.findall(text) if normalize_words(s)]
    asking = [i for i, s in enumerate(sentences) if _asks(s)]
    if not asking:
        return QuestionCheck(False, False, "")
    question = " ".join(sentences[asking[0] :])
    last = sentences[asking[-1]]
    complete = looks_complete(text) and _has_object(last)
    return QuestionCheck(True, complete, question)


def is_complete_question(transcript: str) -> bool:
    return check_question(transcript).complete


_CLAUSE = re.compile(r"[,;:—–]")


def _asks(sentence: str) -> bool:
    if sentence.rstrip().endswith("?"):
        return True
    words = _without_lead_in(normalize_words(sentence))
    if not words:
        return False
    if words[0] in _WH:
        return True
    if _inverted(words, 0):
        return True
    if _request(words) is not None:
        return True
    return any(_clause_asks(clause) for clause in _CLAUSE.split(sentence)[1:])


def _clause_asks(clause: str) -> bool:
    """A clause after a comma that asks: Whisper joins a statement and the question after it
    with a comma and ends it with a full stop ("We run Dynamics 365, which finance systems
    have you used."). It opens with an inverted auxiliary ("..., could you ..."), or with a
    wh-word that an inverted auxiliary follows ("..., which systems have you used"), unlike a
    relative clause ("..., which is where I learned it", "..., where I worked")."""
    words = _without_lead_in(normalize_words(clause))
    if not words:
        return False
    if words[0] in _WH:
        return any(_inverted(words, i, _PERSON) for i in range(1, len(words)))
    return _inverted(words, 0)


# The subjects of an inversion inside a wh-clause: a person, not "the" or "it" ("..., which
# is the backbone", "..., which is it" are no questions).
_PERSON = frozenset({"you", "i", "we", "they", "he", "she"})


def _inverted(words: list[str], i: int, subjects: frozenset[str] | set[str] = _SUBJECT) -> bool:
    """An auxiliary at `i` before its subject: "can you", "have the team"."""
    return words[i] in _AUX and i + 1 < len(words) and words[i + 1] in subjects


def _has_object(sentence: str) -> bool:
    """The asking sentence names what it asks about: "Why?" does (it ends with "?"), "Tell me
    about." and "Describe." do not."""
    words = _without_lead_in(normalize_words(sentence))
    opener = _request(words)
    if opener is None:
        return sentence.rstrip().endswith("?") or len(words) >= 2
    rest = [w for w in words[len(opener) :] if w not in _REQUEST_FILLER]
    return bool(rest)


def _request(words: list[str]) -> tuple[str, ...] | None:
    for opener in _REQUESTS:
        if tuple(words[: len(opener)]) == opener:
            return opener
    return None


def _without_lead_in(words: list[str]) -> list[str]:
    i = 0
    while i < len(words) - 1 and words[i] in _LEAD_IN:
        i += 1
    return words[i:]
