"""Durable turns: WAL + synchronous=FULL, reload by room, survival of kill -9, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent.transcript_store import TranscriptStore


def turn(i: int, *, interrupted: bool = False) -> dict:
    return {
        "user_text": f"question {i}",
        "agent_text": f"answer {i} in full",
        "heard_text": f"answer {i}" if interrupted else f"answer {i} in full",
        "interrupted": interrupted,
        "latency_ms": {"voice_to_voice": 500.0 + i},
    }


def test_turns_come_back_in_order_per_room(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path / "t.sqlite3")
    store.append("room-a", "s1", turn(1))
    store.append("room-b", "s2", turn(2))
    store.append("room-a", "s1", turn(3, interrupted=True))
    rows = store.turns("room-a")
    assert [r["user_text"] for r in rows] == ["question 1", "question 3"]
    assert rows[1]["interrupted"] is True and rows[1]["heard_text"] == "answer 3"
    assert rows[0]["latency_ms"] == {"voice_to_voice": 501.0}
    assert [r["user_text"] for r in store.turns("room-a", limit=1)] == ["question 3"]
    assert len(store.turns()) == 3
    mode = store._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_killed_writer_loses_no_completed_turn(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(Path.cwd())!r})
from agent.transcript_store import TranscriptStore
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
