"""The worker's load accounting, shared engines and room leases (agent/worker/load.py,
agent/worker/process_engines.py, agent/worker/redispatch.py), without a LiveKit server."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.store.leases import Lease, LeaseTable
from agent.worker import process_engines
from agent.worker.load import LOAD_THRESHOLD, CpuMeter, SessionLoad, server_class
from agent.worker.redispatch import Redispatcher


def _server(capacity: int, idle_processes: int = 1):
    from livekit.agents import JobExecutorType

    server = server_class()(
        session_load=SessionLoad(capacity, max_cpu=0),
        ws_url="ws://127.0.0.1:1",
        api_key="k",
        api_secret="s",
        job_executor_type=JobExecutorType.THREAD,
        num_idle_processes=idle_processes,
        load_threshold=LOAD_THRESHOLD,
    )
    # What run() sets up: no job running yet, none reserved.
    server._devmode = False
    server._reserved_slots = 0
    server._worker_load = 0.0
    server._proc_pool = SimpleNamespace(processes=[])
    return server


def test_session_load_is_slots_or_cpu_whichever_is_higher() -> None:
    load = SessionLoad(4, max_cpu=0.8)
    assert load.load(1, 0.0) == 0.25
    assert load.load(1, 0.4) == 0.5
    assert load.load(4, 0.0) == 1.0
    assert SessionLoad(4, max_cpu=0).load(0, 1.0) == 0.0
    with pytest.raises(ValueError):
        SessionLoad(0)


def test_accepted_jobs_fill_the_free_slots_and_no_more() -> None:
    """Jobs accepted but not yet running (reserved) count a session each: with 3 of 4 slots
    taken one more request passes and the next is refused; with none taken, requests that
    arrive together pass until the slots are full."""
    server = _server(capacity=4)
    load = server.session_load
    server._worker_load = load.load(3, 0.0)
    assert server._is_available()
    server._reserved_slots = 1
    assert not server._is_available()

    server._worker_load = load.load(0, 0.0)
    for reserved in range(4):
        server._reserved_slots = reserved
        assert server._is_available(), reserved
    server._reserved_slots = 4
    assert not server._is_available()


def test_stock_estimate_would_refuse_the_second_of_two_simultaneous_rooms() -> None:
    """What VoxroomServer fixes: livekit-agents prices a reserved job at threshold /
    num_idle_processes while no job runs, so one reservation fills a 4-slot worker."""
    from livekit.agents import AgentServer

    server = _server(capacity=4)
    server._worker_load = 0.0
    server._reserved_slots = 1
    assert AgentServer._get_effective_load(server) >= LOAD_THRESHOLD
    assert server._get_effective_load() == 0.25


def test_job_threads_share_one_load_of_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    import agent.adapters.providers
    import agent.store.transcripts

    calls = []

    def load(rate, *settings):
        calls.append(rate)
        return object(), object()

    monkeypatch.setattr(agent.adapters.providers, "load_speech_engines", load)
    monkeypatch.setattr(agent.store.transcripts, "open_turn_store", lambda _settings: "store")
    monkeypatch.setattr(process_engines, "_engines", None)
    procs = [SimpleNamespace(userdata={}) for _ in range(8)]
    threads = [threading.Thread(target=process_engines.prewarm, args=(p,)) for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len({id(p.userdata["stt"]) for p in procs}) == 1
    assert len({id(p.userdata["tts"]) for p in procs}) == 1


def test_cpu_meter_reports_a_share_of_the_usable_cores() -> None:
    import time

    meter = CpuMeter(window_s=5.0)
    assert meter.share() == 0.0  # one sample: no window yet
    end = time.monotonic() + 1.1
    while time.monotonic() < end:  # keep one core busy
        pass
    share = meter.share()
    assert 0.0 < share <= 1.0
    assert meter.cores >= 1


# ---- leases and re-dispatch -------------------------------------------------------------------


class FakeLiveKitAPI:
    """A TEST DOUBLE of livekit.api.LiveKitAPI's room and agent_dispatch services."""

    def __init__(self, participants: dict[str, list[tuple[str, int]]]) -> None:
        self.participants = participants  # room -> [(identity, kind)]
        self.removed: list[tuple[str, str]] = []
        self.dispatched: list[tuple[str, str, str]] = []
        self.room = SimpleNamespace(list_participants=self._list, remove_participant=self._remove)
        self.agent_dispatch = SimpleNamespace(create_dispatch=self._dispatch)

    async def _list(self, req):
        from livekit import api

        if req.room not in self.participants:
            raise api.TwirpError("not_found", "room not found", status=404)
        return SimpleNamespace(
            participants=[
                SimpleNamespace(identity=i, kind=k) for i, k in self.participants[req.room]
            ]
        )

    async def _remove(self, req):
        self.removed.append((req.room, req.identity))

    async def _dispatch(self, req):
        self.dispatched.append((req.room, req.agent_name, req.metadata))


def _job(room: str, job_id: str):
    return SimpleNamespace(
        job=SimpleNamespace(
            room=SimpleNamespace(name=room),
            id=job_id,
            agent_name="voxroom",
            metadata='{"mode": "voice"}',
        ),
        accept_arguments=SimpleNamespace(identity=f"agent-{job_id}"),
        fake_job=False,
    )


AGENT, USER = 4, 0  # ParticipantInfo.Kind


async def test_a_room_whose_worker_stopped_renewing_is_dispatched_again(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"
    now = [1000.0]
    dead_jobs = [_job("talking", "AJ_1"), _job("finished", "AJ_2"), _job("taken", "AJ_3")]
    dead = Redispatcher(
        LeaseTable(store), None, lambda: dead_jobs, lambda: "AW_dead", clock=lambda: now[0]
    )
    await dead.tick()  # renews its three leases, then dies
    api = FakeLiveKitAPI(
        {
            "talking": [("user-1", USER), ("agent-AJ_1", AGENT)],  # the dead agent lingers
            "taken": [("user-2", USER), ("agent-AJ_9", AGENT)],  # another agent took over
        }
    )  # "finished": the room is gone
    alive = Redispatcher(
        LeaseTable(store), api, lambda: [], lambda: "AW_alive", clock=lambda: now[0]
    )
    now[0] += 1.0
    await alive.tick()
    assert api.dispatched == []  # not expired yet
    now[0] += 1.5
    await alive.tick()
    assert api.removed == [("talking", "agent-AJ_1")]
    assert api.dispatched == [("talking", "voxroom", '{"mode": "voice"}')]
    assert [room for room, _ in alive.recovered] == ["talking"]
    await alive.tick()
    assert len(api.dispatched) == 1  # claimed once, then gone


def test_only_one_worker_claims_an_expired_lease(tmp_path: Path) -> None:
    a, b = LeaseTable(tmp_path / "s.sqlite3"), LeaseTable(tmp_path / "s.sqlite3")
    a.renew([Lease("r", "AJ_1", "agent-AJ_1", "voxroom", "", "AW_1", 10.0)])
    [seen_by_a] = a.expired(now=20.0)
    [seen_by_b] = b.expired(now=20.0)
    assert b.claim(seen_by_b)
    assert not a.claim(seen_by_a)


def test_a_renewed_lease_is_not_claimed(tmp_path: Path) -> None:
    table = LeaseTable(tmp_path / "s.sqlite3")
    table.renew([Lease("r", "AJ_1", "agent-AJ_1", "voxroom", "", "AW_1", 10.0)])
    [stale] = table.expired(now=20.0)
    table.renew([Lease("r", "AJ_1", "agent-AJ_1", "voxroom", "", "AW_1", 19.5)])
    assert not table.claim(stale)
    assert table.expired(now=20.0) == []
