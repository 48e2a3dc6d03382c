"""Secrets never reach the logs: every log record is redacted when it is created.

Two nets, both applied to the message (with its %-arguments merged), to a logged exception's
traceback and to stack info:
- the values of the secret settings (LIVEKIT_API_SECRET, OPENAI_API_KEY, DEEPGRAM_API_KEY,
  from the environment at install time, and any registered later with `register_secrets`,
  e.g. from a config file), wherever they appear;
- the shapes of credentials whatever their value: JWTs (LiveKit join tokens), bearer and
  `Token` authorization headers, `sk-…` keys, and `token=`, `key=`, `secret=`, `password=`
  style parameters (a join URL's `access_token=` included), digits-only values too; a number
  with a fraction there is a timing and is kept;
- phone numbers: `+` and 6 to 15 digits, or digits after `sip_` (livekit-sip's identities),
  `sip:` or `tel:`, all but their last two digits (a caller's number is personal data; the
  last two tell calls apart in a log).

It hooks the log record factory, not a handler: it works for every logger and every handler
configured later (each subcommand sets up its own), and a record forwarded from another
process was redacted where it was made, as long as that process installed it too.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import traceback
from collections.abc import Iterable

SECRET_ENV_VARS = ("LIVEKIT_API_SECRET", "OPENAI_API_KEY", "DEEPGRAM_API_KEY")
MASK = "[REDACTED]"
MIN_SECRET_LEN = 8  # shorter values ("secret", the dev server's) would mask ordinary words

_PATTERNS = [
    re.compile(r"eyJ[\w-]{5,}\.[\w-]{5,}\.[\w-]{5,}"),  # JWT: header.payload.signature
    re.compile(r"(\b(?:Bearer|Token|Basic)\s+)[\w.~+/=-]{16,}"),  # Authorization headers
    re.compile(r"\bsk-[\w-]{16,}"),  # OpenAI-style keys
    # A number with a fraction is a measure, not a credential: timings such as
    # {'first_token': 1089.9} stay readable. Digits alone are masked (a PIN, a numeric
    # password or token): the 6-character minimum leaves short counts alone.
    re.compile(
        r"(?i)((?:access_token|api[_-]?key|api[_-]?secret|secret|token|password)"
        r"['\"]?\s*[=:]\s*['\"]?)(?!-?\d*\.\d+(?:e[+-]?\d+)?(?:[\s'\"&,;)}]|$))"
        r"[^\s'\"&,;)}]{6,}"
    ),
    # A phone number: "+" not inside a word or a number (1e+123456 is not one), or livekit-sip's
    # prefixes; the last two digits are kept (lookahead).
    re.compile(r"((?<![0-9A-Za-z.])\+|\b(?:sip_|sip:|tel:)\+?)\d{4,13}(?=\d{2}(?!\d))"),
]

_lock = threading.Lock()
_secrets: set[str] = set()
_installed = False


def register_secrets(values: Iterable[str | None]) -> None:
    """Values to mask wherever they appear (empty and very short ones are ignored)."""
    with _lock:
        _secrets.update(v for v in values if v and len(v) >= MIN_SECRET_LEN)


def redact(text: str) -> str:
    for secret in sorted(_secrets, key=len, reverse=True):  # a secret inside a longer one
        text = text.replace(secret, MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.re.groups else "") + MASK, text)
    return text


def _redact_record(record: logging.LogRecord) -> None:
    message = record.getMessage()
    clean = redact(message)
    if clean != message or record.args:
        record.msg, record.args = clean, None
    if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
        record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip())
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


def install_log_redaction(extra_secrets: Iterable[str | None] = ()) -> None:
    """Redact every log record of this process from now on. Idempotent; call it early
    (`voxroom` main, and each job process of the worker)."""
    global _installed
    register_secrets([os.environ.get(name) for name in SECRET_ENV_VARS])
    register_secrets(extra_secrets)
    with _lock:
        if _installed:
            return
        _installed = True
    make_record = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            _redact_record(record)
        except Exception:  # a message that cannot be formatted is the handler's to report
            pass
        return record

    logging.setLogRecordFactory(factory)
