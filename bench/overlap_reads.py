"""What the agent makes of sounds said over its answer, read as it reads them while they go on:
do backchannels keep the answer, do interruptions stop it, and how soon.

`voxroom bench overlap-reads [--json PATH] [--decodes PATH]`

Each sound (the turn corpus's backchannels and interruptions, and held-out ones that no
corpus has) is said in nine voices, carried through an Opus round trip as LiveKit carries it,
and decoded by Whisper tiny.en as the agent decodes a sound that goes on: its first 0.1 s,
0.2 s, ... and then whole. Those decodes go through the barge-in rules the state machine
applies (`state_machine.barge_in.read_going_on` while the sound goes on, `interrupts` on the
whole): a backchannel should never pause or end the answer, an interruption should pause it
early and end it. Decoded every 0.1 s of sound (`TurnOptions.duck_recheck_s`); the engine's
own decodes are as often at best, so its times are later than these by a decode's length.
No network, no LiveKit: the rules alone, on what Whisper really heard. `--decodes` replays a
saved run's decodes through today's rules in a second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.corpus import BARGE_INS, CACHE_DIR, spoken
from bench.turn_corpus import BACKCHANNELS, COUGH, INTERRUPTIONS
from state_machine.backchannel import interrupts
from state_machine.barge_in import SoFar, read_going_on, words_heard
from state_machine.options import TurnOptions

VOICES = (
    "piper-joe",
    "espeak-en-us",
    "espeak-en-gb",
    "espeak-en-us+f3",
    "espeak-en-gb-scotland",
    "espeak-en-029",
    "espeak-en-gb-x-rp",
    "espeak-en-gb+f4",
    "espeak-en-us-nyc",
)
# Sounds no corpus of the bench has (the backchannel phrases after "okay okay" were added to
# state_machine.backchannel once this bench had heard them misread as questions).
HELD_OUT_BACKCHANNELS = (
    "mm hmm",
    "hmm",
    "ha ha",
    "yeah yeah",
    "got it",
    "I know",
    "exactly",
    "okay okay",
    "oh wow",
    "oh really",
)
HELD_OUT_INTERRUPTIONS = (
    "No, the other one.",
    "Why is that?",
    "Can you say that again?",
    "That is not what I asked.",
    "How much does it cost?",
    "Go back to the first part.",
)
STEP_MS = 100


@dataclass
class Sound:
    kind: str  # "backchannel" | "interruption"
    text: str
    voice: str
    ms: int  # its length
    decodes: list[tuple[int, str]]  # (ms of it decoded, transcript); the last is the whole


@dataclass
class Verdict:
    paused_ms: int | None  # the first decode that paused the answer (None: never)
    ended: bool  # the answer was ended (barge-in committed)
    ended_on: str  # the transcript that ended it
    ended_ms: int | None = None  # the decode that ended it


def sounds() -> list[tuple[str, str]]:
    backchannels = dict.fromkeys(
        [over for _, over, _ in BACKCHANNELS if over != COUGH] + list(HELD_OUT_BACKCHANNELS)
    )
    interruptions = dict.fromkeys(
        [over for _, over, _ in (*BARGE_INS, *INTERRUPTIONS)] + list(HELD_OUT_INTERRUPTIONS)
    )
    return [("backchannel", t) for t in backchannels] + [("interruption", t) for t in interruptions]


async def decode_all(cache_dir: Path) -> list[Sound]:
    from agent.adapters.stt.whisper import WhisperSTT
    from bench.stt_ceiling import opus_round_trip

    stt = WhisperSTT()
    stt.load()
    out = []
    for kind, text in sounds():
        for voice in VOICES:
            pcm = opus_round_trip(await spoken(text, voice, cache_dir))
            length = len(pcm) * 1000 // 16000
            cuts = [*range(STEP_MS, length, STEP_MS), length]
            decodes = [(ms, await stt.transcribe(pcm[: ms * 16])) for ms in cuts]
            out.append(Sound(kind, text, voice, length, decodes))
        print(f"{kind}: {text!r}", flush=True)
    return out


def judge(sound: Sound, options: TurnOptions) -> Verdict:
    """The barge-in rules over the sound's decodes, in order."""
    paused, before = None, ""
    for ms, text in sound.decodes[:-1]:
        heard = words_heard(text, ms / 1000, options)
        so_far = read_going_on(heard, ms / 1000, before, options)
        before = heard
        if so_far is not SoFar.WAIT and paused is None:
            paused = ms
        if so_far is SoFar.END:
            return Verdict(paused, True, text, ms)
    whole = words_heard(sound.decodes[-1][1], sound.ms / 1000, options)
    if interrupts(whole):
        return Verdict(sound.ms if paused is None else paused, True, whole, sound.ms)
    return Verdict(paused, False, "")


def summary(all_sounds: list[Sound], options: TurnOptions) -> dict[str, Any]:
    verdicts = [(s, judge(s, options)) for s in all_sounds]
    backchannels = [(s, v) for s, v in verdicts if s.kind == "backchannel"]
    interruptions = [(s, v) for s, v in verdicts if s.kind == "interruption"]
    paused = sorted(v.paused_ms for _, v in interruptions if v.paused_ms is not None)
    ended = sorted(v.ended_ms for _, v in interruptions if v.ended_ms is not None)
    return {
        "backchannels": len(backchannels),
        "backchannels_pausing": sum(v.paused_ms is not None for _, v in backchannels),
        "backchannels_ending": sum(v.ended for _, v in backchannels),
        "interruptions": len(interruptions),
        "interruptions_missed": sum(v.paused_ms is None for _, v in interruptions),
        "interruption_paused_ms_p50": statistics.median(paused) if paused else None,
        "interruption_paused_ms_p95": paused[int(0.95 * (len(paused) - 1))] if paused else None,
        "interruption_ended_ms_p50": statistics.median(ended) if ended else None,
        "interruption_ended_ms_p95": ended[int(0.95 * (len(ended) - 1))] if ended else None,
        "wrong": [
            {"kind": s.kind, "voice": s.voice, "said": s.text, **asdict(v)}
            for s, v in verdicts
            if (s.kind == "backchannel") == (v.paused_ms is not None)
        ],
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, default=None, help="the summary and every decode")
    p.add_argument(
        "--decodes", type=Path, default=None, help="replay a saved run's decodes (its --json)"
    )
    p.add_argument("--cache-dir", type=Path, default=CACHE_DIR)


def run(args: argparse.Namespace) -> int:
    if args.decodes is not None:
        saved = json.loads(args.decodes.read_text())["sounds"]
        all_sounds = [Sound(**{**s, "decodes": [tuple(d) for d in s["decodes"]]}) for s in saved]
    else:
        all_sounds = asyncio.run(decode_all(args.cache_dir))
    result = summary(all_sounds, TurnOptions())
    for w in result["wrong"]:
        print(
            f"  {w['kind']:12s} {w['voice']:22s} {w['said']!r}: paused at {w['paused_ms']} ms"
            + (f", ended on {w['ended_on']!r}" if w["ended"] else "")
        )
    print(
        f"{result['backchannels']} backchannels: {result['backchannels_pausing']} paused the "
        f"answer, {result['backchannels_ending']} ended it; {result['interruptions']} "
        f"interruptions: {result['interruptions_missed']} never paused it, first pause "
        f"{result['interruption_paused_ms_p50']} / {result['interruption_paused_ms_p95']} ms, "
        f"end {result['interruption_ended_ms_p50']} / {result['interruption_ended_ms_p95']} ms "
        f"(p50 / p95 of the sound); load {os.getloadavg()[0]:.2f}"
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps({**result, "sounds": [asdict(s) for s in all_sounds]}, indent=1) + "\n"
        )
    return 0
