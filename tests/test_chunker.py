"""The chunkers between the LLM and TTS: where chunks end, when the first one comes out, and
that chunks are the cleaned text cut between words whatever the deltas were."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_speakable import split
from tts.chunker import (
    ChunkerOptions,
    FirstGuess,
    LookaheadChunker,
    SentenceChunker,
    TextChunker,
    make_chunker,
)
from tts.speakable import is_unspoken, make_speakable

FAST = settings(max_examples=200, deadline=None)


def pushes(chunker: TextChunker, deltas: list[str]) -> list[list[str]]:
    """What each push returns, then what flush returns."""
    return [chunker.push(d) for d in deltas] + [chunker.flush()]


def chunks(chunker: TextChunker, deltas: list[str]) -> list[str]:
    return [c for out in pushes(chunker, deltas) for c in out]


def words(chunk: str) -> int:
    return sum(any(ch.isalnum() for ch in token) for token in chunk.split())


def word_deltas(text: str) -> list[str]:
    """`text` as an LLM streams it: one token per word, the space leading ("Sure," " the")."""
    first, *rest = text.split(" ")
    return [first, *(" " + w for w in rest)]


# --- sentence chunker -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("Hi there. How are you? Fine! Good…", ["Hi there.", "How are you?", "Fine!", "Good…"]),
        ("I met Mr. Smith and Mrs. Jones. Dr. No.", ["I met Mr. Smith and Mrs. Jones.", "Dr. No."]),
        ("We walked down St. Louis Avenue. Nice.", ["We walked down St. Louis Avenue.", "Nice."]),
        ("Fruit, e.g. apples, i.e. red ones. Yes.", ["Fruit, e.g. apples, i.e. red ones.", "Yes."]),
        ("Apples, pears, etc. are fruit. Ok.", ["Apples, pears, etc. are fruit.", "Ok."]),
        ("Apples, pears, etc. Then more.", ["Apples, pears, etc.", "Then more."]),
        ("It is cats vs. dogs. Ok.", ["It is cats vs. dogs.", "Ok."]),
        ("Come at 9 a.m. or 5 p.m. tomorrow. Ok.", ["Come at 9 a.m. or 5 p.m. tomorrow.", "Ok."]),
        ("Come at 9 a.m. Then leave.", ["Come at 9 a.m.", "Then leave."]),
        ("The U.S. economy grew. Ok.", ["The U.S. economy grew.", "Ok."]),
        ("J. R. R. Tolkien wrote it. Ok.", ["J. R. R. Tolkien wrote it.", "Ok."]),
        ("Pi is 3.14 or so. Ok.", ["Pi is 3.14 or so.", "Ok."]),
        ("It costs $4.99 or €1,299.50 today. Ok.", ["It costs $4.99 or €1,299.50 today.", "Ok."]),
        ("Meet at 10:30 or 10.30 then. Ok.", ["Meet at 10:30 or 10.30 then.", "Ok."]),
        ("Install v1.2.3 first. Ok.", ["Install v1.2.3 first.", "Ok."]),
        ("See example.com/a.b or x@y.org now. Ok.", ["See example.com/a.b or x@y.org now.", "Ok."]),
        ("Visit example.com. Then rest.", ["Visit example.com.", "Then rest."]),
        ("Steps: 1. Mix it. 2. Bake it.", ["Steps: 1. Mix it.", "2. Bake it."]),
        ("There are 3. The first is red.", ["There are 3.", "The first is red."]),
        ("Well... maybe not. Wait... What?", ["Well... maybe not.", "Wait...", "What?"]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("First para\n\nSecond para", ["First para.", "Second para"]),
        ("Options:\n- apples\n- pears", ["Options:", "apples.", "pears"]),
    ],
)
def test_sentence_boundaries(text: str, sentences: list[str]) -> None:
    assert chunks(SentenceChunker(), [text]) == sentences
    assert chunks(SentenceChunker(), list(text)) == sentences  # character by character


def test_sentence_end_is_decided_when_the_next_word_starts() -> None:
    c = SentenceChunker()
    assert c.push("Hello world.") == []
    assert c.push(" ") == []  # "Dr." or the end of a sentence? Not known yet.
    assert c.push("T") == ["Hello world."]
    assert c.push("he Dr.") == []
    assert c.push(" S") == []  # decided: not an end
    assert c.push("mith came.") == []
    assert c.flush() == ["The Dr. Smith came."]


def test_every_split_point() -> None:
    text = (
        "Dr. Smith met J. R. R. Tolkien at 10 a.m. in the U.S. today. It cost $4.99, "
        "i.e. €1,299.50 at 10.30 for v1.2.3 (see example.com/a.b). Wait... what? Yes!\n"
        "1. First.\n2. Second **bold** item [link](u) 🎉. Done"
    )
    expected = chunks(SentenceChunker(), [text])
    for i in range(len(text) + 1):
        assert chunks(SentenceChunker(), [text[:i], text[i:]]) == expected, i


def test_decimal_split_across_deltas() -> None:
    out = pushes(SentenceChunker(), ["Pi is 3.", "14 and e is 2", ".", "71 ok. ", "Yes"])
    assert out == [[], [], [], [], ["Pi is 3.14 and e is 2.71 ok."], ["Yes"]]


# --- lookahead chunker --------------------------------------------------------------------


def test_first_chunk_timing_word_by_word() -> None:
    """The first chunk comes out at the 3rd delta: " capital" starts the 3rd word, so "the"
    is complete and "capital" is arriving, 2 words of lookahead beyond "Sure,". One word is
    short to say, so the next chunk goes out on the same rule, with two words, at the 5th."""
    out = pushes(LookaheadChunker(), word_deltas("Sure, the capital of France is Paris."))
    assert out == [[], [], ["Sure,"], [], ["the capital"], [], [], ["of France is Paris."]]


def test_a_first_chunk_of_two_words_waits_for_the_fourth() -> None:
    opts = ChunkerOptions(min_first_words=2)
    out = pushes(LookaheadChunker(opts), word_deltas("Sure, the capital of France is Paris."))
    assert out == [[], [], [], ["Sure, the"], [], [], [], ["capital of France is Paris."]]


def test_first_chunk_timing_with_trailing_space_tokens() -> None:
    deltas = ["Sure, ", "the ", "capital ", "of ", "France ", "is ", "Paris."]
    # "capital " is held as a growing word (the filter keeps the space until more text comes).
    assert pushes(LookaheadChunker(), deltas)[2] == ["Sure,"]


@FAST
@given(st.binary(min_size=5, max_size=30))
def test_first_chunk_when_the_third_word_starts(program: bytes) -> None:
    reply = [("one", "two,", "three", "four;", "five", "six:", "(seven)")[b % 7] for b in program]
    out = pushes(LookaheadChunker(), word_deltas(" ".join(reply)))
    assert out[:2] == [[], []]
    assert out[2][0] == reply[0]


def test_first_chunk_prefers_a_clause_boundary_when_words_arrive_together() -> None:
    c = LookaheadChunker()
    assert c.push("Well, honestly, I think the answer is Paris. It is") == [
        "Well, honestly,",
        "I think the answer is Paris.",
    ]
    assert c.push(" lovely.") == []
    assert c.flush() == ["It is lovely."]
    c = LookaheadChunker()
    first = c.push("Yes, I think that, honestly, Paris is the one")[0]
    assert first == "Yes, I think that, honestly,"


def test_first_chunk_without_boundary_is_short() -> None:
    c = LookaheadChunker()
    assert c.push("The capital of France is Paris")[0] == "The"


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("Mr. Smith will call now.", "Mr. Smith"),
        ("J. R. R. Tolkien wrote it all.", "J. R. R. Tolkien"),
        ("10 a.m. sharp please ok.", "10 a.m."),
        ("Paris — the city of light.", "Paris —"),
    ],
)
def test_first_chunk_never_splits_a_name_or_time(text: str, first: str) -> None:
    assert chunks(LookaheadChunker(), word_deltas(text))[0] == first


def test_later_chunks_end_at_clauses_and_sentences() -> None:
    text = "Sure, the capital of France, which is lovely, is Paris. Yes. It has, I think, a river."
    assert chunks(LookaheadChunker(), word_deltas(text)) == [
        "Sure,",
        "the capital",  # the lead-in's second chunk
        "of France, which is lovely,",  # "France," is only 3 words in
        "is Paris.",
        "Yes. It has, I think,",  # "Yes." alone is too short, "has," too early for a clause
        "a river.",
    ]


def test_long_chunks_grow_to_the_cap() -> None:
    # Each chunk's audio outlasts the writing of the next: 1 + 2 words, then 4 + 2, 8 + 2, ...
    text = " ".join(f"w{i}" for i in range(60)) + "."
    out = chunks(LookaheadChunker(), word_deltas(text))
    assert [words(c) for c in out] == [1, 2, 6, 10, 18, 23]
    assert " ".join(out) == text
    flat = chunks(LookaheadChunker(ChunkerOptions(chunk_growth=1)), word_deltas(text))
    assert [words(c) for c in flat] == [1, 2] + [4] * 14 + [1]


def test_a_capped_chunk_ends_at_its_last_clause_boundary() -> None:
    text = "Rome grew from a village, of farmers and shepherds on the hills into an empire."
    assert chunks(LookaheadChunker(), word_deltas(text)) == [
        "Rome",
        "grew from",
        "a village,",  # capped at 6 words, cut at the comma within them
        "of farmers and shepherds on the hills into an empire.",
    ]


def test_custom_options() -> None:
    opts = ChunkerOptions(min_first_words=1, lookahead_words=1, min_clause_words=2)
    out = pushes(LookaheadChunker(opts), word_deltas("Sure, the capital, of course, is Paris."))
    assert out[2] == ["Sure,"]
    assert [c for o in out for c in o] == ["Sure,", "the capital,", "of course,", "is Paris."]


def test_short_reply_comes_out_at_flush() -> None:
    c = LookaheadChunker()
    assert c.push("Hi there.") == []
    assert c.flush() == ["Hi there."]
    assert chunks(LookaheadChunker(), []) == []


def test_markdown_only_reply_has_no_chunks() -> None:
    c = make_chunker()
    assert chunks(c, ["```py", "thon\nx = 1\n", "```\n", "🎉 **", "**"]) == []
    assert c.spoken_text == ""


# --- both ---------------------------------------------------------------------------------


def test_markdown_and_emoji_never_reach_tts() -> None:
    reply = (
        "## Answer 🎉\n\nThe **capital** of *France* is `Paris` — see [the map](https://ex.am/p_(q)).\n"
        "Steps:\n1. Take the **train**.\n2. Walk ✅ to the _river_.\n"
        "```python\nprint('secret_code')\n```\n- Enjoy! 👍🏽"
    )
    for kind in ("lookahead", "sentence"):
        c = make_chunker(kind)
        out = chunks(c, split(reply, bytes(range(1, 200, 3))))
        text = " ".join(out)
        assert not set(text) & set("*_`#[]()")
        assert not any(is_unspoken(ch) for ch in text)
        assert "secret" not in text and "python" not in text and "https" not in text
        assert c.spoken_text == make_speakable(reply)
    assert chunks(SentenceChunker(), [reply]) == [
        "Answer.",
        "The capital of France is Paris — see the map.",
        "Steps:",
        "Take the train.",
        "Walk to the river.",
        "Enjoy!",
    ]


def test_make_chunker() -> None:
    assert isinstance(make_chunker(), LookaheadChunker)
    assert isinstance(make_chunker("sentence"), SentenceChunker)
    opts = ChunkerOptions(max_chunk_words=30)
    chunker = make_chunker("lookahead", opts)
    assert isinstance(chunker, LookaheadChunker) and chunker.options is opts
    with pytest.raises(ValueError):
        make_chunker("words")


def test_options_are_frozen_and_checked() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ChunkerOptions().min_first_words = 3  # type: ignore[misc]
    with pytest.raises(ValueError):
        ChunkerOptions(min_first_words=0)
    with pytest.raises(ValueError):
        ChunkerOptions(min_first_words=8)  # above max_first_words
    with pytest.raises(ValueError):
        ChunkerOptions(max_chunk_words=3)


# Reply text: words, numbers, prices, abbreviations, URLs, punctuation, markdown, emoji, glued
# together with or without whitespace, so that every mix occurs.
PIECES = (
    "Paris the capital is wait What Dr. Mr. Mrs. St. e.g. i.e. etc. vs. a.m. p.m. U.S. J. R. "
    "3.14 $4.99 €1,299.50 10:30 10.30 v1.2.3 example.com/a.b x@y.org https://x.org/p_q 1. 2. "
    '. , ! ? ... … ; : — - ** * _ ` ``` [ ](u) # 🎉 👍🏽 " ( )'
).split()
GLUE = [" ", " ", " ", " ", "", "", "\n", "\n\n", "  ", "\n- ", "\n1. "]


def reply_text(program: bytes) -> str:
    return "".join(
        PIECES[program[i] % len(PIECES)] + GLUE[program[i + 1] % len(GLUE)]
        for i in range(0, len(program) - 1, 2)
    )


def cut_between_words(chunker: TextChunker, program: bytes, sizes: bytes) -> tuple[str, list[str]]:
    """The reply of `program`, and the `chunker`'s chunks of it streamed in deltas of `sizes`: the
    speakable text's words, cut between words, and all of it spoken."""
    text = reply_text(program)
    out = chunks(chunker, split(text, sizes))
    assert all(c and c == " ".join(c.split()) for c in out)  # non-empty, single spaces
    assert [w for c in out for w in c.split()] == make_speakable(text).split()
    assert chunker.spoken_text == make_speakable(text)
    return text, out


@FAST
@given(st.binary(max_size=160), st.binary(max_size=80))
def test_sentence_chunks_do_not_depend_on_the_deltas(program: bytes, sizes: bytes) -> None:
    text, out = cut_between_words(SentenceChunker(), program, sizes)
    assert out == chunks(SentenceChunker(), [text])


@FAST
@given(st.binary(max_size=160), st.binary(max_size=80))
def test_lookahead_chunks_are_words_of_the_text(program: bytes, sizes: bytes) -> None:
    _, out = cut_between_words(LookaheadChunker(), program, sizes)
    assert all(words(chunk) >= 2 for chunk in out[1:-1])  # never token by token


@FAST
@given(st.binary(max_size=160), st.binary(max_size=80))
def test_lookahead_chunks_stay_under_the_cap(program: bytes, sizes: bytes) -> None:
    text = re.sub(r"\b(?:Dr|Mr|Mrs|St|e\.g|i\.e|vs|J|R)\.", "", reply_text(program))
    out = chunks(LookaheadChunker(), split(text, sizes))
    assert all(words(chunk) <= 24 for chunk in out)


@FAST
@given(st.binary(max_size=160), st.binary(max_size=80))
def test_the_guessed_first_chunk_is_how_the_first_chunk_begins(
    program: bytes, sizes: bytes
) -> None:
    text = reply_text(program)
    c = LookaheadChunker()
    guesses: list[str] = []
    out: list[str] = []
    for delta in split(text, sizes):
        out += c.push(delta)
        if not out and (guess := c.provisional_first()):
            guesses.append(guess)
    out += c.flush()
    assert c.provisional_first() is None  # nothing to guess once the first chunk is out
    for guess in guesses:  # the TTS may start on it: it is never a different beginning
        assert words(guess.text) == 1 and words(guess.right_context) >= 1
        assert out[0] == guess.text or out[0].startswith(guess.text + " ")  # a bound name
        assert (out[0] + " " + " ".join(out[1:])).startswith(guess.text + " " + guess.right_context)


def test_the_first_chunk_is_guessed_before_it_goes_out() -> None:
    c = LookaheadChunker()
    seen = [(c.push(d), c.provisional_first()) for d in word_deltas("The capital of France is")]
    assert seen[0] == ([], None)  # "The" may still grow ("Then")
    assert seen[1] == ([], FirstGuess("The", "capital"))  # guessed as "capital" begins
    assert seen[2] == (["The"], None)  # the 3rd word: the chunk itself goes out


def test_the_guess_waits_for_its_word_to_be_complete() -> None:
    c = LookaheadChunker()
    guesses = [c.provisional_first() for d in ["The", "n", " cap", "ital"] if not c.push(d)]
    assert guesses == [None, None, FirstGuess("Then", "cap"), FirstGuess("Then", "capital")]
