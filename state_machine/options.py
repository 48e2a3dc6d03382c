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

    speculate_before_score: bool = True
    """With an end-of-turn model, a partial that reads complete starts the reply as soon as its
    words are decoded, and the model's reading of them (tens of ms later, on cores that the
    STT shares) cancels it when it scores them unfinished. False: the reading is waited for,
    which delays the partials that come during the question's last word. A start the reading
    cancels costs an LLM request (for a local LLM, its reading of the prompt on those cores)."""

    similarity_keep: float = 0.92
    """A speculative reply is kept when its input is at least this similar to the final text."""

    barge_in_frames: int = 2
    """Consecutive voiced frames of the user that make the agent yield while it speaks
    (40 ms): it ducks (`duck`) or pauses. Through LiveKit the listener hears it ~90 ms after
    these frames (the network both ways), so each frame is a fifth of the barge-in budget."""

    hold_voice_frames: int = 5
    """While the agent thinks and its answer is held for a sound of the user's, this many voiced
    frames of it (100 ms) take it for the user going on, as the speech vote does: the turn is
    retracted and the sound heard as speech. Piper's "um" before a thinking pause is 6 voiced
    frames, too few for the vote (8 of its window); let go as a click (a few frames) once
    quiet, the answer began in the pause after it and talked over the rest."""

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

    duck_quiet_s: float = 0.30
    """While ducked, a sound is judged whole (a backchannel plays on at full volume) once it has
    been quiet this long, not at the first frames of quiet: "Okay, | but what about the
    price?" pauses ~0.2 s at its comma, and judged there, "Okay" played the answer on and "but
    what about ..." began a sound of its own, judged again from nothing (through LiveKit, 1.2
    to 2 s to stop). Words that interrupt still stop it at once; the answer stays ducked, not
    silent, while it waits."""

    overlap_rejoin_s: float = 0.8
    """A sound over the answer that begins within this long after the end of one that played
    on (a backchannel, or no words) is heard with it: its decodes begin at that one's onset.
    Said with a longer pause than `duck_quiet_s`, "Right, | and what about the food there?"
    was judged in two: "Right" played the answer on, and "and what about ..." began from
    nothing, with too few words and too little of it heard to stop at once (through LiveKit,
    1.0-1.4 s to stop). A backchannel heard with the next one ("Yeah. | Mm hmm.") is still
    one."""

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
    paused agent, commit the barge-in at once (read alike by two reads in a row, unless they
    hold a stop cue: `state_machine.barge_in.read_going_on`). Fewer wait for the end of the
    sound, which is then transcribed whole: a decode of the first half-second of a sound is
    the least reliable one (through LiveKit, Whisper tiny.en heard the start of "mm hmm" as
    "and remember", two words), and the paused agent is silent either way. Real
    interruptions ("Wait, stop, I meant...") pass three words while still being said."""

    words_read_after_s: float = 0.6
    """While the user's sound goes on, its words end the answer (`barge_in_words`) only from a
    decode of at least this much of it, or on a stop cue (`asks_to_stop`: "Wait", "No"):
    Whisper tiny.en reads the first half-second of a sound poorly (through Opus, espeak-ng's
    "that makes sense" came out as "Not to me." and "not to make" at 0.3-0.5 s: a cue and
    three words). Such a decode still pauses the answer, which resumes if the whole sound
    is a backchannel; only the answer is not thrown away on it. Three words take 0.6 s at
    `max_words_per_s`."""

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

    reaction_s: float = 0.7
    """Words that open like a reaction to the answer ("No ...", "Okay ...") react to it only
    when they begin at least this long after its first audio reached the output. Saying a
    word in answer to a heard one takes ~0.6 s (~0.3 s to recognise it, ~0.3 s to start
    speaking), and the path to the user's ear and back adds to it. Sooner, the words go on
    with the user's own turn ("Ever failed. | No matter.": the reader's "No" came 0.5 s
    after the answer's first audio) and are merged with it within `continuation_s`."""

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

    rejoin_s: float = 2.0
    """Speech heard as no words is heard again with the user's next speech if that starts
    within this long after it: its audio goes into the STT first, and the two are decoded as
    one. Whisper can write nothing for a whole half-question said before a thinking pause
    ("Is there a pharmacy that is | open near the old town tonight?" reached the LLM as its
    second half); decoded with the rest, it is heard. A cough or a breath decoded with the
    next words costs nothing: Whisper writes no words for it."""

    rejoin_voiced_s: float = 0.3
    """Shorter speech heard as no words is a click or a breath, not words that were lost."""

    rejoin_max_s: float = 4.0
    """Longer speech heard as no words is not kept to be heard again (the listener keeps the
    audio of `rejoin_max_s + rejoin_s` for it)."""

    def kept_frames(self) -> int:
        return super().kept_frames() + self.frames(self.rejoin_max_s + self.rejoin_s)


@dataclass(frozen=True)
class CopilotOptions(ListenOptions):
    """The copilot's question endpointing and answers."""

    resume_frames: int = 3
    """Consecutive voiced frames that mean the interviewer went on (a speculative answer is
    dropped)."""
    speculative_start: bool = True
    endpoint: EndpointOptions = field(
        default_factory=lambda: EndpointOptions(
            silence_s=0.700,
            silence_cued_s=0.400,
            silence_complete_s=0.400,
            silence_unfinished_s=1.200,
        )
    )
    """Where a question ends (`state_machine.endpointing`, the voice agent's core), with the
    interviewer's numbers. Without an end-of-turn model, 0.7 s of silence ends anything that
    is not a complete question (state_machine.question_detector): interviewers pause inside
    long questions, and 0.7 s lets most "Tell me about a time when... you" pauses pass. A
    statement that ends is dropped (kept as the next question's preamble). With a model, its
    score sets the silence, as for the voice agent, up to 1.2 s: the voice agent waits longer
    for a speaker who thinks (it would talk over them); an answer shown early is not heard.

    A question that looks complete (by its words or its score) ends after 0.4 s, not the
    voice agent's 0.2-0.3 s: its first half often is one ("Where did you go to university,
    and what did you study?"), and the comma's pause (~0.2 s when espeak-ng says it) ended it
    there, answering half the question. An answer to half the question, then another, costs
    the candidate more than the wait, which `show_after_s` takes off the first words."""
    show_after_s: float | None = 0.2
    """A question that looks complete shows its speculative answer after this much silence,
    before the endpoint: the answer starts at the pause and its first token is often ready
    before 0.4 s. If the interviewer goes on before the endpoint, the answer is withdrawn from
    the screen (its stream closes "withdrawn") and the whole question is answered; past the
    endpoint the words that follow are a new question, as without it. None: nothing is shown
    before the endpoint."""
    score_hold_s: float | None = 0.3
    """A turn score asked while an answer reads its prompt waits for the answer's first token,
    up to this long: on two cores the end-of-turn model and the LLM's prompt read slow each
    other, the first words wait on the first token, and the score is needed only by the
    endpoint, later (docs/benchmarks.md). None: scores run at once."""
    similarity_keep: float = 0.92
    """A speculative answer is kept when its question is this similar to the final one."""
    preamble_keep_s: float = 20.0
    """A statement this recent is put before the next question as its context."""
    preamble_max_chars: int = 300
    llm_release_s: float = 0.25
    """After an LLM request is closed before its end (a cancelled answer, a warm-up step),
    the next waits this long: the server frees its slot only then (see `_llm_slot_free`)."""
    stable_prefix_max_chars: int = 6000
    """Documents up to this size (every chunk together) go whole into every prompt, in
    document order: the same prompt prefix for every question, which `warm()` puts into the
    LLM's prompt cache once, so that a question then costs only its own tokens. The bundled
    model reads prompts slowly on a CPU: the documents cost tens of seconds once, a question
    then a fraction of a second, where the nearest chunks would cost seconds on every question
    (docs/benchmarks.md). Larger documents, or a prefix not warm yet: the `context_pieces`
    nearest chunks."""
    warm_step_chars: int = 300
    """A warm-up adds about this much of the documents per request (about 75 tokens: a few
    seconds of prefill with the bundled model, inside the client's limits on a reply)."""
    context_pieces: int = 3
    """Pieces retrieved for a question (agent.copilot.context.retrieval): in its prompt when
    the documents are not a (warm) stable prefix (then with the job description's head), and
    what the guard checks the answer against and builds its fallback from."""
    guard: bool = True
    """Check each finished answer (agent.copilot.answer_guard: the candidate's voice, nothing
    the documents do not hold, on the question's topic); one that fails is replaced on the
    candidate's screen by an answer made of the retrieved pieces themselves."""
    max_answer_lines: int = 3
    """Generation stops after this many lines: the answer stays short and its end comes
    early (the bundled model on a CPU takes about a second to write a line)."""
    max_answer_words: int = 20
    """Past this many words generation stops at the next sentence or line end: for a model
    that ignores the line format. The first answer is read at a glance (about 40 words at
    most), and a sentence begun before this many words seldom runs past that."""
    answer_word_limit: int = 40
    """Generation stops here even inside a sentence: a model caught in a loop may never end
    one. A loop is also stopped as soon as a phrase comes a third time in a row."""
