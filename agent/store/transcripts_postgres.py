"""The PostgreSQL backend of the turn store (agent/store/transcripts.py), for workers on
several hosts: `store.url` = postgresql://user:password@host/db.

Autocommit: each `append` is its own transaction, durable when it returns (the server's
synchronous_commit). One connection per process behind a lock; when the server dropped it
(a restart, a failover, an idle timeout) the statement runs again once on a new connection,
so a restarted PostgreSQL costs the turns written while it was down, not the worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agent.store.turn_row import turn_row

SCHEMA = """
CREATE TABLE IF NOT EXISTS voxroom_turns (
    id BIGSERIAL PRIMARY KEY,
    room TEXT NOT NULL,
    session TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    user_text TEXT NOT NULL,
    agent_text TEXT NOT NULL,
    heard_text TEXT NOT NULL,
    interrupted BOOLEAN NOT NULL,
    latency_ms JSONB NOT NULL,
    fallbacks JSONB NOT NULL,
    tool_messages JSONB NOT NULL DEFAULT '[]',
    caller TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS voxroom_turns_room ON voxroom_turns (room, id);
-- A table made before turns kept their tool calls, or a phone caller's number (its turns had
-- none).
ALTER TABLE voxroom_turns ADD COLUMN IF NOT EXISTS tool_messages JSONB NOT NULL DEFAULT '[]';
ALTER TABLE voxroom_turns ADD COLUMN IF NOT EXISTS caller TEXT NOT NULL DEFAULT '';
"""
# Workers starting together would race in CREATE TABLE IF NOT EXISTS (a unique violation in
# pg_type); the schema is created under this transaction-scoped advisory lock.
SCHEMA_LOCK = 0x766F78726F6F6D  # "voxroom"
CONNECT_TIMEOUT_S = 5
COLUMNS = (
    "id",
    "room",
    "session",
    "created_at",
    "user_text",
    "agent_text",
    "heard_text",
    "interrupted",
    "latency_ms",
    "fallbacks",
    "tool_messages",
    "caller",
)


class PostgresTurnStore:
    """`TurnStore` in the table voxroom_turns of the database at `url` (blocking,
    thread-safe)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()
        self._db = self._connect()
        with self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            self._db.execute(SCHEMA)

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)

    def _run(self, statement: Callable[[Any], Any]) -> Any:
        """`statement(connection)`, once more on a new connection if the server dropped the
        old one (the first statement after a drop is the one that finds out)."""
        import psycopg

        with self._lock:
            if self._db.closed or self._db.broken:
                self._db = self._connect()
            try:
                return statement(self._db)
            except psycopg.OperationalError:
                if not self._db.broken:
                    raise
                self._db = self._connect()
                return statement(self._db)

    def append(self, room: str, session: str, turn: dict[str, Any]) -> None:
        row = (room, session, *turn_row(turn))
        self._run(
            lambda db: db.execute(
                "INSERT INTO voxroom_turns (room, session, created_at, user_text, agent_text,"
                " heard_text, interrupted, latency_ms, fallbacks, tool_messages, caller)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                row,
            )
        )

    def turns(self, room: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        query = f"SELECT {', '.join(COLUMNS)} FROM voxroom_turns"
        params: list[Any] = []
        if room:
            query += " WHERE room = %s"
            params.append(room)
        query += " ORDER BY id DESC"
        if limit is not None:
            query += " LIMIT %s"
            params.append(limit)
        rows = self._run(lambda db: db.execute(query, params).fetchall())
        return [dict(zip(COLUMNS, r, strict=True)) for r in rows[::-1]]

    def close(self) -> None:
        with self._lock:
            self._db.close()
