"""The shared state of workers on several hosts, in a real redis-server (the fixture's): room
leases taken and renewed atomically and claimed by one worker once expired; each room's
capped history; the reply being spoken recovered once by the room's next agent
(agent/store/conversation_log.py), heard as far as it was sent, with Redis or, on one host, the
SQLite store's file."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent.adapters.llm.history import ChatHistory
from agent.events import AudioStart, Event, TtsChunk, Turn, event_json
from agent.store.conversation_log import ConversationLog
from agent.store.leases import Lease
from agent.store.room_memory_sqlite import SqliteRoomMemory
from agent.store.shared_state import RedisLeases, RedisRoomMemory, connect_redis
from agent.store.transcripts import TranscriptStore


def lease(job: str = "AJ_1", at: float = 10.0) -> Lease:
    return Lease("room-1", job, f"agent-{job}", "voxroom", '{"mode": "voice"}', "AW_1", at)


def wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_lease_expires_on_redis_clock_and_one_worker_claims_it(fresh_redis_url: str) -> None:
    holder = RedisLeases(connect_redis(fresh_redis_url), ttl_s=0.3)
    watchers = [RedisLeases(connect_redis(fresh_redis_url), ttl_s=0.3) for _ in range(4)]
    holder.renew([lease()])
    assert watchers[0].expired(now=0.0) == []  # held
    wait_until(lambda: watchers[0].expired(now=0.0) != [], timeout_s=5.0)
    [seen] = watchers[0].expired(now=0.0)
    assert seen == lease()
    with ThreadPoolExecutor(4) as pool:  # four workers race for the room's recovery
        claimed = list(pool.map(lambda w: w.claim(seen), watchers))
    assert claimed.count(True) == 1
    assert watchers[1].expired(now=0.0) == []  # claimed: gone for everyone


def test_a_renewed_lease_is_not_claimed(fresh_redis_url: str) -> None:
    leases = RedisLeases(connect_redis(fresh_redis_url), ttl_s=0.3)
    leases.renew([lease(at=10.0)])
    wait_until(lambda: leases.expired(now=0.0) != [], timeout_s=5.0)
    [stale] = leases.expired(now=0.0)
    leases.renew([lease(at=11.0)])  # the worker came back before anyone claimed it
    assert not leases.claim(stale)
    assert leases.expired(now=0.0) == []


def test_another_jobs_lease_is_not_taken_over(fresh_redis_url: str) -> None:
    client = connect_redis(fresh_redis_url)
    leases = RedisLeases(client, ttl_s=5.0)
    leases.renew([lease("AJ_1")])
    leases.renew([lease("AJ_2")])  # a second agent in the room: SET NX fails
    assert client.get("voxroom:lease:room-1") == "AJ_1"
    ttl_ms = client.pttl("voxroom:lease:room-1")
    assert 0 < ttl_ms <= 5000


def test_history_is_capped_per_room_and_the_turn_ends_the_reply_in_flight(
    fresh_redis_url: str,
) -> None:
    memory = RedisRoomMemory(connect_redis(fresh_redis_url), history_turns=3)
    memory.speaking("a", {"user_text": "q", "sent_text": "partial", "session": "s"})
    for i in range(5):
        memory.record_turn("a", {"user_text": f"q{i}", "heard_text": f"a{i}"})
    memory.record_turn("b", {"user_text": "other", "heard_text": "room"})
    assert [t["user_text"] for t in memory.history("a")] == ["q2", "q3", "q4"]
    assert memory.take_speaking("a") is None  # the turn's end removed it


def test_only_one_new_agent_takes_the_reply_a_dead_agent_was_speaking(
    fresh_redis_url: str,
) -> None:
    memory = RedisRoomMemory(connect_redis(fresh_redis_url), history_turns=3)
    memory.speaking("a", {"user_text": "q", "sent_text": "half of it", "session": "s"})
    with ThreadPoolExecutor(4) as pool:
        taken = list(pool.map(lambda _: memory.take_speaking("a"), range(4)))
    assert [t for t in taken if t] == [
        {"user_text": "q", "sent_text": "half of it", "session": "s"}
    ]


@pytest.fixture(params=["redis", "sqlite"])
def memory_and_store(request: pytest.FixtureRequest, tmp_path: Path):
    """A room memory (Redis across hosts, the SQLite file on one) and the turn store."""
    store = TranscriptStore(tmp_path / "t.sqlite3")
    if request.param == "redis":
        url = request.getfixturevalue("fresh_redis_url")
        memory = RedisRoomMemory(connect_redis(url), history_turns=20)
    else:
        memory = SqliteRoomMemory(store, history_turns=20)
    yield memory, store
    store.close()


async def speaking(memory, store, question: str, *events: Event) -> None:
    """The first agent of room "room" (session "s1"), asked `question`, reports `events`
    (its reply's chunks and audio start); returns once they are written."""
    history = ChatHistory("system")
    first = ConversationLog("room", "s1", history, store=store, memory=memory)
    assert await first.start(20) == []
    history.add_user(question)
    for event in events:
        first.on_event(event_json(event))
    await asyncio.wait_for(first._writes.join(), 5.0)  # what was sent is in the room memory


async def test_a_reply_cut_by_a_crash_is_recorded_as_heard_by_the_next_agent(
    memory_and_store,
) -> None:
    memory, store = memory_and_store
    await speaking(
        memory,
        store,
        "What is the plan?",
        TtsChunk(1.0, "Unheard speculative.", reply_id=1),
        TtsChunk(1.1, "First we", reply_id=2),
        AudioStart(1.2, reply_id=2),
        TtsChunk(1.3, "pack the car,", reply_id=2),
    )
    # The worker dies here: no "turn" event, no aclose().
    second = ConversationLog("room", "s2", ChatHistory("system"), store=store, memory=memory)
    [recovered] = await second.start(20)
    assert recovered["user_text"] == "What is the plan?"
    assert recovered["heard_text"] == "First we pack the car," and recovered["interrupted"]
    [stored] = store.turns("room")
    assert stored["heard_text"] == "First we pack the car," and stored["interrupted"] is True
    assert stored["session"] == "s2"
    second.on_event(
        event_json(
            Turn(
                2.0,
                user_text="And then?",
                agent_text="We drive.",
                heard_text="We drive.",
                interrupted=False,
                latency_ms={},
            )
        )
    )
    await second.aclose()
    assert [t["user_text"] for t in store.turns("room")] == ["What is the plan?", "And then?"]
    third = ConversationLog("room", "s3", ChatHistory("system"), store=store, memory=memory)
    assert [t["heard_text"] for t in await third.start(20)] == [
        "First we pack the car,",
        "We drive.",
    ]
    await third.aclose()


async def test_a_turn_stored_by_an_agent_that_died_before_sharing_it_is_kept_once(
    memory_and_store,
) -> None:
    said = [TtsChunk(1.0, "Noted,", 1), AudioStart(1.1, 1), TtsChunk(1.2, "427.", 1)]
    memory, store = memory_and_store
    await speaking(memory, store, "Remember 427.", *said)
    # The turn reaches the store, and the worker dies before the room memory hears of it.
    turn = {
        "user_text": "Remember 427.",
        "agent_text": "Noted, 427.",
        "heard_text": "Noted, 427.",
        "interrupted": False,
        "latency_ms": {},
    }
    store.append("room", "s1", turn)
    second = ConversationLog("room", "s2", ChatHistory("system"), store=store, memory=memory)
    [kept] = await second.start(20)
    assert (kept["user_text"], kept["heard_text"], kept["interrupted"]) == (
        "Remember 427.",
        "Noted, 427.",
        False,
    )
    assert len(store.turns("room")) == 1
    assert memory.take_speaking("room") is None
    await second.aclose()


async def test_without_shared_state_the_history_comes_from_the_store(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path / "t.sqlite3")
    store.append(
        "room",
        "old",
        {
            "user_text": "q",
            "agent_text": "a",
            "heard_text": "a",
            "interrupted": False,
            "latency_ms": {},
        },
    )
    log = ConversationLog("room", "s", ChatHistory("system"), store=store)
    assert [t["user_text"] for t in await log.start(20)] == ["q"]
    log.on_event(event_json(AudioStart(1.0, reply_id=1)))  # nothing shared: nothing to write
    await log.aclose()
    store.close()


def test_one_host_workers_take_a_dead_agents_reply_once(tmp_path: Path) -> None:
    stores = [TranscriptStore(tmp_path / "t.sqlite3") for _ in range(4)]
    memories = [SqliteRoomMemory(s, history_turns=5) for s in stores]
    memories[0].speaking("a", {"user_text": "q", "sent_text": "half", "session": "s"})
    with ThreadPoolExecutor(4) as pool:
        taken = list(pool.map(lambda m: m.take_speaking("a"), memories))
    assert [t for t in taken if t] == [{"user_text": "q", "sent_text": "half", "session": "s"}]
    for m, s in zip(memories, stores, strict=True):
        m.close()
        s.close()
