"""make_speakable / SpeakableFilter: markdown and emoji out, words kept, same result however
the text is split into deltas."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tts.speakable import SpeakableFilter, is_unspoken, make_speakable

FAST = settings(max_examples=200, deadline=None)


def stream(deltas: list[str]) -> list[str]:
    """What a SpeakableFilter returns for each delta, then for flush()."""
    f = SpeakableFilter()
    return [f.push(d) for d in deltas] + [f.flush()]


@st.composite
def splits(draw: st.DrawFn, text: str) -> list[str]:
    """`text` cut into deltas at arbitrary positions (empty deltas included)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=len(text) + 2)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("# Title\nBody text.", "Title.\nBody text."),
        ("### Step 1:\nDo it.", "Step 1:\nDo it."),
        ("#hashtag stays", "#hashtag stays"),
        ("Some **bold**, *italic*, __strong__ and _em_ words.", "Some bold, italic, strong and em words."),
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
        ("Family 👨‍👩‍👧 flag 🇫🇷 thumbs 👍🏽 ok ✅ heart ❤️ star ⭐", "Family flag thumbs ok heart star"),
        ("Press 1️⃣ now", "Press 1 now"),
        ("  lots \t of\u00a0 space  ", "lots of space"),
        ("2 * 3 = 6 and 2*3 = 6", "2 * 3 = 6 and 2*3 = 6"),
        ("my_var and snake_case_name", "my_var and snake_case_name"),
        ("Go to https://example.com/a_b_c/x.y now", "Go to https://example.com/a_b_c/x.y now"),
        ("**https://x.org/p_q**.", "https://x.org/p_q."),
        ('He said "done"\n\nThen left', 'He said "done".\nThen left'),
        ("Price $4.99, pi 3.14, v1.2.3 at 10:30 © 2024 25°C →", "Price $4.99, pi 3.14, v1.2.3 at 10:30 © 2024 25°C →"),
        ("Wow!", "Wow!"),
        ("", ""),
    ],
)
def test_make_speakable(text: str, spoken: str) -> None:
    assert make_speakable(text) == spoken


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


@st.composite
def inline_piece(draw: st.DrawFn) -> tuple[str, list[str]]:
    """One markdown inline element and the words it should be spoken as."""
    w = draw(st.sampled_from(WORDS))
    v = draw(st.sampled_from(WORDS))
    raw, words = draw(
        st.sampled_from(
            [
                (w, [w]),
                (f"**{w}**", [w]),
                (f"*{w}*", [w]),
                (f"_{w}_", [w]),
                (f"__{w} {v}__", [w, v]),
                (f"***{w}***", [w]),
                (f"`{w}`", [w]),
                (f"[{w} {v}](https://example.com/{v}_(x))", [w, v]),
                (f"![{w}](img.png)", [w]),
                (draw(st.sampled_from(EMOJI)), []),
            ]
        )
    )
    return raw + draw(st.sampled_from(["", ",", ".", "!", "?", ":"])), words


@st.composite
def markdown_line(draw: st.DrawFn) -> tuple[str, list[str]]:
    pieces = draw(st.lists(inline_piece(), min_size=1, max_size=6))
    seps = draw(st.lists(st.sampled_from([" ", "  ", "\t", " \u00a0"]), min_size=len(pieces)))
    text = "".join(p + s for (p, _), s in zip(pieces, seps, strict=False)).rstrip()
    words = [w for _, ws in pieces for w in ws]
    kind = draw(st.sampled_from(["plain", "heading", "bullet", "numbered", "quote", "code"]))
    if kind == "code":
        return "```python\nprint(secret_value)\n```", []
    prefix = {"plain": "", "heading": "## ", "bullet": "- ", "numbered": "3. ", "quote": "> "}
    return prefix[kind] + text, words


@st.composite
def markdown_texts(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A markdown reply and the words (in order) that must be spoken."""
    lines = draw(st.lists(markdown_line(), min_size=1, max_size=6))
    breaks = draw(st.lists(st.sampled_from(["\n", "\n\n", "\n \n"]), min_size=len(lines)))
    text = "".join(line + b for (line, _), b in zip(lines, breaks, strict=False))
    return text, [w for _, ws in lines for w in ws]


@FAST
@given(st.data(), markdown_texts())
def test_streaming_equals_one_shot(data: st.DataObject, reply: tuple[str, list[str]]) -> None:
    text, _ = reply
    assert "".join(stream(data.draw(splits(text)))) == make_speakable(text)


@FAST
@given(st.data(), st.text(alphabet="ab *_`[]()!#-1.\n🎉", max_size=40))
def test_streaming_equals_one_shot_on_any_text(data: st.DataObject, text: str) -> None:
    assert "".join(stream(data.draw(splits(text)))) == make_speakable(text)


@FAST
@given(markdown_texts())
def test_markdown_becomes_plain_words(reply: tuple[str, list[str]]) -> None:
    text, words = reply
    spoken = make_speakable(text)
    assert re.findall(r"[A-Za-z]+", spoken) == words  # nothing lost, no code, no URLs
    assert not set(spoken) & set("*_`#[]()>")
    assert not any(is_unspoken(ch) for ch in spoken)
    assert spoken == spoken.strip()
    assert not re.search(r"\s\s| \n|\n ", spoken)  # collapsed: one space or one break
