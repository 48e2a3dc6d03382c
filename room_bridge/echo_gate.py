"""Echo exclusion by gating: mute captured audio while the agent's own voice can be in it.

When the bridge plays the agent's voice on this computer (`--play-agent`), the loopback
capture hears it again, and the agent would hear (and answer) itself. The player tells the
gate exactly which audio it handed to the output device and until when the device plays
it; the gate mutes every captured frame that may contain it.

Timing, all on the monotonic clock in ms. A captured frame is stamped with the arrival of
its newest sample's block (`CapturedFrame.t_ms`); its oldest sample arrived up to a frame
and a block earlier.
- Played audio can reach the capture no earlier than the moment the player handed it to
  the device (`handed_ms`): a frame stamped before that cannot hold it. `lead_ms` is a
  margin on top.
- It reaches the capture no later than its end at the DAC (`until_ms`) plus the capture
  path's delay, and a frame stamped t holds samples up to ~40 ms older than t: `tail_ms`
  covers both (and, with speakers and a microphone, the room's reverberation).

The trade-off: while the agent speaks, the meeting is not heard either, so the agent
cannot hear an interviewer who talks over it. Acoustic echo cancellation (subtracting the
known played signal instead of muting) would keep both; it is future work.
"""

from __future__ import annotations

import collections

import numpy as np

from room_bridge.frames import CapturedFrame
from room_bridge.levels import level_dbfs


class EchoGate:
    def __init__(
        self, *, lead_ms: float = 20.0, tail_ms: float = 150.0, threshold_dbfs: float = -50.0
    ) -> None:
        self.lead_ms = lead_ms
        self.tail_ms = tail_ms
        # Played audio quieter than this (the silence between the agent's words, comfort
        # noise) cannot be heard in the capture and does not mute it.
        self.threshold_dbfs = threshold_dbfs
        self._spans: collections.deque[list[float]] = collections.deque()  # [start, end], merged
        self.muted_frames = 0

    def note_played(self, pcm: np.ndarray, handed_ms: float, until_ms: float) -> None:
        """The player handed `pcm` to the output device at `handed_ms`; the device plays it
        until `until_ms`. Call in time order."""
        if until_ms < handed_ms:
            raise ValueError(f"until_ms {until_ms} is before handed_ms {handed_ms}")
        if level_dbfs(pcm) < self.threshold_dbfs:
            return
        last = self._spans[-1] if self._spans else None
        if last is not None and handed_ms <= last[1] + self.lead_ms + self.tail_ms:
            last[1] = max(last[1], until_ms)  # one continuous stretch of the agent's voice
        else:
            self._spans.append([handed_ms, until_ms])

    def is_muted(self, t_ms: float) -> bool:
        """May a frame stamped `t_ms` contain played audio?"""
        while self._spans and self._spans[0][1] + self.tail_ms < t_ms - 1000.0:
            self._spans.popleft()  # long past: no frame that old is still to come
        return any(s - self.lead_ms <= t_ms <= e + self.tail_ms for s, e in self._spans)

    def apply(self, frame: CapturedFrame) -> CapturedFrame:
        """`frame`, or silence of the same length (the track keeps its timing) when muted."""
        if not self.is_muted(frame.t_ms):
            return frame
        self.muted_frames += 1
        return CapturedFrame(np.zeros_like(frame.pcm), frame.t_ms)
