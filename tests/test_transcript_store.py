"""Durable turns in both backends (the SQLite file; PostgreSQL, a real server started by the
fixture): reload by room, survival of kill -9, the CLI against either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import StoreSettings
from agent.store.transcripts import TranscriptStore, TurnStore, open_turn_store


def turn(i: int, *, interrupted: bool = False) -> dict:
    return {
        "user_text": f"question {i}",
        "agent_text": f"answer {i} in full",
        "heard_text": f"answer {i}" if interrupted else f"answer {i} in full",
        "interrupted": interrupted,
        "latency_ms": {"voice_to_voice": 500.0 + i},
    }


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> TurnStore:
    if request.param == "sqlite":
        settings = StoreSettings(path=str(tmp_path / "t.sqlite3"))
    else:
        settings = StoreSettings(url=request.getfixturevalue("postgres_url"))
    store = open_turn_store(settings)
    request.addfinalizer(store.close)
    return store


def test_turns_come_back_in_order_per_room(store: TurnStore) -> None:
    store.append("room-a", "s1", turn(1))
    store.append("room-b", "s2", turn(2))
    store.append("room-a", "s1", turn(3, interrupted=True))
    rows = store.turns("room-a")
    assert [r["user_text"] for r in rows] == ["question 1", "question 3"]
    assert rows[1]["interrupted"] is True and rows[1]["heard_text"] == "answer 3"
    assert rows[0]["latency_ms"] == {"voice_to_voice": 501.0}
    assert [r["user_text"] for r in store.turns("room-a", limit=1)] == ["question 3"]
    assert len(store.turns()) == 3
    assert rows[0]["room"] == "room-a" and rows[0]["session"] == "s1"
    assert rows[0]["fallbacks"] == [] and rows[0]["created_at"] > 0


def test_the_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path / "t.sqlite3")
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_workers_starting_together_create_the_postgres_schema_once(postgres_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from agent.store.transcripts_postgres import PostgresTurnStore

    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(lambda _: PostgresTurnStore(postgres_url), range(4)))
    stores[0].append("r", "s", turn(1))
    assert [t["user_text"] for t in stores[3].turns("r")] == ["question 1"]
    for s in stores:
        s.close()


def test_a_bad_store_url_is_a_clear_configuration_error() -> None:
    from agent.config import ConfigError, load_settings

    with pytest.raises(ConfigError, match="VOXROOM_STORE_URL"):
        load_settings(env={"VOXROOM_STORE_URL": "mysql://db/voxroom"})
    with pytest.raises(ConfigError, match="VOXROOM_REDIS_URL"):
        load_settings(env={"VOXROOM_REDIS_URL": "http://redis:6379"})


def test_store_passwords_are_masked_in_the_logs() -> None:
    from agent.config import load_settings
    from agent.log_redaction import redact

    load_settings(
        env={
            "VOXROOM_STORE_URL": "postgresql://v:pg-secret-4242@db/v",
            "VOXROOM_REDIS_URL": "redis://:redis-secret-9191@redis:6379/0",
        }
    )
    assert "pg-secret-4242" not in redact("connecting with pg-secret-4242")
    assert "redis-secret-9191" not in redact("auth redis-secret-9191 failed")


def test_a_killed_writer_loses_no_completed_turn(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(Path.cwd())!r})
from agent.store.transcripts import TranscriptStore
from tests.test_transcript_store import turn
store = TranscriptStore(__import__("pathlib").Path({str(path)!r}))
for i in range(25):
    store.append("room", "s", turn(i))
print("appended", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == -9 and "appended" in result.stdout, result.stderr
    rows = TranscriptStore(path).turns("room")
    assert [r["user_text"] for r in rows] == [f"question {i}" for i in range(25)]


def test_cli_prints_turns_as_json(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    TranscriptStore(path).append("room-a", "s", turn(7, interrupted=True))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "transcripts",
            "--store",
            str(path),
            "--room",
            "room-a",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    [row] = [json.loads(line) for line in out.splitlines()]
    assert row["heard_text"] == "answer 7" and row["interrupted"] is True
    text = subprocess.run(
        [sys.executable, "-m", "agent.cli", "transcripts", "--store", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "question 7" in text and "interrupted" in text


def test_cli_reads_postgres_by_url(postgres_url: str, tmp_path: Path) -> None:
    store = open_turn_store(StoreSettings(url=postgres_url))
    store.append("room-p", "s", turn(3, interrupted=True))
    store.close()
    out = subprocess.run(
        [sys.executable, "-m", "agent.cli", "transcripts", "--room", "room-p", "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={**os.environ, "VOXROOM_STORE_URL": postgres_url},
    ).stdout
    [row] = [json.loads(line) for line in out.splitlines()]
    assert row["user_text"] == "question 3" and row["heard_text"] == "answer 3"
    assert row["interrupted"] is True


def test_cli_says_so_when_the_store_is_unreachable(tmp_path: Path, dead_port: int) -> None:
    port = dead_port
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "transcripts",
            "--store-url",
            f"postgresql://voxroom@127.0.0.1:{port}/voxroom",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 1 and "cannot open the store" in done.stderr
    assert "Traceback" not in done.stderr


def test_postgres_store_survives_the_server_dropping_its_connection(postgres_url: str) -> None:
    import psycopg

    from agent.store.transcripts_postgres import PostgresTurnStore

    store = PostgresTurnStore(postgres_url)
    store.append("r", "s", turn(1))
    pid = store._db.info.backend_pid
    with psycopg.connect(postgres_url, autocommit=True) as admin:  # as a restart would
        # With a timeout it returns once the backend is gone (PostgreSQL 14+).
        assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()[0]
    store.append("r", "s", turn(2))  # finds the drop, reconnects, writes
    assert store._db.info.backend_pid != pid
    assert [t["user_text"] for t in store.turns("r")] == ["question 1", "question 2"]
    store.close()


def test_a_phone_callers_number_is_kept_with_its_turns(store: TurnStore) -> None:
    store.append("call-1", "s1", {**turn(1), "caller": "+15105550123"})
    store.append("room-b", "s2", turn(2))  # anyone else's turns have no caller
    assert [t["caller"] for t in store.turns()] == ["+15105550123", ""]


# The turns table as it was before turns kept their tool calls and the caller's number.
OLD_COLUMNS = (
    "id {serial} PRIMARY KEY, room TEXT NOT NULL, session TEXT NOT NULL, "
    "created_at {real} NOT NULL, user_text TEXT NOT NULL, agent_text TEXT NOT NULL, "
    "heard_text TEXT NOT NULL, interrupted {boolean} NOT NULL, "
    "latency_ms TEXT NOT NULL, fallbacks TEXT NOT NULL"
)
OLD_ROW = ("room-a", "s1", 1.0, "question", "answer", "answer", False, "{}", "[]")


def check_the_new_columns(store: TurnStore) -> None:
    """The old row reads with the new columns' defaults; a new one keeps them."""
    try:
        store.append("room-a", "s2", {**turn(1), "caller": "+15105550123"})
        old, new = store.turns("room-a")
    finally:
        store.close()
    assert (old["tool_messages"], old["caller"]) == ([], "")
    assert new["caller"] == "+15105550123"


def test_an_older_sqlite_file_gets_the_new_columns(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE turns ("
            + OLD_COLUMNS.format(serial="INTEGER", real="REAL", boolean="INTEGER")
            + ")"
        )
        db.execute(
            "INSERT INTO turns (room, session, created_at, user_text, agent_text, "
            "heard_text, interrupted, latency_ms, fallbacks) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
            OLD_ROW,
        )
    check_the_new_columns(TranscriptStore(path))


def test_an_older_postgres_table_gets_the_new_columns(postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(
            "CREATE TABLE voxroom_turns ("
            + OLD_COLUMNS.format(serial="BIGSERIAL", real="DOUBLE PRECISION", boolean="BOOLEAN")
            .replace("latency_ms TEXT", "latency_ms JSONB")
            .replace("fallbacks TEXT", "fallbacks JSONB")
            + ")"
        )
        db.execute(
            "INSERT INTO voxroom_turns (room, session, created_at, user_text, agent_text,"
            " heard_text, interrupted, latency_ms, fallbacks) VALUES "
            "(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            OLD_ROW,
        )
    check_the_new_columns(open_turn_store(StoreSettings(url=postgres_url)))
