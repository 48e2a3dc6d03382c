"""How a room session keeps its turns: each finished turn goes to the durable turn store
(agent/store/transcripts.py) and to the room memory the moment it ends; the reply being spoken
is kept in the room memory as far as it was sent, so that when the worker dies mid-reply the
room's next agent records it as an interrupted turn, heard as far as it went. The room memory
is Redis across hosts (agent/store/shared_state.py), or the SQLite store's file on one host
(agent/store/room_memory_sqlite.py).

Writes are blocking (SQLite, PostgreSQL, Redis): one writer task runs them in a thread, in
the order of the events, so that a turn's end never lands before its reply's last chunk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agent.adapters.llm.history import ChatHistory
    from agent.store.transcripts import TurnStore

log = logging.getLogger(__name__)


class RoomMemory(Protocol):
    """Each room's recent turns and the reply being spoken in it (blocking, thread-safe)."""

    def history(self, room: str) -> list[dict[str, Any]]:
        """The room's last turns, oldest first."""
        ...

    def record_turn(self, room: str, turn: dict[str, Any]) -> None:
        """A finished turn (already in the turn store): the reply in flight is over."""
        ...

    def speaking(self, room: str, reply: dict[str, Any]) -> None:
        """The reply being spoken now in `room`, as far as it was sent."""
        ...

    def take_speaking(self, room: str) -> dict[str, Any] | None:
        """The reply a dead agent was speaking in `room`, for one caller only."""
        ...


def recovered_turn(speaking: dict[str, Any]) -> dict[str, Any]:
    """The turn of a reply whose agent died while speaking: interrupted, heard as sent."""
    return {
        "user_text": speaking["user_text"],
        "agent_text": speaking["sent_text"],
        "heard_text": speaking["sent_text"],
        "interrupted": True,
        "latency_ms": {},
        "fallbacks": ["agent_lost_mid_reply"],
    }


_STORE_ONLY = ("id", "room", "session", "created_at")  # a stored row's, not the turn's


def stored_already(turn: dict[str, Any], speaking: dict[str, Any]) -> bool:
    """Whether the stored `turn` is the one whose reply was `speaking`: the same session, the
    same question, and the reply heard as far as it was sent at least."""
    return (
        turn.get("session") == speaking.get("session")
        and turn["user_text"] == speaking["user_text"]
        and turn["heard_text"].startswith(speaking["sent_text"])
    )


class ConversationLog:
    def __init__(
        self,
        room: str,
        session: str,
        history: ChatHistory,
        *,
        store: TurnStore | None,
        memory: RoomMemory | None = None,
        caller: str = "",
    ) -> None:
        """`caller`: a phone caller's number, kept with each of the session's turns."""
        self._room, self._session, self._history = room, session, history
        self._caller = caller
        self._store, self._memory = store, memory
        self._writes: asyncio.Queue[Callable[[], None]] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._chunks: dict[int, list[str]] = {}  # reply id -> its chunks sent to the speaker
        self._audible: int | None = None  # the reply being heard
        self._user_text = ""  # what the audible reply answers

    async def start(self, limit: int) -> list[dict[str, Any]]:
        """Record the reply a dead agent left unfinished in this room, if any, and start
        writing; returns the room's last `limit` turns, oldest first."""
        turns: list[dict[str, Any]] = []
        if self._memory is not None:
            try:
                turns = await asyncio.to_thread(self._shared_history)
            except Exception as e:  # Redis down: the store's history, no recovery
                log.warning("room %s: no room memory: %s: %s", self._room, type(e).__name__, e)
        if not turns and self._store is not None:  # none in memory (or expired): the store's
            try:
                turns = await asyncio.to_thread(self._store.turns, self._room, limit)
            except Exception as e:
                log.warning("room %s: no stored history: %s: %s", self._room, type(e).__name__, e)
        self._writer = asyncio.create_task(self._write(), name="conversation-log")
        return turns[-limit:]

    def _shared_history(self) -> list[dict[str, Any]]:
        """The room memory's turns, the reply a dead agent left unfinished recorded first
        (blocking)."""
        assert self._memory is not None
        left = self._memory.take_speaking(self._room)
        if left is not None:
            stored = self._store.turns(self._room, 1) if self._store is not None else []
            if stored and stored_already(stored[-1], left):
                # The agent died between storing the turn and sharing it (`_record`): the
                # stored turn is shared, not recorded a second time as interrupted.
                log.info("room %s: sharing the turn its last agent had stored", self._room)
                row = {k: v for k, v in stored[-1].items() if k not in _STORE_ONLY}
                self._memory.record_turn(self._room, row)
            else:
                log.info("room %s: recording the reply its last agent was speaking", self._room)
                self._record(recovered_turn(left))
        return self._memory.history(self._room)

    def on_event(self, event: dict[str, Any]) -> None:
        """One of the turn engine's events, as its JSON (`{"t", "type", ...}`; called on the
        loop, only enqueues)."""
        kind = event["type"]
        if kind == "tts_chunk":
            rid = event["reply_id"]
            self._chunks.setdefault(rid, []).append(event["text"])
            if rid == self._audible:
                self._speaking(rid)
        elif kind == "audio_start":
            self._audible = event["reply_id"]
            users = (m["content"] for m in reversed(self._history.turns) if m["role"] == "user")
            self._user_text = next(users, "")
            self._speaking(self._audible)
        elif kind == "turn":
            self._audible = None
            self._chunks.clear()
            turn = {k: v for k, v in event.items() if k != "type"}  # the turn's own fields
            if self._caller:
                turn["caller"] = self._caller
            self._writes.put_nowait(lambda: self._record(turn))

    def _speaking(self, rid: int) -> None:
        if self._memory is None:
            return
        reply = {
            "user_text": self._user_text,
            "sent_text": " ".join(self._chunks.get(rid, [])),
            "session": self._session,
        }
        memory, room = self._memory, self._room
        self._writes.put_nowait(lambda: memory.speaking(room, reply))

    def _record(self, turn: dict[str, Any]) -> None:
        """A finished turn, durably first; then the room memory (blocking)."""
        if self._store is not None:
            try:
                self._store.append(self._room, self._session, turn)
            except Exception as e:  # the store being down must not end the conversation
                log.warning("room %s: turn not stored: %s: %s", self._room, type(e).__name__, e)
        if self._memory is not None:
            try:
                self._memory.record_turn(self._room, turn)
            except Exception as e:
                log.warning("room %s: turn not shared: %s: %s", self._room, type(e).__name__, e)

    async def _write(self) -> None:
        while True:
            write = await self._writes.get()
            try:
                await asyncio.to_thread(write)
            except Exception as e:  # a reply's progress not shared: the next one may be
                log.warning("room %s: %s: %s", self._room, type(e).__name__, e)
            finally:
                self._writes.task_done()

    async def aclose(self) -> None:
        """Every finished turn written, then stop."""
        await self._writes.join()
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
