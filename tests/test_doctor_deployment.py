"""The checks of `voxroom doctor` that a deployment needs beyond the engines: the turn store
and the shared state (`--only store`) against real PostgreSQL and Redis servers (the
fixtures'), dead URLs and the SQLite default (a read-only home: tests/test_pod_start.py);
the copilot's embedder (`--only embedder`), which the image must install."""

from __future__ import annotations

from pathlib import Path

from agent.apps.doctor import FAIL, OK, SKIP, Doctor
from agent.config import Settings, StoreSettings


async def test_postgres_and_redis_that_answer_pass(postgres_url: str, fresh_redis_url: str) -> None:
    settings = Settings(store=StoreSettings(url=postgres_url, redis_url=fresh_redis_url))
    rows = await Doctor(settings, only={"store"}).run()
    assert [(r.name, r.status) for r in rows] == [
        ("turn store (postgresql)", OK),
        ("shared state (redis)", OK),
    ], rows
    assert "Redis " in rows[1].detail


async def test_dead_servers_fail_with_their_reason(dead_port: int) -> None:
    port = dead_port
    settings = Settings(
        store=StoreSettings(
            url=f"postgresql://v@127.0.0.1:{port}/v", redis_url=f"redis://127.0.0.1:{port}/0"
        )
    )
    store, redis = await Doctor(settings, only={"store"}).run()
    assert store.status == FAIL and "VOXROOM_STORE_URL" in store.detail
    assert redis.status == FAIL and "onnect" in redis.detail  # "Connection refused"


async def test_the_sqlite_default_is_checked_without_creating_it(tmp_path: Path) -> None:
    path = tmp_path / "new" / "transcripts.sqlite3"
    store, redis = await Doctor(Settings(store=StoreSettings(path=str(path))), only={"store"}).run()
    assert store.status == OK and "will be created" in store.detail and not path.parent.exists()
    assert redis.status == SKIP


async def test_the_embedder_puts_a_paraphrase_nearer_than_an_unrelated_line() -> None:
    [row] = await Doctor(Settings(), only={"embedder"}).run()
    assert row.status == OK, row.detail
    assert "to a paraphrase" in row.detail
