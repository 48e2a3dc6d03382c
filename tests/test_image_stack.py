"""infra/docker-compose.yml as a user runs it, with podman-compose (`make image-test`; marked
`image`): LiveKit with Redis, PostgreSQL and two agent workers from the image, the LLM the
scripted test double (tests/compose_stack.py). The test user talks over WebRTC through the
compose LiveKit.

- A conversation, then `kill -9` of the worker serving it mid-reply (its process, as a crash:
  the container exits and its restart policy brings it back): the other worker takes the room
  within 3 s, answers the next question, and the turns are stored (the cut one as
  interrupted).
- A rolling update as Kubernetes does it (maxSurge 1, maxUnavailable 0): with conversations
  going on, a worker from a new image tag starts, then one old worker is stopped (SIGTERM:
  it drains), and again for the second; no conversation is dropped, every question is
  answered within the usual time, the old workers exit 0, and the turn store has every turn.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from bench.room_client import RoomUser
from bench.speech import espeak, with_silence
from tests.compose_stack import Stack, compose_stack, logs, wait_healthy
from tests.containers import IMAGE, podman, podman_env
from tests.marks import DEV_SECRET

pytestmark = [pytest.mark.image, DEV_SECRET]

MOVE_Q = "Can you help me plan my move?"
# Slow and long: the worker is killed while it is being spoken.
MOVE_A = (
    "Here is the plan for your move, one step at a time. First we pack the kitchen, "
    "then the books go into the small boxes, and after that we load the van early in "
    "the morning."
)
RECALL_Q = "What did I ask you about?"
RECALL_A = "You asked me about your move."
QUESTIONS = {
    "What is the capital of France?": "The capital of France is Paris.",
    "Why is the sky blue?": "Air scatters blue light more than red light.",
    "How many legs does a spider have?": "A spider has eight legs.",
}
SCRIPT = {
    "replies": ["I am not sure."],
    "by_text": {MOVE_Q: MOVE_A, RECALL_Q: RECALL_A, **QUESTIONS},
    "ttft_ms": 100,
    "words_per_s": 6,
}
SCRIPTED = {*SCRIPT["replies"], *SCRIPT["by_text"].values()}
NEW_AGENT_WITHIN_S = 3.0
# From the end of a question to the agent's speaking state, under the test's own load.
ANSWER_WITHIN_S = 6.0
NEW_TAG = IMAGE.rsplit(":", 1)[0] + ":next"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    with compose_stack(tmp_path_factory.mktemp("stack"), SCRIPT) as s:
        started = time.monotonic()
        ready = await asyncio.gather(*(wait_healthy(s.container("agent", n), 300) for n in (1, 2)))
        print(f"\ncompose agents healthy {max(ready) - started:.1f} s after `up agent` returned")
        yield s


async def _ask(user: RoomUser, question: str) -> tuple[float, str]:
    """Says `question`, waits for the agent's whole answer; returns the seconds from the end
    of the question to the agent's speaking state, and the answer. Which scripted reply it is
    depends on what Whisper heard (a misheard question gets the fallback), so the callers
    check that one came and was stored, not which."""
    said_at = time.monotonic()
    heard = len(user.final_texts(user.agent_identity or ""))
    await user.speak(with_silence(espeak(question), 0.3, 0.0))
    ended = time.monotonic()
    mic = asyncio.create_task(user.silence(60))
    try:
        speaking = await user.wait_for_state("speaking", after=said_at, timeout_s=30)
        await user.wait_for_state("listening", after=speaking, timeout_s=60)
        assert user.agent_identity is not None
        finals = await user.wait_for_finals(user.agent_identity, heard + 1, timeout_s=10)
    finally:
        mic.cancel()
        await asyncio.gather(mic, return_exceptions=True)
    assert finals[-1] in SCRIPTED, (question, finals)
    return speaking - ended, finals[-1]


def worker_pid(container: str) -> int:
    """The host pid of the `voxroom agent` process in `container` (tini's child)."""
    init = podman("inspect", container, "--format", "{{.State.Pid}}").stdout.strip()
    [child] = Path(f"/proc/{init}/task/{init}/children").read_text().split()
    return int(child)


async def _serving(agent_identity: str, workers: list[str]) -> str:
    """The worker whose log has the job of this agent (waits for the line)."""
    job = agent_identity.removeprefix("agent-")
    await _until(lambda: any(job in logs(w) for w in workers), 10, f"{job} in a worker's log")
    [worker] = [w for w in workers if job in logs(w)]
    return worker


async def _until(
    predicate, timeout_s: float, what: str, tasks: list[asyncio.Task[None]] = ()
) -> None:  # type: ignore[assignment]
    """Waits for `predicate`; the first of `tasks` to fail fails the wait."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        for task in tasks:
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.mark.asyncio(loop_scope="module")
async def test_kill_9_of_the_worker_mid_reply_the_other_takes_the_room(stack: Stack) -> None:
    workers = [stack.container("agent", n) for n in (1, 2)]
    user = stack.user("stack-move", "user-1")
    await user.connect()
    try:
        await user.wait_for_state("listening", after=0, timeout_s=60)
        first_agent = user.agent_identity
        assert first_agent is not None
        victim = await _serving(first_agent, workers)
        [survivor] = [w for w in workers if w != victim]
        said = time.monotonic()
        await user.speak(with_silence(espeak(MOVE_Q), 0.3, 0.0))
        mic = asyncio.create_task(user.silence(120))
        speaking = await user.wait_for_state("speaking", after=said, timeout_s=30)
        # Mid-reply: its first audio has reached the user (the rest takes seconds more).
        await _until(
            lambda: user.first_audio_after(speaking) is not None, 10, "the reply's first audio"
        )
        os.kill(worker_pid(victim), signal.SIGKILL)  # a crash: the restart policy applies
        killed = time.monotonic()
        await _until(lambda: user.agent_identity not in (None, first_agent), 30, "a new agent")
        new_agent_s = time.monotonic() - killed
        print(f"\nkill -9 {victim}: new agent {user.agent_identity} after {new_agent_s:.2f} s")
        assert await _serving(user.agent_identity or "", [survivor]) == survivor
        assert "re-dispatched room stack-move" in logs(survivor)
        assert new_agent_s <= NEW_AGENT_WITHIN_S
        await user.wait_for_state("listening", after=killed, timeout_s=30)
        mic.cancel()
        await asyncio.gather(mic, return_exceptions=True)
        latency, reply = await _ask(user, RECALL_Q)
        print(f"the new agent answered {reply!r} {latency:.2f} s after the question")
    finally:
        await user.close()
    turns = await asyncio.to_thread(stack.transcripts, "stack-move", survivor)
    assert [t["interrupted"] for t in turns] == [True, False], turns
    cut, answered = turns
    assert MOVE_A.startswith(cut["heard_text"]) and cut["heard_text"] != MOVE_A
    assert answered["agent_text"] == reply


@dataclass
class Conversation:
    room: str
    questions: list[str]
    latencies: list[float] = field(default_factory=list)
    heard: list[str] = field(default_factory=list)  # every answer the user got, in order
    agent: str | None = None


async def _converse(stack: Stack, c: Conversation, gap_s: float) -> None:
    """A whole conversation: join, ask each question in turn, leave."""
    user = stack.user(c.room, "user-" + c.room)
    await user.connect()
    try:
        await user.wait_for_state("listening", after=0, timeout_s=60)
        c.agent = user.agent_identity
        for q in c.questions:
            latency, _ = await _ask(user, q)
            c.latencies.append(latency)
            assert user.agent_identity == c.agent, "the conversation changed agents"
            await asyncio.sleep(gap_s)
        c.heard = user.final_texts(c.agent or "")
    finally:
        await user.close()


def _new_image() -> None:
    """The next version: the image with one more label (a new image id and tag)."""
    subprocess.run(
        [
            "podman",
            "build",
            "--format",
            "docker",
            "-t",
            NEW_TAG,
            "--label",
            f"voxroom.rollout={time.time_ns()}",
            "-f",
            "-",
            ".",
        ],
        input=f"FROM {IMAGE}\n",
        text=True,
        env=podman_env(),
        check=True,
        capture_output=True,
        timeout=300,
        cwd=Path(__file__).parent,
    )


def _start_like(stack: Stack, old: str, name: str) -> None:
    """A worker of the new tag with the settings compose gave `old`, on the same network and
    limits."""
    env = stack.agent_environment(old)
    args = [
        "run",
        "-d",
        "--name",
        name,
        "--network",
        f"{stack.project}_default",
        "--cpus",
        "2",
        "--memory",
        "4g",
        "--restart",
        "unless-stopped",
    ]
    for k, v in sorted(env.items()):
        args += ["--env", f"{k}={v}"]
    podman(*args, NEW_TAG)


@pytest.mark.asyncio(loop_scope="module")
async def test_rolling_update_drops_no_conversation_and_stores_every_turn(
    stack: Stack,
) -> None:
    old = [stack.container("agent", n) for n in (1, 2)]
    for w in old:  # one killed by the test before is back (restart: unless-stopped)
        await wait_healthy(w, 300)
    await asyncio.to_thread(_new_image)
    qs = list(QUESTIONS)
    conversations: list[Conversation] = []
    tasks: list[asyncio.Task[None]] = []

    def begin(room: str, n: int) -> None:
        c = Conversation(room, [qs[i % len(qs)] for i in range(n)])
        conversations.append(c)
        tasks.append(asyncio.create_task(_converse(stack, c, gap_s=1.0)))

    begin("roll-a", 4)
    begin("roll-b", 4)
    await _until(
        lambda: all(c.latencies for c in conversations),
        120,
        "both conversations answered once",
        tasks,
    )
    exits = {}
    for n, worker in enumerate(old, start=1):
        new = f"{stack.project}_agent_next{n}"
        await asyncio.to_thread(_start_like, stack, worker, new)
        await wait_healthy(new, 300)  # the readiness probe, before an old worker goes
        # `podman stop`: SIGTERM, then up to the grace period for the drain (a stopped
        # container is not restarted).
        stopping = asyncio.create_task(
            asyncio.to_thread(podman, "stop", "--time", "660", worker, timeout_s=700)
        )
        await _until(lambda w=worker: "draining worker" in logs(w), 10, f"{worker} draining", tasks)
        begin(f"roll-during-{n}", 2)  # goes to a worker that is not draining
        await stopping
        exits[worker] = int(podman("inspect", worker, "--format", "{{.State.ExitCode}}").stdout)
        print(f"\n{worker} drained and exited {exits[worker]}; {new} serving")
    await asyncio.gather(*tasks)
    assert exits == dict.fromkeys(old, 0)
    for c in conversations:
        print(f"{c.room}: answered after {', '.join(f'{x:.2f}' for x in c.latencies)} s")
        assert len(c.latencies) == len(c.questions)
        assert max(c.latencies) <= ANSWER_WITHIN_S, c
    reader = f"{stack.project}_agent_next1"
    for c in conversations:
        turns = await asyncio.to_thread(stack.transcripts, c.room, reader)
        assert [t["agent_text"] for t in turns] == c.heard, turns
        assert len(turns) >= len(c.questions)
        assert not any(t["interrupted"] for t in turns)
    ran = podman("ps", "--format", "{{.Names}} {{.Image}}").stdout
    assert f"{stack.project}_agent_next1 {NEW_TAG}" in ran
    assert f"{stack.project}_agent_next2 {NEW_TAG}" in ran
