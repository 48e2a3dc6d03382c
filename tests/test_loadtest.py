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

from bench.loadtest import (
    Usage,
    _range,
    _room_steps,
    add_arguments,
    added_session_mb,
    format_report,
    reply_chunks,
    reply_gaps,
    run,
    series_summary,
    side_by_side,
)
from bench.measure import HeardAudio

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


def _step(
    n: int, p50: float | None, p95: float | None, peak_mb: float, failed: int = 0
) -> dict[str, object]:
    """A step as step_summary writes it, with the fields the series and the report read."""
    none = {"n": 0, "p50": None, "p95": None, "p99": None}
    return {
        "rooms": n,
        "rooms_failed": failed,
        "errors": ["join: timeout"] * failed,
        "dispatch_ms": none,
        "replies": 3 * n,
        "voice_to_voice_ms": {"n": 3 * n, "p50": p50, "p95": p95, "p99": p95},
        "audio_gaps": {"count": 0},
        "cpu_cores": 0.2 * n,
        "cpu_cores_per_session": 0.2,
        "mem_mb_peak": peak_mb,
        "mem_mb_per_session": 10.0,
    }


def test_a_series_counts_only_steps_within_the_goal_with_every_room_served() -> None:
    steps = [
        _step(1, 800.0, 900.0, 410.0),
        _step(2, 900.0, 1150.0, 420.0),
        _step(4, 1000.0, 1190.0, 440.0, failed=1),  # within, but a room got no agent
        _step(8, 1300.0, 1500.0, 480.0),
    ]
    series = series_summary("voxroom", "thread", steps, idle_mb=400.0)
    assert series["max_rooms_within_goal"] == 2
    assert series["mem_mb_per_added_session"] == pytest.approx(10.0, abs=0.5)
    # a step with no voice-to-voice at all is not within the goal
    assert (
        series_summary("x", "thread", [_step(1, None, None, 410.0)], idle_mb=400.0)[
            "max_rooms_within_goal"
        ]
        is None
    )


def test_side_by_side_puts_both_workers_ladders_in_one_table() -> None:
    voxroom = series_summary(
        "voxroom", "thread", [_step(1, 700.0, 800.0, 410.0), _step(4, 900.0, 1100.0, 440.0)], 400.0
    )
    agentsession = series_summary(
        "agentsession-tuned",
        "process",
        [_step(1, 1000.0, 1300.0, 900.0), _step(4, 2000.0, 3000.0, 2100.0)],
        150.0,
    )
    report = {
        "workers": 2,
        "duration_s": 20.0,
        "p95_goal_ms": 1200.0,
        "engines": {"llm": "scripted"},
        **{k: v for k, v in voxroom.items() if k != "worker"},
        "agentsession": agentsession,
    }
    rows = side_by_side(report)
    assert [r["worker"] for r in rows] == ["voxroom", "agentsession-tuned"]
    assert rows[0]["sessions_per_worker"] == 2.0  # N = 4 over two workers
    assert rows[1]["sessions_per_worker"] is None  # even one session over 1.2 s p95
    assert rows[0]["voice_to_voice_ms"] == {"1": [700.0, 800.0], "4": [900.0, 1100.0]}
    assert rows[1]["cpu_cores"] == {"1": 0.2, "4": 0.8}
    assert rows[1]["mem_mb_per_added_session"] > 400 > rows[0]["mem_mb_per_added_session"]
    report["side_by_side"] = rows
    text = format_report(report)
    assert "agentsession-tuned (process executor)" in text
    assert "N=4 2000/3000" in text and "sessions per worker none" in text


def test_compare_agentsession_defaults_to_tuned_and_needs_local_engines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    p = argparse.ArgumentParser()
    add_arguments(p)
    p.add_argument("--config")
    assert p.parse_args(["--compare-agentsession"]).compare_agentsession == "tuned"
    assert p.parse_args([]).compare_agentsession is None
    with pytest.raises(SystemExit):
        p.parse_args(["--compare-agentsession", "fast"])
    args = p.parse_args(["--engines", "remote", "--compare-agentsession", "defaults"])
    assert run(args) == 2  # refused before anything starts
    assert "needs --engines local" in capsys.readouterr().err


async def test_reply_chunks_are_the_replies_cut_as_the_workers_cut_them() -> None:
    replies = ["Sure, a ten minute timer starts now.", "Of course, sorry about that."]
    chunks = await reply_chunks(replies)
    assert " ".join(chunks) == " ".join(replies)
    assert len(chunks) > len(replies)  # a short first chunk, then the rest


def loadtest(repo_root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`voxroom loadtest ARGS` run to its end, successfully."""
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "loadtest", *args],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.integration
@pytest.mark.slow
def test_one_room_loadtest_reports_every_figure(tmp_path: Path, repo_root: Path) -> None:
    out = tmp_path / "report.json"
    proc = loadtest(repo_root, "--rooms", "1", "--duration", "10", "--json", "--out", str(out))
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
    loadtest(
        repo_root,
        "--engines",
        "remote",
        "--rooms",
        "1",
        "--duration",
        "10",
        "--json",
        "--out",
        str(out),
    )
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


@pytest.mark.integration
@pytest.mark.slow
def test_compare_agentsession_runs_the_same_load_against_both_workers(
    tmp_path: Path, repo_root: Path
) -> None:
    out = tmp_path / "report.json"
    proc = loadtest(
        repo_root, "--rooms", "1", "--duration", "8", "--compare-agentsession", "--out", str(out)
    )
    assert "agentsession-tuned step N=1" in proc.stderr
    assert "side by side" in proc.stdout
    report = json.loads(out.read_text())
    theirs = report["agentsession"]
    assert theirs["worker"] == "agentsession-tuned"
    for series in (report, theirs):
        [step] = series["steps"]
        assert step["rooms_failed"] == 0, step["errors"]
        assert step["replies"] >= 1 and step["voice_to_voice_ms"]["n"] >= 1
        assert step["cpu_cores"] > 0 and series["mem_mb_per_added_session"] is not None
    assert [r["worker"] for r in report["side_by_side"]] == ["voxroom", "agentsession-tuned"]
