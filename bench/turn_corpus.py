"""The turn-taking corpus of `voxroom bench --corpus turns`: does the agent let the user
finish, and does it keep talking through a backchannel?

Kinds of item (KINDS):
- question: a question said in one breath;
- paused: a question with a 0.3-1.2 s thinking pause at a natural break ("Could you tell me
  ... which bus goes to the airport?");
- filler: a start, a filler ("so, um", or a lone "uh", "um", "so") right before a pause of
  0.6-1.2 s, and the rest of the question;
- backchannel: a question with a long answer, and 1-2 s into the answer a backchannel over it,
  which must not end the answer: one word ("mm hmm", "okay", "sure"), two or three ("uh huh",
  "I see", "oh okay", "that makes sense"), a cough or a laugh;
- interruption: a question with a long answer, and a real interruption: bench/corpus.py's
  barge-ins (cue words: "wait", "stop", "sorry"), then ones with no cue word ("Tell me about
  Lisbon instead.") and ones that begin with a backchannel word ("okay but what about the
  price?").

Each kind's first items (as many as the corpus had before it grew: ORIGINAL) keep their text
and voice, so that figures of older runs stay comparable; later items are appended. Those
first items cycle through five voices: the bundled Piper voice, espeak-ng's American and
British English, and espeak-ng's female American (en-us+f3) and Scottish (en-gb-scotland;
espeak-ng takes "en-sc" as an unknown name and falls back to its default English voice). The
appended items cycle through MORE_VOICES, which starts with voices the first items do not
have (espeak-ng's Caribbean, received pronunciation, female British and New York voices).
The question kind ends with the bundled real recording's cuts whose words are known
(bench/listen_corpus.py's BECKETT), when it is installed.

A pause must sound like a person thinking, not like two sentences: the words before it keep
the unfinished intonation of the whole sentence. So each paused utterance is synthesized
once, as one sentence, with silence put in at the word boundary: espeak-ng reads SSML with a
`<break time=.../>` there (a break is a clause boundary with espeak-ng's "no punctuation"
intonation, not a full stop's fall); for Piper the boundary is found in its phoneme
alignments (tts.piper_tts.synthesize_with_word_cuts), the silence goes in at the quietest
point near it, with short fades where the sound is cut. Either way the pause is then set to
exactly the length asked (`set_pause`), as the bench's pause finder measures it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.engines import INPUT_RATE
from bench.corpus import (
    BARGE_INS,
    CACHE_DIR,
    INTERRUPTION_ANSWER,
    QUESTIONS,
    VOICES,
    BargeIn,
    Utterance,
    cached_speech,
    espeak_name,
    espeak_speech,
    first_of_kinds,
    over_long_answer,
    quiet_gaps,
    spoken,
)

KINDS = ("question", "paused", "filler", "backchannel", "interruption")
TURN_VOICES = (*VOICES, "espeak-en-us+f3", "espeak-en-gb-scotland")
MORE_VOICES = (
    "espeak-en-029",
    "espeak-en-gb-x-rp",
    "espeak-en-gb+f4",
    "espeak-en-us-nyc",
    *TURN_VOICES,
)
MIN_PAUSE_S = 0.15  # quiet between voiced samples that counts as a pause (not a stop closure)

# (words before the pause, pause in seconds, words after it, the scripted answer)
PAUSED: tuple[tuple[str, float, str, str], ...] = (
    (
        "Could you tell me",
        0.6,
        "which bus goes to the airport?",
        "The number seven bus goes to the airport every twenty minutes.",
    ),
    (
        "I was wondering",
        0.5,
        "what time the pharmacy closes today?",
        "Most pharmacies close at six in the evening.",
    ),
    (
        "What is the name of",
        0.7,
        "the longest river in Africa?",
        "The Nile is the longest river in Africa.",
    ),
    (
        "Can you help me find",
        0.4,
        "a good place to eat near the station?",
        "There is a small Italian place across from the station.",
    ),
    (
        "How long should I cook",
        0.5,
        "fresh pasta for?",
        "Fresh pasta needs only two to three minutes.",
    ),
    (
        "Do you know if",
        0.8,
        "the museum is open on Mondays?",
        "Many museums close on Mondays, so check before you go.",
    ),
    (
        "What is the best way to",
        0.3,
        "get from Paris to London?",
        "The train through the tunnel takes about two and a half hours.",
    ),
    (
        "I would like to know",
        0.65,
        "how tall the Eiffel Tower is.",
        "The Eiffel Tower is about three hundred and thirty metres tall.",
    ),
    (
        "Could you check",
        1.0,
        "whether my train is on time?",
        "I cannot see train times, so please check the departure board.",
    ),
    (
        "What do you think about",
        1.2,
        "learning the piano at forty?",
        "It is never too late, and many adults learn to play well.",
    ),
    (
        "Is there a pharmacy",
        0.9,
        "open near the old town tonight?",
        "I cannot see opening hours, but a pharmacy sign lists the one on duty.",
    ),
    (
        "Why does",
        1.1,
        "bread go stale so quickly?",
        "Bread dries out as its starch turns back into crystals.",
    ),
)
FILLERS: tuple[tuple[str, float, str, str], ...] = (
    (
        "I need a recipe for dinner, so, um",
        0.7,
        "something with chicken?",
        "Try roast chicken with lemon and garlic.",
    ),
    (
        "Could you recommend a film for tonight, uh",
        0.6,
        "something funny?",
        "A light comedy like Paddington would be a good pick.",
    ),
    (
        "I want to plan a trip, and, um",
        0.7,
        "where should I go in spring?",
        "Japan in spring is lovely when the cherry trees bloom.",
    ),
    (
        "I am looking for a present for my sister, and, uh",
        0.6,
        "she really likes books.",
        "A new novel by her favourite author would be a lovely gift.",
    ),
    (
        "Can you tell me, um",
        1.0,
        "how to get to the stadium?",
        "Take the green line to the last stop, and the stadium is right there.",
    ),
    (
        "What is the weather like in, uh",
        1.2,
        "Barcelona in October?",
        "Barcelona is mild in October, around twenty degrees.",
    ),
    (
        "I have a bad headache, so",
        0.9,
        "what can I take for it?",
        "Rest, drink water, and a common painkiller usually helps.",
    ),
    (
        "My flight leaves at, um",
        1.1,
        "six in the morning, when should I get up?",
        "Get up around three thirty to be at the airport two hours early.",
    ),
)
COUGH = "(cough)"  # not said: the item's sound is `cough()`
LAUGH = "ha ha"
# (question, what the user says over the answer, seconds after the agent's first audio)
BACKCHANNELS: tuple[tuple[str, str, float], ...] = (
    ("Can you tell me about the history of Rome?", "mm hmm", 1.2),
    ("How does the stock market work?", "okay", 1.5),
    ("What are some tips for sleeping better?", "right", 1.0),
    ("How do I start running?", "yeah", 1.8),
    ("What should I know about adopting a dog?", COUGH, 1.3),
    ("How do airplanes stay in the air?", LAUGH, 2.0),
    ("What is the best way to save money?", "uh huh", 1.4),
    ("How do vaccines work?", "I see", 1.6),
    ("Why do leaves change colour in autumn?", "that makes sense", 1.2),
    ("How does a fridge keep food cold?", "oh okay", 1.5),
    ("What makes a good cup of coffee?", "sure", 1.1),
    ("How do bees make honey?", COUGH, 1.7),
    ("Why do we dream at night?", "ha ha ha", 1.3),
    ("How are mountains formed?", "right, right", 1.9),
)
# Interruptions of the turn corpus's own, after bench/corpus.py's first N_INTERRUPTIONS
# barge-ins: no cue word at all, or a backchannel word first ("okay but ...").
INTERRUPTIONS: tuple[tuple[str, str, float], ...] = (
    ("Where should I stay in Portugal?", "Tell me about Lisbon instead.", 1.3),
    ("What car should I buy?", "Okay, but what about the price?", 1.6),
    ("Which phone should I get?", "Yeah, no, I meant the other one.", 1.1),
    ("How do I train for a marathon?", "What about a half marathon?", 1.4),
    ("What is there to see in Vienna?", "Right, and what about the food there?", 1.7),
    ("How do I look after a cactus?", "I have three of them actually.", 1.2),
)
# The scripted reply to a backchannel the agent (wrongly) took as a turn.
BACKCHANNEL_ANSWER = "Sorry, shall I go on?"
N_QUESTIONS = 14
N_INTERRUPTIONS = 4
# Items per kind before the corpus grew: these keep their voice (TURN_VOICES, i % 5).
ORIGINAL = {"question": 10, "paused": 8, "filler": 4, "backchannel": 6, "interruption": 4}


def voice_of(kind: str, i: int) -> str:
    """The voice of a kind's i-th item: the first ORIGINAL[kind] cycle through TURN_VOICES
    as they always did, the appended ones through MORE_VOICES."""
    n = ORIGINAL[kind]
    return TURN_VOICES[i % len(TURN_VOICES)] if i < n else MORE_VOICES[(i - n) % len(MORE_VOICES)]


@dataclass(frozen=True)
class TurnSet:
    """One half of the corpus: each kind's items, their voices and the coughs' noise."""

    questions: Sequence[tuple[str, str]]
    paused: Sequence[tuple[str, float, str, str]]
    fillers: Sequence[tuple[str, float, str, str]]
    backchannels: Sequence[tuple[str, str, float]]
    interruptions: Sequence[tuple[str, str, float]]
    voice_of: Callable[[str, int], str]  # (kind, i) -> the voice of its i-th item
    cough_seed: Callable[[int], int]  # i -> the seed of the i-th backchannel's cough
    recordings: bool  # the real recording's cuts end the questions


# The tuning half: the corpus every rule and setting was measured on.
TUNING = TurnSet(
    QUESTIONS[:N_QUESTIONS],
    PAUSED,
    FILLERS,
    BACKCHANNELS,
    (*BARGE_INS[:N_INTERRUPTIONS], *INTERRUPTIONS),
    voice_of=voice_of,
    cough_seed=lambda i: 0 if i < ORIGINAL["backchannel"] else i,
    recordings=True,
)


async def load_turn_corpus(
    cache_dir: Path = CACHE_DIR, *, recordings: bool = True, turn_set: TurnSet = TUNING
) -> list[Utterance | BargeIn]:
    """Every item of `turn_set` (the tuning half by default), kind by kind (KINDS order), each
    in its voice; the real recording's cuts last among the questions (`recordings`, when the
    set has them and they are installed)."""
    items: list[Utterance | BargeIn] = []
    for i, (text, answer) in enumerate(turn_set.questions):
        v = turn_set.voice_of("question", i)
        items.append(
            Utterance(f"question-{i:02d}-{v}", v, text, answer, await spoken(text, v, cache_dir))
        )
    if recordings and turn_set.recordings:
        items += recorded_questions()
    for kind, specs in (("paused", turn_set.paused), ("filler", turn_set.fillers)):
        for i, (before, pause_s, after, answer) in enumerate(specs):
            v = turn_set.voice_of(kind, i)
            pcm = await spoken_with_pause(before, pause_s, after, v, cache_dir)
            items.append(
                Utterance(f"{kind}-{i:02d}-{v}", v, f"{before} {after}", answer, pcm, kind=kind)
            )
    for kind, overs, over_answer in (
        ("backchannel", turn_set.backchannels, BACKCHANNEL_ANSWER),
        ("interruption", turn_set.interruptions, INTERRUPTION_ANSWER),
    ):
        for i, (text, over, after_s) in enumerate(overs):
            items.append(
                await over_long_answer(
                    f"{kind}-{i:02d}",
                    turn_set.voice_of(kind, i),
                    text,
                    over,
                    over_answer,
                    after_s,
                    cache_dir,
                    kind=kind,
                    over_pcm=cough(turn_set.cough_seed(i)) if over == COUGH else None,
                )
            )
    return items


def recorded_questions() -> list[Utterance]:
    """The bundled real recording's cuts whose words are known, as question items (a real
    voice, with its own pauses between sentences); none when it is not installed."""
    from bench.corpus import RECORDING_ANSWER, recording_cuts
    from bench.listen_corpus import BECKETT

    return [
        Utterance(f"question-{cut.id}", "recording", BECKETT[cut.id][1], RECORDING_ANSWER, cut.pcm)
        for cut in recording_cuts()
        if cut.id in BECKETT
    ]


def select(
    items: Sequence[Utterance | BargeIn],
    kinds: Sequence[str] | None = None,
    per_kind: int | None = None,
) -> list[Utterance | BargeIn]:
    """The items of `kinds` (all for None), at most the first `per_kind` of each."""
    check_kinds(kinds)
    return first_of_kinds(items, kinds, per_kind)


def check_kinds(kinds: Sequence[str] | None) -> None:
    """ValueError naming the kinds that are not KINDS."""
    unknown = set(kinds or ()) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")


async def spoken_with_pause(
    before: str, pause_s: float, after: str, voice: str, cache_dir: Path = CACHE_DIR
) -> np.ndarray:
    """The sentence "`before` `after`" said by `voice` with a pause of `pause_s` between the
    two (see the module docstring); cached. The pause is the longest in it."""

    async def make() -> np.ndarray:
        if voice == "piper-joe":
            pcm = await _piper_with_pause(before, pause_s, after)
        else:
            ssml = f'{before} <break time="{round(pause_s * 1000)}ms"/> {after}'
            pcm = await espeak_speech(ssml, espeak_name(voice), ssml=True)
        return set_pause(pcm, pause_s)

    return await cached_speech(
        voice, f"{before}\n<pause {pause_s:.3f} s>\n{after}", make, cache_dir
    )


def set_pause(pcm: np.ndarray, pause_s: float) -> np.ndarray:
    """`pcm` with its longest pause (`quiet_gaps`) made `pause_s` long: quiet added, or taken
    out, in its middle, where it is silent."""
    gaps = quiet_gaps(pcm, MIN_PAUSE_S)
    if not gaps:
        raise ValueError("no pause found to set")
    start, end = max(gaps, key=lambda g: g[1] - g[0])
    middle, change = (start + end) // 2, round(pause_s * INPUT_RATE) - (end - start)
    if change >= 0:
        return np.concatenate([pcm[:middle], np.zeros(change, pcm.dtype), pcm[middle:]])
    cut = middle + change // 2  # change < 0: -change samples out, centred on the middle
    return np.concatenate([pcm[:cut], pcm[cut - change :]])


async def _piper_with_pause(before: str, pause_s: float, after: str) -> np.ndarray:
    """Piper's one synthesis of the sentence, silence put in at the word boundary found in
    its phoneme alignments."""
    from tts.piper_tts import (
        PIPER_RATE,
        PiperTTS,
        count_words,
        load_voice,
        piper_executor,
        synthesize_with_word_cuts,
    )

    voice = await asyncio.to_thread(load_voice)
    text = f"{before} {after}"

    def render() -> np.ndarray:
        aligned = synthesize_with_word_cuts(voice, text)
        n_before = count_words(voice, before)
        if aligned is None or len(aligned[1]) != n_before + count_words(voice, after) + 1:
            raise RuntimeError(f"Piper: cannot find the word boundary in {text!r}")
        audio, cuts = aligned
        return insert_silence(audio, cuts[n_before], pause_s, PIPER_RATE)

    audio = await asyncio.get_running_loop().run_in_executor(piper_executor, render)
    return PiperTTS(output_rate=INPUT_RATE).finish(audio)


def insert_silence(audio: np.ndarray, at: int, seconds: float, rate: int) -> np.ndarray:
    """`seconds` of silence put into float `audio` at its quietest 5 ms within 40 ms of
    `at`; 10 ms fades either side, so that sound cut there trails off instead of clicking."""
    frame, reach, fade = (round(s * rate) for s in (0.005, 0.04, 0.01))
    lo = max(0, at - reach)
    window = audio[lo : min(audio.size, at + reach)]
    n = window.size // frame
    if n:
        energy = np.square(window[: n * frame].reshape(n, frame)).mean(axis=1)
        at = lo + int(np.argmin(energy)) * frame + frame // 2
    head, tail = audio[:at].copy(), audio[at:].copy()
    ramp = np.sin(np.linspace(0.0, np.pi / 2, min(fade, head.size, tail.size))) ** 2
    if ramp.size:
        head[-ramp.size :] *= ramp[::-1]
        tail[: ramp.size] *= ramp
    return np.concatenate([head, np.zeros(round(seconds * rate), audio.dtype), tail])


def cough(seed: int = 0) -> np.ndarray:
    """A cough made of shaped noise: two ~250 ms bursts of band-passed noise (300-3000 Hz),
    each with a 10 ms attack and a fast exponential decay, the second softer; int16."""
    rng = np.random.default_rng(seed)
    burst_n = round(0.25 * INPUT_RATE)
    t = np.arange(burst_n) / INPUT_RATE
    envelope = np.minimum(t / 0.01, 1.0) * np.exp(-t / 0.06)

    def burst(peak: float) -> np.ndarray:
        spectrum = np.fft.rfft(rng.standard_normal(burst_n))
        freqs = np.fft.rfftfreq(burst_n, 1 / INPUT_RATE)
        noise = np.fft.irfft(spectrum * ((freqs >= 300) & (freqs <= 3000)), burst_n)
        shaped = noise * envelope
        return shaped / np.abs(shaped).max() * peak

    gap = np.zeros(round(0.12 * INPUT_RATE))
    edge = np.zeros(round(0.03 * INPUT_RATE))
    audio = np.concatenate([edge, burst(0.6), gap, burst(0.4), edge])
    return np.round(audio * 32767).astype(np.int16)
