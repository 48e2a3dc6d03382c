"""The room leases of agent/worker/redispatch.py in SQLite: one row per served room, renewed by
the job that serves it, in the transcript store's file, which the workers of one host share
(agent/store/shared_state.py keeps them in Redis for every host). The table compares
wall-clock seconds, because workers on different processes write them.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# Six missed renewals: the worker is gone, not just busy. Short, so that the room has a new
# agent within 3 s of a kill -9 (expiry, a scan, the dispatch and the new agent's join).
LEASE_TTL_S = 1.5

SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_leases (
    room TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    agent_identity TEXT NOT NULL,
    agent_name TEXT NOT NULL,
    metadata TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    renewed_at REAL NOT NULL
);
"""


@dataclass(frozen=True)
class Lease:
    room: str
    job_id: str
    agent_identity: str
    agent_name: str
    metadata: str
    worker_id: str
    renewed_at: float


class Leases(Protocol):
    """Where the leases are (blocking: call from a thread)."""

    def renew(self, leases: list[Lease]) -> None: ...

    def expired(self, now: float, ttl_s: float = LEASE_TTL_S) -> list[Lease]: ...

    def claim(self, lease: Lease) -> bool: ...

    def close(self) -> None: ...


class LeaseTable:
    """The leases in the SQLite file at `path` (thread-safe; blocking: call from a thread)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # A lease lost in a power cut only delays a recovery; no fsync per renewal.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(SCHEMA)

    def renew(self, leases: list[Lease]) -> None:
        rows = [
            (
                x.room,
                x.job_id,
                x.agent_identity,
                x.agent_name,
                x.metadata,
                x.worker_id,
                x.renewed_at,
            )
            for x in leases
        ]
        if not rows:
            return
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO agent_leases VALUES (?, ?, ?, ?, ?, ?, ?)", rows
            )

    def expired(self, now: float, ttl_s: float = LEASE_TTL_S) -> list[Lease]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM agent_leases WHERE renewed_at < ?", (now - ttl_s,)
            ).fetchall()
        return [Lease(*row) for row in rows]

    def claim(self, lease: Lease) -> bool:
        """Delete `lease` if it is still the one seen (not renewed, not claimed by another
        worker meanwhile); True for the one caller that deleted it."""
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM agent_leases WHERE room = ? AND job_id = ? AND renewed_at = ?",
                (lease.room, lease.job_id, lease.renewed_at),
            )
        return cur.rowcount == 1

    def close(self) -> None:
        with self._lock:
            self._db.close()
