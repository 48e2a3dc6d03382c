"""Written forms Piper's phonemizer (espeak-ng) reads wrong, rewritten as they are said.

espeak-ng reads "$19.99" as "dollar nineteen point nine nine" (the TTS -> STT round trip of
bench/tts_roundtrip.py lost words on a price: docs/bench/tts_roundtrip.md). Amounts of money
become "19 dollars 99 cents"; other text is left as it is.
"""

from __future__ import annotations

import re

_CURRENCIES = {"$": ("dollar", "cent"), "€": ("euro", "cent"), "£": ("pound", "penny")}
_AMOUNT = re.compile(
    r"([$€£])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:\s+(thousand|million|billion|trillion)\b)?"
)


def _plural(n: str, unit: str) -> str:
    if n.lstrip("0") == "1":
        return unit
    return "pence" if unit == "penny" else f"{unit}s"


def _say_amount(m: re.Match[str]) -> str:
    unit, sub = _CURRENCIES[m.group(1)]
    whole, fraction, scale = m.group(2), m.group(3), m.group(4)
    if scale:  # "$2.5 million" -> "2.5 million dollars"
        return f"{whole}{'.' + fraction if fraction else ''} {scale} {unit}s"
    if fraction and len(fraction) != 2:  # "$2.5": a decimal, not cents
        return f"{whole}.{fraction} {unit}s"
    said = f"{whole} {_plural(whole, unit)}"
    if fraction and fraction != "00":
        said += f" {int(fraction)} {_plural(fraction, sub)}"
    return said


def spoken_form(text: str) -> str:
    """`text` with amounts of money written out as words are said."""
    return _AMOUNT.sub(_say_amount, text)
