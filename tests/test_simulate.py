"""`voxroom simulate` through its command-line contract, on espeak-ng speech, with the scripted
LLM (a test double): the state cycle, the transcript, the latency's records, and barge-in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from bench.speech import RATE, espeak, last_voiced_sample
from bench.wer import normalize, wer

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France?"
INTERRUPTION = "Wait, what is the weather today?"
LONG_REPLY = (
    "The capital of France is Paris, a city of about two million people on the river Seine, "
    "famous for its museums, its cafes, its long boulevards and the Eiffel Tower, which was "
    "built for the world fair of eighteen eighty nine."
)
WEATHER_REPLY = "It is sunny and warm today."
SHORT_REPLY = "The capital of France is Paris, on the river Seine."


def simulate(tmp_path: Path, pcm: np.ndarray, replies: list[str]) -> tuple[list[dict], np.ndarray]:
    wav, events, out, script = (tmp_path / n for n in ("in.wav", "ev.jsonl", "agent.wav", "s.txt"))
    sf.write(str(wav), pcm, RATE, subtype="PCM_16")
    script.write_text("\n".join(replies) + "\n", encoding="utf-8")
    cmd = [
        sys.executable,
        "-m",
        "agent.cli",
        "simulate",
        str(wav),
        "--events",
        str(events),
        "--audio-out",
        str(out),
        "--llm",
        f"script:{script}",
        "--tail-s",
        "8",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = events.read_text(encoding="utf-8").splitlines()
    agent, rate = sf.read(str(out), dtype="int16")
    assert rate == RATE
    return [json.loads(line) for line in lines], agent


def test_spoken_question_cycles_states_and_is_answered(tmp_path: Path) -> None:
    speech = espeak(QUESTION)
    pcm = np.concatenate([np.zeros(RATE // 2, np.int16), speech])
    speech_end = (RATE // 2 + last_voiced_sample(speech)) / RATE
    events, agent = simulate(tmp_path, pcm, [SHORT_REPLY])

    states = [e["state"] for e in events if e["type"] == "state"]
    assert states == ["LISTENING", "THINKING", "SPEAKING", "LISTENING"]
    finals = [e["text"] for e in events if e["type"] == "transcript" and e["final"]]
    assert len(finals) == 1 and wer(QUESTION, finals[0]) <= 0.2, finals
    [audio_start] = [e["t"] for e in events if e["type"] == "audio_start"]
    [heard_end] = [e["t"] for e in events if e["type"] == "speech_end"]
    print(
        f"\nend of speech {speech_end:.3f}s (heard {heard_end:.3f}s) -> first agent audio "
        f"{audio_start:.3f}s: {(audio_start - speech_end) * 1000:.0f} ms"
    )
    # How soon is a speed goal (`voxroom bench --path simulate`), not a wall-clock bound of a
    # test: here the answer comes after the question, and every record of it agrees.
    assert heard_end < audio_start
    first_sound = np.flatnonzero(np.abs(agent.astype(np.int32)) > 300)[0] / RATE
    assert abs(first_sound - audio_start) < 0.1  # the WAV agrees with the event
    [turn] = [e for e in events if e["type"] == "turn"]
    assert turn["agent_text"] == SHORT_REPLY and not turn["interrupted"]
    # The turn's figure is the events' (each rounded to the ms).
    voice_to_voice = (audio_start - heard_end) * 1000
    assert turn["latency_ms"]["voice_to_voice"] == pytest.approx(voice_to_voice, abs=2)


def test_talking_over_the_answer_ducks_then_stops_it_and_the_interruption_is_answered(
    tmp_path: Path,
) -> None:
    q, i = espeak(QUESTION), espeak(INTERRUPTION)
    lead = RATE // 2
    q_end = (lead + last_voiced_sample(q)) / RATE
    gap = int((q_end - lead / RATE + 0.5 + 2.5) * RATE) - len(q)  # interrupt ~2.5 s into the answer
    pcm = np.concatenate([np.zeros(lead, np.int16), q, np.zeros(gap, np.int16), i])
    onset = (lead + len(q) + gap + np.flatnonzero(np.abs(i.astype(np.int32)) > 500)[0]) / RATE
    events, agent = simulate(tmp_path, pcm, [LONG_REPLY, WEATHER_REPLY])

    # The agent gives way at once (ducks), and stops once "Wait, what" is heard.
    [ducked] = [e for e in events if e["type"] == "playback_ducked"]
    [barge] = [e for e in events if e["type"] == "barge_in"]
    assert ducked["t"] - onset <= 0.150 and ducked["t"] <= barge["t"]
    starts = [e["t"] for e in events if e["type"] == "audio_start"]
    assert len(starts) == 2 and starts[0] < onset < starts[1]
    assert barge["t"] < onset + len(i) / RATE  # before the interruption ended
    # Silent until the second answer: the events' times have 1 ms resolution (rounded), and
    # the answer's audio is loud from its first sample, so the window ends 1 ms before it.
    quiet = agent[int((barge["t"] + 0.05) * RATE) : int((starts[1] - 0.001) * RATE)]
    assert quiet.size > 0 and int(np.abs(quiet.astype(np.int32)).max()) < 50, "agent audible"
    turns = [e for e in events if e["type"] == "turn"]
    assert [t["interrupted"] for t in turns] == [True, False]
    first, second = turns
    assert first["heard_text"] and normalize(LONG_REPLY).startswith(normalize(first["heard_text"]))
    assert len(first["heard_text"]) < len(LONG_REPLY)
    assert wer(INTERRUPTION, second["user_text"]) <= 0.25, second
    assert second["agent_text"] == WEATHER_REPLY
    [stopped] = [e for e in events if e["type"] == "playback_stopped"]
    assert stopped["heard_text"] == first["heard_text"]


def test_unreadable_input_is_a_one_line_error_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "simulate",
            str(bad),
            "--events",
            str(tmp_path / "e"),
            "--audio-out",
            str(tmp_path / "a.wav"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "cannot read" in result.stderr
