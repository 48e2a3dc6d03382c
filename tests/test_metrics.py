"""Operators' metrics: Prometheus figures, the turn id in the JSON logs, spans per turn, and
metrics recorded in a job process showing up in the worker's multiprocess collection."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agent.events import (
    AudioStart,
    BargeIn,
    PlaybackDucked,
    PlaybackStopped,
    ReplyCancelled,
    ReplyStarted,
    Speculative,
    SpeechEnd,
    SpeechStart,
    Transcript,
    TtsChunk,
    Turn,
    event_json,
)
from agent.ops.metrics import Metrics, MetricsRecorder

LATENCY = {
    "endpoint": 310.0,
    "stt": 250.0,
    "llm_first_token": 120.0,
    "first_chunk": 260.0,
    "tts_first_audio": 40.0,
    "voice_to_voice": 580.0,
}


def conversation() -> list[dict]:
    """Events as the turn engine emits them, as the recorder gets them (their JSON): a question
    answered by a speculative reply, the user cuts in, and the cut-in is answered."""
    turn = {
        "user_text": "what is the capital of france",
        "agent_text": "Paris.",
        "heard_text": "Paris.",
        "interrupted": False,
    }
    return [
        event_json(e)
        for e in [
            SpeechStart(1.0, utterance_id=1),
            Transcript(1.5, "what is", final=False),
            SpeechEnd(2.0, utterance_id=1),
            ReplyStarted(2.25, reply_id=1, speculative=True),
            Speculative(2.31, kept=True, similarity=1.0),
            Transcript(2.31, "What is the capital of France?", final=True),
            AudioStart(2.58, reply_id=1),
            TtsChunk(2.55, "The capital", reply_id=1),
            SpeechStart(3.0, utterance_id=2),
            BargeIn(3.06, text="Stop.", onset=3.0),
            ReplyCancelled(3.5, reply_id=1, reason="barge_in"),
            PlaybackStopped(3.5, heard_text="The capital"),
            Turn(
                3.5, **turn | {"interrupted": True, "heard_text": "The capital"}, latency_ms=LATENCY
            ),
            SpeechEnd(4.0, utterance_id=2),
            ReplyStarted(4.2, reply_id=2, speculative=True),
            Speculative(4.3, kept=False, similarity=0.5),
            ReplyCancelled(4.3, reply_id=2, reason="speculative_mismatch"),
            Transcript(4.3, "Stop.", final=True),
            ReplyStarted(4.3, reply_id=3, speculative=False),
            AudioStart(4.7, reply_id=3),
            Turn(
                6.0,
                **turn,
                latency_ms={**LATENCY, "voice_to_voice": 700.0, "llm_first_token": None},
            ),
        ]
    ]


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels or None)


def test_turn_events_become_prometheus_metrics() -> None:
    registry = CollectorRegistry()
    rec = MetricsRecorder("room/user", metrics=Metrics(registry), tracer=None)
    for event in conversation():
        rec.on_event(event)
    assert sample(registry, "voxroom_voice_to_voice_seconds_count") == 2
    assert sample(registry, "voxroom_voice_to_voice_seconds_sum") == pytest.approx(1.28)
    # 0.58 s falls in the 0.6 s bucket, 0.7 s does not
    assert sample(registry, "voxroom_voice_to_voice_seconds_bucket", le="0.6") == 1
    assert sample(registry, "voxroom_turn_stage_seconds_count", stage="endpoint") == 2
    assert sample(registry, "voxroom_turn_stage_seconds_count", stage="llm_first_token") == 1
    assert sample(registry, "voxroom_turns_total", interrupted="true") == 1
    assert sample(registry, "voxroom_turns_total", interrupted="false") == 1
    assert sample(registry, "voxroom_barge_ins_total") == 1
    assert sample(registry, "voxroom_speculative_starts_total", outcome="kept") == 1
    assert sample(registry, "voxroom_speculative_starts_total", outcome="wasted") == 1


async def test_active_sessions_and_memory_gauges() -> None:
    registry = CollectorRegistry()
    rec = MetricsRecorder("s", metrics=Metrics(registry), tracer=None)
    rec.start()
    try:
        assert sample(registry, "voxroom_active_sessions") == 1
        await _until(lambda: (sample(registry, "voxroom_session_memory_bytes") or 0) > 10e6)
    finally:
        await rec.aclose()
    assert sample(registry, "voxroom_active_sessions") == 0


def test_json_logs_carry_one_turn_id_through_each_turn(caplog: pytest.LogCaptureFixture) -> None:
    rec = MetricsRecorder("room/user", metrics=Metrics(CollectorRegistry()), tracer=None)
    with caplog.at_level(logging.INFO, logger="voxroom.turns"):
        for event in conversation():
            rec.on_event(event)
    records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "voxroom.turns"]
    ids = {r["event"] + str(r.get("reply_id", "")): r["turn_id"] for r in records[:6]}
    # the first question: speech, the speculative reply, its audio, and its (interrupted) end
    assert {ids["speech_start"], ids["speech_end"], ids["reply_started1"], ids["audio_start1"]} == {
        1
    }
    turns = [r for r in records if r["event"] == "turn"]
    assert [t["turn_id"] for t in turns] == [1, 2]
    assert [r["turn_id"] for r in records if r["event"] == "barge_in"] == [2]
    assert [r["turn_id"] for r in records if r["event"] == "reply_cancelled"] == [1, 2]
    assert all(r["session"] == "room/user" and "t_ms" in r for r in records)
    # INFO logs say how long, not what: no transcript text, no partials, no TTS chunks
    assert not any("text" in r or "heard_text" in r for r in records)
    assert "tts_chunk" not in {r["event"] for r in records}
    assert turns[0]["heard_text_chars"] == len("The capital")


def test_an_onset_is_logged_on_the_wall_clock_of_t_ms(caplog: pytest.LogCaptureFixture) -> None:
    rec = MetricsRecorder("room/user", metrics=Metrics(CollectorRegistry()), tracer=None)
    with caplog.at_level(logging.INFO, logger="voxroom.turns"):
        rec.on_event(event_json(PlaybackDucked(3.04, onset=3.0)))
    [record] = [json.loads(r.getMessage()) for r in caplog.records if r.name == "voxroom.turns"]
    assert record["event"] == "playback_ducked" and record["onset"] == 3.0
    assert record["t_ms"] - record["onset_ms"] == pytest.approx(40, abs=1)


def test_a_span_per_turn_with_its_stages() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rec = MetricsRecorder(
        "s", metrics=Metrics(CollectorRegistry()), tracer=provider.get_tracer("test")
    )
    for event in conversation():
        rec.on_event(event)
    spans = exporter.get_finished_spans()
    turns = [s for s in spans if s.name == "voxroom.turn"]
    assert [t.attributes["voxroom.turn_id"] for t in turns] == [1, 2]
    first = turns[0]
    assert first.attributes["voxroom.interrupted"] is True
    assert (first.end_time - first.start_time) / 1e9 == pytest.approx(1.5)  # speech end -> 3.5
    children = {
        s.name: s
        for s in spans
        if s.parent is not None and s.parent.span_id == first.context.span_id
    }
    assert set(children) == {
        "voxroom.endpoint",
        "voxroom.llm_first_token",
        "voxroom.first_chunk",
        "voxroom.tts_first_audio",
    }
    tts = children["voxroom.tts_first_audio"]
    assert (tts.start_time - first.start_time) / 1e6 == pytest.approx(250 + 260, abs=0.01)
    assert (tts.end_time - tts.start_time) / 1e6 == pytest.approx(40, abs=0.01)
    # the second turn has no LLM latency: no span invented for it
    second = {
        s.name
        for s in spans
        if s.parent is not None and s.parent.span_id == turns[1].context.span_id
    }
    assert "voxroom.llm_first_token" not in second


def test_a_broken_event_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    rec = MetricsRecorder("s", metrics=Metrics(CollectorRegistry()), tracer=None)
    rec.on_event({"t": 1.0, "type": "turn"})  # no latency_ms
    assert any("not recorded" in r.getMessage() for r in caplog.records)


JOB = """
import asyncio
from agent.ops.metrics import MetricsRecorder

async def main():
    rec = MetricsRecorder("job")
    rec.start()
    rec.on_event({"t": 1.0, "type": "barge_in"})
    rec.on_event({"t": 2.0, "type": "turn", "interrupted": False,
                  "latency_ms": {"voice_to_voice": 450.0}})
    print("recorded", flush=True)
    input()  # stay alive (a session in progress) until the test says so
    await rec.aclose()

asyncio.run(main())
"""


def test_job_process_metrics_reach_the_worker_collector(tmp_path: Path) -> None:
    """Sessions run in job processes; the worker serves their sum (multiprocess mode)."""
    from prometheus_client import multiprocess

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    job = subprocess.Popen(
        [sys.executable, "-c", JOB],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "recorded"
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
        text = generate_latest(registry).decode()
        assert "voxroom_voice_to_voice_seconds_count 1.0" in text
        assert "voxroom_barge_ins_total 1.0" in text
        assert "voxroom_active_sessions 1.0" in text
        assert f'voxroom_session_memory_bytes{{pid="{job.pid}"}}' in text
        job.communicate("\n", timeout=30)
    finally:
        job.kill()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    text = generate_latest(registry).decode()
    assert "voxroom_voice_to_voice_seconds_count 1.0" in text  # counts outlive the process
    assert "voxroom_session_memory_bytes{" not in text  # its live gauges do not
    assert "voxroom_active_sessions 0.0" in text or "voxroom_active_sessions " not in text


async def _until(predicate, timeout_s: float = 5.0) -> None:
    import asyncio
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)
