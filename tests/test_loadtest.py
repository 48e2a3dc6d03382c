"""`voxroom loadtest`: its measurements on synthetic audio, and one short real run (one room,
one worker, a real livekit-server) whose report must carry every figure."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agent.bench_measure import HeardAudio
from agent.loadtest import (
    Usage,
    _range,
    _room_steps,
    added_session_mb,
    reply_chunks,
    reply_gaps,
)

RATE = 16_000


def _tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (8000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def test_cpu_spent_over_a_window_shorter_than_the_sampling_period() -> None:
    import os

    usage = Usage([os.getpid()], children=False, memory=False)
    usage.samples = [(10.0, 1.0, 0.0), (10.1, 1.05, 0.0), (10.2, 1.2, 0.0), (10.3, 1.2, 0.0)]
    # widened to the samples around it: 10.1 .. 10.3
    assert usage.spent(10.15, 10.25) == pytest.approx((0.15, 0.2))
    assert usage.spent(10.1, 10.2) == pytest.approx((0.15, 0.1))
    assert usage.spent(9.0, 10.2) is None  # before the first sample
    assert usage.spent(10.2, 11.0) is None  # after the last
    assert usage.sample()[2] == 0.0  # no memory asked for


def test_reply_gaps_are_the_long_silences_inside_a_reply() -> None:
    quiet = lambda s: np.zeros(int(s * RATE), np.int16)  # noqa: E731
    # 0.5 s voice, 0.1 s pause (natural), 0.5 s voice, 0.4 s gap, 0.5 s voice, then silence
    pcm = np.concatenate([_tone(0.5), quiet(0.1), _tone(0.5), quiet(0.4), _tone(0.5), quiet(2)])
    heard = HeardAudio(RATE, [(10.0, pcm)])
    gaps = reply_gaps(heard, 10.0, 10.0 + len(pcm) / RATE)
    assert len(gaps) == 1 and 380 <= gaps[0] <= 420, gaps
    assert reply_gaps(heard, 10.0, 11.5) == []  # the gap starts inside, ends after the window


def test_room_steps_and_ranges_parse_and_are_bounded() -> None:
    assert _room_steps("8,1,2,2") == [1, 2, 8]
    assert _range("300-600") == (300.0, 600.0)
    assert _range("250") == (250.0, 250.0)
    for bad in ("0", "1,65", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            _room_steps(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        _range("600-300")


def test_memory_per_added_session_is_the_slope_over_the_steps() -> None:
    steps = [{"rooms": 1, "mem_mb_peak": 530.0}, {"rooms": 4, "mem_mb_peak": 590.0}]
    assert added_session_mb(steps, idle_mb=510.0) == pytest.approx(20.0, abs=0.5)
    assert added_session_mb([{"rooms": 2, "mem_mb_peak": None}], idle_mb=500.0) is None


async def test_reply_chunks_are_the_replies_cut_as_the_workers_cut_them() -> None:
    replies = ["Sure, a ten minute timer starts now.", "Of course, sorry about that."]
    chunks = await reply_chunks(replies)
    assert " ".join(chunks) == " ".join(replies)
    assert len(chunks) > len(replies)  # a short first chunk, then the rest


@pytest.mark.integration
@pytest.mark.slow
def test_one_room_loadtest_reports_every_figure(tmp_path: Path, repo_root: Path) -> None:
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "loadtest", "--rooms", "1", "--duration", "10",
         "--json", "--out", str(out)],
        cwd=repo_root, capture_output=True, text=True, timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step N=1" in proc.stderr  # progress goes to the terminal
    report = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == report
    [step] = report["steps"]
    assert step["rooms"] == 1 and step["rooms_failed"] == 0, step["errors"]
    assert step["dispatch_ms"]["n"] == 1 and step["dispatch_ms"]["p50"] > 0
    v2v = step["voice_to_voice_ms"]
    assert v2v["n"] >= 1 and 0 < v2v["p50"] <= v2v["p95"] <= v2v["p99"] < 15_000
    assert step["replies"] >= 1
    assert step["cpu_cores"] > 0 and step["mem_mb_peak"] > report["idle_mem_mb"] / 2
    assert {"count", "per_reply", "max_ms"} <= step["audio_gaps"].keys()
    assert report["mem_mb_per_added_session"] is not None
    expected = 1 if v2v["p95"] <= report["p95_goal_ms"] else None
    assert report["max_rooms_within_goal"] == expected


@pytest.mark.integration
@pytest.mark.slow
def test_remote_engines_loadtest_runs_the_workers_on_the_doubles(
    tmp_path: Path, repo_root: Path
) -> None:
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "loadtest", "--engines", "remote", "--rooms", "1",
         "--duration", "10", "--json", "--out", str(out)],
        cwd=repo_root, capture_output=True, text=True, timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    engines = report["engines"]
    # one connection is the worker's provider check at start, one the session's
    assert engines["stt"].startswith("Deepgram adapter") and "(2 connections" in engines["stt"]
    assert " 0 utterances" not in engines["stt"]
    assert engines["tts"].startswith("OpenAI speech adapter") and "0 requests" not in engines["tts"]
    [step] = report["steps"]
    assert step["rooms_failed"] == 0, step["errors"]
    assert step["replies"] >= 1 and step["voice_to_voice_ms"]["n"] >= 1
    assert step["clients_cpu_cores"] > 0 and step["cpu_cores"] > 0
    # the worker loaded no speech model: its memory is far below a local-engine worker's
    assert report["idle_mem_mb"] < 700
