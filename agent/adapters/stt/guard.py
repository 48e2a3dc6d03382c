"""An STT stream's push() and discard() for an engine's audio path, where they must not raise.

Both engines (agent.voice.engine, agent.copilot.engine) push every 20 ms frame and discard the
utterance once it is taken; a dead STT must not take the session down. Its failure shows again
where it matters, as an empty or failed `flush()`, so here it is logged once per utterance
instead of 50 times a second.
"""

from __future__ import annotations

import logging

import numpy as np

from agent.engines import STTStream

log = logging.getLogger(__name__)


class GuardedSTTStream:
    """`push()`/`discard()` of `stream` that never raise; the first failure of each utterance
    is logged (`new_utterance()` starts the next)."""

    def __init__(self, stream: STTStream) -> None:
        self.stream = stream
        self._failed = False

    def new_utterance(self) -> None:
        """Discard what the stream holds and log the next failure again."""
        self._failed = False
        self.discard()

    def push(self, pcm: np.ndarray) -> None:
        try:
            self.stream.push(pcm)
        except Exception as e:
            self._trouble("push", e)

    def discard(self) -> None:
        try:
            self.stream.discard()
        except Exception as e:
            self._trouble("discard", e)

    def _trouble(self, what: str, e: Exception) -> None:
        if not self._failed:
            self._failed = True
            log.warning("STT %s failed: %s: %s", what, type(e).__name__, e)
