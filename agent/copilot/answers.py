"""One copilot answer on its way: what it is made of, how its text is generated, written to
the candidate's screen and checked by the guard.

The steps of `agent.copilot.engine.CopilotEngine`'s answers, apart from the engine's state:
each takes what it works with (the LLM, the sink, the context) as an argument.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.copilot.answer_guard import Grounding, guarded_answer, vocabulary
from agent.copilot.context.retrieval import (
    figure_asked,
    general_pieces,
    grounding_pieces,
    is_follow_up,
    is_job_piece,
    job_lead,
    other_kinds_sections,
    relevant_pieces,
)
from agent.copilot.prompts import chunk_id, without_answer_label
from agent.engines import ChatMessage, LanguageModel
from state_machine.options import CopilotOptions
from state_machine.question_detector import check_question

log = logging.getLogger(__name__)

FAILED_ANSWER = "(no answer: the language model did not respond)"


class AnswerSink(Protocol):
    """Where answers are shown: one stream per answer."""

    async def open(self, answer_id: int, question: str) -> None: ...

    async def write(self, answer_id: int, text: str) -> None: ...

    async def close(self, answer_id: int, status: str) -> None:
        """`status`: complete | failed | cancelled (superseded by a newer answer, or the
        session ended) | replaced (by the guard's answer, in a new stream) | withdrawn (shown
        before the question's end, and the interviewer went on: it answered part of it)."""
        ...


class ContextSearch(Protocol):
    async def search_async(self, question: str, k: int = 3) -> list[Any]: ...

    async def pieces_async(self) -> list[Any]: ...


@dataclass
class AnswerRecord:
    """One confirmed answer and its timings (engine clock, seconds)."""

    answer_id: int
    question: str
    speech_end: float
    committed_at: float
    started_at: float
    speculative: bool
    first_token_at: float | None = None
    first_shown_at: float | None = None
    done_at: float | None = None
    status: str = ""
    text: str = ""
    pieces: list[Any] = field(default_factory=list)
    relevant: list[Any] = field(default_factory=list)
    """The pieces retrieved for the question, nearest first."""
    llm_text: str = ""
    """The model's answer, when the guard replaced it (`problems` says why)."""
    problems: list[str] = field(default_factory=list)
    replacement_id: int | None = None
    """The answer stream that replaced this one's on the screen."""

    def take_times(self, answer: LiveAnswer) -> None:
        """The answer's first token and first words, once its stream is done with them."""
        self.first_token_at, self.first_shown_at = answer.first_token_at, answer.first_shown_at

    def latency_ms(self) -> dict[str, float | None]:
        def ms(t: float | None) -> float | None:
            return None if t is None else round((t - self.speech_end) * 1000, 1)

        return {
            "answer_started": ms(self.started_at),
            "first_token": ms(self.first_token_at),
            "endpoint": ms(self.committed_at),
            "first_words": ms(self.first_shown_at),
            "whole_answer": ms(self.done_at),
        }


@dataclass
class LiveAnswer:
    """An answer on its way: from its start (maybe speculative) to its stream's close."""

    id: int
    text_in: str
    speculative: bool
    started_at: float
    confirmed: asyncio.Event = field(default_factory=asyncio.Event)
    shown: asyncio.Event = field(default_factory=asyncio.Event)  # before or at `confirmed`
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    first_token: asyncio.Event = field(default_factory=asyncio.Event)
    text: str = ""
    first_token_at: float | None = None
    first_shown_at: float | None = None
    record: AnswerRecord | None = None
    task: asyncio.Task[None] | None = None
    pieces: list[Any] = field(default_factory=list)
    previous: str = ""  # the question confirmed before this one
    exchange: tuple[str, str] | None = None  # that question and the answer shown to it
    relevant: list[Any] = field(default_factory=list)
    replacement: str = ""  # what the guard shows instead of the model's answer
    problems: list[str] = field(default_factory=list)


def asked(answer: LiveAnswer) -> str:
    """The question `answer` answers, as the candidate's screen shows it."""
    return check_question(answer.text_in).question or answer.text_in


async def stream_answer(
    llm: LanguageModel,
    answer: LiveAnswer,
    messages: list[ChatMessage],
    options: CopilotOptions,
    clock: Callable[[], float],
) -> bool:
    """Generate `answer`'s text from `messages`, cut at `options`' limits; True when the
    request was closed before its end (the server stops only at its next token)."""
    stream = llm.stream(messages)
    cut = False
    written = ""
    try:
        async for delta in stream:
            if not delta or not isinstance(delta, str):  # no tools offered: text only
                continue
            if answer.first_token_at is None:
                answer.first_token_at = clock()
                answer.first_token.set()
            written += delta
            text = without_answer_label(written)
            if text is None:
                continue
            answer.text = text
            answer.changed.set()
            kept = answer_end(answer.text, options)
            if kept is not None:
                answer.text = kept
                cut = True
                break
    finally:
        await stream.aclose()
    return cut


def answer_end(text: str, options: CopilotOptions) -> str | None:
    """Where an answer written so far as `text` ends at `options`' limits: the text it keeps
    (None: it goes on). The hard word limit cuts when the word after it begins, so that the
    last word kept is whole (a token may end inside a word: "account" of "accountants");
    only what came in with that word is dropped, none of what was shown before."""
    lines = [x for x in text.split("\n") if x.strip()]
    if len(lines) > options.max_answer_lines:
        return text[: text.rstrip().rfind("\n") + 1]
    # Words as the reader counts them: a bullet's "-" is none.
    spans = [m for m in re.finditer(r"\S+", text) if any(c.isalnum() for c in m.group())]
    words = [m.group() for m in spans]
    if len(words) > options.answer_word_limit:
        return text[: spans[options.answer_word_limit - 1].end()]
    if looping(words) or (
        len(words) >= options.max_answer_words and text.rstrip(" ").endswith((".", "!", "?", "\n"))
    ):
        return text
    return None


def looping(words: list[str], *, copies: int = 3, longest: int = 12) -> bool:
    """The text ends with the same phrase of 2 to `longest` words `copies` times in a row:
    the bundled model, once in a loop ("caused by a full disk outage caused by a full disk
    outage ..."), does not leave it. llama.cpp's DRY sampler breaks such loops too, but delays
    every request's first token (docs/benchmarks.md)."""
    for n in range(2, longest + 1):
        if len(words) < n * copies:
            break
        tail = words[-n:]
        if all(words[-n * (k + 1) : len(words) - n * k] == tail for k in range(1, copies)):
            return True
    return False


async def publish_answer(
    sink: AnswerSink,
    answer: LiveAnswer,
    generate: asyncio.Task[None],
    clock: Callable[[], float],
) -> str:
    """Write the answer's text as it grows (the buffer of a speculative start at once);
    returns the status to close with."""
    written = 0
    while True:
        answer.changed.clear()
        if len(answer.text) > written:
            delta, written = answer.text[written:], len(answer.text)
            await sink.write(answer.id, delta)
            if answer.first_shown_at is None:
                answer.first_shown_at = clock()
            continue
        if generate.done():
            break
        changed = asyncio.ensure_future(answer.changed.wait())
        try:
            await asyncio.wait({generate, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
    if generate.exception() is None:
        return "complete"
    e = generate.exception()
    log.warning("answer %d failed: %s: %s", answer.id, type(e).__name__, e)
    if written == 0:
        await sink.write(answer.id, FAILED_ANSWER)
    return "failed"


async def show_replacement(sink: AnswerSink, record: AnswerRecord, answer: LiveAnswer) -> None:
    """Show the guard's answer as a new stream for the same question (the candidate's
    client drops the one closed as "replaced")."""
    assert record.replacement_id is not None
    log.info(
        "answer %d replaced by %d: %s", answer.id, record.replacement_id, "; ".join(answer.problems)
    )
    record.llm_text, record.problems = answer.text, answer.problems
    record.text = answer.replacement
    await sink.open(record.replacement_id, record.question)
    try:
        await sink.write(record.replacement_id, answer.replacement)
    finally:
        await sink.close(record.replacement_id, "complete")


async def relevant_to(
    context: ContextSearch | None, answer: LiveAnswer, k: int, *, after_first_token: bool
) -> list[Any]:
    """The `k` pieces that answer the question. When the whole documents are the prompt, the
    search waits for the answer's first token: nothing is added before it, and the guard
    needs them only once the answer is written."""
    if context is None:
        return []
    if after_first_token:
        await answer.first_token.wait()
    return await relevant_pieces(
        context,
        answer.text_in,
        answer.previous,
        k,
        previous_answer=answer.exchange[1] if answer.exchange is not None else "",
    )


async def check_answer(context: ContextSearch, answer: LiveAnswer) -> None:
    """The guard: an answer that is not the candidate's, names what the documents do not
    hold, or says nothing particular to the pieces retrieved for the question (beyond its
    words, and for a follow-up beyond the exchange it follows) gets a replacement: its
    sentences before the first that fails, or one made of the retrieved pieces (when
    they make one)."""
    every = await context.pieces_async()
    vocab = vocabulary([*(p.text for p in every), answer.text_in, answer.previous])
    first = min((chunk_id(p) for p in every if not is_job_piece(p)), default=None)
    asked = answer.text_in
    if answer.exchange is not None and is_follow_up(asked):
        asked = " ".join([*answer.exchange, asked])
    grounding = Grounding(
        answer.relevant,
        asked,
        nearest=grounding_pieces(answer.text_in),
        general=general_pieces(every, answer.text_in) | other_kinds_sections(every, answer.text_in),
        figure_from=figure_asked(answer.text_in),
    )
    replacement, problems = guarded_answer(
        answer.text,
        vocab,
        grounding,
        first_resume_id=first,
        job_lead=job_lead(answer.text_in),
    )
    if replacement:
        answer.replacement, answer.problems = replacement, problems
