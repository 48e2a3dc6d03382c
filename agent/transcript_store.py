"""Durable conversation turns, and `voxroom transcripts` to read them back.

Every finished turn (what the user said, what the agent said, what was heard, whether it was
interrupted, its timings) is committed to SQLite in WAL mode with synchronous=FULL: once
`append` returns, the turn survives a `kill -9` of the worker. A new agent for the same room
(after a crash and re-dispatch) reloads the room's history from here, so the conversation
continues instead of starting over.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    room TEXT NOT NULL,
    session TEXT NOT NULL,
    created_at REAL NOT NULL,
    user_text TEXT NOT NULL,
    agent_text TEXT NOT NULL,
    heard_text TEXT NOT NULL,
    interrupted INTEGER NOT NULL,
    latency_ms TEXT NOT NULL,
    fallbacks TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_room ON turns (room, id);
"""


def default_store_path() -> Path:
    """$VOXROOM_STORE_PATH, else $XDG_DATA_HOME/voxroom/transcripts.sqlite3."""
    if explicit := os.environ.get("VOXROOM_STORE_PATH"):
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "voxroom" / "transcripts.sqlite3"


class TranscriptStore:
    """Thread-safe; call `append` from a worker thread (asyncio.to_thread), never the loop."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_store_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # fsync the WAL at every commit
        self._db.execute("PRAGMA busy_timeout=5000")  # several workers may share the file
        self._db.executescript(SCHEMA)

    def append(self, room: str, session: str, turn: dict[str, Any]) -> None:
        row = (
            room,
            session,
            time.time(),
            turn["user_text"],
            turn["agent_text"],
            turn["heard_text"],
            int(turn["interrupted"]),
            json.dumps(turn["latency_ms"]),
            json.dumps(turn.get("fallbacks", [])),
        )
        with self._lock:
            self._db.execute(
                "INSERT INTO turns (room, session, created_at, user_text, agent_text, heard_text,"
                " interrupted, latency_ms, fallbacks) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )

    def turns(self, room: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Turns in order, oldest first; the last `limit` of them when given."""
        query = "SELECT * FROM turns" + (" WHERE room = ?" if room else "") + " ORDER BY id DESC"
        params: tuple[Any, ...] = (room,) if room else ()
        if limit is not None:
            query += " LIMIT ?"
            params += (limit,)
        with self._lock:
            cur = self._db.execute(query, params)
            names = [c[0] for c in cur.description]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        for r in rows:
            r["interrupted"] = bool(r["interrupted"])
            r["latency_ms"] = json.loads(r["latency_ms"])
            r["fallbacks"] = json.loads(r["fallbacks"])
        return rows[::-1]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--room", help="only this room's turns")
    p.add_argument("--json", action="store_true", help="one JSON object per turn")
    p.add_argument(
        "--store",
        type=Path,
        default=None,
        help="the SQLite file (default: "
        "$VOXROOM_STORE_PATH or ~/.local/share/voxroom/transcripts.sqlite3)",
    )


def run(args: argparse.Namespace) -> int:
    path = args.store or default_store_path()
    if not path.exists():
        print(f"no transcripts yet ({path} does not exist)")
        return 0
    store = TranscriptStore(path)
    for t in store.turns(args.room):
        if args.json:
            print(json.dumps(t))
            continue
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t["created_at"]))
        v2v = t["latency_ms"].get("voice_to_voice")
        print(f"[{when}] {t['room']}  ({v2v:.0f} ms)" if v2v else f"[{when}] {t['room']}")
        print(f"  user:  {t['user_text']}")
        cut = "  (interrupted; heard: " + repr(t["heard_text"]) + ")" if t["interrupted"] else ""
        print(f"  agent: {t['agent_text']}{cut}")
    store.close()
    return 0
