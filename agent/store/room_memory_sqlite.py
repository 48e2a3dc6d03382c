"""The single-host backend of the room memory (agent/store/conversation_log.py's `RoomMemory`),
for workers that share the SQLite turn store's file and no Redis: the reply being spoken in
each room is a row of the table `speaking` in that file; the room's history is the store's
own turns. The Redis backend (agent/store/shared_state.py) does the same across hosts.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from typing import Any

from agent.store.transcripts import TranscriptStore

SCHEMA = "CREATE TABLE IF NOT EXISTS speaking (room TEXT PRIMARY KEY, reply TEXT NOT NULL)"


class SqliteRoomMemory:
    """Blocking and thread-safe: call it from a worker thread."""

    def __init__(self, store: TranscriptStore, history_turns: int) -> None:
        self._store = store
        self._history_turns = history_turns
        self._lock = threading.Lock()
        self._db = sqlite3.connect(store.path, check_same_thread=False, isolation_level=None)
        # A reply's progress lost in a power cut costs only that reply's record.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.execute(SCHEMA)

    def history(self, room: str) -> list[dict[str, Any]]:
        return self._store.turns(room, self._history_turns)

    def record_turn(self, room: str, turn: dict[str, Any]) -> None:
        """The turn is in the store already: the reply in flight is over."""
        with self._lock:
            self._db.execute("DELETE FROM speaking WHERE room = ?", (room,))

    def speaking(self, room: str, reply: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO speaking VALUES (?, ?)", (room, json.dumps(reply))
            )

    def take_speaking(self, room: str) -> dict[str, Any] | None:
        """The reply a dead agent was speaking in `room`, for one caller only (one DELETE)."""
        with self._lock:
            row = self._db.execute(
                "DELETE FROM speaking WHERE room = ? RETURNING reply", (room,)
            ).fetchone()
        return json.loads(row[0]) if row else None

    def close(self) -> None:
        with self._lock:
            self._db.close()
