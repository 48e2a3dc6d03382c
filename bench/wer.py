"""Word error rate of what the agent heard, for `voxroom bench --corpus listen`: the final user
transcripts the agent published during an item against what the item says, scored with jiwer
after `normalize` (case, punctuation, numbers and a few contractions made alike, so that
"It's 144." and "it is one hundred forty four" are the same words).

Per condition (the item's kind) and overall the word error rate is the corpus-level one: the
edits of all its items over all their reference words, so a short question weighs less than
a long one. `first_word_lost` says whether the item's first word was dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**9, "billion"), (10**6, "million"), (1000, "thousand"), (100, "hundred"))
# The contractions Whisper writes for words people say in full (and the corpus spells out).
_CONTRACTIONS = {
    "what's": "what is",
    "it's": "it is",
    "that's": "that is",
    "there's": "there is",
    "where's": "where is",
    "who's": "who is",
    "how's": "how is",
    "i'm": "i am",
    "you're": "you are",
    "we're": "we are",
    "they're": "they are",
    "isn't": "is not",
    "don't": "do not",
    "doesn't": "does not",
    "can't": "cannot",
    "won't": "will not",
    "i'd": "i would",
    "i'll": "i will",
    "let's": "let us",
}

# Hesitations, which Whisper mostly leaves out and a listener does not count as words.
_FILLERS = {"um", "uh", "er", "erm", "ah", "hmm", "mm"}


def number_words(n: int) -> str:
    """`n` >= 0 in words, without "and": 144 -> "one hundred forty four"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    for size, name in _SCALES:
        if n >= size:
            head, rest = divmod(n, size)
            return f"{number_words(head)} {name}" + ("" if rest == 0 else " " + number_words(rest))
    raise AssertionError("unreachable")


def _spell_number(m: re.Match[str]) -> str:
    whole, _, fraction = m.group(0).replace(",", "").partition(".")
    words = number_words(int(whole))
    return f"{words} point {' '.join(_ONES[int(d)] for d in fraction)}" if fraction else words


def normalize(text: str) -> str:
    """Lower case, contractions spelled out, numbers in words, hyphens as spaces, no other
    punctuation, no hesitations ("um"), single spaces; "and" between number words dropped
    ("a hundred and five")."""
    text = text.lower().replace("\u2019", "'")
    text = re.sub(r"\d[\d,]*(?:\.\d+)?", _spell_number, text)
    text = re.sub(r"[a-z]+'[a-z]+", lambda m: _CONTRACTIONS.get(m.group(0), m.group(0)), text)
    text = re.sub(r"[^a-z' ]+", " ", text).replace("'", "")
    words = [w for w in text.split() if w not in _FILLERS]
    numbers = {*_ONES, *_TENS[2:], *(name for _, name in _SCALES)}
    kept = [
        w
        for i, w in enumerate(words)
        if not (
            w == "and"
            and 0 < i < len(words) - 1
            and words[i - 1] in numbers
            and words[i + 1] in numbers
        )
    ]
    return " ".join(kept)


def wer(said: str, heard: str) -> float:
    """Word error rate of one utterance, both sides normalized; 1.0 when nothing was heard."""
    import jiwer

    ref, hyp = normalize(said), normalize(heard)
    return jiwer.wer(ref, hyp) if hyp else 1.0


def word_errors(said: str, heard: str) -> dict[str, int]:
    """Reference words and the substitutions, deletions and insertions that turn `said` into
    `heard` (both normalized)."""
    import jiwer

    ref, hyp = normalize(said), normalize(heard)
    if not ref:
        return {"words": 0, "substitutions": 0, "deletions": 0, "insertions": len(hyp.split())}
    if not hyp:
        n = len(ref.split())
        return {"words": n, "substitutions": 0, "deletions": n, "insertions": 0}
    out = jiwer.process_words(ref, hyp)
    return {
        "words": len(ref.split()),
        "substitutions": out.substitutions,
        "deletions": out.deletions,
        "insertions": out.insertions,
    }


def first_word_lost(said: str, heard: str) -> bool:
    """The first word of `said` is missing from `heard`: deleted in the alignment (cut off
    with the start of the audio, as "Who ...?" heard as "... wrote Pride and Prejudice?"). A
    first word heard as another word is a substitution, not a loss."""
    import jiwer

    ref, hyp = normalize(said), normalize(heard)
    if not ref:
        return False
    if not hyp:
        return True
    [chunks] = jiwer.process_words(ref, hyp).alignments
    first = next(c for c in chunks if c.ref_start_idx <= 0 < c.ref_end_idx)
    return first.type == "delete"


def wer_summary(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Corpus-level figures of (said, heard) pairs: items, words, edits, word error rate, and
    the items whose first word was lost."""
    pairs = list(pairs)
    errors = [word_errors(s, h) for s, h in pairs]
    total = {
        k: sum(e[k] for e in errors) for k in ("words", "substitutions", "deletions", "insertions")
    }
    edits = total["substitutions"] + total["deletions"] + total["insertions"]
    return {
        "items": len(pairs),
        **total,
        "wer": round(edits / total["words"], 4) if total["words"] else None,
        "first_word_lost": sum(first_word_lost(s, h) for s, h in pairs),
    }


def wer_by_kind(items: Sequence[Any]) -> dict[str, Any] | None:
    """`wer_summary` per kind of the items that say what was said and have a transcript
    (bench_measure.ItemResult's `said` and `transcript`), and "overall"; None if none does."""
    scored = [i for i in items if i.said and i.transcript is not None]
    if not scored:
        return None
    kinds = dict.fromkeys(i.kind for i in scored)
    out = {k: wer_summary((i.said, i.transcript) for i in scored if i.kind == k) for k in kinds}
    out["overall"] = wer_summary((i.said, i.transcript) for i in scored)
    return out


def final_transcript(finals: Sequence[str]) -> str:
    """The user's words of one item from the final transcripts the agent published during
    it, in order: a final that begins with the text so far replaces it (a turn withdrawn
    because the user went on is merged into the next, state_machine.machine), any other is
    appended (the agent took two turns)."""
    text = ""
    for final in finals:
        if text and not normalize(final).startswith(normalize(text)):
            text = f"{text} {final}"
        else:
            text = final
    return text
