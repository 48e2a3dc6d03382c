"""voxroom's offline engines as livekit-agents plugins, for people who build on LiveKit Agents'
AgentSession and want Whisper tiny.en and the bundled Piper voice without any cloud:

    from agent.livekit_plugins import PiperTTSPlugin, WhisperSTTPlugin, load_plugins

    stt, tts = load_plugins()  # loads and warms both models (blocking: do it in prewarm)
    session = AgentSession(stt=stt.with_vad(vad), tts=tts, vad=vad, llm=...)

`WhisperSTTPlugin` recognizes a whole utterance (`recognize`); AgentSession streams through
livekit's VAD StreamAdapter, which cuts utterances with the VAD and recognizes each one.
`PiperTTSPlugin` synthesizes a whole text per request (ChunkedStream); AgentSession feeds it
sentence by sentence through its own sentence tokenizer.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import numpy as np
from livekit import rtc
from livekit.agents import LanguageCode, stt, tts, utils
from livekit.agents.types import (
    DEFAULT_API_CONNECT_OPTIONS,
    NOT_GIVEN,
    APIConnectOptions,
    NotGivenOr,
)

from agent.engines import INPUT_RATE, SpeechToText, TextToSpeech

if TYPE_CHECKING:
    from livekit.agents.vad import VAD


class _VoxroomPlugin:
    """What a plugin tells livekit-agents (its metrics) about itself: `MODEL`, by voxroom."""

    MODEL = ""

    @property
    def model(self) -> str:
        return self.MODEL

    @property
    def provider(self) -> str:
        return "voxroom"


class WhisperSTTPlugin(_VoxroomPlugin, stt.STT):
    """A voxroom `SpeechToText` (default: Whisper tiny.en) as a non-streaming livekit STT."""

    MODEL = "whisper-tiny.en"

    def __init__(self, engine: SpeechToText, *, language: str = "en") -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=False, interim_results=False))
        self._engine = engine
        self._language = language

    def with_vad(self, vad: VAD) -> stt.StreamAdapter:
        """The streaming STT AgentSession needs: utterances cut by `vad`, each recognized."""
        return stt.StreamAdapter(stt=self, vad=vad)

    async def _recognize_impl(
        self,
        buffer: utils.AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions,
    ) -> stt.SpeechEvent:
        text = await self._engine.transcribe(to_pcm16k(buffer))
        return stt.SpeechEvent(
            type=stt.SpeechEventType.FINAL_TRANSCRIPT,
            request_id=uuid.uuid4().hex,
            alternatives=[
                stt.SpeechData(language=LanguageCode(language or self._language), text=text)
            ],
        )


class PiperTTSPlugin(_VoxroomPlugin, tts.TTS):
    """A voxroom `TextToSpeech` (default: the bundled Piper voice) as a livekit TTS."""

    MODEL = "piper-en_US-joe-medium"

    def __init__(self, engine: TextToSpeech) -> None:
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=False),
            sample_rate=engine.sample_rate,
            num_channels=1,
        )
        self._engine = engine

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> tts.ChunkedStream:
        return _PiperStream(tts=self, input_text=text, conn_options=conn_options)


class _PiperStream(tts.ChunkedStream):
    def __init__(self, *, tts: PiperTTSPlugin, input_text: str, conn_options: APIConnectOptions):
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._engine = tts._engine

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        # Cancelling this task cancels the synthesis (PiperTTS stops the running inference).
        pcm = await self._engine.synthesize(self.input_text)
        output_emitter.initialize(
            request_id=uuid.uuid4().hex,
            sample_rate=self._engine.sample_rate,
            num_channels=1,
            mime_type="audio/pcm",
        )
        output_emitter.push(pcm.astype(np.int16).tobytes())
        output_emitter.flush()


def to_pcm16k(buffer: utils.AudioBuffer) -> np.ndarray:
    """Any livekit audio buffer -> 16 kHz mono int16, what voxroom's STT takes."""
    import soxr

    frame = rtc.combine_audio_frames(buffer)
    pcm = np.frombuffer(frame.data, np.int16).reshape(-1, frame.num_channels)
    mono = pcm.mean(axis=1) if frame.num_channels > 1 else pcm[:, 0].astype(np.float64)
    if frame.sample_rate != INPUT_RATE:
        mono = soxr.resample(mono, frame.sample_rate, INPUT_RATE)
    return np.clip(np.round(mono), -32768, 32767).astype(np.int16)


def load_plugins(output_rate: int = 48_000) -> tuple[WhisperSTTPlugin, PiperTTSPlugin]:
    """Load and warm Whisper and Piper (blocking), wrapped as plugins."""
    from agent.adapters.providers import load_speech_engines

    engine_stt, engine_tts = load_speech_engines(output_rate)
    return WhisperSTTPlugin(engine_stt), PiperTTSPlugin(engine_tts)
