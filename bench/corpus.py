"""The spoken-question corpus of `voxroom bench`: what the simulated user says, and the
barge-in scenarios.

Questions are spoken by three synthetic voices in turn (the bundled Piper voice, espeak-ng's
American and British English), so one voice's quirks do not decide the figures; the real
recordings named in design.md (beckett.wav, and two_cities.wav when `moonshine-voice` is
installed) are cut at their pauses into utterances of a few seconds. Synthesized speech is
cached as 16 kHz WAVs under .cache/bench/.

Each question carries the answer the scripted LLM gives, so a run with `--llm script:` is
repeatable and the first chunk's length varies as it does in real replies.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from agent.engines import INPUT_RATE
from agent.testing.scripted_llm import Scripted

CACHE_DIR = Path(".cache/bench")
# The questions' voices; `spoken()` also takes any other espeak-ng voice as "espeak-NAME".
VOICES = ("piper-joe", "espeak-en-us", "espeak-en-gb")
VOICED = 500  # int16 amplitude (about -36 dBFS): louder samples are speech
EDGE_S = 0.03  # silence kept at each end of an utterance

# (question, the scripted answer)
QUESTIONS: tuple[tuple[str, str], ...] = (
    ("What is the capital of Australia?", "The capital of Australia is Canberra, not Sydney."),
    (
        "How far away is the moon?",
        "The moon is about three hundred and eighty thousand kilometres from the earth.",
    ),
    (
        "What time is it in Tokyo right now?",
        "I cannot see a clock, but Tokyo is nine hours ahead of London.",
    ),
    ("Can you set a timer for ten minutes?", "Sure, a ten minute timer starts now."),
    ("Tell me a joke about computers.", "Why did the computer go to the doctor? It had a virus."),
    ("Why is the sky blue?", "Sunlight scatters off the air, and blue light scatters the most."),
    ("Who wrote Pride and Prejudice?", "Jane Austen wrote it, and it came out in 1813."),
    ("How many people live in New York City?", "About eight and a half million people live there."),
    ("What does the word serendipity mean?", "It means finding something good by happy accident."),
    (
        "Where is the nearest train station?",
        "I do not know where you are, so I cannot tell you that yet.",
    ),
    (
        "How do I make green tea that is not bitter?",
        "Use water just below eighty degrees and steep it for two minutes.",
    ),
    (
        "What is the boiling point of water?",
        "Water boils at one hundred degrees Celsius at sea level.",
    ),
    (
        "Could you remind me to call my mother tomorrow?",
        "Okay, I will remind you tomorrow morning.",
    ),
    (
        "What is the tallest mountain in the world?",
        "Mount Everest is the tallest, at almost nine thousand metres.",
    ),
    (
        "How do rainbows form?",
        "Raindrops bend and reflect sunlight, splitting it into its colours.",
    ),
    (
        "What is the difference between a virus and a bacterium?",
        "Bacteria are living cells; viruses need a host cell to copy themselves.",
    ),
    ("Can you recommend a good book?", "Try The Remains of the Day by Kazuo Ishiguro."),
    ("How long should I boil an egg?", "About seven minutes for a firm white and a soft yolk."),
    (
        "What is the speed of light?",
        "Light travels about three hundred thousand kilometres per second.",
    ),
    ("Is it going to rain this afternoon?", "I have no weather data, so please check a forecast."),
    (
        "How do I reset my password?",
        "Open the settings, choose security, then pick reset password.",
    ),
    ("What is the largest ocean on earth?", "The Pacific is the largest ocean by far."),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci painted it in the early fifteen hundreds."),
    (
        "How many days are there in a leap year?",
        "A leap year has three hundred and sixty six days.",
    ),
    ("What should I cook for dinner tonight?", "How about a quick vegetable stir fry with rice?"),
    ("Why do cats purr?", "Cats purr when they are content, and sometimes to calm themselves."),
    (
        "What is the square root of one hundred forty four?",
        "The square root of one hundred forty four is twelve.",
    ),
    (
        "Can you explain what a black hole is?",
        "A black hole is a region where gravity is so strong that not even light escapes.",
    ),
    (
        "How do I say thank you in Japanese?",
        "You say arigato, or arigato gozaimasu to be more polite.",
    ),
    (
        "What is the best way to learn a new language?",
        "Practise a little every day and talk with native speakers early.",
    ),
)

RECORDING_ANSWER = "That sounds like a line from a book. Shall we talk about it?"

# Long answers, so that the user can cut in while the agent is still speaking.
LONG_ANSWER = (
    "Well, there are many things to say about that. First of all, it depends on where you "
    "live and what you like to do, and then there is the question of time, money and the "
    "people you would like to bring along with you."
)
# (question, interruption, seconds after the agent's first audio that the user cuts in)
BARGE_INS: tuple[tuple[str, str, float], ...] = (
    ("Where should I go on holiday this summer?", "Wait, stop, I meant next winter.", 1.0),
    ("What is a good hobby to pick up?", "Hold on, something cheap please.", 1.5),
    ("How should I plan a birthday party?", "Sorry, it is for a child.", 0.8),
    ("What do you think about working from home?", "Actually, never mind.", 2.0),
    ("How can I get better at cooking?", "Stop, just one tip please.", 1.2),
    ("What should I look for in a new laptop?", "Wait, I mostly play games.", 1.8),
)
INTERRUPTION_ANSWER = "Of course, sorry about that."


@dataclass(frozen=True)
class Utterance:
    id: str
    voice: str
    text: str  # what is said ("" when unknown: a cut of a real recording)
    answer: Scripted  # the scripted LLM's reply to it (a tool turn in bench/tool_corpus.py)
    pcm: np.ndarray  # 16 kHz mono int16, EDGE_S of silence at each end
    kind: str = "question"  # what the bench reports it as (bench/turn_corpus.py has more)

    @property
    def speech_start(self) -> int:
        """First voiced sample."""
        return voiced_span(self.pcm)[0]

    @property
    def speech_end(self) -> int:
        """Just past the last voiced sample (where the user stops talking)."""
        return voiced_span(self.pcm)[1]

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / INPUT_RATE


@dataclass(frozen=True)
class BargeIn:
    """The user asks `question`, the agent answers, and `after_s` seconds after the agent's
    first audio the user says `interruption` over it."""

    id: str
    question: Utterance
    interruption: Utterance
    after_s: float
    kind: str = "barge_in"  # or bench/turn_corpus.py's "interruption" / "backchannel"


@dataclass(frozen=True)
class Corpus:
    questions: list[Utterance]
    barge_ins: list[BargeIn]

    def limited(self, n_questions: int | None, n_barge_ins: int | None) -> Corpus:
        """The first items of each kind (the whole corpus for None)."""
        return Corpus(self.questions[:n_questions], self.barge_ins[:n_barge_ins])


def voiced_span(pcm: np.ndarray) -> tuple[int, int]:
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > VOICED)
    return (int(loud[0]), int(loud[-1]) + 1) if loud.size else (0, 0)


def quiet_gaps(pcm: np.ndarray, min_s: float) -> list[tuple[int, int]]:
    """The pauses inside the speech: (start, end) samples of each stretch of at least `min_s`
    between two voiced samples (as `voiced_span` tells voiced from quiet)."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > VOICED)
    if loud.size < 2:
        return []
    steps = np.diff(loud)
    return [
        (int(loud[i]) + 1, int(loud[i + 1])) for i in np.flatnonzero(steps > min_s * INPUT_RATE)
    ]


def trim(pcm: np.ndarray, keep_s: float = EDGE_S) -> np.ndarray:
    """The speech with `keep_s` of its own silence at each end."""
    start, end = voiced_span(pcm)
    keep = round(keep_s * INPUT_RATE)
    return pcm[max(0, start - keep) : end + keep]


async def load_corpus(cache_dir: Path = CACHE_DIR, *, recordings: bool = True) -> Corpus:
    """All questions (voice i % 3 for question i), the recordings' cuts and the barge-ins."""
    said = await spoken_in_turn([text for text, _ in QUESTIONS], cache_dir)
    questions = [
        Utterance(f"q{i:02d}-{voice}", voice, text, answer, pcm)
        for i, ((text, answer), (voice, pcm)) in enumerate(zip(QUESTIONS, said, strict=True))
    ]
    if recordings:
        questions += recording_cuts()
    barge_ins = [
        await over_long_answer(
            f"b{i:02d}", VOICES[i % 3], text, interruption, INTERRUPTION_ANSWER, after_s, cache_dir
        )
        for i, (text, interruption, after_s) in enumerate(BARGE_INS)
    ]
    return Corpus(questions, barge_ins)


async def over_long_answer(
    item_id: str,
    voice: str,
    question: str,
    over: str,
    over_answer: str,
    after_s: float,
    cache_dir: Path = CACHE_DIR,
    *,
    kind: str = "barge_in",
    over_pcm: np.ndarray | None = None,
) -> BargeIn:
    """`question` (answered with LONG_ANSWER), then `over` said over the answer `after_s`
    after its first audio (`over_pcm`: other audio than `over` spoken by `voice`)."""
    if over_pcm is None:
        over_pcm = await spoken(over, voice, cache_dir)
    return BargeIn(
        f"{item_id}-{voice}",
        Utterance(
            f"{item_id}-question",
            voice,
            question,
            LONG_ANSWER,
            await spoken(question, voice, cache_dir),
        ),
        Utterance(
            f"{item_id}-{'backchannel' if kind == 'backchannel' else 'interruption'}",
            voice,
            over,
            over_answer,
            over_pcm,
        ),
        after_s,
        kind=kind,
    )


async def spoken_in_turn(
    texts: Sequence[str], cache_dir: Path = CACHE_DIR
) -> list[tuple[str, np.ndarray]]:
    """(voice, speech) of each text, text i said by voice i % 3 (VOICES), one after the
    other; cached."""
    said = []
    for i, text in enumerate(texts):
        voice = VOICES[i % len(VOICES)]
        said.append((voice, await spoken(text, voice, cache_dir)))
    return said


def add_cache_dir_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"synthesized speech cache (default {CACHE_DIR})",
    )


async def spoken(text: str, voice: str, cache_dir: Path = CACHE_DIR) -> np.ndarray:
    """`text` said by `voice` ("piper-joe" or "espeak-NAME", NAME an espeak-ng voice such as
    en-us+f3), trimmed, 16 kHz int16; cached."""
    if voice == "piper-joe":
        return await cached_speech(voice, text, lambda: _piper(text), cache_dir)
    espeak_voice = espeak_name(voice)
    return await cached_speech(voice, text, lambda: espeak_speech(text, espeak_voice), cache_dir)


def espeak_name(voice: str) -> str:
    """The espeak-ng voice of "espeak-NAME"; ValueError for a voice `spoken()` does not know."""
    if not voice.startswith("espeak-"):
        raise ValueError(
            f"unknown voice {voice!r}; known: piper-joe, espeak-NAME "
            f"(an espeak-ng voice), e.g. {', '.join(VOICES)}"
        )
    return voice.removeprefix("espeak-")


async def cached_speech(
    voice: str, key: str, make: Callable[[], Awaitable[np.ndarray]], cache_dir: Path = CACHE_DIR
) -> np.ndarray:
    """`make()`'s speech, trimmed, cached under `cache_dir` by `voice` and `key` (the text,
    or whatever else decides the audio)."""
    import soundfile as sf

    digest = hashlib.sha256(f"{voice}\n{key}".encode()).hexdigest()[:16]
    path = cache_dir / f"{voice}-{digest}.wav"
    if path.exists():
        return sf.read(str(path), dtype="int16")[0]
    pcm = trim(await make())
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), pcm, INPUT_RATE, subtype="PCM_16")
    return pcm


async def espeak_speech(
    text: str, voice: str, *, ssml: bool = False, words_per_min: int = 160
) -> np.ndarray:
    from bench.speech import espeak

    return await asyncio.to_thread(
        espeak, text, voice=voice, ssml=ssml, words_per_min=words_per_min
    )


async def _piper(text: str) -> np.ndarray:
    from tts.piper_tts import PiperTTS

    tts = PiperTTS(output_rate=INPUT_RATE)
    tts.load()
    return await tts.synthesize(text)


def recording_paths() -> list[Path]:
    """The real recordings that are installed: beckett.wav (useful-moonshine-onnx) and
    two_cities.wav (moonshine-voice)."""
    found = []
    for package, name in (("moonshine_onnx", "beckett.wav"), ("moonshine_voice", "two_cities.wav")):
        spec = importlib.util.find_spec(package)  # no import: the packages load models
        if spec is not None and spec.origin is not None:
            path = Path(spec.origin).parent / "assets" / name
            if path.exists():
                found.append(path)
    return found


def recording_cuts(
    min_pause_s: float = 0.2, max_len_s: float = 6.0, min_len_s: float = 0.5
) -> list[Utterance]:
    """The real recordings cut at pauses into utterances of at most `max_len_s` (a single
    piece of speech longer than that stays whole); scraps under `min_len_s` are left out."""
    from agent.apps.simulate import read_input

    cuts = []
    for path in recording_paths():
        pcm = read_input(path)
        pieces = split_at_pauses(pcm, min_pause_s, max_len_s)
        for j, piece in enumerate(p for p in pieces if len(p) >= min_len_s * INPUT_RATE):
            cuts.append(
                Utterance(f"rec-{path.stem}-{j}", "recording", "", RECORDING_ANSWER, trim(piece))
            )
    return cuts


def split_at_pauses(pcm: np.ndarray, min_pause_s: float, max_len_s: float) -> list[np.ndarray]:
    """Pieces of speech separated by at least `min_pause_s` of quiet (20 ms frames more than
    35 dB below the loudest), joined back while they fit in `max_len_s`."""
    frame = INPUT_RATE // 50
    n = len(pcm) // frame
    if n == 0:
        return []
    x = pcm[: n * frame].astype(np.float64).reshape(n, frame)
    db = 10 * np.log10(np.mean(x * x, axis=1) + 1.0)
    voiced = db > db.max() - 35
    pieces: list[tuple[int, int]] = []  # frame ranges of speech
    gap = round(min_pause_s * 50)
    start = quiet = None
    for i, v in enumerate(voiced):
        if v:
            if start is None:
                start = i
            elif quiet is not None and i - quiet >= gap:
                pieces.append((start, quiet))
                start = i
            quiet = None
        elif start is not None and quiet is None:
            quiet = i
    if start is not None:
        pieces.append((start, quiet if quiet is not None else n))
    joined: list[tuple[int, int]] = []
    for a, b in pieces:
        if joined and (b - joined[-1][0]) / 50 <= max_len_s:
            joined[-1] = (joined[-1][0], b)
        else:
            joined.append((a, b))
    return [pcm[a * frame : b * frame] for a, b in joined]


def scripted_answers(items: Sequence[Utterance | BargeIn]) -> dict[str, Scripted]:
    """What the user says in `items` -> the scripted LLM's reply to it (for ScriptedLLM's
    `by_text`: a reply that does not shift when the agent takes a turn too many or too few)."""
    said = [
        u
        for item in items
        for u in ((item.question, item.interruption) if isinstance(item, BargeIn) else (item,))
    ]
    return {u.text: u.answer for u in said if u.text}


def scripted_replies(items: Sequence[Utterance | BargeIn]) -> list[Scripted]:
    """The scripted LLM's replies in the order of the user's turns when `items` are said
    one after another in one conversation (a barge-in is two user turns)."""
    replies: list[Scripted] = []
    for item in items:
        if isinstance(item, BargeIn):
            replies += [item.question.answer, item.interruption.answer]
        else:
            replies.append(item.answer)
    return replies


class _Kinded(Protocol):
    @property
    def kind(self) -> str: ...


K = TypeVar("K", bound=_Kinded)


def first_of_kinds(
    items: Sequence[K], kinds: Sequence[str] | None = None, per_kind: int | None = None
) -> list[K]:
    """The items of `kinds` (all for None), at most the first `per_kind` of each, in order."""
    taken: dict[str, int] = {}
    chosen = []
    for item in items:
        if kinds is not None and item.kind not in kinds:
            continue
        taken[item.kind] = taken.get(item.kind, 0) + 1
        if per_kind is None or taken[item.kind] <= per_kind:
            chosen.append(item)
    return chosen
