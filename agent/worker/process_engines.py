"""The engines every session of a worker process shares, loaded once per process: the speech
models, the end-of-turn model, the turn store, the shared room memory and the tool registry.
`prewarm` hands them to each job process (or job thread) before it takes a job."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.config import Settings, load_settings

if TYPE_CHECKING:  # loaded by process_engines(): importing this module loads no model library
    from livekit.agents import JobProcess

    from agent.adapters.tools.registry import ToolRegistry
    from agent.adapters.turn_detector import TurnDetector
    from agent.engines import SpeechToText, TextToSpeech
    from agent.store.conversation_log import RoomMemory
    from agent.store.transcripts import TurnStore

log = logging.getLogger("voxroom.worker")


@dataclass(frozen=True)
class ProcessEngines:
    """What every session of a process shares: the speech models, the end-of-turn model, the
    turn store, the shared room memory (None without `store.redis_url`) and the tool registry
    (its MCP servers' connections)."""

    stt: SpeechToText
    tts: TextToSpeech
    store: TurnStore
    turn_detector: TurnDetector | None = None
    memory: RoomMemory | None = None
    tools: ToolRegistry | None = None


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
            _engines = ProcessEngines(
                stt,
                tts,
                store,
                detector,
                _room_memory(settings, store),
                start_tool_registry(settings),
            )
        return _engines


def loaded_engines() -> ProcessEngines | None:
    """The process's engines if they are loaded (never loads them)."""
    return _engines


def _room_memory(settings: Settings, store: TurnStore) -> RoomMemory | None:
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


def prewarm(proc: JobProcess) -> None:
    """Runs in every job process (or job thread) before it takes a job."""
    from agent.log_redaction import install_log_redaction

    install_log_redaction()  # a job process's records are redacted before they are forwarded
    engines = process_engines()
    proc.userdata["stt"] = engines.stt
    proc.userdata["tts"] = engines.tts
    proc.userdata["store"] = engines.store
    proc.userdata["turn_detector"] = engines.turn_detector
    proc.userdata["memory"] = engines.memory
    proc.userdata["tools"] = engines.tools
