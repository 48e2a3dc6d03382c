"""Reading the interviewer's question into the LLM server's prompt cache while it is asked.

With the documents a warm prompt prefix (agent.copilot_engine), what is left to read when a
question ends is the question itself and the chat template's tail: ~10-18 tokens at ~40-80 ms
each with the bundled model on one core, most of the time to the first answer words. So while
the interviewer speaks, each streaming partial transcript is read ahead: llama.cpp gets the
answer prompt cut right after the partial question, and at the end only the words after the
last partial and the template's tail (5 tokens) are left.

`LlamaPrefill` talks to llama.cpp's own endpoints (the bundled server, agent.llm_local): the
answer prompt rendered by `/apply-template`, cut after the question, read by `/completion`
with `n_predict` 0. Measured with `timings.cache_n`: the answer's chat request then reuses
every token of the cut prompt (a word that grew since, " about" -> " about a", costs its own
token again). A `/completion` request returns once its prompt is read (its one token comes
from the prompt's logits), so its slot is free when the reply arrives; a stream closed early
would keep the slot busy until its next token, and the answer would go to the other, cold slot.

`QuestionPrefill` keeps at most one such request in flight: a partial that comes meanwhile
waits, and only the newest one waiting is sent next.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agent.engines import ChatMessage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrefillResult:
    cached: int
    """Prompt tokens the server found in its cache."""
    read: int
    """Prompt tokens it read."""
    ms: float
    """How long reading them took, at the server."""


class Prefiller(Protocol):
    async def prefill(self, messages: list[ChatMessage], question: str) -> PrefillResult:
        """Read the prompt of `messages` up to the end of `question` (the end of the last
        message's text) into the server's prompt cache."""
        ...


class LlamaPrefill:
    """`Prefiller` for a llama.cpp server (the bundled one: agent.llm_local)."""

    def __init__(self, base_url: str, *, timeout_s: float = 10.0) -> None:
        """`base_url`: the server's OpenAI base URL (http://127.0.0.1:PORT/v1) or its root."""
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.timeout_s = timeout_s
        self._session: Any = None  # an aiohttp.ClientSession, made in the loop that uses it

    async def prefill(self, messages: list[ChatMessage], question: str) -> PrefillResult:
        rendered = (await self._post("/apply-template", {"messages": messages}))["prompt"]
        at = rendered.rfind(question)
        if not question or at < 0:
            raise ValueError("the question is not in the rendered prompt")
        prompt = rendered[: at + len(question)]
        reply = await self._post(
            "/completion", {"prompt": prompt, "n_predict": 0, "cache_prompt": True})
        timings = reply.get("timings", {})
        return PrefillResult(int(timings.get("cache_n", 0)), int(timings.get("prompt_n", 0)),
                             float(timings.get("prompt_ms", 0.0)))

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import aiohttp

        if self._session is None:  # one keep-alive connection pool for the session
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
                total=self.timeout_s, sock_connect=2.0))
        async with self._session.post(self.root + path, json=body) as response:
            response.raise_for_status()
            return await response.json()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def llama_prefill_for(llm: Any) -> LlamaPrefill | None:
    """A prefill for `llm` when it is served by the bundled llama.cpp server on this machine
    (an OpenAI-compatible client whose base URL is on 127.0.0.1), else None: other servers
    lack llama.cpp's endpoints, and a remote one reads prompts fast enough."""
    base_url = str(getattr(llm, "base_url", None) or "")
    if not base_url.startswith("http://127.0.0.1:"):
        return None
    return LlamaPrefill(base_url)


class QuestionPrefill:
    """Reads a growing question into the cache through a `Prefiller`, one request at a time.

    `messages(question)` builds the answer prompt for a question (None: not now); `ready()`
    says whether a request may go out now (the engine's slot rules). After `max_failures`
    failures in a row it stops for good: answers work without it.
    """

    def __init__(
        self,
        client: Prefiller,
        messages: Callable[[str], Awaitable[list[ChatMessage] | None]],
        ready: Callable[[], bool],
        *,
        on_done: Callable[[str, PrefillResult], None] | None = None,
        max_failures: int = 3,
    ) -> None:
        self._client = client
        self._messages = messages
        self._ready = ready
        self._on_done = on_done or (lambda _q, _r: None)
        self._max_failures = max_failures
        self._failures = 0
        self._task: asyncio.Task[None] | None = None
        self._waiting: str | None = None
        self._sent = ""  # the question last read into the cache

    @property
    def in_flight(self) -> bool:
        return self._task is not None

    @property
    def working(self) -> bool:
        """False once it has stopped for good (`max_failures`)."""
        return self._failures < self._max_failures

    def restart(self) -> None:
        """A new utterance: nothing of the last one is sent any more."""
        self._waiting = None
        self._sent = ""

    def offer(self, question: str) -> None:
        """The newest partial question; its words but the last are sent when nothing is in
        flight and `ready()`. A partial ends where the audio was cut, often inside a word:
        in a bench run 7 of 12 last words were wrong ("your set" for "yourself", "entered
        do" for "during"); reading them only delays the next request. End punctuation goes
        too."""
        question = question.strip().rpartition(" ")[0].rstrip(".?!,;:\u2026 ")
        if question and not self._sent.startswith(question):
            self._waiting = question
            self.send_waiting()

    def send_waiting(self) -> None:
        """Send the newest waiting question, if nothing is in flight and `ready()` (the engine
        calls it when the interviewer speaks again after a pause)."""
        if self._task is not None or self._waiting is None or not self.working:
            return
        if not self._ready():
            return
        question, self._waiting = self._waiting, None
        self._task = asyncio.get_running_loop().create_task(
            self._run(question), name="copilot-prefill")

    async def _run(self, question: str) -> None:
        try:
            messages = await self._messages(question)
            if messages is not None:
                result = await self._client.prefill(messages, question)
                self._sent = question
                self._failures = 0
                self._on_done(question, result)
        except Exception as e:  # answers still work, reading the whole question at the end
            self._failures += 1
            log.warning("prefill failed (%d in a row): %s: %s", self._failures,
                        type(e).__name__, e)
        finally:
            self._task = None
        self.send_waiting()

    async def settled(self) -> None:
        """Wait until no request is in flight (without cancelling it)."""
        while self._task is not None:
            await asyncio.wait({self._task})

    async def aclose(self) -> None:
        self._waiting = None
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
