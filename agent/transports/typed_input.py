"""The bounds on what a user may type to the agent (`lk.chat` text streams, read by
agent.transports.room_session): a message is read chunk by chunk and given up as soon as it
passes `max_chars`, so an oversized one is never held whole nor sent to the LLM; and each
sender's messages are rate limited (a token bucket), so a flood is refused rather than
answered, or interrupting the agent, turn after turn. Each refusal is a sentence for the
sender. Pure: no I/O."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.transports.rate_limit import RateLimiter

MAX_TYPED_CHARS = 2_000  # a long spoken question is ~60 words; this is a paragraph and more
TYPED_PER_MIN = 20.0  # sustained: a message every 3 s, faster than anyone reads the answers
TYPED_BURST = 4  # a few in a row (a correction, a follow-up) pass at once
READ_TIMEOUT_S = 10.0  # a message is a few chunks: one that never ends is a stalled sender


def too_long_reply(max_chars: int) -> str:
    return (
        f"Your message was not sent to the agent: it is longer than {max_chars} "
        "characters. Please shorten it."
    )


def too_fast_reply(wait_s: float) -> str:
    return (
        f"Your message was not sent to the agent: too many messages in a short time. "
        f"Please wait {max(1, math.ceil(wait_s))} s."
    )


class BoundedMessage:
    """One message's chunks, up to `max_chars` in all: past that it is dropped whole (`over`)
    and the reader stops reading."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.over = False
        self._parts: list[str] = []
        self._chars = 0

    def add(self, chunk: str) -> bool:
        """Take a chunk; False once the message is over the bound (stop reading)."""
        if self.over:
            return False
        self._chars += len(chunk)
        if self._chars > self.max_chars:
            self.over = True
            self._parts.clear()
            return False
        self._parts.append(chunk)
        return True

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def refusal(self) -> str:
        return too_long_reply(self.max_chars)


@dataclass
class TypedInput:
    """The limits of one session's typed input."""

    max_chars: int = MAX_TYPED_CHARS
    per_min: float = TYPED_PER_MIN
    burst: float = TYPED_BURST
    read_timeout_s: float = READ_TIMEOUT_S
    clock: Callable[[], float] = time.monotonic
    _limiter: RateLimiter = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._limiter = RateLimiter(self.per_min, burst=self.burst, clock=self.clock)

    def admit(self, sender: str) -> str | None:
        """A message from `sender` begins: None when it may be read, else the refusal to send
        back (too many messages: it is not read at all)."""
        wait_s = self._limiter.take(sender)
        return None if wait_s == 0 else too_fast_reply(wait_s)

    def message(self) -> BoundedMessage:
        return BoundedMessage(self.max_chars)
