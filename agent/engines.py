"""The interfaces between the turn engine and the speech/language engines.

Audio crossing these seams is mono int16 numpy arrays. The turn engine hears and
transcribes at 16 kHz (`INPUT_RATE`); each TTS says its own output rate.
Every method that does CPU-heavy work runs it off the event loop and is cancellable:
cancelling the awaiting task abandons the result promptly.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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


# An OpenAI chat message: {"role", "content"}; an assistant's message may carry "tool_calls"
# ([{"id", "type": "function", "function": {"name", "arguments"}}]) and a tool's result is
# {"role": "tool", "tool_call_id", "content"}.
ChatMessage = dict[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the LLM is offered it: a name, what it does, and the JSON schema of its
    arguments (an object)."""

    name: str
    description: str
    parameters: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        """The entry of the chat completions request's `tools` list."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class ToolCall:
    """A tool call the LLM made, whole: `arguments` is the JSON text it wrote (not yet checked:
    it may be invalid JSON, or not match the schema)."""

    id: str
    name: str
    arguments: str

    def message(self) -> dict[str, Any]:
        """The entry of an assistant message's `tool_calls` list."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    def key(self) -> tuple[str, str]:
        """What makes two calls the same call: the tool and its arguments (key order aside)."""
        try:
            return self.name, json.dumps(json.loads(self.arguments or "{}"), sort_keys=True)
        except ValueError:
            return self.name, self.arguments

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as an object; ValueError when they are not JSON of an object."""
        args = json.loads(self.arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError(f"the arguments of {self.name} are not a JSON object")
        return args


class LanguageModel(Protocol):
    def stream(
        self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncGenerator[str | ToolCall, None]:
        """Text deltas of the reply, and each tool call once it is complete (only when `tools`
        are offered; callers that offer none get text alone). Closing the iterator (`aclose`)
        cancels the request."""
        ...
