"""Where a phone line costs words, offline: `voxroom bench phone-band`.

The listening corpus's clean questions and beckett.wav's cuts (bench/listen_corpus.py), each
carried by a line of increasing damage: as it is; resampled to 8 kHz and back (nothing above
4 kHz); also band-passed to 300-3400 Hz; and through G.711 mu-law too (the bench's phone line,
`phone_line`). Every line's audio is then Opus-coded as LiveKit carries it (libsndfile, as
`bench/stt_ceiling.py` does). Per line, the stages the agent puts it through, measured apart,
each twice: as the agent hears a browser's microphone (the wideband tuning) and as it hears a
phone caller (agent/adapters/stt/phone_band.py: the VAD's lower energy gate, Whisper's phone
tuning):

- the front end: webrtcvad with the energy gate (agent/audio/vad.py) and the speech vote
  (state_machine's SpeechVote, TurnOptions' window), after 0.5 s of silence: where the
  utterance opens, and whether the pre-roll (`pre_roll_s` before the onset) starts before the
  first voiced sample (a word start cut otherwise); the share of the speech's frames voiced;
- the STT: the audio from the pre-roll's start to the speech's end (plus the endpoint margin)
  decoded whole by the bundled Whisper; and the whole item decoded as it is, no front end.

No LiveKit, no streaming: a decode's cost is all it takes (seconds for the corpus). The
streamed path, turn-taking included, is `voxroom bench --path simulate|livekit --corpus listen
--caller both`.

`voxroom bench phone-band [--split tune|held-out] [--gain-db DB] [--no-opus] [--json F]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agent.engines import FRAME_SAMPLES, INPUT_RATE

LEAD_S = 0.5  # silence before the speech, as the simulate path's user gives
TAIL_S = 0.06  # audio decoded after the speech's end (the STT's endpoint margin and a frame)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--split",
        choices=("tune", "held-out"),
        default=None,
        help="one half of the corpus (default: both)",
    )
    parser.add_argument("--no-opus", action="store_true", help="leave out the Opus round trip")
    parser.add_argument(
        "--gain-db",
        type=float,
        default=0.0,
        help="the speech's level against the corpus's (~ -20 dBFS active): a "
        "phone line's nominal level is ~6 dB under it, a quiet caller's more",
    )
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")


def run(args: argparse.Namespace) -> int:
    asyncio.run(_run(args))
    return 0


def lines() -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """The lines, least damage first: name -> 16 kHz int16 in, 16 kHz int16 out."""
    from bench.listen_corpus import PHONE_BAND_HZ, phone_line

    return {
        "clean": lambda pcm: pcm,
        "8 kHz": lambda pcm: narrowband(pcm, band=None),
        "8 kHz, 300-3400 Hz": lambda pcm: narrowband(pcm, band=PHONE_BAND_HZ),
        "phone (+ G.711)": phone_line,
    }


def narrowband(pcm: np.ndarray, band: tuple[float, float] | None) -> np.ndarray:
    """`pcm` resampled to the phone rate and back, band-passed to `band` there (None: not)."""
    import soxr
    from scipy.signal import butter, sosfilt

    from bench.listen_corpus import PHONE_RATE

    x = soxr.resample(pcm.astype(np.float32) / 32768.0, INPUT_RATE, PHONE_RATE)
    if band is not None:
        x = sosfilt(butter(4, band, btype="bandpass", fs=PHONE_RATE, output="sos"), x)
    y = soxr.resample(np.asarray(x, np.float32), PHONE_RATE, INPUT_RATE)
    return np.clip(np.round(y * 32767), -32768, 32767).astype(np.int16)


def front_end(audio: np.ndarray, vad: Any = None) -> tuple[list[bool], float | None]:
    """The decision of `vad` (default: the agent's VAD for a browser's microphone) on each
    20 ms frame of `audio`, and the onset of the utterance the speech vote opens first
    (seconds; None: none opens), as the turn engine decides them."""
    from agent.audio.vad import VoiceActivityDetector
    from state_machine.endpointing import SpeechVote
    from state_machine.options import TurnOptions

    o = TurnOptions()
    vad = vad or VoiceActivityDetector()
    vote = SpeechVote(o.frames(o.vad_window_s), o.vad_start_ratio, o.frame_s)
    voiced: list[bool] = []
    onset = None
    for i in range(len(audio) // FRAME_SAMPLES):
        v = vad.is_speech(audio[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES])
        voiced.append(v)
        # The machine opens an utterance on a vote with at least two voiced frames running.
        if vote.push(v, (i + 1) * o.frame_s) and onset is None and vote.run >= 2:
            onset = vote.run_start
    return voiced, onset


async def measure_item(
    item: Any, pcm: np.ndarray, tunings: dict[str, tuple[Callable[[], Any], Any]]
) -> dict[str, Any]:
    """One item's audio (16 kHz int16, as the line and the coding left it) through the stages
    of each tuning (name -> (a new VAD, the STT))."""
    from state_machine.options import TurnOptions

    lead = round(LEAD_S * INPUT_RATE)
    audio = np.concatenate(
        [np.zeros(lead, np.int16), pcm, np.zeros(round(0.5 * INPUT_RATE), np.int16)]
    )
    start_s = (lead + item.speech_start) / INPUT_RATE
    end_s = (lead + item.speech_end) / INPUT_RATE
    row: dict[str, Any] = {"item": item.id, "said": item.text}
    for name, (new_vad, stt) in tunings.items():
        voiced, onset = front_end(audio, new_vad())
        span = voiced[int(start_s / 0.02) : int(np.ceil(end_s / 0.02))]
        row[f"voiced_share_{name}"] = round(float(np.mean(span)), 3) if span else 0.0
        if onset is None:
            row[f"pre_roll_margin_ms_{name}"] = None
            heard = np.zeros(0, np.int16)
        else:
            opens = max(0.0, onset - TurnOptions().pre_roll_s)
            row[f"pre_roll_margin_ms_{name}"] = round((start_s - opens) * 1000)  # < 0: cut
            heard = audio[round(opens * INPUT_RATE) : round((end_s + TAIL_S) * INPUT_RATE)]
        row[f"front_end_{name}"] = await stt.transcribe(heard) if len(heard) else ""
        row[f"whole_{name}"] = await stt.transcribe(pcm)
    return row


def summarize(rows: list[dict[str, Any]], tunings: list[str]) -> dict[str, Any]:
    from agent.voice.turn_metrics import percentiles
    from bench.wer import wer_summary

    out: dict[str, Any] = {}
    for name in tunings:
        margins = [r[f"pre_roll_margin_ms_{name}"] for r in rows]
        out[name] = {
            "not_opened": sum(m is None for m in margins),
            "word_start_cut": sum(m is not None and m < 0 for m in margins),
            "pre_roll_margin_ms": {
                "min": min((m for m in margins if m is not None), default=None),
                **percentiles(margins),
            },
            "voiced_share_p50": float(np.median([r[f"voiced_share_{name}"] for r in rows])),
            "whole": wer_summary((r["said"], r[f"whole_{name}"]) for r in rows),
            "front_end": wer_summary((r["said"], r[f"front_end_{name}"]) for r in rows),
        }
    return out


async def _run(args: argparse.Namespace) -> None:
    from agent.adapters.stt.phone_band import for_phone_line, phone_line_vad
    from agent.adapters.stt.whisper import WhisperSTT
    from agent.audio.vad import VoiceActivityDetector
    from bench.listen_corpus import load_listen_corpus
    from bench.measure import load_average
    from bench.stt_ceiling import opus_round_trip

    items = [
        i for i in await load_listen_corpus(split=args.split) if i.kind in ("clean", "recording")
    ]
    wideband = WhisperSTT()
    wideband.load()
    wideband.warmup()
    tunings: dict[str, tuple[Callable[[], Any], Any]] = {
        "wideband": (VoiceActivityDetector, wideband),
        "phone": (phone_line_vad, for_phone_line(wideband)),
    }
    gain = 10 ** (args.gain_db / 20)
    load_start = load_average()
    report: dict[str, Any] = {
        "split": args.split or "both",
        "opus": not args.no_opus,
        "gain_db": args.gain_db,
        "lines": {},
    }
    for line, carry in lines().items():
        rows = []
        for item in items:
            pcm = carry(np.clip(np.round(item.pcm * gain), -32768, 32767).astype(np.int16))
            rows.append(
                await measure_item(item, pcm if args.no_opus else opus_round_trip(pcm), tunings)
            )
        report["lines"][line] = {"summary": summarize(rows, list(tunings)), "items": rows}
    report["load_average"] = {"start": load_start, "end": load_average()}
    _print(report, len(items))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


def _print(report: dict[str, Any], n: int) -> None:
    print(
        f"{n} items ({report['split']}), gain {report['gain_db']:+.0f} dB, "
        f"Opus {'on' if report['opus'] else 'off'}; "
        f"load {report['load_average']['start']} -> {report['load_average']['end']}"
    )
    print(
        f"{'line':20s} {'tuning':9s} {'cut':>4s} {'margin min/p50 ms':>18s} {'voiced':>7s} "
        f"{'WER whole':>17s} {'WER front end':>17s}"
    )
    for line, figures in report["lines"].items():
        for name, s in figures["summary"].items():
            m = s["pre_roll_margin_ms"]
            print(
                f"{line:20s} {name:9s} {s['word_start_cut']:4d} "
                f"{m['min']!s:>8s}/{m['p50']!s:>9s} {s['voiced_share_p50']:7.2f} "
                f"{_wer(s['whole']):>17s} {_wer(s['front_end']):>17s}"
            )


def _wer(w: dict[str, Any]) -> str:
    edits = int(w["substitutions"] + w["deletions"] + w["insertions"])
    return f"{w['wer']:.3f} ({edits}/{w['words']})"
