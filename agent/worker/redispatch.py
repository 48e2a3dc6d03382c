"""Re-dispatch of a room whose agent died with its worker (`kill -9`, OOM, a lost host).

livekit-server (1.13) does nothing for such a room: it drops the worker's jobs when the
worker's WebSocket closes ("TODO update dispatch state" in its agent service), never dispatches
the room again, and keeps the dead agent's participant for ~20 s until ICE times out. So the
workers watch each other through leases: every worker renews, four times a second, a lease per
room it serves. With `store.redis_url` the leases are in Redis (agent/store/shared_state.py), which
the workers of every host reach; without it, in a SQLite table in the transcript store's file
(agent/store/leases.py), which only the workers of one host share. Each worker also scans for leases
that stopped being renewed; the one that claims such a lease first owns the room's recovery: when a
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
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent.config import Settings
from agent.store.leases import Lease, Leases

if TYPE_CHECKING:  # livekit-agents loads with the worker's server, not with this module
    from livekit.agents import AgentServer

log = logging.getLogger("voxroom.redispatch")

RENEW_INTERVAL_S = 0.25


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
            Lease(
                j.job.room.name,
                j.job.id,
                j.accept_arguments.identity,
                j.job.agent_name,
                j.job.metadata,
                worker,
                now,
            )
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
            p
            for p in listed.participants
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
            lease.room,
            lease.job_id,
            lease.worker_id,
            silent_s,
        )
        print(
            f"voxroom: re-dispatched room {lease.room} (job {lease.job_id} of worker "
            f"{lease.worker_id} gone)",
            flush=True,
        )


class RedispatchTask:
    """The lease loop of a worker and what it holds open. Opened before the worker registers
    (a table it cannot open stops the worker with its reason); the loop starts once it
    registered, when LiveKit lists its jobs."""

    def __init__(self, settings: Settings) -> None:
        from livekit import api

        self._table = open_leases(settings)
        lk = settings.livekit
        self._api = api.LiveKitAPI(lk.url, lk.api_key, lk.api_secret)
        self._task: asyncio.Task[None] | None = None

    def start(self, server: AgentServer, worker_id: Callable[[], str]) -> None:
        """Start the loop; again (a re-registration) is a no-op."""
        if self._task is None:
            redispatcher = Redispatcher(
                self._table, self._api, lambda: server.active_jobs, worker_id
            )
            self._task = asyncio.create_task(redispatcher.run(), name="leases")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._api.aclose()
        self._table.close()


def open_leases(settings: Settings) -> Leases:
    """Redis' leases with store.redis_url, else the SQLite table in the store's file."""
    from agent.store.leases import LeaseTable

    if settings.store.redis_url:
        from agent.store.shared_state import RedisLeases, connect_redis

        return RedisLeases(connect_redis(settings.store.redis_url))
    from agent.store.transcripts import default_store_path, open_store_file

    return open_store_file(
        LeaseTable,
        default_store_path(settings.store.path),
        "keep the room leases in",
        "store.redis_url (VOXROOM_REDIS_URL), or store.path (VOXROOM_STORE_PATH) to a writable "
        "file",
    )
