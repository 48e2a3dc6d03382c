"""Frame-level voice activity from webrtcvad. The turn-level decisions (sliding-window vote,
trailing silence, barge-in) are pure logic in `state_machine.machine`."""

from __future__ import annotations

import numpy as np

from agent.engines import FRAME_SAMPLES, INPUT_RATE


class VoiceActivityDetector:
    def __init__(self, aggressiveness: int = 2) -> None:
        import webrtcvad

        if aggressiveness not in (0, 1, 2, 3):
            raise ValueError(f"webrtcvad aggressiveness must be 0-3, got {aggressiveness}")
        self._vad = webrtcvad.Vad(aggressiveness)

    def is_speech(self, pcm: np.ndarray) -> bool:
        """`pcm`: one 20 ms frame, int16 mono at 16 kHz."""
        if len(pcm) != FRAME_SAMPLES:
            raise ValueError(f"VAD frames are {FRAME_SAMPLES} samples, got {len(pcm)}")
        return self._vad.is_speech(pcm.tobytes(), INPUT_RATE)
