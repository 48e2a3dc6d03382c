"""How a phone caller is heard: a phone line carries 8 kHz speech, 300-3400 Hz, with no gain
control in front of it. The VAD's energy gate sits lower (agent/audio/vad.py's
`PHONE_MIN_SPEECH_RMS`), and the STT is its phone-line tuning where it has one: Whisper tuned on
wideband speech takes much of it for no speech (agent/adapters/stt/whisper_options.py's
`PHONE_NO_SPEECH_PROB`).
An engine that has such a tuning offers `phone_band()`."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agent.audio.vad import PHONE_MIN_SPEECH_RMS, VoiceActivityDetector
from agent.engines import SpeechToText


@runtime_checkable
class PhoneBandTunable(Protocol):
    def phone_band(self) -> SpeechToText: ...


def for_phone_line(stt: SpeechToText) -> SpeechToText:
    """`stt` tuned for a phone caller where it has such a tuning (the bundled Whisper), else
    `stt` as it is (a cloud STT's own model decides)."""
    return stt.phone_band() if isinstance(stt, PhoneBandTunable) else stt


def phone_line_vad() -> VoiceActivityDetector:
    """The VAD for a phone caller's speech."""
    return VoiceActivityDetector(min_speech_rms=PHONE_MIN_SPEECH_RMS)
