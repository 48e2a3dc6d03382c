"""Text cleanup for speech: what an LLM writes (markdown, emoji) turned into what TTS should say.

Markdown markers go (headings, emphasis, inline-code backticks, link targets, list markers);
the content of fenced code blocks is dropped; emoji and other pictographs are removed;
whitespace collapses to single spaces. Structure that a reader sees (paragraphs, list items,
headings, code blocks) becomes a sentence break: a newline, preceded by a period when the text
before it ends without punctuation, so TTS pauses there. All other characters are kept as written.

`SpeakableFilter` does this on a stream of LLM deltas. It holds back only what it cannot decide
yet (a `*` whose neighbour has not arrived, a `[` that may open a link, the whitespace before
the next visible character), so its output is the same however the text was split:
`make_speakable(text)` equals the concatenation of everything the filter returns for it.
"""

from __future__ import annotations

import unicodedata

_NONE, _SPACE, _BREAK = 0, 1, 2  # the separator owed before the next visible character

_PAUSE_PUNCT = ".!?…:;,"  # text ending in one of these needs no period before a break
_CLOSERS = "\"')]}»”’"  # looked through when checking how text ends
_LINK_TEXT_LIMIT = 300  # a "[" with no "]" this soon is a bracket, not a link
_LINK_TARGET_LIMIT = 2000
_URL_PREFIXES = ("http://", "https://", "www.")
_BULLETS = "-*+•"
_THEMATIC_BREAKS = "-*_"  # "---" alone on a line

# Emoji and pictograph blocks. Arrows, ©, ®, ™ and ° are kept: they are text.
_PICTOGRAPH_RANGES = (
    (0x2300, 0x23FF),  # miscellaneous technical: ⌚ ⏰ ⏩
    (0x25A0, 0x25FF),  # geometric shapes: ■ ▶ ◆ (often used as bullets)
    (0x2600, 0x27BF),  # miscellaneous symbols, dingbats: ☀ ✅ ✨ ❤
    (0x2B00, 0x2BFF),  # miscellaneous symbols and arrows: ⭐ ⬆
    (0x1F000, 0x1FAFF),  # tiles, enclosed alphanumerics, emoji, pictographs, regional indicators
    (0xFE00, 0xFE0F),  # variation selectors
    (0xE0000, 0xE007F),  # tags (subdivision flags)
)
_PICTOGRAPHS = frozenset({0x20E3, 0x3030, 0x303D, 0x3297, 0x3299})  # keycap, 〰 〽 ㊗ ㊙


def is_unspoken(ch: str) -> bool:
    """Whether `ch` is an emoji/pictograph or an invisible format or control character."""
    code = ord(ch)
    if code in _PICTOGRAPHS or any(lo <= code <= hi for lo, hi in _PICTOGRAPH_RANGES):
        return True
    return unicodedata.category(ch) in ("Cf", "Cc") and not ch.isspace()


def make_speakable(text: str) -> str:
    """`text` (markdown, emoji) as TTS should say it. See the module docstring."""
    f = SpeakableFilter()
    return f.push(text) + f.flush()


def _run_end(s: str, i: int, ch: str) -> int:
    while i < len(s) and s[i] == ch:
        i += 1
    return i


def _match_link(s: str, j: int, final: bool) -> tuple[int, str] | None:
    """Match `[text](target)` starting at `s[j] == "["`.

    Returns (end, text) for a link, (-1, "") for no link, None when more input is needed.
    """
    close = -1
    for k in range(j + 1, min(len(s), j + 1 + _LINK_TEXT_LIMIT)):
        if s[k] == "]":
            close = k
            break
        if s[k] in "[\n":
            return -1, ""
    if close < 0:
        return (-1, "") if final or len(s) - j - 1 >= _LINK_TEXT_LIMIT else None
    if close + 1 == len(s):
        return (-1, "") if final else None
    if s[close + 1] != "(":
        return -1, ""
    depth = 0  # targets may contain balanced parentheses (Wikipedia URLs)
    start = close + 2
    for k in range(start, min(len(s), start + _LINK_TARGET_LIMIT)):
        if s[k] == "\n":
            return -1, ""
        if s[k] == "(":
            depth += 1
        elif s[k] == ")":
            if depth == 0:
                return k + 1, s[j + 1 : close]
            depth -= 1
    return (-1, "") if final or len(s) - start >= _LINK_TARGET_LIMIT else None


class SpeakableFilter:
    """Streaming `make_speakable`: `push(delta)` returns the cleaned text that is safe to emit
    so far, `flush()` the rest at the end of the text. One instance per text.

    The returned text never ends in whitespace: a separator is emitted together with the next
    visible character (it may turn out to be a sentence break, which adds a period).
    """

    def __init__(self) -> None:
        self._buf = ""  # raw input not consumed yet
        self._i = 0  # position in _buf during a run
        self._out: list[str] = []
        self._sep = _NONE
        self._started = False  # anything emitted yet
        self._tail = ""  # the last visible characters emitted
        self._word = ""  # the start of the current word as emitted (to spot URLs)
        self._prev = "\n"  # the raw character before _buf[_i] (emphasis needs its neighbours)
        self._dropped = False  # a pictograph was removed since the last visible character
        self._line_start = True  # only indentation so far on this line
        self._newlines = 0  # newlines since the last visible character
        self._heading = False  # this line is a heading: its end is a sentence break
        self._code_block = False
        self._code_span = False
        self._url = False  # inside a bare URL: markdown characters are literal
        self._url_held = ""  # "*"/"_" at the current end of a URL: kept only if the URL goes on

    def push(self, delta: str) -> str:
        self._buf += delta
        return self._run(final=False)

    def flush(self) -> str:
        """The rest of the text; the input has ended."""
        return self._run(final=True)

    def _run(self, final: bool) -> str:
        self._out = []
        while self._i < len(self._buf) and self._step(final):
            if self._i > 0:
                self._prev = self._buf[self._i - 1]
        self._buf = self._buf[self._i :]
        self._i = 0
        if final:
            self._sep = _NONE  # a trailing break says nothing
            self._url_held = ""
        return "".join(self._out)

    def _step(self, final: bool) -> bool:
        """Consume at least one character of _buf at _i; False when more input is needed."""
        s, i = self._buf, self._i
        c = s[i]
        if self._code_block:
            return self._in_code_block(final)
        if c == "\n":
            self._end_word()
            self._line_start = True
            self._code_span = False
            self._newlines += 1
            if self._newlines >= 2 or self._heading:
                self._sep = _BREAK
            self._heading = False
            self._i += 1
            return True
        if c.isspace():
            self._end_word()
            self._i += 1
            return True
        if is_unspoken(c):
            self._dropped = True
            self._i += 1
            return True
        if self._line_start and not self._code_span:
            marker = self._line_marker(final)
            if marker is None:
                return False
            if marker:
                self._i += marker
                return True
            self._line_start = False
        if c == "`":
            return self._backticks(final)
        if self._url:
            if c in "*_":
                self._url_held += c
            else:  # markers inside the URL are part of it, before punctuation they close emphasis
                self._emit((self._url_held if c.isalnum() else "") + c)
                self._url_held = ""
            self._i += 1
            return True
        if self._code_span:
            self._emit(c)
            self._i += 1
            return True
        if c in "*_":
            return self._emphasis(final)
        if c == "[" or c == "!":
            return self._link(final)
        self._emit(c)
        self._i += 1
        return True

    def _end_word(self) -> None:
        self._sep = max(self._sep, _SPACE)
        self._word = ""
        self._url = False
        self._url_held = ""

    def _emit(self, text: str) -> None:
        if self._sep and self._started:
            if self._sep == _BREAK:
                last = self._tail.rstrip(_CLOSERS)[-1:]
                self._out.append("\n" if last and last in _PAUSE_PUNCT else ".\n")
            elif not (self._dropped and text[0] in ",.!?;:"):  # "Done ✅." -> "Done."
                self._out.append(" ")
        self._sep = _NONE
        self._started = True
        self._dropped = False
        self._newlines = 0
        self._out.append(text)
        self._tail = (self._tail + text)[-8:]
        if len(self._word) < 12:
            self._word += text
            self._url = self._word.lstrip("(<\"'").startswith(_URL_PREFIXES)

    def _line_marker(self, final: bool) -> int | None:
        """Length of a block marker (heading, bullet, number, quote, rule) at _i, at the start
        of a line; 0 if there is none, None when more input is needed."""
        s, i = self._buf, self._i
        c = s[i]
        if c == ">":  # blockquote: the quoted text is read as is
            return 1
        if c == "#":
            j = _run_end(s, i, "#")
            if j == len(s) and not final:
                return None
            if j - i <= 6 and (j == len(s) or s[j].isspace()):
                self._heading = True
                self._sep = _BREAK
                return j - i
            return 0
        if c in _BULLETS or c in _THEMATIC_BREAKS:
            j = _run_end(s, i, c)
            if j == len(s) and not final:
                return None
            after = s[j] if j < len(s) else "\n"
            if j - i >= 3 and c in _THEMATIC_BREAKS and after == "\n":
                self._sep = _BREAK
                return j - i
            if j - i == 1 and c in _BULLETS and after.isspace():
                self._sep = _BREAK
                return 1
            return 0
        if c.isdigit():
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            if not final and (j == len(s) or (s[j] in ".)" and j + 1 == len(s))):
                return None
            numbered = j - i <= 3 and j < len(s) and s[j] in ".)"
            if numbered and (j + 1 == len(s) or s[j + 1].isspace()):
                self._sep = _BREAK
                return j + 1 - i
        return 0

    def _backticks(self, final: bool) -> bool:
        s, i = self._buf, self._i
        j = _run_end(s, i, "`")
        if j == len(s) and not final:
            return False
        if j - i < 3:  # inline code: drop the backticks, say the content
            self._code_span = not self._code_span
            self._i = j
            return True
        end = s.find("\n", j)  # the fence's info string ("python") is not said either
        if end < 0:
            if not final:
                return False
            end = len(s)
        self._code_block = True
        self._code_span = False
        self._sep = _BREAK
        self._i = end
        return True

    def _in_code_block(self, final: bool) -> bool:
        s, i = self._buf, self._i
        tick = s.find("`", i)
        if tick != i:  # drop everything up to the next backtick
            self._i = len(s) if tick < 0 else tick
            return True
        j = _run_end(s, i, "`")
        if j == len(s) and not final:
            return False
        if j - i >= 3:
            self._code_block = False
            self._sep = _BREAK
        self._i = j
        return True

    def _emphasis(self, final: bool) -> bool:
        s, i = self._buf, self._i
        c = s[i]
        j = _run_end(s, i, c)
        if j == len(s) and not final:
            return False
        before, after = self._prev, s[j] if j < len(s) else " "
        literal = (
            (before.isspace() and after.isspace())  # "2 * 3"
            or (c == "_" and before.isalnum() and after.isalnum())  # snake_case
            or (c == "*" and before.isdigit() and after.isdigit())  # 2*3
        )
        if literal:
            self._emit(s[i:j])
        self._i = j
        return True

    def _link(self, final: bool) -> bool:
        """At "[" or "!": a link or image becomes its text; anything else is literal."""
        s, i = self._buf, self._i
        start = i
        if s[i] == "!":
            if i + 1 == len(s) and not final:
                return False
            start = i + 1
        if start < len(s) and s[start] == "[":
            match = _match_link(s, start, final)
            if match is None:
                return False
            end, text = match
            if end > 0:  # continue with the link text in place of the link
                self._buf = s[:i] + text + s[end:]
                return True
        self._emit(s[i])
        self._i += 1
        return True
