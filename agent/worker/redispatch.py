"""Re-dispatch of a room whose agent died with its worker (`kill -9`, OOM, a lost host).

livekit-server (1.13) does nothing for such a room: it drops the worker's jobs when the
worker's WebSocket closes ("TODO update dispatch state" in its agent service), never dispatches
the room again, and keeps the dead agent's participant for ~20 s until ICE times out. So the
workers watch each other through leases: every worker renews, four times a second, a lease per
room it serves. With `store.redis_url` the leases are in Redis (agent/store/shared_state.py), which
the workers of every host reach; without it, in this module's SQLite table in the transcript
store's file, which only the workers of one host share. Each worker also scans for leases that
stopped being renewed; the one that claims such a lease first owns the room's recovery: when a
user is still in the room and no other agent is, it removes the dead agent's participant and
creates a new dispatch for the room.

A job that ends normally (the user left) also stops renewing its lease; the scan then finds
no user in the room (or no room) and only drops the lease. The SQLite table compares
wall-clock seconds, because workers on different processes write them; Redis expires its keys
on its own clock.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("voxroom.redispatch")

RENEW_INTERVAL_S = 0.25
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
            (x.room, x.job_id, x.agent_identity, x.agent_name, x.metadata, x.worker_id,
             x.renewed_at)
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


class Redispatcher:
    """Renews this worker's leases and recovers rooms whose lease expired.

    `running_jobs()` returns livekit-agents' RunningJobInfo of the worker's active jobs;
    `worker_id()` the id LiveKit gave the worker ("" before it registered).
    """

    def __init__(
        self,
        table: Leases,
        api: Any,
        running_jobs: Callable[[], list[Any]],
        worker_id: Callable[[], str],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._table = table
        self._api = api  # livekit.api.LiveKitAPI
        self._running_jobs = running_jobs
        self._worker_id = worker_id
        self._clock = clock
        self.recovered: list[tuple[str, float]] = []  # (room, seconds since the last renewal)

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as e:  # a flaky API or a locked file must not stop the loop
                log.warning("lease round failed: %s", e)
            await asyncio.sleep(RENEW_INTERVAL_S)

    async def tick(self) -> None:
        now = self._clock()
        worker = self._worker_id()
        leases = [
            Lease(j.job.room.name, j.job.id, j.accept_arguments.identity, j.job.agent_name,
                  j.job.metadata, worker, now)
            for j in self._running_jobs()
            if not j.fake_job
        ]
        await asyncio.to_thread(self._table.renew, leases)
        for lease in await asyncio.to_thread(self._table.expired, now):
            if await asyncio.to_thread(self._table.claim, lease):
                await self._recover(lease, now)

    async def _recover(self, lease: Lease, now: float) -> None:
        from livekit import api

        try:
            listed = await self._api.room.list_participants(
                api.ListParticipantsRequest(room=lease.room)
            )
        except api.TwirpError as e:  # the room is gone: the conversation is over
            log.debug("lease of %s dropped: %s", lease.room, e.message)
            return
        agent_kind = api.ParticipantInfo.Kind.AGENT
        users = [p for p in listed.participants if p.kind != agent_kind]
        others = [
            p for p in listed.participants
            if p.kind == agent_kind and p.identity != lease.agent_identity
        ]
        if not users or others:
            return
        ghost = any(p.identity == lease.agent_identity for p in listed.participants)
        if ghost:  # the dead agent's participant would linger until ICE gives up (~20 s)
            try:
                await self._api.room.remove_participant(
                    api.RoomParticipantIdentity(room=lease.room, identity=lease.agent_identity)
                )
            except api.TwirpError as e:
                log.debug("removing %s: %s", lease.agent_identity, e.message)
        await self._api.agent_dispatch.create_dispatch(
            api.CreateAgentDispatchRequest(
                agent_name=lease.agent_name, room=lease.room, metadata=lease.metadata
            )
        )
        silent_s = now - lease.renewed_at
        self.recovered.append((lease.room, silent_s))
        log.warning(
            "re-dispatched room %s: job %s of worker %s stopped renewing %.1f s ago",
            lease.room, lease.job_id, lease.worker_id, silent_s,
        )
        print(f"voxroom: re-dispatched room {lease.room} (job {lease.job_id} of worker "
              f"{lease.worker_id} gone)", flush=True)
