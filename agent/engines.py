"""The interfaces between the turn engine and the speech/language engines.

Audio crossing these seams is mono int16 numpy arrays. The turn engine hears and
transcribes at 16 kHz (`INPUT_RATE`); each TTS says its own output rate.
Every method that does CPU-heavy work runs it off the event loop and is cancellable:
cancelling the awaiting task abandons the result promptly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

INPUT_RATE = 16_000
FRAME_MS = 20
FRAME_SAMPLES = INPUT_RATE * FRAME_MS // 1000  # 320


@dataclass(frozen=True)
class Transcript:
    text: str
    final: bool


class STTStream(Protocol):
    """One user's speech, utterance after utterance.

    The turn engine pushes every 20 ms frame of an utterance (from shortly before the VAD's
    speech start), calls `flush()` at each pause for a candidate transcript, and `discard()`
    once the turn is taken (or was a false start). Partials come from `partials()` while the
    user speaks.
    """

    def push(self, pcm: np.ndarray) -> None: ...

    async def flush(self) -> str:
        """The transcript of the utterance pushed so far; the utterance goes on (a candidate
        the turn engine takes at a pause, before it knows whether the user is done)."""
        ...

    async def finalize(self) -> str:
        """The final transcript of the utterance pushed so far; resets for the next one."""
        ...

    def discard(self) -> None:
        """Drop the current utterance (a false start) without transcribing it."""
        ...

    def partials(self) -> AsyncIterator[Transcript]: ...

    def set_paused(self, paused: bool) -> None:
        """Pause partial decoding (the agent is generating and needs the CPU)."""
        ...

    async def aclose(self) -> None: ...


class SpeechToText(Protocol):
    def stream(self) -> STTStream: ...

    async def transcribe(self, pcm: np.ndarray) -> str:
        """One-shot transcription of a whole 16 kHz utterance."""
        ...


class TextToSpeech(Protocol):
    sample_rate: int

    async def synthesize(
        self, text: str, *, left_context: str = "", right_context: str = ""
    ) -> np.ndarray:
        """Speech for `text` at `sample_rate`. The contexts are neighbouring words the engine
        may use for intonation; only `text`'s own samples are returned."""
        ...


ChatMessage = dict[str, str]


class LanguageModel(Protocol):
    def stream(self, messages: list[ChatMessage]) -> AsyncIterator[str]:
        """Text deltas of the reply. Closing the iterator (`aclose`) cancels the request."""
        ...
