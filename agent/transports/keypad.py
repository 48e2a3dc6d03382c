"""A phone caller's keypad: the SIP DTMF packets livekit-sip sends for each digit pressed
(rtc.Room's "sip_dtmf_received"), as typed turns ("The caller pressed 1 2 3 #.") or ignored,
as the profile says (`keypad`). Only the served caller's digits count: anyone else's (another
participant's, a server SDK's) never steer the agent."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.transports.phone_call import DTMF_CODES

if TYPE_CHECKING:
    from livekit import rtc

log = logging.getLogger(__name__)

# Digits pressed in a row are one message: an account number is not eight turns. A caller
# keying in a number presses a digit every few hundred milliseconds; one second of no key
# ends it, and "#" (what menus ask to end an entry with) ends it at once.
DIGIT_GAP_S = 1.0
MAX_DIGITS = 32  # one message at most this long: a stuck key does not grow it without end
_DIGIT_OF_CODE = {code: digit for digit, code in DTMF_CODES.items()}


def keypad_text(digits: list[str]) -> str:
    return f"The caller pressed {' '.join(digits)} on the keypad."


class KeypadInput:
    """`caller`'s digits in `room` to `push` (None: ignored, logged once)."""

    def __init__(
        self,
        room: rtc.Room,
        caller: str,
        push: Callable[[str], None] | None,
        *,
        gap_s: float = DIGIT_GAP_S,
    ) -> None:
        self._room = room
        self._caller = caller
        self._push = push
        self._gap_s = gap_s
        self._digits: list[str] = []
        self._flush_at: asyncio.TimerHandle | None = None
        self._logged: set[str] = set()  # what was logged once: a flood logs one line

    def start(self) -> None:
        self._room.on("sip_dtmf_received", self.on_dtmf)

    def close(self) -> None:
        """Stop listening; digits still waiting for their gap are dropped (the caller left)."""
        self._room.off("sip_dtmf_received", self.on_dtmf)
        if self._flush_at is not None:
            self._flush_at.cancel()

    def on_dtmf(self, dtmf: rtc.SipDTMF) -> None:
        sender = dtmf.participant.identity if dtmf.participant is not None else ""
        if sender != self._caller:
            self._once(
                f"from:{sender}",
                "keypad digit from %s ignored: the agent serves %s",
                sender or "the server",
                self._caller,
            )
            return
        digit = dtmf.digit.upper() if dtmf.digit else _DIGIT_OF_CODE.get(dtmf.code, "")
        if digit not in DTMF_CODES:
            self._once(
                "bad",
                "keypad event %r (code %d) ignored: not a keypad digit",
                dtmf.digit,
                dtmf.code,
            )
            return
        if self._push is None:
            self._once(
                "ignore",
                'keypad digits from %s ignored (the profile\'s keypad = "ignore")',
                self._caller,
            )
            return
        self._digits.append(digit)
        if self._flush_at is not None:
            self._flush_at.cancel()
        if digit == "#" or len(self._digits) >= MAX_DIGITS:
            self._flush()
        else:
            self._flush_at = asyncio.get_running_loop().call_later(self._gap_s, self._flush)

    def _flush(self) -> None:
        self._flush_at = None
        digits, self._digits = self._digits, []
        if digits and self._push is not None:
            log.info("keypad: %d digit(s) from the caller", len(digits))
            self._push(keypad_text(digits))

    def _once(self, key: str, message: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(message, *args)
