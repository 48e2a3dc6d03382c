"""Where an interviewer's question ends: the copilot's pure endpointing.

`QuestionEndpointer` decides from the VAD decisions and the candidate transcripts (as the voice
turn engine's state machine does), with the question check of `state_machine.question_detector`
as the text cue. It starts an answer speculatively on a stable candidate that asks something,
shows it before the endpoint once the question looks complete (withdrawn if the interviewer goes
on), keeps it when the final text is nearly the same, and drops utterances that ask nothing (kept
briefly as the next question's preamble: "I see you were at Northwind. What did you do there?").
Clock-injected: every call carries the time (agent.copilot.engine runs it against real engines).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from state_machine import actions as A
from state_machine import endpointing  # the decisions: the same core as the voice agent's
from state_machine import events as E
from state_machine.endpointing import EPS, Candidate, SpeechVote, Utterance
from state_machine.options import CopilotOptions
from state_machine.question_detector import check_question
from state_machine.similarity import answers_the_same, spoken_words, text_similarity


@dataclass
class _Pending:
    id: int
    text: str
    shown: bool = False  # on the screen before its question's endpoint


@dataclass(frozen=True)
class NotAQuestion(E.Event):
    """Notice: the utterance asked nothing: no answer; its words are kept as the next
    question's preamble."""

    kind: ClassVar[str] = "not_a_question"
    utterance_id: int
    text: str


@dataclass(frozen=True)
class QuestionTranscript(E.Event):
    """Notice: a question's final transcript: `text` is what the answer is asked (the preamble
    of a statement before it included), `heard` the utterance's own words."""

    kind: ClassVar[str] = "transcript"
    text: str
    final: bool
    utterance_id: int
    heard: str


EndpointerAction = A.Action | NotAQuestion | QuestionTranscript


class QuestionEndpointer:
    """Pure decisions: fed VAD decisions per frame, candidate transcripts, end-of-turn scores
    and the time; answers with `state_machine.actions`: OpenUtterance, RequestCandidate,
    ScoreTurn, DropCandidate, DiscardUtterance, StartReply (speculative or not), ShowReply,
    CancelReply, ConfirmReply + CommitUserTurn, and notices (its own NotAQuestion and
    QuestionTranscript among them). Its endpointing is the voice agent's core
    (`state_machine.endpointing`), with the question check as the text cue."""

    def __init__(self, options: CopilotOptions | None = None) -> None:
        self.options = o = options or CopilotOptions()
        self._vote = SpeechVote(o.frames(o.vad_window_s), o.vad_start_ratio, o.frame_s)
        self._utt: Utterance | None = None
        self._pending: _Pending | None = None  # a speculative answer, not yet confirmed
        self._next_id = 0
        self._preamble = ""
        self._preamble_at = -1e9

    def on_frame(self, voiced: bool, now: float) -> list[EndpointerAction]:
        o = self.options
        out: list[EndpointerAction] = []
        vote = self._vote.push(voiced, now)
        utt = self._utt
        if utt is not None:
            utt.hear(now, o.frame_s)
        if utt is None:
            if vote:
                self._next_id += 1
                onset = self._vote.run_start
                self._utt = Utterance(self._next_id, onset, now)
                out.append(A.OpenUtterance(self._next_id, o.pre_roll_s + now - onset))
                out.append(E.SpeechStart(onset, self._next_id))
        elif voiced and self._vote.run >= 2:  # a lone voiced frame is noise
            utt.voice(now)
            if self._vote.run == o.resume_frames:
                utt.endpoint_reached = False
                self._cancel_pending("the interviewer went on", out)
                if utt.candidate_in_flight:  # asked at a pause: it would end before the words
                    utt.candidate_in_flight = False
                    out.append(A.DropCandidate(utt.id))
        return out + self.tick(now)

    def on_candidate(
        self, utterance_id: int, text: str, covered_until: float, now: float
    ) -> list[EndpointerAction]:
        utt = self._utt
        if utt is None or utt.id != utterance_id:
            return []
        utt.candidate_in_flight = False
        utt.candidate = Candidate(text, covered_until)
        return [E.Transcript(now, text, final=False), *self.tick(now)]

    def on_turn_score(
        self, utterance_id: int, text: str, score: float | None, now: float
    ) -> list[EndpointerAction]:
        """The end-of-turn model's P(complete) of the candidate `text` (None: it failed)."""
        utt = self._utt
        if utt is None or utt.id != utterance_id:
            return []
        utt.take_score(score)
        return self.tick(now)

    def tick(self, now: float) -> list[EndpointerAction]:
        o = self.options.endpoint
        out: list[EndpointerAction] = []
        utt = self._utt
        if utt is None:
            return out
        if endpointing.candidate_due(o, utt, now):
            utt.candidate_in_flight = True
            out.append(A.RequestCandidate(utt.id, turn=True))
        score = A.ScoreTurn(utt.id, utt.start_scoring()) if endpointing.score_due(o, utt) else None
        fresh = utt.fresh()
        if utt.endpoint_reached:
            if fresh:
                self._end(utt, now, out)
            return out
        complete = False
        if fresh:
            assert utt.candidate is not None
            check = check_question(utt.candidate.text)
            complete = check.complete
            # A question mark starts and shows the answer as the words do, but does not end
            # the question: see `_maybe_show`.
            asked = complete or utt.candidate.text.rstrip().endswith("?")
            if not check.is_question:
                self._cancel_pending("the text asks nothing", out)
            elif endpointing.speculation_due(o, utt, now, asked):
                self._maybe_speculate(utt, now, out)
                self._maybe_show(utt, now, asked, out)
        if score is not None:  # after the answer it may share the cores with (`score_hold_s`)
            out.append(score)
        if endpointing.endpoint_due(o, utt, now, complete):
            utt.endpoint_reached = True
            out.append(E.SpeechEnd(utt.last_voiced, utt.id))
            if fresh:
                self._end(utt, now, out)
        return out

    def _maybe_speculate(self, utt: Utterance, now: float, out: list[EndpointerAction]) -> None:
        if not self.options.speculative_start:
            return
        assert utt.candidate is not None
        text = self._with_preamble(utt.candidate.text, now)
        p = self._pending
        if p is not None:
            if answers_the_same(p.text, text, self.options.similarity_keep):
                return
            self._cancel_pending("the question changed", out)
        self._start(text, speculative=True, out=out)

    def _maybe_show(
        self, utt: Utterance, now: float, cue: bool, out: list[EndpointerAction]
    ) -> None:
        """Show the answer speculated on the fresh candidate once the question looks complete,
        by its words (`cue`: the question check, or a question mark) or by its score (it would
        end at the shortest endpoint silence), and has been quiet `show_after_s`. The words
        alone suffice here, where they do not end the question: the end-of-turn model scores
        many whole questions low, and a shown answer that was early is only withdrawn."""
        o, p = self.options, self._pending
        if o.show_after_s is None or p is None or p.shown:
            return
        e = o.endpoint
        assert utt.candidate is not None
        worded = cue and not utt.hesitant
        complete = worded or endpointing.endpoint_silence(e, utt, cue) <= e.silence_complete_s + EPS
        if complete and utt.silence(now, e.late_input_s) + EPS >= o.show_after_s:
            p.shown = True
            out.append(A.ShowReply(p.id))

    def _end(self, utt: Utterance, now: float, out: list[EndpointerAction]) -> None:
        assert utt.candidate is not None
        self._utt = None
        text = spoken_words(utt.candidate.text)
        if not check_question(text).is_question:
            out.append(A.DiscardUtterance(utt.id))
            self._cancel_pending("no question", out)
            if text:
                fresh = now - self._preamble_at <= self.options.preamble_keep_s
                joined = f"{self._preamble} {text}" if fresh else text
                self._preamble = joined[-self.options.preamble_max_chars :].strip()
                self._preamble_at = now
            out.append(NotAQuestion(now, utt.id, text))
            return
        question = self._with_preamble(text, now)
        self._preamble = ""
        p = self._pending
        kept = False
        if p is not None:
            similarity = text_similarity(p.text, question)
            kept = answers_the_same(p.text, question, self.options.similarity_keep)
            out.append(E.Speculative(now, kept, round(similarity, 3)))
            if not kept:
                self._cancel_pending("the final question differs", out)
        if not kept:
            self._start(question, speculative=False, out=out)
        assert self._pending is not None
        reply_id, self._pending = self._pending.id, None
        out.append(QuestionTranscript(now, question, True, utt.id, heard=text))
        out.append(A.CommitUserTurn(question, utt.id))
        out.append(A.ConfirmReply(reply_id))

    def question_text(self, transcript: str, now: float) -> str:
        """The question an answer prompt would carry for `transcript` heard now: what an
        answer started now would ask (the preamble included)."""
        return self._with_preamble(transcript, now)

    def _with_preamble(self, text: str, now: float) -> str:
        text = spoken_words(text)
        if self._preamble and now - self._preamble_at <= self.options.preamble_keep_s:
            return f"{self._preamble} {text}"
        return text

    def _start(self, text: str, *, speculative: bool, out: list[EndpointerAction]) -> None:
        self._next_id += 1
        self._pending = _Pending(self._next_id, text)
        out.append(A.StartReply(self._next_id, text, speculative))

    def new_answer_id(self) -> int:
        """An id no answer has had (the guard's replacement answers take one)."""
        self._next_id += 1
        return self._next_id

    def _cancel_pending(self, reason: str, out: list[EndpointerAction]) -> None:
        if self._pending is not None:
            out.append(A.CancelReply(self._pending.id, reason))
            self._pending = None
