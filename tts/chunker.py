"""Text chunkers between the streaming LLM and TTS.

The turn engine pushes every LLM delta (a few characters) into a chunker and sends each chunk
it returns to TTS at once. Time to first audio depends on how soon the first chunk comes out;
prosody depends on chunks not being tiny fragments. Both chunkers clean the deltas with
`SpeakableFilter` first, so markdown and emoji never reach TTS, and cut only between words:
the chunks, joined with spaces, are the cleaned text (`spoken_text`) with each run of
whitespace (a sentence break included) as one space. A chunk is never empty.

Words are whitespace-separated. A word is complete once the cleaned text goes on after it;
the filter emits whitespace together with the next visible character, so with the usual
leading-space LLM tokens (" the") a word completes when the next token arrives.

- `SentenceChunker`: whole sentences.
- `LookaheadChunker` (the default for voice): a short first chunk as soon as
  `lookahead_words` words follow it, then clause and sentence chunks.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from tts.speakable import SpeakableFilter


@dataclass(frozen=True)
class ChunkerOptions:
    """How `LookaheadChunker` cuts. Counts are words that contain a letter or digit."""

    min_first_words: int = 1
    """Fewest words in the first chunk. One: the first word goes out as soon as its lookahead
    is there (a word sooner than two, ~70 ms at 15 words/s), synthesized with that lookahead
    as its right context so that it is said as the start of a sentence, not as one."""

    min_chunk_words: int = 2
    """Fewest words in every later chunk but the last (never token by token)."""

    lookahead_words: int = 2
    """Complete words that must follow the first chunk before it is released, so that the cut
    is known to be safe ("Dr." vs. a sentence end) and TTS has right context."""

    max_first_words: int = 6
    """The first chunk ends at a clause or sentence boundary when one lies within this many
    words and the lookahead is already there; otherwise it has `min_first_words` words (more
    when a title, an initial or a time binds the next word)."""

    min_clause_words: int = 4
    """After the first chunk, a chunk may end at a clause boundary (, ; : —) once it has this
    many words. A sentence end always ends a chunk (given `min_chunk_words`)."""

    max_chunk_words: int = 24
    """A chunk with no boundary is cut at the last word boundary within this many words."""

    chunk_growth: int = 2
    """Without a sentence end in reach, the k-th chunk after the first holds at most
    `min_chunk_words` x `chunk_growth`^k + `lookahead_words` words (and `max_chunk_words`),
    cut at its last clause
    boundary if it has one: each chunk's audio then lasts longer than the LLM takes to write
    the next, so the voice never runs dry after a short first chunk in a long sentence with
    no commas (a 24-word second chunk left ~1 s of silence after "Rome grew")."""

    def __post_init__(self) -> None:
        if min(self.min_first_words, self.min_chunk_words) < 1 or self.lookahead_words < 0:
            raise ValueError(
                "min_first_words and min_chunk_words must be >= 1, lookahead_words >= 0"
            )
        if self.max_first_words < self.min_first_words:
            raise ValueError("max_first_words must be >= min_first_words")
        if self.max_chunk_words < max(self.min_chunk_words, self.min_clause_words):
            raise ValueError("max_chunk_words must be >= min_chunk_words and min_clause_words")
        if self.chunk_growth < 1:
            raise ValueError("chunk_growth must be >= 1")


class FirstGuess(NamedTuple):
    """The chunker's guess of the first chunk, and the words after it so far."""

    text: str
    right_context: str


class TextChunker(Protocol):
    """Raw LLM deltas in, chunks of speakable text out (each non-empty, cut between words)."""

    @property
    def spoken_text(self) -> str:
        """The cleaned text received so far (chunked or not): what TTS is given, in order."""
        ...

    def push(self, delta: str) -> list[str]:
        """Chunks completed by `delta` (often none)."""
        ...

    def flush(self) -> list[str]:
        """The remaining chunks at the end of the reply."""
        ...

    @property
    def pending_text(self) -> str:
        """The cleaned words received and not chunked yet: the right context of the chunk
        just cut."""
        ...

    def provisional_first(self) -> FirstGuess | None:
        """What the first chunk will most likely be, before its lookahead has arrived (None:
        no guess yet, or the first chunk is out). TTS may start on it early; the chunk that
        goes out can differ, so compare before using anything made from this."""
        ...


def make_chunker(kind: str = "lookahead", options: ChunkerOptions | None = None) -> TextChunker:
    """A chunker for one reply: "lookahead" (`options` apply) or "sentence"."""
    if kind == "lookahead":
        return LookaheadChunker(options)
    if kind == "sentence":
        return SentenceChunker()
    raise ValueError(f"unknown chunker kind {kind!r} (expected 'lookahead' or 'sentence')")


_OPENERS = "\"'([{«“‘¿¡"
_CLOSERS = "\"')]}»”’"
_SENTENCE_PUNCT = ".!?…"
_CLAUSE_PUNCT = ",;:—–"

# Abbreviations that belong to the next word: never a sentence end, never a chunk end.
_TITLES = frozenset(
    "mr mrs ms mx dr prof rev fr st mt gen col capt lt sgt sen rep gov hon "
    "vs v e.g i.e cf viz approx ca".split()
)
# Abbreviations that may end a sentence: they do when a capital letter follows.
_ABBREVIATIONS = frozenset(
    "etc inc ltd co corp llc jr sr no nos vol fig ch p pp sec eq dept est min max al "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_INITIAL = re.compile(r"[A-Z]\.")  # J. R. R. Tolkien
_DOTTED = re.compile(r"(?:[A-Za-z]{1,3}\.){2,}")  # U.S. a.m. Ph.D.
_ORDINAL = re.compile(r"\d{1,2}\.")  # "1. First"
_TIME_SUFFIXES = frozenset({"a.m", "p.m"})


@dataclass
class _Token:
    text: str
    after_break: bool  # a sentence break (paragraph, list item, heading) comes before it


def _core(text: str) -> str:
    return text.lstrip(_OPENERS).rstrip(_CLOSERS)


def _is_word(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _sentence_end(
    before: _Token | None, token: _Token, after: _Token, after_open: bool
) -> bool | None:
    """Whether a sentence ends between `token` and `after` (`before` precedes `token`).

    None while undecided: `after` is still growing and has no letter or digit yet.
    """
    if after.after_break:
        return True
    core = _core(token.text)
    if not core or core[-1] not in _SENTENCE_PUNCT:
        return False
    first = after.text.lstrip(_OPENERS)[:1]
    if not first:
        if after_open:
            return None
        first = "."
    if core.endswith(".") and not core.endswith(".."):  # not an ellipsis
        stem = core[:-1].lower()
        if stem in _TITLES or _INITIAL.fullmatch(core):
            return False
        if stem in _ABBREVIATIONS or _DOTTED.fullmatch(core):
            return first.isupper()
        if _ORDINAL.fullmatch(core) and _starts_sentence(before, token):
            return False
    return not first.islower()  # "wait... what", "approx. five": the sentence goes on


def _starts_sentence(before: _Token | None, token: _Token) -> bool:
    if before is None or token.after_break:
        return True
    core = _core(before.text)
    return bool(core) and core[-1] in _SENTENCE_PUNCT + ",;:"


def _clause_end(token: _Token) -> bool:
    core = token.text.rstrip(_CLOSERS)
    return token.text in ("-", "--") or (bool(core) and core[-1] in _CLAUSE_PUNCT)


def _binds(token: _Token, after: _Token) -> bool:
    """Whether a chunk must not end between `token` and `after`."""
    core = _core(token.text)
    if core.endswith(".") and (core[:-1].lower() in _TITLES or _INITIAL.fullmatch(core)):
        return True  # "Dr. | Smith", "J. | R. R. Tolkien"
    if not _is_word(after.text):
        return True  # "Paris | —": punctuation belongs to the words before it
    return _core(after.text).rstrip(".,;:!?").lower() in _TIME_SUFFIXES  # "10 | a.m."


class _Chunker(ABC):
    """Cleans the deltas and splits the cleaned text into tokens; subclasses decide the cuts."""

    def __init__(self) -> None:
        self._filter = SpeakableFilter()
        self._spoken: list[str] = []
        self._tokens: list[_Token] = []  # not chunked yet
        self._open = False  # the last token may still grow
        self._break = False  # a sentence break since the last token
        self._before: _Token | None = None  # the last token already chunked

    @property
    def spoken_text(self) -> str:
        return "".join(self._spoken)

    def push(self, delta: str) -> list[str]:
        self._feed(self._filter.push(delta))
        return self._take()

    def flush(self) -> list[str]:
        self._feed(self._filter.flush())
        self._open = False
        chunks = self._take()
        if self._tokens:
            chunks.append(self._cut(len(self._tokens)))
        return chunks

    @property
    def pending_text(self) -> str:
        return " ".join(t.text for t in self._tokens)

    def provisional_first(self) -> FirstGuess | None:
        return None

    @abstractmethod
    def _take(self) -> list[str]:
        """Cut the chunks that are ready off the front of the tokens."""

    def _feed(self, text: str) -> None:
        if not text:
            return
        self._spoken.append(text)
        for m in re.finditer(r"\s+|\S+", text):
            piece = m.group()
            if piece[0].isspace():
                self._open = False
                self._break = self._break or "\n" in piece
            elif self._open:
                self._tokens[-1].text += piece
            else:
                self._tokens.append(_Token(piece, self._break))
                self._break = False
                self._open = True

    def _complete(self) -> int:
        return len(self._tokens) - (1 if self._open else 0)

    def _token_before(self, i: int) -> _Token | None:
        return self._tokens[i - 1] if i > 0 else self._before

    def _sentence_end_at(self, i: int) -> bool | None:
        """Whether a sentence ends before token i."""
        after_open = self._open and i == len(self._tokens) - 1
        before = self._token_before(i - 1)
        return _sentence_end(before, self._tokens[i - 1], self._tokens[i], after_open)

    def _cut(self, k: int) -> str:
        """The first k tokens as a chunk."""
        chunk = self._tokens[:k]
        del self._tokens[:k]
        self._before = chunk[-1]
        return " ".join(t.text for t in chunk)


class SentenceChunker(_Chunker):
    """Whole sentences. A sentence ends at . ! ? … followed by whitespace, or at a sentence
    break in the cleaned text (paragraph, list item, heading), but not after an abbreviation
    (Mr. e.g. etc. before a lowercase word), an initial (J. R. R. Tolkien), an ordinal that
    starts a list item ("1. First") or before a lowercase word ("approx. five", "wait... what").
    Numbers, prices, times, versions, URLs and emails (3.14, $4.99, 10.30, v1.2.3, x@y.org) are
    single words, so a period inside them never ends a sentence. A boundary is decided once the
    next word's first letter or digit is seen, or at flush; the chunks do not depend on how the
    text was split into deltas.
    """

    def __init__(self) -> None:
        super().__init__()
        self._checked = 1  # boundaries before tokens [1, _checked) are known not to be ends

    def _take(self) -> list[str]:
        chunks = []
        i = self._checked
        while i < len(self._tokens):
            end = self._sentence_end_at(i)
            if end is None:
                break
            if end:
                chunks.append(self._cut(i))
                i = 1
            else:
                i += 1
        self._checked = i
        return chunks


class LookaheadChunker(_Chunker):
    """The first chunk as soon as it has `min_first_words` words and `lookahead_words` words
    follow it, the last of which may still be arriving (with the defaults: when the 3rd word
    starts, the first goes out), ending at the last clause or sentence boundary within
    `max_first_words` if the words already there reach one. Later chunks end at sentence ends,
    at clause boundaries (, ; : —) once they have `min_clause_words` words, or at a cap that
    grows chunk by chunk up to `max_chunk_words` (`ChunkerOptions.chunk_growth`). Every later
    chunk but the last has at least `min_chunk_words` words, and no chunk ends between a title
    or initial and its name or before "a.m."/"p.m." (which can delay the first chunk by a word
    or two). A cut between two words is made only once the word after it is complete.
    """

    def __init__(self, options: ChunkerOptions | None = None) -> None:
        super().__init__()
        self.options = options or ChunkerOptions()
        self._first_done = False
        self._words_out = 0
        self._grown = 0  # chunks cut since the lead-in (`_leading`)

    def _take(self) -> list[str]:
        chunks = []
        while (k := self._next_cut()) is not None:
            if not self._leading():
                self._grown += 1
            self._words_out += sum(_is_word(t.text) for t in self._tokens[:k])
            chunks.append(self._cut(k))
            self._first_done = True
        return chunks

    def _leading(self) -> bool:
        """The chunks go out on the first chunk's rule (each as soon as its lookahead is
        there) until they hold `min_chunk_words` words: after a one-word first chunk, whose
        audio is short, the next must be ready before it ends."""
        return self._words_out < self.options.min_chunk_words

    def _cap(self) -> int:
        """Words the next chunk may hold (`ChunkerOptions.chunk_growth`)."""
        o = self.options
        grown: int = o.min_chunk_words * o.chunk_growth ** min(self._grown + 1, 16)
        # The lookahead's words on top: a sentence that ends a word or two later is one chunk.
        return min(o.max_chunk_words, grown + o.lookahead_words)

    def provisional_first(self) -> FirstGuess | None:
        """The first `min_first_words` words as soon as the word after them has begun: the
        usual first chunk (it is longer only when a clause ends within `max_first_words`, or a
        title or an initial binds the next word), known a word before it may go out, with the
        words after it so far as its right context."""
        if self._first_done:
            return None
        words = 0
        for i, t in enumerate(self._tokens):
            words += _is_word(t.text)
            if words == self.options.min_first_words:
                after = self._tokens[i + 1 :]
                if not any(_is_word(a.text) for a in after):
                    return None
                return FirstGuess(
                    " ".join(a.text for a in self._tokens[: i + 1]),
                    " ".join(a.text for a in after),
                )
        return None

    def _next_cut(self) -> int | None:
        """Where the next chunk ends (a token index), or None to wait for more text."""
        o, tokens = self.options, self._tokens
        n = self._complete()
        words = [0]  # words[i]: words in tokens[:i]
        for t in tokens[:n]:
            words.append(words[-1] + _is_word(t.text))
        cuts = [i for i in range(1, n) if not _binds(tokens[i - 1], tokens[i])]
        if self._leading():
            # The word still arriving counts as lookahead: the cut only needs the word after
            # it complete, and waiting for one more token costs a token's time (~50-70 ms).
            growing = int(self._open and _is_word(tokens[-1].text))
            fewest = o.min_chunk_words if self._first_done else o.min_first_words
            ready = [
                i
                for i in cuts
                if words[i] >= fewest and words[n] - words[i] + growing >= o.lookahead_words
            ]
            at_boundary = [i for i in ready if words[i] <= o.max_first_words and self._boundary(i)]
            return max(at_boundary, default=ready[0] if ready else None)
        cap = self._cap()
        for i in cuts:
            if words[i] > cap:
                break
            if words[i] >= o.min_chunk_words and (
                self._sentence_end_at(i)
                or (words[i] >= o.min_clause_words and _clause_end(tokens[i - 1]))
            ):
                return i
        if words[n] > cap:
            fitting = [i for i in cuts if o.min_chunk_words <= words[i] <= cap]
            at_clause = [i for i in fitting if _clause_end(tokens[i - 1])]
            return max(at_clause, default=fitting[-1] if fitting else None)
        return None

    def _boundary(self, i: int) -> bool:
        return bool(self._sentence_end_at(i)) or _clause_end(self._tokens[i - 1])
