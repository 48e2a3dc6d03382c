"""TTS -> STT round trip: does Piper, streamed in two-word-lookahead chunks, still say the
words, and how much sooner does its first audio come than a whole sentence's?

Each sentence is synthesized by the bundled Piper voice
- whole: one `PiperTTS.synthesize(sentence)` call;
- chunked: fed word by word (LLM-style deltas " word") to `make_chunker("lookahead")`, each
  chunk synthesized as it is released, as agent/pipeline/reply.py does: the first with the
  lookahead words already received as its right context, each later one with the previous
  chunk as its left context; the chunks' samples concatenated, as the reply hands them to
  agent/pipeline/playout.py;
- chunked, right context on all: every chunk also with its lookahead words as right context;
- chunked, left context only: no chunk with a right context, the first one said on its own;
and each is transcribed by the bundled Whisper tiny.en (`WhisperSTT.transcribe`, 16 kHz).
espeak-ng's reading of the sentence is transcribed too: the STT's own error on the sentence,
with no Piper involved, tells an STT miss from a TTS one.

WER (jiwer, over all sentences) after the same normalization of both sides: lower case, no
punctuation, numbers, ordinals, money and percentages as words, a few abbreviations expanded.
Time to first audio: the synthesis time of the whole sentence vs. of the first chunk (text in
hand -> first samples; the LLM's time is not included, which flatters the whole sentence).

`voxroom bench tts-roundtrip [--json out.json] [--limit N]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from agent.engines import INPUT_RATE
from bench.wer import number_words

SENTENCES = (
    # numbers
    "There are 365 days in a year and 24 hours in a day.",
    "The package weighs 2.5 kilograms and costs $19.99.",
    "Our team grew from 12 people to 150 people in 3 years.",
    "She finished the race in 42 minutes and came in 5th place.",
    "The temperature dropped to 15 degrees last night.",
    "Turn left after 200 meters, then take the 2nd exit.",
    "Prices went up by 8% this year.",
    # names
    "Maria and John are flying to Paris next Friday.",
    "Dr. Smith will see you at the clinic on Monday.",
    "Please send the report to Sarah Johnson before lunch.",
    "William Shakespeare wrote Romeo and Juliet.",
    "Tell David that Emma called about the dinner on Saturday.",
    # questions
    "Can you remind me to water the plants this evening?",
    "How long does it take to drive from Chicago to Detroit?",
    "Why do cats sleep so much during the day?",
    "Would you like coffee or tea with your breakfast?",
    # lists
    "We need apples, bananas, oranges and grapes for the party.",
    "Add 3 eggs, 2 cups of flour and 1 cup of milk.",
    "Pack your passport, your tickets, a charger and some snacks.",
    "Thank you for waiting. Your order number is 4721 and it will arrive on Wednesday.",
    # 15+ words
    "I checked the weather for the weekend, and it looks like it will rain on Saturday but "
    "clear up by Sunday afternoon.",
    "If you leave the office at a quarter past five, you should arrive at the station just in "
    "time for the six o'clock train.",
    "The new library downtown has three floors of books, a quiet reading room, and a small "
    "cafe near the entrance.",
    "Before you start the installation, make sure the computer is plugged in and connected to "
    "a stable network.",
    "My sister moved to Seattle last year, and she says the coffee there is better than "
    "anywhere else she has lived.",
    "Could you tell me which restaurants nearby are open late on Sunday night and also take "
    "reservations for a group of eight?",
    "The museum opens at 9 in the morning, closes at 6 in the evening, and is free for "
    "children under 12.",
    "To reset your password, open the settings page, choose the security tab, and follow the "
    "instructions in the email we send you.",
    "Our flight was delayed by two hours, so we missed the connection and had to spend the "
    "night at the airport hotel.",
    "James bought 4 tickets for the concert on the 21st, but only 3 of his friends are able "
    "to come along.",
    "Please remember that the budget meeting has been moved from Tuesday morning to Thursday "
    "afternoon at half past two.",
    "When the children got home from school, they ate a snack, finished their homework, and "
    "went outside to play football.",
    "The doctor said I should drink more water, sleep at least eight hours, and walk for "
    "thirty minutes every day.",
    "Is it true that the Pacific Ocean is larger than all of the land on Earth put together?",
)
LONG_WORDS = 15  # "sentences of 15+ words" for the first-audio comparison
VARIANTS = ("whole", "chunked", "chunked_right_all", "chunked_left_only", "espeak")

# ---- normalization (applied to the reference and the transcript alike) ----------------------

_ORDINALS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
_ABBREVIATIONS = {
    "dr": "doctor",
    "mr": "mister",
    "mrs": "missus",
    "st": "saint",
    "ok": "okay",
    "o'clock": "oclock",
}


def ordinal_words(n: int) -> str:
    words = number_words(n).split()
    last = words[-1]
    if last in _ORDINALS:
        words[-1] = _ORDINALS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _spell(match: re.Match[str]) -> str:
    currency, whole, fraction, ordinal, percent = match.groups()
    whole = whole.replace(",", "")
    if ordinal:
        return ordinal_words(int(whole))
    if currency:
        words = f"{number_words(int(whole))} dollars"
        if fraction and int(fraction):
            words += f" {number_words(int(fraction))} cents"
    else:
        words = number_words(int(whole))
        if fraction:
            words += " point " + " ".join(number_words(int(d)) for d in fraction)
    return words + (" percent" if percent else "")


_NUMBER = re.compile(r"(\$)?(\d[\d,]*)(?:\.(\d+))?(?:(st|nd|rd|th)\b|(%))?")


def normalize(text: str) -> str:
    """Lower case, words only, numbers spelled out, hyphens and "and" between number words
    dropped: how both sides are compared."""
    text = text.lower().replace("-", " ")
    text = re.sub(r"(\d),(\d)", r"\1\2", text)
    text = _NUMBER.sub(lambda m: " " + _spell(m) + " ", text)
    words = re.sub(r"[^a-z0-9' ]+", " ", text.replace(".", "")).split()
    words = [_ABBREVIATIONS.get(w, w) for w in words]
    return " ".join(w for w in words if w != "and")


# ---- synthesis as the product streams it ------------------------------------------------------


# The pace of the LLM double the turn benchmarks use (`--ttft-ms 150 --words-per-s 15`): the
# playout timeline below releases each chunk when the word that released it would arrive.
FIRST_WORD_S = 0.150
WORDS_PER_S = 15.0


@dataclass(frozen=True)
class Chunk:
    text: str
    left: str  # the previous chunk (agent/pipeline/reply.py's left context)
    right: str  # the words already received after the chunk when it was released
    word: int  # the word (0-based; the count at the end) whose arrival released it
    synthesis_from: int  # the word at which its synthesis may start (the first: the guess)


def word_time(word: int) -> float:
    """When word `word` of the reply arrives from the LLM double, in seconds."""
    return FIRST_WORD_S + word / WORDS_PER_S


def stream_chunks(text: str) -> list[Chunk]:
    """The lookahead chunker fed `text` word by word like LLM deltas, each chunk with the
    context known when it was released and the word that released it."""
    from tts.chunker import make_chunker

    chunker = make_chunker("lookahead")
    chunks: list[Chunk] = []
    taken = 0  # words of the cleaned text already in chunks
    guessed: tuple[str, int] | None = None  # the first chunk's guess, and its word

    def add(released: list[str], word: int, at_end: bool) -> None:
        nonlocal taken
        for chunk in released:
            taken += len(chunk.split())
            right = "" if at_end else " ".join(chunker.spoken_text.split()[taken:])
            start = word
            if not chunks and guessed is not None and guessed[0] == chunk:
                start = guessed[1]  # the reply synthesizes a right guess from then on
            chunks.append(Chunk(chunk, chunks[-1].text if chunks else "", right, word, start))

    words = text.split()
    for i, word in enumerate(words):
        add(chunker.push(word if i == 0 else " " + word), i, at_end=False)
        if not chunks and guessed is None and (guess := chunker.provisional_first()):
            guessed = (guess.text, i)
    add(chunker.flush(), len(words), at_end=True)
    return chunks


def playout_gaps(chunks: Sequence[Chunk], synthesis_s: Sequence[float], audio_s: Sequence[float]):
    """The silences (s) between consecutive chunks as the reply plays them at the LLM double's
    pace: each chunk synthesized, one at a time, from when it may start, and played when it
    is ready and the one before has ended. Also the first audio's time from the request."""
    ready, busy, end = [], 0.0, None
    gaps: list[float] = []
    for i, (chunk, synth) in enumerate(zip(chunks, synthesis_s, strict=True)):
        start = word_time(chunk.synthesis_from)
        done = max(start + synth, word_time(chunk.word)) if i == 0 else max(start, busy) + synth
        busy = done
        ready.append(done)
    for done, seconds in zip(ready, audio_s, strict=True):
        begin = done if end is None else max(done, end)
        if end is not None:
            gaps.append(begin - end)
        end = begin + seconds
    return gaps, ready[0]


async def synthesize_whole(tts, text: str) -> tuple[np.ndarray, float]:
    """Audio of `text` in one call, and its synthesis time in ms (its time to first audio)."""
    start = time.monotonic()
    pcm = await tts.synthesize(text)
    return pcm, (time.monotonic() - start) * 1000


async def synthesize_chunks(
    tts, chunks: Sequence[Chunk], *, right_context: str = "first"
) -> tuple[list[np.ndarray], list[float]]:
    """The chunks synthesized in order (as playout plays them), and each one's synthesis time
    in s. `right_context`: which chunks are said with their lookahead words, "first" (as the
    reply does), "all" or "none"."""
    parts, seconds = [], []
    for i, chunk in enumerate(chunks):
        start = time.monotonic()
        with_right = right_context == "all" or (right_context == "first" and i == 0)
        parts.append(
            await tts.synthesize(
                chunk.text,
                left_context=chunk.left,
                right_context=chunk.right if with_right else "",
            )
        )
        seconds.append(time.monotonic() - start)
    return parts, seconds


# ---- the round trip -----------------------------------------------------------------------


@dataclass
class SentenceResult:
    text: str
    words: int
    chunks: list[str]
    heard: dict[str, str]  # variant -> transcript
    wer: dict[str, float]  # variant -> WER of this sentence
    first_audio_ms: dict[str, float]  # "whole", "chunked"
    audio_s: dict[str, float]
    # "chunked" played at the LLM double's pace: the silences between its chunks, and when
    # its first audio is ready after the request
    gaps_ms: list[float]
    paced_first_audio_ms: float


async def round_trip(tts, stt, text: str, *, with_espeak: bool = True) -> SentenceResult:
    import jiwer

    chunks = stream_chunks(text)
    audio: dict[str, np.ndarray] = {}
    audio["whole"], whole_ms = await synthesize_whole(tts, text)
    parts, synthesis_s = await synthesize_chunks(tts, chunks)
    audio["chunked"] = np.concatenate(parts)
    gaps, first_ready = playout_gaps(chunks, synthesis_s, [p.size / tts.sample_rate for p in parts])
    for variant, right in (("chunked_right_all", "all"), ("chunked_left_only", "none")):
        audio[variant] = np.concatenate(
            (await synthesize_chunks(tts, chunks, right_context=right))[0]
        )
    if with_espeak:
        from bench.speech import espeak

        audio["espeak"] = await asyncio.to_thread(espeak, text)
    heard = {variant: await stt.transcribe(pcm) for variant, pcm in audio.items()}
    return SentenceResult(
        text=text,
        words=len(text.split()),
        chunks=[c.text for c in chunks],
        heard=heard,
        wer={
            v: round(jiwer.wer(normalize(text), normalize(h) or "<empty>"), 4)
            for v, h in heard.items()
        },
        first_audio_ms={"whole": round(whole_ms, 1), "chunked": round(synthesis_s[0] * 1000, 1)},
        audio_s={v: round(pcm.size / INPUT_RATE, 2) for v, pcm in audio.items()},
        gaps_ms=[round(g * 1000, 1) for g in gaps],
        paced_first_audio_ms=round(first_ready * 1000, 1),
    )


def load_engines():
    """Piper at 16 kHz (Whisper's rate) and Whisper tiny.en, loaded and warmed."""
    from agent.adapters.stt.whisper import WhisperSTT
    from tts.piper_tts import PiperTTS

    tts = PiperTTS(output_rate=INPUT_RATE)
    tts.load()
    tts.warmup()
    stt = WhisperSTT()
    stt.load()
    stt.warmup()
    return tts, stt


def corpus_wer(results: Sequence[SentenceResult], variant: str) -> float:
    import jiwer

    pairs = [
        (normalize(r.text), normalize(r.heard[variant]) or "<empty>")
        for r in results
        if variant in r.heard
    ]
    return round(jiwer.wer([p[0] for p in pairs], [p[1] for p in pairs]), 4)


def percentile(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1)


def summarize(results: Sequence[SentenceResult]) -> dict[str, object]:
    long = [r for r in results if r.words >= LONG_WORDS]
    whole = [r.first_audio_ms["whole"] for r in long]
    chunked = [r.first_audio_ms["chunked"] for r in long]
    ratios = [w / c for w, c in zip(whole, chunked, strict=True)]
    return {
        "sentences": len(results),
        "long_sentences": len(long),
        "wer": {v: corpus_wer(results, v) for v in VARIANTS if any(v in r.heard for r in results)},
        "first_audio_ms_long": {
            "whole": {"p50": percentile(whole, 50), "p95": percentile(whole, 95)},
            "chunked": {"p50": percentile(chunked, 50), "p95": percentile(chunked, 95)},
            "ratio_whole_over_chunked": {
                "p50": round(float(np.median(ratios)), 2),
                "min": round(min(ratios), 2),
            },
        }
        if long
        else {},
        "paced": paced_summary(results),
    }


def paced_summary(results: Sequence[SentenceResult]) -> dict[str, object]:
    """The chunked replies played at the LLM double's pace: when the first audio is ready,
    and the longest silence between chunks per sentence (the voice running dry)."""
    longest = [max(r.gaps_ms, default=0.0) for r in results]
    first = [r.paced_first_audio_ms for r in results]
    return {
        "llm": f"first word {FIRST_WORD_S * 1000:.0f} ms, {WORDS_PER_S:.0f} words/s",
        "first_audio_ms": {"p50": percentile(first, 50), "p95": percentile(first, 95)},
        "longest_gap_ms": {
            "p50": percentile(longest, 50),
            "p95": percentile(longest, 95),
            "max": round(max(longest, default=0.0), 1),
        },
        "sentences_with_a_gap_over_50_ms": sum(g > 50 for g in longest),
    }


def print_report(results: Sequence[SentenceResult], summary: dict[str, object]) -> None:
    for r in results:
        flags = " ".join(f"{v}={r.wer[v]:.2f}" for v in r.heard)
        print(
            f"[{r.words:2d} w] {flags}  first audio {r.first_audio_ms['whole']:.0f} -> "
            f"{r.first_audio_ms['chunked']:.0f} ms  {r.text}"
        )
        for v, heard in r.heard.items():
            if r.wer[v] > 0:
                print(f"        {v:<17} heard: {heard}")
    print(json.dumps(summary, indent=2))


async def run_all(sentences: Sequence[str], *, with_espeak: bool) -> list[SentenceResult]:
    tts, stt = await asyncio.to_thread(load_engines)
    return [await round_trip(tts, stt, s, with_espeak=with_espeak) for s in sentences]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write per-sentence results and the summary here")
    parser.add_argument("--limit", type=int, default=0, help="only the first N sentences")
    parser.add_argument(
        "--no-espeak",
        action="store_true",
        help="skip transcribing espeak-ng's reading (the STT-only baseline)",
    )


def run(args: argparse.Namespace) -> int:
    sentences = SENTENCES[: args.limit] if args.limit else SENTENCES
    results = asyncio.run(run_all(sentences, with_espeak=not args.no_espeak))
    summary = summarize(results)
    print_report(results, summary)
    if args.json:
        meta = {
            "command": "voxroom bench tts-roundtrip",
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {"meta": meta, "summary": summary, "sentences": [asdict(r) for r in results]},
                f,
                indent=2,
            )
    return 0
