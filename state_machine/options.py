"""Turn-taking options. All durations are in seconds; frames are the 20 ms VAD frames."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Self

from state_machine.endpointing import EndpointOptions


@dataclass(frozen=True)
class ListenOptions:
    """How a speaker is heard, the same for the voice agent and the copilot: the frames, the
    speech vote, the pre-roll and where a turn ends."""

    frame_s: float = 0.020
    """Length of one VAD frame."""

    vad_window_s: float = 0.300
    """Sliding window for the speech-start vote."""

    vad_start_ratio: float = 0.5
    """Speech starts when more than this share of the window's frames are voiced."""

    pre_roll_s: float = 0.300
    """Audio transcribed from before the speech's onset (the first voiced frame of the run
    the vote started on), so a soft first syllable that the VAD missed is heard. Counted
    from the decision instead, it held only ~0.14 s before the onset (the vote takes 8 voiced
    frames), and through LiveKit "Could you remind me" was heard "of your mind meter"."""

    endpoint: EndpointOptions = field(default_factory=EndpointOptions)
    """Where the speaker's turn ends (`state_machine.endpointing`)."""

    def scored(self) -> Self:
        """These options, with the endpoint silence set by an end-of-turn model's score."""
        return replace(self, endpoint=replace(self.endpoint, scored=True))

    def kept_frames(self) -> int:
        """Frames the listener keeps: the pre-roll and a vote window before the decision."""
        return self.frames(self.pre_roll_s + self.vad_window_s)

    def frames(self, seconds: float) -> int:
        return max(1, round(seconds / self.frame_s))


@dataclass(frozen=True)
class TurnOptions(ListenOptions):
    """The voice agent's turn-taking."""

    speculative_start: bool = True
    """Start the LLM on a stable candidate before the endpoint is confirmed."""

    speculate_on_partials: bool = True
    """A partial transcript that reads complete, decoded while the user is still speaking,
    starts the reply (unheard) before the pause's candidate: the LLM's first words and their
    audio are then ready sooner after the endpoint."""

    similarity_keep: float = 0.92
    """A speculative reply is kept when its input is at least this similar to the final text."""

    barge_in_frames: int = 2
    """Consecutive voiced frames of the user that make the agent yield while it speaks
    (40 ms): it ducks (`duck`) or pauses. Through LiveKit the listener hears it ~90 ms after
    these frames (the network both ways), so each frame is a fifth of the barge-in budget."""

    duck: bool = True
    """Yield by lowering the agent's volume (`DuckPlayback`) while the user's sound is judged,
    instead of pausing: a backchannel ("mm hmm", a laugh) then never silences the answer, and
    the agent still audibly gives way at once. The pause comes as soon as the sound is judged
    an interruption (`interrupts` on what is heard of it so far), or when it outlasts any
    backchannel (`duck_max_s`). False: pause at once, as a hard stop."""

    duck_recheck_s: float = 0.10
    """While ducked and the user's sound goes on, what it holds so far is transcribed at the
    speech vote and again this often, once the decode before is done: each decode is a chance
    to see an interruption and stop.
    Whisper tiny.en decodes a second of audio in a few tens of ms."""

    duck_max_s: float = 1.2
    """A sound going on this long after its onset is not a backchannel (they are short: "mm
    hmm", "uh huh", a laugh): the ducked agent pauses, and its words decide as for a pause."""

    false_interruption_s: float = 1.0
    """A pause caused by user sound that brings no words within this time resumes playback
    (once the sound has stopped)."""

    barge_in_recheck_s: float = 0.5
    """While the user talks over the paused agent, what they said so far is transcribed at
    the speech vote and again every this often, until it holds `barge_in_words`."""

    barge_in_words: int = 3
    """Words that are not a backchannel which, heard while the user is still talking over the
    paused agent, commit the barge-in at once. Fewer wait for the end of the sound, which is
    then transcribed whole: a decode of the first half-second of a sound is the least reliable
    one (through LiveKit, Whisper tiny.en heard the start of "mm hmm" as "and remember", two
    words), and the paused agent is silent either way. Real interruptions ("Wait, stop, I
    meant...") pass three words while still being said."""

    max_words_per_s: float = 5.0
    """A transcript of the sound that paused the agent with more words than 1 + this many a
    second of it is the STT's invention, not speech: Whisper tiny.en turned a 0.5 s "mm hmm"
    (Opus-coded) into "and I'm not going to be able to do". It counts as no words. Fast
    speech is ~4 words a second."""

    continuation_s: float = 1.4
    """Words said over the answer that begin within this long after the end of the user's turn
    (and do not react to the answer: `state_machine.backchannel.reacts`) go on with that turn:
    the agent took a thinking pause for its end. The answer is withdrawn and the LLM asked the
    whole question. 1.4 s: thinking pauses run up to ~1.2 s (the onset is the first voiced
    frame, the end the last). Not longer: a backchannel comes a second or more into the
    answer, and one misheard as words ("and Emma" for "mm hmm") this early withdraws it. An
    early interruption that does not react ("in Tokyo, I meant") is merged too: its words are
    all asked, with the question they go with."""

    backchannel_resume: bool = True
    """A pause whose sound is a backchannel ("mm-hmm", "okay", "right": see
    `state_machine.backchannel`) resumes playback as soon as its transcript says so, instead
    of ending the answer."""

    thinking_filler_s: float = 2.0
    """THINKING timeout: play a short filler phrase if no reply audio has started."""

    thinking_timeout_s: float = 8.0
    """THINKING hard timeout: give up on the reply and say a short canned phrase. Counted from
    the reply's last progress (a tool call started or ended), so a reply that works through
    its tools is not given up on."""

    speaking_stall_s: float = 4.0
    """SPEAKING timeout: the reply produced no audio for this long while unfinished; end it."""
