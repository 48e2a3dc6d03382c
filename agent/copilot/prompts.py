"""The copilot's answer prompts: the system prompt, the documents' pieces in the order every
prompt shares (the LLM's cached prefix), the exchange before and the question.

Pure text (agent.copilot.engine sends them; agent.adapters.llm.prefill reads them ahead).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.adapters.llm.prefill import ANSWER_CUE, QUESTION_LABEL
from agent.copilot.context.retrieval import is_job_piece
from agent.engines import ChatMessage

COPILOT_SYSTEM_PROMPT = (
    "You are the candidate in a job interview. Answer the interviewer as yourself, in the first "
    "person, in one or two short sentences (at most 40 words): first the direct answer, then "
    "where you did it and what came of it, with its number, from your resume. Use only facts "
    "from your resume and the job description; never invent an employer, school, number or "
    "technology. Never ask for anything, and never describe the job back to the interviewer."
)
JOB_HEAD_CHARS = 500
"""The job description's first characters in a prompt: its title, where, the pay, what the
company does; the rest (requirements) a small model tends to recite as if they were the
candidate's."""


EXCHANGE_MAX_WORDS = 40
"""The previous answer in a prompt is cut at this many words (`copilot_messages`)."""


def copilot_messages(
    system_prompt: str, pieces: list[Any], question: str, exchange: tuple[str, str] | None = None
) -> list[ChatMessage]:
    """Fixed system prompt, then the documents' pieces (`documents_text`: the resume's in
    document order, so that questions that retrieve the same pieces share the prompt prefix,
    then the job), then, as the last paragraph, the dialogue: the `exchange` before (the
    previous question and the answer shown to it: "How much time did that save?" refers to
    it), then the question. The exchange comes before the question, so that it is read into
    the prompt cache before the question is asked (`CopilotEngine` reads it once an answer is
    done); in the dialogue's own layout, so that the bundled model's prompt has it in the
    answer's turn (`CopilotLlamaClient.prompt`): placed before the line that says who is who,
    the model took that line for the answer to go on with ("I am the candidate. Next: ...")."""
    user = QUESTION_LABEL + question
    if exchange is not None and all(exchange):
        asked, answered = exchange
        words = answered.split()
        answered = " ".join(words[:EXCHANGE_MAX_WORDS])
        if len(words) > EXCHANGE_MAX_WORDS:
            answered += " …"
        user = f"{QUESTION_LABEL}{asked}{ANSWER_CUE} {answered}\n{user}"
    if pieces:
        user = f"{documents_text(pieces)}\n\n{user}"
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]


ANSWER_LABEL = ANSWER_CUE.strip()


def without_answer_label(text: str) -> str | None:
    """An answer's text so far without the dialogue's speaker label: a chat model, given the
    prompt's "Interviewer: ..." lines, may begin "Me: I led ..." (the bundled model's own
    client writes the label into the prompt instead). None while the text may still be the
    label ("M", "Me")."""
    head = text.lstrip()
    if ANSWER_LABEL.startswith(head):
        return None
    if head.startswith(ANSWER_LABEL):
        return head[len(ANSWER_LABEL) :].lstrip()
    return text


def documents_text(pieces: list[Any]) -> str:
    """The candidate's pieces as a list ("My resume:"), then a line of company context (the
    job description's title line: "Staff Engineer, Payments Platform — Lumen Pay") and the job
    description's pieces. Each is a prefix of the text of more pieces in the same order, as
    the warm-up's steps need (`prefix_steps`)."""
    ordered = _prompt_order({chunk_id(p): p for p in pieces}.values())
    mine = [p for p in ordered if not is_job_piece(p)]
    job = [p for p in ordered if is_job_piece(p)]
    parts = []
    if mine:
        parts.append("My resume:\n" + "\n".join(f"- {p.text}" for p in mine))
    if job:
        title, sep, _ = job[0].text.partition(": ")
        about = f"The job I am interviewing for: {title}\n" if sep else ""
        parts.append(f"{about}From its description: " + " ".join(p.text for p in job))
    return "\n\n".join(parts)


def prompt_pieces(every: list[Any]) -> list[Any]:
    """What of the documents goes into every prompt: the candidate's pieces and the job
    description's head, its first pieces up to `JOB_HEAD_CHARS` (the first at least)."""
    head: list[Any] = []
    size = 0
    for piece in _prompt_order(p for p in every if is_job_piece(p)):
        size += len(piece.text)
        if head and size > JOB_HEAD_CHARS:
            break
        head.append(piece)
    return [*(p for p in every if not is_job_piece(p)), *head]


def chunk_id(piece: Any) -> int:
    return int(piece.chunk_id)


def _prompt_order(pieces: Iterable[Any]) -> list[Any]:
    """The candidate's pieces, then the job description's, each in document order."""
    return sorted(pieces, key=lambda p: (is_job_piece(p), chunk_id(p)))


def prefix_steps(pieces: list[Any], step_chars: int) -> list[list[Any]]:
    """The growing prompt prefixes a warm-up reads one after the other: none of the pieces
    (the system prompt alone), then about `step_chars` more of them (in the prompt's order) at
    a time, the last one with them all."""
    ordered = _prompt_order(pieces)
    steps: list[list[Any]] = [[]]
    added = 0
    for i, piece in enumerate(ordered, 1):
        added += len(piece.text)
        if added >= step_chars or i == len(ordered):
            steps.append(ordered[:i])
            added = 0
    return steps


def chunk_ids(pieces: list[Any]) -> tuple[int, ...]:
    """Which chunks `pieces` are, in any order: what a warm prompt prefix is known by."""
    return tuple(sorted(chunk_id(p) for p in pieces))
