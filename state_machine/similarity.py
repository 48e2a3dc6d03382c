"""Text similarity for deciding whether a speculative reply answered the final transcript."""

from __future__ import annotations

import re
from difflib import SequenceMatcher

_WORD = re.compile(r"[a-z0-9']+")


def normalize_words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def text_similarity(a: str, b: str) -> float:
    """Word-level similarity in [0, 1], ignoring case and punctuation."""
    wa, wb = normalize_words(a), normalize_words(b)
    if not wa and not wb:
        return 1.0
    return SequenceMatcher(a=wa, b=wb, autojunk=False).ratio()


def answers_the_same(asked: str, final: str, keep: float) -> bool:
    """A reply started on the words `asked` answers `final`: they are nearly the same (word
    similarity at least `keep`), every word of `final` is among them, and `final` ends where
    `asked` does. Nearly the same is not enough on its own: one word missing leaves two
    sentences 0.94 alike, and the answer to the words asked is then the answer to another
    question ("Could you remind me to call my mother" for "... my mother tomorrow?", "How
    many days are there in a year?" for "... in a leap year?"). A word `asked` has and
    `final` lacks loses nothing."""
    said, heard = normalize_words(asked), normalize_words(final)
    if not said and not heard:
        return True
    match = SequenceMatcher(a=said, b=heard, autojunk=False)
    every_word = sum(block.size for block in match.get_matching_blocks()) == len(heard)
    return match.ratio() >= keep and every_word and (not heard or heard[-1] in said[-2:])


def agreed_words(a: str, b: str) -> str:
    """The words two transcripts begin with alike (case and punctuation aside), as text."""
    agreed = []
    for x, y in zip(normalize_words(a), normalize_words(b), strict=False):
        if x != y:
            break
        agreed.append(x)
    return " ".join(agreed)


_NON_SPEECH = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*")


# Whisper's best-known invention for a sound that holds no words (a cough, a breath, a thud),
# learned from subtitles: a lone "you". Seen through LiveKit on a cough over the agent's answer,
# where it would have stopped the answer; nobody's turn is that one word.
_INVENTED = frozenset({("you",)})


def spoken_words(transcript: str) -> str:
    """The transcript without non-speech annotations such as "[coughs]" or "(music)", and empty
    when all it holds is what the STT writes for a sound with no words (`_INVENTED`)."""
    text = " ".join(_NON_SPEECH.sub(" ", transcript).split())
    return "" if tuple(normalize_words(text)) in _INVENTED else text


# Words that leave a sentence open when they come last: "... and", "... the", "... my".
_TRAILING_CONTINUATION = {"and", "or", "but", "so", "because", "the", "a", "an", "if", "my", "your"}
# Words that mostly leave it open too ("What is the name of", "Is it true that"), but may end
# one: "I've already tried that.", "What is it for?", "Go on.", "I'd love to.".
_MAY_END = {"to", "of", "with", "that", "which", "is", "are", "for", "in", "on", "like"}

# A thinking sound however Whisper spells it: "um", "umm", "uhh", "uhm", "er", "erm", "hmm", "mm".
_HESITATION = re.compile(r"(?:u+[hm]+|e+r+m*|h+m+|m{2,})")


def is_hesitation(word: str) -> bool:
    """`word` (normalized) is a filler, not a word of the sentence."""
    return _HESITATION.fullmatch(word) is not None


def hesitates_only(transcript: str) -> bool:
    """`transcript` holds no word of a sentence: nothing, or fillers ("Um.", "hmm")."""
    return all(is_hesitation(w) for w in normalize_words(spoken_words(transcript)))


def trails_off(transcript: str) -> bool:
    """The last word leaves the sentence open: a conjunction, an article, a preposition, a
    filler ("... so, um")."""
    words = normalize_words(spoken_words(transcript))
    return bool(words) and (
        words[-1] in _TRAILING_CONTINUATION or words[-1] in _MAY_END or is_hesitation(words[-1])
    )


def leaves_open(transcript: str) -> bool:
    """`trails_off`, unless the last word may end a sentence and the STT ended it there (a
    full stop, a question or an exclamation mark; not an ellipsis): an end-of-turn model
    then tells the two apart, as a word list cannot. The text model scores "I've already
    tried that." 0.05 and "Is it true that." 0.0000."""
    if not trails_off(transcript):
        return False
    words = normalize_words(spoken_words(transcript))
    text = transcript.rstrip()
    ended = text.endswith(("?", "!")) or (text.endswith(".") and not text.endswith(".."))
    return not (ended and words[-1] in _MAY_END)


def looks_complete(transcript: str) -> bool:
    """True when the text ends like a finished sentence or question: end punctuation and
    no dangling conjunction/article before it."""
    text = transcript.strip()
    if not text or text[-1] not in ".?!":
        return False
    return not trails_off(text)
