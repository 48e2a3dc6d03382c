"""Operators' view of the agent: Prometheus metrics, OpenTelemetry spans and JSON logs per turn.

A `MetricsRecorder` per conversation is fed the turn engine's events as their JSON
(`on_event(event)`, agent.events.event_json) and turns them into:

- Prometheus: a histogram of voice-to-voice and one of every stage (label `stage`), counters
  of turns, barge-ins, false interruptions, speculative starts kept and wasted, failed replies
  and fallbacks, a gauge of active sessions and one of each session's resident memory.
  Sessions run in the worker's job processes, so the metrics use prometheus_client's
  multiprocess mode: the worker points PROMETHEUS_MULTIPROC_DIR at a directory before any job
  process starts (`prepare_multiprocess_dir()`), and livekit-agents' own HTTP server serves
  the sum of all processes on `/metrics` (AgentServer's `prometheus_port`).
- OpenTelemetry: one span per turn, from the end of the user's speech to the end of the reply,
  with a child span per stage; only when VOXROOM_OTEL_ENDPOINT names an OTLP/HTTP collector
  (nothing is exported otherwise).
- Logs: one JSON object per event on the `voxroom.turns` logger, each with the session and the
  turn id that follows the turn from the user's first word to the reply's end. What was said is
  logged only at DEBUG.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import tempfile
import time
from typing import Any

log = logging.getLogger("voxroom.turns")

OTEL_ENDPOINT_ENV = "VOXROOM_OTEL_ENDPOINT"
MEMORY_SAMPLE_S = 5.0
STAGES = ("endpoint", "stt", "llm_first_token", "first_chunk", "tts_first_audio")
# 25 ms .. 8 s: the stages are tens to hundreds of ms, a bad turn several seconds.
BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 0.9, 1.2, 1.5, 2, 3, 5, 8)
_TEXT_FIELDS = ("text", "user_text", "agent_text", "heard_text")


class Metrics:
    """The Prometheus metrics, on `registry` (None: prometheus_client's default registry)."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        r = registry if registry is not None else REGISTRY
        self.voice_to_voice = Histogram(
            "voxroom_voice_to_voice_seconds",
            "End of the user's speech to the first reply audio at the listener",
            buckets=BUCKETS,
            registry=r,
        )
        self.stage = Histogram(
            "voxroom_turn_stage_seconds",
            "Latency of one stage of a turn (see TurnRecord.latency_ms)",
            ["stage"],
            buckets=BUCKETS,
            registry=r,
        )
        self.turns = Counter("voxroom_turns", "Finished turns", ["interrupted"], registry=r)
        self.barge_ins = Counter(
            "voxroom_barge_ins", "Times the user cut in on the agent", registry=r
        )
        self.false_interruptions = Counter(
            "voxroom_false_interruptions",
            "Pauses for user sound that brought no words; playback resumed",
            registry=r,
        )
        self.speculative = Counter(
            "voxroom_speculative_starts",
            "Replies started before the final transcript, by whether they were kept or wasted",
            ["outcome"],
            registry=r,
        )
        self.reply_failures = Counter(
            "voxroom_reply_failures", "Replies whose LLM or TTS failed", registry=r
        )
        self.fallbacks = Counter(
            "voxroom_fallbacks", "Degraded answers, by kind", ["kind"], registry=r
        )
        self.active_sessions = Gauge(
            "voxroom_active_sessions",
            "Conversations in progress",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.session_memory = Gauge(
            "voxroom_session_memory_bytes",
            "Resident memory of the process of a session",
            multiprocess_mode="liveall",
            registry=r,
        )


@functools.cache
def default_metrics() -> Metrics:
    """The process's metrics on the default registry (created once)."""
    return Metrics()


def prepare_multiprocess_dir() -> str:
    """Point PROMETHEUS_MULTIPROC_DIR at a fresh directory (unless it is set) and return it.
    Call in the worker before anything imports prometheus_client or starts a job process."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        path = tempfile.mkdtemp(prefix="voxroom-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def record_fallback(kind: str, reason: str = "") -> None:
    """Count a degraded answer (e.g. kind "llm_local": the bundled LLM answered instead)."""
    default_metrics().fallbacks.labels(kind=kind).inc()
    log.warning(json.dumps({"event": "fallback", "kind": kind, "reason": reason}))


@functools.cache
def otel_tracer() -> Any:
    """A tracer exporting to $VOXROOM_OTEL_ENDPOINT (OTLP over HTTP), or None when unset."""
    endpoint = os.environ.get(OTEL_ENDPOINT_ENV)
    if not endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "voxroom-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider.get_tracer("voxroom")


class MetricsRecorder:
    """One conversation's metrics, spans and logs, fed by the turn engine's events."""

    def __init__(
        self, session_id: str, *, metrics: Metrics | None = None, tracer: Any = None
    ) -> None:
        self.session_id = session_id
        self._m = metrics or default_metrics()
        self._tracer = tracer if tracer is not None else otel_tracer()
        self._next_turn = 1
        self._listening = 0  # turn id of the user's current (or last) utterance
        self._answering = 0  # turn id of the committed user turn being answered
        self._reply_turn: dict[int, int] = {}
        self._speech_end: dict[int, int] = {}  # turn id -> end of the user's speech (wall ns)
        self._memory_task: asyncio.Task[None] | None = None
        self._active = False
        # monotonic -> wall clock, for span timestamps (the engine's times are monotonic)
        self._wall_offset_ns = time.time_ns() - time.monotonic_ns()

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Count the session as active and sample its memory (call from the event loop)."""
        self._m.active_sessions.inc()
        self._active = True
        self._memory_task = asyncio.get_running_loop().create_task(self._sample_memory())

    async def aclose(self) -> None:
        if self._memory_task is not None:
            self._memory_task.cancel()
            await asyncio.gather(self._memory_task, return_exceptions=True)
        if self._active:
            self._active = False
            self._m.active_sessions.dec()
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                from prometheus_client import multiprocess

                # This process's live gauges (its sessions, its memory) leave /metrics.
                multiprocess.mark_process_dead(os.getpid())

    async def _sample_memory(self) -> None:
        import psutil

        proc = psutil.Process()
        while True:
            self._m.session_memory.set(proc.memory_info().rss)
            await asyncio.sleep(MEMORY_SAMPLE_S)

    # ---- events ---------------------------------------------------------------------------

    def on_event(self, event: dict[str, Any]) -> None:
        """One of the turn engine's events, as its JSON (`{"t", "type", ...}`). Never raises."""
        try:
            kind = event["type"]
            turn_id = self._turn_of(kind, event)
            self._count(kind, event)
            if kind == "turn" and self._tracer is not None:
                self._span(turn_id, event)
            self._log(kind, event, turn_id)
        except Exception:  # observability must not break a conversation
            log.exception("metrics: event %s not recorded", event.get("type"))

    def _turn_of(self, kind: str, data: dict[str, Any]) -> int:
        if kind == "speech_start":
            self._listening = self._next_turn
            self._next_turn += 1
        elif kind == "speech_end" and self._tracer is not None:
            self._speech_end[self._listening] = self._wall_ns(data["t"])
        elif kind == "transcript" and data.get("final"):
            self._answering = self._listening
        elif kind == "reply_started":
            # A speculative reply starts before the final transcript: it answers the utterance
            # being heard, not the turn answered so far.
            self._reply_turn[data["reply_id"]] = self._listening
        if "reply_id" in data:
            return self._reply_turn.get(data["reply_id"], self._listening)
        if kind in ("turn", "playback_stopped"):
            return self._answering
        return self._listening

    def _count(self, kind: str, data: dict[str, Any]) -> None:
        m = self._m
        if kind == "turn":
            m.turns.labels(interrupted=str(bool(data["interrupted"])).lower()).inc()
            lat = data["latency_ms"]
            if lat.get("voice_to_voice") is not None:
                m.voice_to_voice.observe(lat["voice_to_voice"] / 1000)
            for stage in STAGES:
                if lat.get(stage) is not None:
                    m.stage.labels(stage=stage).observe(lat[stage] / 1000)
            for fallback in data.get("fallbacks", ()):
                m.fallbacks.labels(kind=str(fallback)).inc()
        elif kind == "barge_in":
            m.barge_ins.inc()
        elif kind == "false_interruption":
            m.false_interruptions.inc()
        elif kind == "speculative":
            m.speculative.labels(outcome="kept" if data["kept"] else "wasted").inc()
        elif kind == "reply_failed":
            m.reply_failures.inc()

    def _log(self, kind: str, data: dict[str, Any], turn_id: int) -> None:
        chatty = kind in ("tts_chunk",) or (kind == "transcript" and not data.get("final"))
        level = logging.DEBUG if chatty else logging.INFO
        if not log.isEnabledFor(level):
            return
        record: dict[str, Any] = {"session": self.session_id, "turn_id": turn_id, "event": kind}
        for key, value in data.items():
            if key == "type":
                continue
            if key == "t":
                record["t_ms"] = self._wall_ns(value) // 1_000_000
            elif key == "onset":  # on the same wall clock as t_ms: the two subtract exactly
                record[key] = value
                record["onset_ms"] = self._wall_ns(value) // 1_000_000
            elif key in _TEXT_FIELDS:
                record[f"{key}_chars"] = len(value)
                if log.isEnabledFor(logging.DEBUG):
                    record[key] = value
            else:
                record[key] = value
        log.log(level, json.dumps(record, default=str))

    def _span(self, turn_id: int, data: dict[str, Any]) -> None:
        """A span from the end of the user's speech to the turn's close, with a child span per
        stage placed by its latency (endpoint and the reply's start are measured from the end
        of speech; the LLM, chunk and TTS stages from the reply's start)."""
        lat = data["latency_ms"]
        end_ns = self._wall_ns(data["t"])
        start_ns = self._speech_end.pop(turn_id, None) or end_ns
        attrs = {
            "voxroom.session": self.session_id,
            "voxroom.turn_id": turn_id,
            "voxroom.interrupted": bool(data["interrupted"]),
        }
        attrs |= {f"voxroom.latency_ms.{k}": v for k, v in lat.items() if v is not None}
        parent = self._tracer.start_span("voxroom.turn", start_time=start_ns, attributes=attrs)
        ctx = trace_context(parent)

        def child(name: str, begin_ms: float | None, length_ms: float | None) -> None:
            if begin_ms is None or length_ms is None:
                return
            begin = start_ns + int(begin_ms * 1e6)
            self._tracer.start_span(f"voxroom.{name}", context=ctx, start_time=begin).end(
                end_time=begin + int(length_ms * 1e6)
            )

        reply = lat.get("stt")
        child("endpoint", 0.0, lat.get("endpoint"))
        child("llm_first_token", reply, lat.get("llm_first_token"))
        child("first_chunk", reply, lat.get("first_chunk"))
        chunk_at = (
            None
            if reply is None or lat.get("first_chunk") is None
            else (reply + lat["first_chunk"])
        )
        child("tts_first_audio", chunk_at, lat.get("tts_first_audio"))
        parent.end(end_time=max(end_ns, start_ns))

    def _wall_ns(self, monotonic_s: float) -> int:
        return int(monotonic_s * 1e9) + self._wall_offset_ns


def trace_context(span: Any) -> Any:
    from opentelemetry import trace

    return trace.set_span_in_context(span)
