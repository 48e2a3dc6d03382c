"""The turn-taking corpus of `voxroom bench --corpus turns`: does the agent let the user
finish, and does it keep talking through a backchannel?

Kinds of item (KINDS):
- question: a question said in one breath;
- paused: a question with a 0.3-0.8 s thinking pause at a natural break ("Could you tell me
  ... which bus goes to the airport?");
- filler: a start, a trailing filler ("so, um") and a pause before the user goes on;
- backchannel: a question with a long answer, and 1-2 s into the answer "mm hmm", "okay", a
  cough or a laugh over it, which must not end the answer;
- interruption: a question with a long answer, and a real interruption (bench/corpus.py's
  barge-ins).

Five voices in turn: the bundled Piper voice, espeak-ng's American and British English, and
espeak-ng's female American (en-us+f3) and Scottish (en-gb-scotland; espeak-ng takes "en-sc"
as an unknown name and falls back to its default English voice).

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
from collections.abc import Sequence
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
MIN_PAUSE_S = 0.15  # quiet between voiced samples that counts as a pause (not a stop closure)

# (words before the pause, pause in seconds, words after it, the scripted answer)
PAUSED: tuple[tuple[str, float, str, str], ...] = (
    ("Could you tell me", 0.6, "which bus goes to the airport?",
     "The number seven bus goes to the airport every twenty minutes."),
    ("I was wondering", 0.5, "what time the pharmacy closes today?",
     "Most pharmacies close at six in the evening."),
    ("What is the name of", 0.7, "the longest river in Africa?",
     "The Nile is the longest river in Africa."),
    ("Can you help me find", 0.4, "a good place to eat near the station?",
     "There is a small Italian place across from the station."),
    ("How long should I cook", 0.5, "fresh pasta for?",
     "Fresh pasta needs only two to three minutes."),
    ("Do you know if", 0.8, "the museum is open on Mondays?",
     "Many museums close on Mondays, so check before you go."),
    ("What is the best way to", 0.3, "get from Paris to London?",
     "The train through the tunnel takes about two and a half hours."),
    ("I would like to know", 0.65, "how tall the Eiffel Tower is.",
     "The Eiffel Tower is about three hundred and thirty metres tall."),
)
FILLERS: tuple[tuple[str, float, str, str], ...] = (
    ("I need a recipe for dinner, so, um", 0.7, "something with chicken?",
     "Try roast chicken with lemon and garlic."),
    ("Could you recommend a film for tonight, uh", 0.6, "something funny?",
     "A light comedy like Paddington would be a good pick."),
    ("I want to plan a trip, and, um", 0.7, "where should I go in spring?",
     "Japan in spring is lovely when the cherry trees bloom."),
    ("I am looking for a present for my sister, and, uh", 0.6, "she really likes books.",
     "A new novel by her favourite author would be a lovely gift."),
)
COUGH = "(cough)"
LAUGH = "ha ha"
# (question, what the user says over the answer, seconds after the agent's first audio)
BACKCHANNELS: tuple[tuple[str, str, float], ...] = (
    ("Can you tell me about the history of Rome?", "mm hmm", 1.2),
    ("How does the stock market work?", "okay", 1.5),
    ("What are some tips for sleeping better?", "right", 1.0),
    ("How do I start running?", "yeah", 1.8),
    ("What should I know about adopting a dog?", COUGH, 1.3),
    ("How do airplanes stay in the air?", LAUGH, 2.0),
)
# The scripted reply to a backchannel the agent (wrongly) took as a turn.
BACKCHANNEL_ANSWER = "Sorry, shall I go on?"
N_QUESTIONS = 10
N_INTERRUPTIONS = 4


async def load_turn_corpus(cache_dir: Path = CACHE_DIR) -> list[Utterance | BargeIn]:
    """Every item, kind by kind (KINDS order), voice i % 5 for the i-th item of a kind."""
    def voice(i: int) -> str:
        return TURN_VOICES[i % len(TURN_VOICES)]

    items: list[Utterance | BargeIn] = []
    for i, (text, answer) in enumerate(QUESTIONS[:N_QUESTIONS]):
        items.append(Utterance(f"question-{i:02d}-{voice(i)}", voice(i), text, answer,
                               await spoken(text, voice(i), cache_dir)))
    for kind, specs in (("paused", PAUSED), ("filler", FILLERS)):
        for i, (before, pause_s, after, answer) in enumerate(specs):
            pcm = await spoken_with_pause(before, pause_s, after, voice(i), cache_dir)
            items.append(Utterance(f"{kind}-{i:02d}-{voice(i)}", voice(i),
                                   f"{before} {after}", answer, pcm, kind=kind))
    for i, (text, over, after_s) in enumerate(BACKCHANNELS):
        items.append(await over_long_answer(
            f"backchannel-{i:02d}", voice(i), text, over, BACKCHANNEL_ANSWER, after_s, cache_dir,
            kind="backchannel", over_pcm=cough() if over == COUGH else None))
    for i, (text, interruption, after_s) in enumerate(BARGE_INS[:N_INTERRUPTIONS]):
        items.append(await over_long_answer(
            f"interruption-{i:02d}", voice(i), text, interruption, INTERRUPTION_ANSWER, after_s,
            cache_dir, kind="interruption"))
    return items


def select(
    items: Sequence[Utterance | BargeIn], kinds: Sequence[str] | None = None,
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

    return await cached_speech(voice, f"{before}\n<pause {pause_s:.3f} s>\n{after}", make,
                               cache_dir)


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
