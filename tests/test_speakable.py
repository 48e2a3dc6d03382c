"""make_speakable / SpeakableFilter: markdown and emoji out, words kept, same result however
the text is split into deltas."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tts.speakable import SpeakableFilter, is_unspoken, make_speakable
from tts.spoken_form import spoken_form

FAST = settings(max_examples=200, deadline=None)


def stream(deltas: list[str]) -> list[str]:
    """What a SpeakableFilter returns for each delta, then for flush()."""
    f = SpeakableFilter()
    return [f.push(d) for d in deltas] + [f.flush()]


def split(text: str, sizes: bytes) -> list[str]:
    """`text` cut into deltas of 0 to 7 characters, one size per byte (the rest in one delta):
    byte strings from hypothesis give arbitrary splits that shrink well."""
    deltas, i = [], 0
    for b in sizes:
        deltas.append(text[i : i + b % 8])
        i += b % 8
    return [*deltas, text[i:]]


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("# Title\nBody text.", "Title.\nBody text."),
        ("### Step 1:\nDo it.", "Step 1:\nDo it."),
        ("#hashtag stays", "#hashtag stays"),
        ("Some **bold**, *it*, __strong__ and _em_ words.", "Some bold, it, strong and em words."),
        ("***both*** at once", "both at once"),
        ("Use `x = 1` here.", "Use x = 1 here."),
        ("Code:\n```python\nprint('secret')\n```\nDone.", "Code:\nDone."),
        ("Before\n```\nunterminated code", "Before"),
        ("See [the docs](https://example.com/a_(b)) now.", "See the docs now."),
        ("An image: ![a cat](cat.png).", "An image: a cat."),
        ("Not a link [1] or [x] (y).", "Not a link [1] or [x] (y)."),
        ("Options:\n- apples\n- pears", "Options:\napples.\npears"),
        ("* one\n+ two\n• three", "one.\ntwo.\nthree"),
        ("Steps:\n1. Mix.\n2) Bake!", "Steps:\nMix.\nBake!"),
        ("Para one\n\nPara two", "Para one.\nPara two"),
        ("a soft\nline break", "a soft line break"),
        ("> quoted words", "quoted words"),
        ("Above\n\n---\n\nBelow", "Above.\nBelow"),
        ("Great job 🎉! Rocket 🚀 here.", "Great job! Rocket here."),
        ("Family 👨‍👩‍👧 flag 🇫🇷 thumbs 👍🏽 ok ✅ love ❤️ ⭐", "Family flag thumbs ok love"),
        ("Press 1️⃣ now", "Press 1 now"),
        ("  lots \t of\u00a0 space  ", "lots of space"),
        ("**https://x.org/p_q**.", "https://x.org/p_q."),
        ('He said "done"\n\nThen left', 'He said "done".\nThen left'),
        ("", ""),
    ],
)
def test_make_speakable(text: str, spoken: str) -> None:
    assert make_speakable(text) == spoken


@pytest.mark.parametrize(
    "text",
    [
        "2 * 3 = 6 and 2*3 = 6",
        "my_var and snake_case_name",
        "Go to https://example.com/a_b_c/x.y now",
        "Price $4.99, pi 3.14, v1.2.3 at 10:30 © 2024 25°C →",
        "Wow!",
    ],
)
def test_plain_text_is_kept(text: str) -> None:
    assert make_speakable(text) == text


def test_unspoken_characters() -> None:
    assert all(is_unspoken(ch) for ch in "🎉🚀✅⭐\u200d\ufe0f\u20e3\u200b")
    assert not any(is_unspoken(ch) for ch in "aZ9.,-$€©®™°→é ")


def test_emphasis_split_across_deltas() -> None:
    assert stream(["Some *", "*bo", "ld*", "* text"]) == ["Some", " bo", "ld", " text", ""]


def test_link_split_across_deltas_is_held_until_resolved() -> None:
    assert stream(["See [the", " docs](https://ex", "ample.com) now"]) == [
        "See",
        "",
        " the docs now",
        "",
    ]


def test_bracket_without_link_is_released() -> None:
    assert stream(["Item [1", "] is", " here"]) == ["Item", " [1] is", " here", ""]


SAMPLE = (
    "## Plan 🎉\n\nSome **bold**, __strong__ and _em_ text with `x_y` and 2 * 3.\n"
    "See [the docs](https://ex.am/a_(b)) and ![a cat](c.png)! Or [1] (x).\n"
    "1. First ✅\n- Second 👨‍👩‍👧\n> Quote\n\n---\n```python\nprint('secret')\n```\n"
    "Visit **https://x.org/p_q**. Done"
)


def test_every_split_point() -> None:
    spoken = make_speakable(SAMPLE)
    for i in range(len(SAMPLE) + 1):
        assert "".join(stream([SAMPLE[:i], SAMPLE[i:]])) == spoken, i
    assert "".join(stream(list(SAMPLE))) == spoken


def test_code_fence_split_across_deltas() -> None:
    assert "".join(stream(["Look:\n``", "`py\nx = 1\n`", "``\nDone."])) == "Look:\nDone."


def test_visible_text_is_not_held_back() -> None:
    f = SpeakableFilter()
    assert f.push("Hello wor") == "Hello wor"
    assert f.push("ld ") == "ld"  # the space waits for the next visible character
    assert f.push("\n") == ""
    assert f.push("\n- next") == ".\nnext"  # a list item: a sentence break
    assert f.flush() == ""


def test_break_needs_following_text() -> None:
    assert stream(["Last line\n\n"]) == ["Last line", ""]


WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
EMOJI = ["🎉", "👍🏽", "👨‍👩‍👧", "🇫🇷", "✅", "❤️", "⭐", "🚀"]
# Inline markdown around words ("{}" is a word) and how many words each says.
INLINE = [
    ("{}", 1),
    ("**{}**", 1),
    ("*{}*", 1),
    ("_{}_", 1),
    ("__{} {}__", 2),
    ("***{}***", 1),
    ("`{}`", 1),
    ("[{} {}](https://example.com/x_(y))", 2),
    ("![{}](img.png)", 1),
]
SUFFIXES = ["", "", ",", ".", "!", "?", ":"]
# What comes between two inline elements: spaces, or a line break and a block marker.
BETWEEN = [
    " ",
    " ",
    " ",
    "  ",
    "\t",
    " \u00a0",
    "\n",
    "\n\n",
    "\n \n",
    "\n- ",
    "\n* ",
    "\n3. ",
    "\n## ",
    "\n> ",
    "\n\n---\n",
    "\n```python\nprint(secret_value)\n```\n",
]


def markdown_reply(program: bytes) -> tuple[str, list[str]]:
    """A markdown reply decoded from bytes, and the words (in order) it must be spoken as."""
    text, words = [], []
    for i in range(0, len(program) - 2, 3):
        a, b, c = program[i : i + 3]
        if a % 5 == 0:
            text.append(EMOJI[b % len(EMOJI)])
        else:
            form, n = INLINE[a % len(INLINE)]
            said = [WORDS[(b + k) % len(WORDS)] for k in range(n)]
            text.append(form.format(*said) + SUFFIXES[c % len(SUFFIXES)])
            words += said
        text.append(BETWEEN[c // len(SUFFIXES) % len(BETWEEN)])
    return "".join(text), words


@FAST
@given(st.binary(max_size=90), st.binary(max_size=60))
def test_streaming_equals_one_shot(program: bytes, sizes: bytes) -> None:
    text, _ = markdown_reply(program)
    assert "".join(stream(split(text, sizes))) == make_speakable(text)


@FAST
@given(st.text(alphabet="ab *_`[]()!#-1.\n🎉", max_size=40), st.binary(max_size=40))
def test_streaming_equals_one_shot_on_any_text(text: str, sizes: bytes) -> None:
    assert "".join(stream(split(text, sizes))) == make_speakable(text)


@FAST
@given(st.binary(max_size=90))
def test_markdown_becomes_plain_words(program: bytes) -> None:
    text, words = markdown_reply(program)
    spoken = make_speakable(text)
    assert re.findall(r"[A-Za-z]+", spoken) == words  # nothing lost, no code, no URLs
    assert not set(spoken) & set("*_`#[]()>")
    assert not any(is_unspoken(ch) for ch in spoken)
    assert spoken == spoken.strip()
    assert not re.search(r"\s\s| \n|\n ", spoken)  # collapsed: one space or one break


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("It costs $19.99 today.", "It costs 19 dollars 99 cents today."),
        ("Only $1.", "Only 1 dollar."),
        ("About €2,500 a month", "About 2,500 euros a month"),
        ("£3.01 or £1.00", "3 pounds 1 penny or 1 pound"),
        ("$2.5 million", "2.5 million dollars"),
        ("$2.5", "2.5 dollars"),
        ("No money here: 19.99 and $ alone.", "No money here: 19.99 and $ alone."),
    ],
)
def test_amounts_of_money_are_written_as_said(written: str, said: str) -> None:
    assert spoken_form(written) == said
