"""The copilot on the bundled llama.cpp server: the interviewer's question read into the prompt
cache while it is asked, and answers written through llama.cpp's `/completion` with a prompt
whose end after the question is as short as it can be.

With the documents a warm prompt prefix (agent.copilot.engine), what is left to read when a
question ends is the end of the question and what follows it before the answer: at ~60-100 ms
a token with the bundled model on one shared core, most of the time to the first answer words.
So:

- While the interviewer speaks, each streaming partial transcript is read ahead: llama.cpp
  gets the answer prompt cut right after the partial question, through `/completion` with
  `n_predict` 0, and at the end only the words after the last partial are left. A
  `/completion` request returns once its prompt is read (its one token comes from the prompt's
  logits), so its slot is free when the reply arrives; a stream closed early would keep the
  slot busy until its next token, and the answer would go to the other, cold slot.
- The answer prompt is laid out so that 2 tokens follow the question instead of the chat
  template's 5 (`<|im_end|>\n<|im_start|>assistant\n`, which must follow the user's turn): the
  documents and a line saying who is who are the user's turn, and the question opens the
  assistant's, which the model continues after `\nMe:` (`CopilotLlamaClient.prompt`): fewer
  tokens are read after the question's last word, and the answers still use the resume in the
  first person as the chat layout's do (docs/benchmarks.md, "The copilot's answer prompt").
  Other servers get the chat messages (agent.adapters.llm.openai_chat) unchanged.

`QuestionPrefill` keeps at most one read-ahead request in flight: a partial that comes
meanwhile waits, and only the newest one waiting is sent next.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.adapters.llm.openai_chat import DEFAULT_REPLY, LLMError, ReplySettings
from agent.engines import ChatMessage, ToolCall, ToolSpec

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


QUESTION_LABEL = "Interviewer: "
"""What comes before the question in an answer prompt (agent.copilot.prompts.copilot_messages)."""
ROLES_LINE = (
    "I am the candidate. Next: the interviewer's question, then what I could say to "
    "it, in the first person."
)
"""Ends the user's turn of a `CopilotLlamaClient.prompt()`: the assistant's turn after it holds the
question and the answer."""
ANSWER_CUE = "\nMe:"
"""What follows the question in a `CopilotLlamaClient.prompt()`: 2 tokens after a "?"."""
ANSWER_OPENING = "I"
"""The answer's first word, written into the prompt after `ANSWER_CUE` (one token more to read
at the end of the question): the model then goes on in the first person, as the candidate. Left
to itself, the 0.5B model began "Sure, I can. Please provide me with the resume.", "We are a
leading payments platform ..." or "Tidewater Games built ...". The opening is put before the
first text of the answer it streams."""


class CopilotLlamaClient:
    """The copilot's requests to a llama.cpp server (the bundled one:
    agent.adapters.llm.llama_server): a `Prefiller`, and an `agent.engines.LanguageModel`
    whose `stream()` answers through `/completion` in the layout of `prompt()`.
    Its `reply` settings are those of the chat client it stands in for (`llama_client_for`)."""

    def __init__(
        self,
        base_url: str,
        *,
        reply: ReplySettings = DEFAULT_REPLY,
        timeout_s: float = 10.0,
    ) -> None:
        """`base_url`: the server's OpenAI base URL (http://127.0.0.1:PORT/v1) or its root.
        `timeout_s` bounds the requests other than the answer's (which `reply` bounds)."""
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.reply = reply
        # The model would go on with the next exchange it imagines, or a second answer.
        self.stop = [*reply.stop, "\n" + QUESTION_LABEL.strip(), ANSWER_CUE]
        self.timeout_s = timeout_s
        self.on_answer_read: Callable[[PrefillResult], None] | None = None
        """Told what each answer's prompt found cached and read (the bench records it)."""
        self._session: Any = None  # an aiohttp.ClientSession, made in the loop that uses it
        # The last rendered head: the system prompt and the documents are the same for every
        # question, and a round trip to the server costs most when its cores are busy.
        self._rendered: tuple[str, str] = ("", "")

    async def prompt(self, messages: list[ChatMessage]) -> tuple[str, str]:
        """The answer prompt for copilot `messages`, as (up to the end of the question, the
        rest): the system prompt and the documents (the user's turn) rendered by the server's
        chat template, ended by `ROLES_LINE`; then the assistant's turn, which holds the
        dialogue (the last paragraph: the exchange before, if any, then the question) and
        continues after `ANSWER_CUE`. Messages whose last paragraph does not open with the
        question label are rendered as they are."""
        *head, last = messages
        content = last["content"]
        dialogue = content.rpartition("\n\n")[2]
        if not dialogue.startswith(QUESTION_LABEL):
            return await self._render(messages), ""
        context = content[: len(content) - len(dialogue)]
        user: ChatMessage = {"role": last["role"], "content": context + ROLES_LINE}
        rendered = await self._render([*head, user])
        return rendered + dialogue, f"{ANSWER_CUE} {ANSWER_OPENING}"

    async def prefill(self, messages: list[ChatMessage], question: str) -> PrefillResult:
        until_question, _ = await self.prompt(messages)
        if not until_question.endswith(question):
            raise ValueError("the question does not end the prompt's question part")
        reply = await self._post(
            "/completion", {"prompt": until_question, "n_predict": 0, "cache_prompt": True}
        )
        return _read(reply.get("timings", {}))

    async def stream(
        self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncGenerator[str | ToolCall, None]:
        """Text deltas of the answer (never a tool call: `tools` are not offered through
        /completion); `aclose()` on the iterator (or cancelling the task that iterates it)
        closes the response, which makes the server stop generating."""
        import aiohttp

        until_question, rest = await self.prompt(messages)
        body = {
            "prompt": until_question + rest,
            "stream": True,
            "cache_prompt": True,
            "n_predict": self.reply.max_tokens,
            "temperature": self.reply.temperature,
            "stop": self.stop,
        }
        deadline = time.monotonic() + self.reply.max_duration_s
        timeout = aiohttp.ClientTimeout(
            total=self.reply.max_duration_s, sock_connect=2.0, sock_read=self.reply.stall_timeout_s
        )
        async with self._client().post(
            self.root + "/completion", json=body, timeout=timeout
        ) as response:
            try:
                if response.status >= 400:
                    raise LLMError(
                        f"llama.cpp /completion: HTTP {response.status}: "
                        f"{(await response.text())[:200]}"
                    )
                started = False
                async for line in response.content:
                    if not line.startswith(b"data: "):  # blank lines, SSE pings
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        raise LLMError(f"llama.cpp /completion: {chunk['error']}")
                    text = chunk.get("content", "")
                    if not started:  # the answer continues the prompt's "Me: I"
                        text = _after_opening(text)
                    if text:
                        started = True
                        yield text
                    if chunk.get("stop"):
                        if self.on_answer_read is not None and "timings" in chunk:
                            self.on_answer_read(_read(chunk["timings"]))
                        return
                    if time.monotonic() > deadline:
                        raise LLMError(
                            f"llama.cpp /completion: reply took over {self.reply.max_duration_s} s"
                        )
            finally:
                response.close()  # a reply not read to its end stops the server's generation

    async def _render(self, messages: list[ChatMessage]) -> str:
        key = json.dumps(messages)
        if self._rendered[0] != key:
            rendered = await self._post("/apply-template", {"messages": messages})
            self._rendered = (key, str(rendered["prompt"]))
        return self._rendered[1]

    def _client(self) -> Any:
        import aiohttp

        if self._session is None:  # one keep-alive connection pool for the session
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=2.0)
            )
        return self._session

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self._client().post(self.root + path, json=body) as response:
            response.raise_for_status()
            return await response.json()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _after_opening(text: str) -> str:
    """The answer's first text with `ANSWER_OPENING` before it ("I" + " studied ..."), unless
    the model wrote the opening again; empty while it writes only blanks."""
    if not text.strip():
        return ""
    stripped = text.lstrip()
    if stripped == ANSWER_OPENING or stripped.startswith(
        (ANSWER_OPENING + " ", ANSWER_OPENING + "'")
    ):
        return stripped
    return ANSWER_OPENING + text


def _read(timings: dict[str, Any]) -> PrefillResult:
    return PrefillResult(
        int(timings.get("cache_n", 0)),
        int(timings.get("prompt_n", 0)),
        float(timings.get("prompt_ms", 0.0)),
    )


def llama_client_for(llm: Any) -> CopilotLlamaClient | None:
    """A client for the server behind `llm` when it is the bundled llama.cpp server on this
    machine (an OpenAI-compatible client of the bundled model on 127.0.0.1), with `llm`'s
    sampling settings; else None: other servers (another local one included) lack llama.cpp's
    endpoints, and a remote one reads prompts fast enough."""
    from agent.adapters.llm.llama_server import DEFAULT_MODEL_NAME

    base_url = str(getattr(llm, "base_url", None) or "")
    if not base_url.startswith("http://127.0.0.1:") or getattr(llm, "model", None) != (
        DEFAULT_MODEL_NAME
    ):
        return None
    reply = getattr(llm, "reply", None)
    return CopilotLlamaClient(
        base_url, reply=reply if isinstance(reply, ReplySettings) else DEFAULT_REPLY
    )


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
        on_flight: Callable[[], None] | None = None,
        max_failures: int = 3,
    ) -> None:
        """`on_flight()` is called when a request goes out and when none is in flight any
        more (`in_flight` says which)."""
        self._client = client
        self._messages = messages
        self._ready = ready
        self._on_done = on_done or (lambda _q, _r: None)
        self._on_flight = on_flight or (lambda: None)
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

    def offer(self, question: str, *, at_pause: bool = False) -> None:
        """The newest partial question; its words but the last are sent when nothing is in
        flight and `ready()`. A partial ends where the audio was cut, often inside a word:
        most such last words are wrong ("your set" for "yourself", "entered do" for
        "during"); reading them only delays the next request. A transcript taken
        at a pause (`at_pause`) keeps its last word: the speaker had finished it. End
        punctuation goes too."""
        question = question.strip()
        if not at_pause:
            question = question.rpartition(" ")[0]
        question = question.rstrip(".?!,;:\u2026 ")
        if question and not self._sent.startswith(question):
            self._waiting = question
            self.send_waiting()

    def read_head(self) -> None:
        """Read the prompt up to where a question goes (`messages("")`: the documents and the
        exchange before), when `ready()`; a question offered meanwhile replaces it."""
        self._waiting = ""
        self._sent = ""
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
            self._run(question), name="copilot-prefill"
        )
        self._on_flight()

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
            log.warning("prefill failed (%d in a row): %s: %s", self._failures, type(e).__name__, e)
        finally:
            self._task = None
        self.send_waiting()
        if self._task is None:
            self._on_flight()

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
