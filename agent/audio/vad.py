"""Frame-level voice activity: webrtcvad, gated by frame energy against the noise floor.

webrtcvad keeps saying "speech" for about 100 ms after speech stops (its built-in hangover),
even on digital silence. The turn engine measures trailing silence from the last voiced frame,
so that hangover would add ~100 ms to every reply. A frame therefore counts as voiced only if
webrtcvad says so AND it is clearly louder than the background (an adaptive noise floor).
The turn-level decisions (window vote, trailing silence, barge-in) are pure logic in
`state_machine.machine`.
"""

from __future__ import annotations

import numpy as np

from agent.engines import FRAME_SAMPLES, INPUT_RATE

MIN_SPEECH_RMS = 120.0  # -49 dBFS: quieter frames are never speech
# A phone line has no browser's gain control in front of it: its nominal speech level is
# -26 dBov, quieter callers lower, and the 300 Hz high-pass takes the loudest part of a voice
# away. At such a level the -49 dBFS gate cut the first words of quiet callers; this floor cuts
# far fewer, and steady phone-line noise still opens no utterance (bench/phone_band.py;
# docs/benchmarks.md, "Phone callers").
PHONE_MIN_SPEECH_RMS = 30.0  # -61 dBFS
FLOOR_MARGIN = 2.0  # speech is at least 6 dB over the noise floor
FLOOR_DOWN = 0.5  # the floor follows quieter frames quickly...
FLOOR_UP = 0.002  # ...and louder ones slowly, so speech itself does not raise it much


class VoiceActivityDetector:
    def __init__(self, aggressiveness: int = 2, *, min_speech_rms: float = MIN_SPEECH_RMS) -> None:
        import webrtcvad

        if aggressiveness not in (0, 1, 2, 3):
            raise ValueError(f"webrtcvad aggressiveness must be 0-3, got {aggressiveness}")
        if min_speech_rms <= 0:
            raise ValueError(f"min_speech_rms must be positive, got {min_speech_rms}")
        self._vad = webrtcvad.Vad(aggressiveness)
        self._min_rms = min_speech_rms
        self.noise_floor = min_speech_rms / FLOOR_MARGIN

    def is_speech(self, pcm: np.ndarray) -> bool:
        """`pcm`: one 20 ms frame, int16 mono at 16 kHz."""
        if len(pcm) != FRAME_SAMPLES:
            raise ValueError(f"VAD frames are {FRAME_SAMPLES} samples, got {len(pcm)}")
        rms = float(np.sqrt(np.mean(pcm.astype(np.float32) ** 2)))
        loud = rms >= max(self._min_rms, FLOOR_MARGIN * self.noise_floor)
        rate = FLOOR_DOWN if rms < self.noise_floor else FLOOR_UP
        self.noise_floor += rate * (rms - self.noise_floor)
        return loud and self._vad.is_speech(pcm.tobytes(), INPUT_RATE)
