"""What the workers of every host share in Redis (`store.redis_url`): room leases, each
room's recent turns, and the reply being spoken in each room.

- Leases (`RedisLeases`, the shared backend of agent/worker/redispatch.py): `voxroom:lease:<room>`
  holds the serving job's id, taken with SET NX PX and renewed only by that job, so it expires
  on Redis' clock `LEASE_TTL_S` after the last renewal. The hash `voxroom:leases` says which
  rooms are served and by what (agent identity, dispatch name and metadata), so another worker
  can tell a room whose lease expired and dispatch it again; one atomic script lets exactly one
  worker claim it.
- History (`RedisRoomMemory`): `voxroom:history:<room>` is a capped list of the room's last
  turns (JSON), what a new agent for the room starts from.
- The reply in flight: `voxroom:speaking:<room>` holds the turn being answered and what the
  agent has sent of its reply so far. The turn's end replaces it with the finished turn in one
  transaction; when the worker dies mid-reply it stays, and the room's next agent takes it
  (GETDEL: only one does) and records it as an interrupted turn, heard as far as it was sent.

Blocking calls on redis-py's thread-safe client: call them from a worker thread.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

from agent.store.leases import LEASE_TTL_S, Lease

log = logging.getLogger("voxroom.shared_state")
PREFIX = "voxroom:"
LEASES = PREFIX + "leases"
HISTORY_TTL_S = 24 * 3600  # a room's turns are kept a day after its last one
SOCKET_TIMEOUT_S = 2.0  # a Redis that stopped answering fails a round, not the worker

# KEYS: the lease, the registry; ARGV: room, job id, the lease as JSON, TTL in ms.
# 1: the job holds the room's lease (taken or renewed); 0: another job holds it.
_RENEW = """
if redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[4]) or
   redis.call('GET', KEYS[1]) == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  return 1
end
return 0
"""
# KEYS: the lease, the registry; ARGV: room, the expired lease as JSON seen by the caller.
# 1 for the one caller that removed it: nobody renewed or claimed it meanwhile.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 1
end
return 0
"""


def connect_redis(url: str) -> Any:
    """A redis-py client for `url` (connections are opened on first use)."""
    import redis

    return redis.Redis.from_url(
        url,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=SOCKET_TIMEOUT_S,
        decode_responses=True,
    )


def _lease_key(room: str) -> str:
    return f"{PREFIX}lease:{room}"


def _encode(lease: Lease) -> str:
    return json.dumps(asdict(lease))


class RedisLeases:
    """The leases of agent/worker/redispatch.py in Redis (agent/store/leases.py's `Leases`, as
    its SQLite `LeaseTable`)."""

    def __init__(self, client: Any, ttl_s: float = LEASE_TTL_S) -> None:
        self._client = client
        self._ttl_ms = int(ttl_s * 1000)
        self._renew = client.register_script(_RENEW)
        self._claim = client.register_script(_CLAIM)

    def renew(self, leases: list[Lease]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for x in leases:
            self._renew(
                keys=[_lease_key(x.room), LEASES],
                args=[x.room, x.job_id, _encode(x), self._ttl_ms],
                client=pipe,
            )
        held = pipe.execute() if leases else []
        for x, ok in zip(leases, held, strict=True):
            if not ok:  # two agents in one room: the other job's lease stands
                log.warning("room %s: job %s has no lease, another job holds it", x.room, x.job_id)

    def expired(self, now: float, ttl_s: float = LEASE_TTL_S) -> list[Lease]:
        """Leases of served rooms that nobody renewed within the TTL (Redis' clock: `now` and
        `ttl_s` are the SQLite table's way and unused here)."""
        served = self._client.hgetall(LEASES)
        if not served:
            return []
        pipe = self._client.pipeline(transaction=False)
        rooms = list(served)
        for room in rooms:
            pipe.exists(_lease_key(room))
        alive = pipe.execute()
        return [Lease(**json.loads(served[r])) for r, a in zip(rooms, alive, strict=True) if not a]

    def claim(self, lease: Lease) -> bool:
        return bool(
            self._claim(keys=[_lease_key(lease.room), LEASES], args=[lease.room, _encode(lease)])
        )

    def close(self) -> None:
        self._client.close()


class RedisRoomMemory:
    """Each room's recent turns and its reply in flight, shared by every worker."""

    def __init__(self, client: Any, history_turns: int) -> None:
        self._client = client
        self._history_turns = history_turns

    def history(self, room: str) -> list[dict[str, Any]]:
        """The room's last turns, oldest first."""
        return [json.loads(t) for t in self._client.lrange(_history_key(room), 0, -1)]

    def record_turn(self, room: str, turn: dict[str, Any]) -> None:
        """Append a finished turn to the room's history; the reply in flight is over."""
        key = _history_key(room)
        pipe = self._client.pipeline(transaction=True)
        pipe.rpush(key, json.dumps(turn))
        pipe.ltrim(key, -self._history_turns, -1)
        pipe.expire(key, HISTORY_TTL_S)
        pipe.delete(_speaking_key(room))
        pipe.execute()

    def speaking(self, room: str, reply: dict[str, Any]) -> None:
        """The reply being spoken now in `room`, as far as it was sent."""
        self._client.set(_speaking_key(room), json.dumps(reply), ex=HISTORY_TTL_S)

    def take_speaking(self, room: str) -> dict[str, Any] | None:
        """The reply a dead agent was speaking in `room`, for one caller only."""
        raw = self._client.getdel(_speaking_key(room))
        return json.loads(raw) if raw else None


def _history_key(room: str) -> str:
    return f"{PREFIX}history:{room}"


def _speaking_key(room: str) -> str:
    return f"{PREFIX}speaking:{room}"
