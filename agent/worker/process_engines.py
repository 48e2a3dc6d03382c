"""The engines every session of a worker process shares, loaded once per process: the speech
models, the end-of-turn model, the turn store, the shared room memory and the tool registry.
`prewarm` hands them to each job process (or job thread) before it takes a job."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from agent.config import Settings, load_settings

log = logging.getLogger("voxroom.worker")


@dataclass(frozen=True)
class ProcessEngines:
    """What every session of a process shares: the speech models, the end-of-turn model, the
    turn store, the shared room memory (None without `store.redis_url`) and the tool registry
    (its MCP servers' connections)."""

    stt: Any
    tts: Any
    store: Any
    turn_detector: Any = None
    memory: Any = None
    tools: Any = None


_engines: ProcessEngines | None = None
_engines_lock = threading.Lock()


def process_engines() -> ProcessEngines:
    """The process's engines, loaded and warmed by the first caller (blocking); job threads
    that ask meanwhile wait for that one load instead of starting their own."""
    global _engines
    with _engines_lock:
        if _engines is None:
            from agent.adapters.providers import load_speech_engines
            from agent.adapters.turn_detector import load_detector
            from agent.store.transcripts import open_turn_store
            from agent.transports.room_io import OUTPUT_RATE
            from agent.worker.tool_registry import start_tool_registry

            settings = load_settings()
            store = open_turn_store(settings.store)  # first: a store it cannot open fails fast
            stt, tts = load_speech_engines(OUTPUT_RATE, settings.stt, settings.tts)
            detector = load_detector(settings.turn.detector)
            _engines = ProcessEngines(stt, tts, store, detector,
                                      _room_memory(settings, store), start_tool_registry(settings))
        return _engines


def loaded_engines() -> ProcessEngines | None:
    """The process's engines if they are loaded (never loads them)."""
    return _engines


def _room_memory(settings: Settings, store: Any) -> Any:
    """Redis with store.redis_url; else the SQLite store's own file (one host); none for
    PostgreSQL without Redis (the turns are shared, a reply cut by a crash is not)."""
    from agent.transports.room_session import PERSISTED_HISTORY_TURNS

    if settings.store.redis_url:
        from agent.store.shared_state import RedisRoomMemory, connect_redis

        return RedisRoomMemory(connect_redis(settings.store.redis_url), PERSISTED_HISTORY_TURNS)
    from agent.store.transcripts import TranscriptStore

    if isinstance(store, TranscriptStore):
        from agent.store.room_memory_sqlite import SqliteRoomMemory

        return SqliteRoomMemory(store, PERSISTED_HISTORY_TURNS)
    return None


def prewarm(proc: object) -> None:
    """Runs in every job process (or job thread) before it takes a job."""
    from agent.log_redaction import install_log_redaction

    install_log_redaction()  # a job process's records are redacted before they are forwarded
    engines = process_engines()
    proc.userdata["stt"] = engines.stt  # type: ignore[attr-defined]
    proc.userdata["tts"] = engines.tts  # type: ignore[attr-defined]
    proc.userdata["store"] = engines.store  # type: ignore[attr-defined]
    proc.userdata["turn_detector"] = engines.turn_detector  # type: ignore[attr-defined]
    proc.userdata["memory"] = engines.memory  # type: ignore[attr-defined]
    proc.userdata["tools"] = engines.tools  # type: ignore[attr-defined]
