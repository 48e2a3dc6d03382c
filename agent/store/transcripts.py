"""Durable conversation turns, and `voxroom transcripts` to read them back.

Every finished turn (what the user said, what the agent said, what was heard, whether it was
interrupted, its timings) is committed as soon as it ends: once `append` returns, the turn
survives a `kill -9` of the worker. Two backends behind one interface (`TurnStore`): a SQLite
file in WAL mode with synchronous=FULL, the embedded default for one host, and PostgreSQL by
URL (`store.url`, agent/store/transcripts_postgres.py), which workers on every host and
`voxroom transcripts` reach. A new agent for the same room (after a crash and re-dispatch)
reloads the room's history from the shared state or from here, so the conversation continues
instead of starting over.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from agent.store.turn_row import turn_row

if TYPE_CHECKING:
    from agent.config import StoreSettings

T = TypeVar("T")

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
    fallbacks TEXT NOT NULL,
    tool_messages TEXT NOT NULL DEFAULT '[]',
    caller TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS turns_room ON turns (room, id);
"""
# A file written before turns kept their tool calls, or a phone caller's number (`caller`, ""
# for anyone else), gets the column (its turns had none).
ADDED_COLUMNS = {
    "tool_messages": "ALTER TABLE turns ADD COLUMN tool_messages TEXT NOT NULL DEFAULT '[]'",
    "caller": "ALTER TABLE turns ADD COLUMN caller TEXT NOT NULL DEFAULT ''",
}


class TurnStore(Protocol):
    """Where finished turns go. Blocking and thread-safe: call it from a worker thread
    (asyncio.to_thread), never the event loop."""

    def append(self, room: str, session: str, turn: dict[str, Any]) -> None: ...

    def turns(self, room: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Turns in order, oldest first; the last `limit` of them when given."""
        ...

    def close(self) -> None: ...


def default_store_path(configured: str = "") -> Path:
    """`configured` (store.path, $VOXROOM_STORE_PATH), else
    $XDG_DATA_HOME/voxroom/transcripts.sqlite3."""
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "voxroom" / "transcripts.sqlite3"


def open_turn_store(settings: StoreSettings) -> TurnStore:
    """PostgreSQL when `settings.url` is set, else the SQLite file (blocking). A store that
    cannot be opened is a ConfigError saying which and what to set."""
    from agent.config import ConfigError

    if settings.url:
        import psycopg

        from agent.store.transcripts_postgres import PostgresTurnStore

        try:
            return PostgresTurnStore(settings.url)
        except psycopg.Error as e:
            raise ConfigError(
                f"cannot open the turn store at store.url (VOXROOM_STORE_URL): "
                f"{type(e).__name__}: {e}"
            ) from e
    return open_store_file(
        TranscriptStore,
        default_store_path(settings.path),
        "open the turn store",
        "store.path (VOXROOM_STORE_PATH) to a writable file, or store.url (VOXROOM_STORE_URL) "
        "to a PostgreSQL database",
    )


def open_store_file(open_file: Callable[[Path], T], path: Path, what: str, instead: str) -> T:
    """`open_file(path)` on a SQLite file of the store; one that cannot be opened is a
    ConfigError saying `what` it was for, the file, and what to set `instead`."""
    from agent.config import ConfigError

    try:
        return open_file(path)
    except (OSError, sqlite3.Error) as e:
        raise ConfigError(f"cannot {what} {path}: {e}. Set {instead}") from e


class TranscriptStore:
    """The SQLite backend of `TurnStore`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # fsync the WAL at every commit
        self._db.execute("PRAGMA busy_timeout=5000")  # several workers may share the file
        self._db.executescript(SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(turns)")}
        for column, add in ADDED_COLUMNS.items():
            if column not in columns:
                self._db.execute(add)

    def append(self, room: str, session: str, turn: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO turns (room, session, created_at, user_text, agent_text, heard_text,"
                " interrupted, latency_ms, fallbacks, tool_messages, caller)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (room, session, *turn_row(turn)),
            )

    def turns(self, room: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
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
            r["tool_messages"] = json.loads(r["tool_messages"])
        return rows[::-1]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def read_turns(path: Path) -> list[dict[str, Any]]:
    """Every turn in the SQLite file at `path`, oldest first (blocking)."""
    store = TranscriptStore(path)
    try:
        return store.turns()
    finally:
        store.close()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--room", help="only this room's turns")
    p.add_argument("--json", action="store_true", help="one JSON object per turn")
    p.add_argument(
        "--store",
        type=Path,
        default=None,
        help="the SQLite file (default: store.path, $VOXROOM_STORE_PATH or "
        "~/.local/share/voxroom/transcripts.sqlite3); ignored when store.url is set",
    )
    p.add_argument(
        "--store-url",
        default=None,
        help="a PostgreSQL URL (default: store.url, $VOXROOM_STORE_URL)",
    )


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from agent.config import load_settings

    settings = load_settings(args.config).store
    if args.store_url is not None:
        settings = replace(settings, url=args.store_url)
    elif args.store is not None:
        settings = replace(settings, url="", path=str(args.store))
    if not settings.url and not (path := default_store_path(settings.path)).exists():
        print(f"no transcripts yet ({path} does not exist)")
        return 0
    try:
        store = open_turn_store(settings)
    except Exception as e:  # unreachable server, bad credentials: one line, not a trace
        print(f"voxroom transcripts: cannot open the store: {e}", file=sys.stderr)
        return 1
    for t in store.turns(args.room):
        if args.json:
            print(json.dumps(t))
            continue
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t["created_at"]))
        v2v = t["latency_ms"].get("voice_to_voice")
        caller = f"  caller {t['caller']}" if t["caller"] else ""
        print(f"[{when}] {t['room']}{caller}" + (f"  ({v2v:.0f} ms)" if v2v else ""))
        print(f"  user:  {t['user_text']}")
        cut = "  (interrupted; heard: " + repr(t["heard_text"]) + ")" if t["interrupted"] else ""
        print(f"  agent: {t['agent_text']}{cut}")
    store.close()
    return 0
