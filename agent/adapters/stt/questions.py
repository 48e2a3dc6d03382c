"""How the copilot hears an interviewer: its questions' words are what the answer is looked up
and written from, so the STT decodes them with its question tuning where it has one (the
bundled Whisper: agent/adapters/stt/whisper_options.py's `question_options`); a cloud STT's
own model decides."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agent.engines import SpeechToText


@runtime_checkable
class QuestionTunable(Protocol):
    def for_questions(self) -> SpeechToText: ...


def for_questions(stt: SpeechToText) -> SpeechToText:
    """`stt` tuned for questions where it has such a tuning, else `stt` as it is."""
    return stt.for_questions() if isinstance(stt, QuestionTunable) else stt
