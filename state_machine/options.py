"""Turn-taking options. All durations are in seconds; frames are the 20 ms VAD frames."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TurnOptions:
    frame_s: float = 0.020
    """Length of one VAD frame."""

    vad_window_s: float = 0.300
    """Sliding window for the speech-start vote."""

    vad_start_ratio: float = 0.5
    """Speech starts when more than this share of the window's frames are voiced."""

    pre_roll_s: float = 0.300
    """Audio kept from before the speech-start decision, so the first syllable is transcribed."""

    candidate_silence_s: float = 0.060
    """Trailing silence after which the utterance so far is transcribed as a candidate.
    Short on purpose: the decode (~200-300 ms for 2-6 s on Whisper tiny.en) then overlaps the
    rest of the endpoint wait, so the final costs nothing at the endpoint. A pause inside a
    sentence only wastes one decode; the turn does not end."""

    speculative_start: bool = True
    """Start the LLM on a stable candidate before the endpoint is confirmed."""

    speculative_silence_s: float = 0.250
    """A candidate is stable (speculative start) after this much trailing silence, or at once
    when it ends with end punctuation."""

    endpoint_silence_s: float = 0.500
    """Trailing silence that ends the user's turn when the transcript gives no cue. 500 ms:
    shorter cut speakers off at commas and 'um' pauses in our recordings; longer is felt."""

    endpoint_silence_cued_s: float = 0.300
    """Trailing silence that ends the turn when the transcript ends like a complete sentence or
    question (end punctuation and no trailing conjunction)."""

    max_utterance_s: float = 30.0
    """LISTENING timeout: a turn this long is ended even without silence (a stuck open mic)."""

    similarity_keep: float = 0.92
    """A speculative reply is kept when its input is at least this similar to the final text."""

    barge_in_frames: int = 3
    """Consecutive voiced frames of the user that pause the agent while it speaks (60 ms)."""

    false_interruption_s: float = 1.0
    """A pause caused by user sound that brings no words within this time resumes playback."""

    thinking_filler_s: float = 2.0
    """THINKING timeout: play a short filler phrase if no reply audio has started."""

    thinking_timeout_s: float = 8.0
    """THINKING hard timeout: give up on the reply and say a short canned phrase."""

    speaking_stall_s: float = 4.0
    """SPEAKING timeout: the reply produced no audio for this long while unfinished; end it."""

    def frames(self, seconds: float) -> int:
        return max(1, round(seconds / self.frame_s))
