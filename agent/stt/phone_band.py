"""The STT a phone caller is heard with: a phone line carries 8 kHz speech, 300-3400 Hz, which
an STT tuned on wideband speech may take for no speech (agent/stt/whisper.py's
`PHONE_NO_SPEECH_PROB`). An engine that has a tuning for it offers `phone_band()`."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agent.engines import SpeechToText


@runtime_checkable
class PhoneBandTunable(Protocol):
    def phone_band(self) -> SpeechToText: ...


def for_phone_line(stt: SpeechToText) -> SpeechToText:
    """`stt` tuned for a phone caller where it has such a tuning (the bundled Whisper), else
    `stt` as it is (a cloud STT's own model decides)."""
    return stt.phone_band() if isinstance(stt, PhoneBandTunable) else stt
