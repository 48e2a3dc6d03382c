"""Which pieces of the candidate's documents answer an interview question.

MiniLM alone matches a question's words with a chunk's words, and interview questions often
share none with the chunk that answers them: "What is your biggest weakness?" with "Professional
development: working on my public speaking", "Where did you train?" with "Education: BSc ...",
"Tell me about yourself." with anything. So a question of a common interview kind is searched
with a few words of the sections that answer that kind (`search_text`); a follow-up ("How much
time did that save?") is searched with the question before it, whose subject it refers to.
Measured in docs/benchmarks.md (the three document sets of bench/copilot_data/).
"""

from __future__ import annotations

import re
from typing import Any

from agent.copilot.answer_guard import GROUNDING_PIECES, JobLead
from agent.copilot.context.index import Piece

OVERVIEW = (
    r"\b(?:(?:about|describe|introduce|present) yourself|walk me through|"
    r"your background|introduce)\b"
)
"""A question about the candidate as a whole: the resume's opening piece (name, title, where,
years) answers it first."""
SALARY = r"\bsalary|\bpay\b|\bcompensation|\bremuneration|\bpackage\b|\bexpect to earn"
EMPLOYER = r"\bour (?:company|hospital|school|firm|business)\b|\babout us\b|\bknow about\b"
QUESTIONS_FOR_US = (
    r"\bquestions? (?:(?:do|would) you have )?for (?:us|me)\b|"
    r"\banything (?:you['’]d|you would|you want to) (?:like to )?ask\b"
)
FUTURE = r"\bfive years|\bfuture\b|\blong[- ]term|\bcareer goal"
INTENTS: tuple[tuple[re.Pattern[str], str, re.Pattern[str] | None], ...] = tuple(
    (
        re.compile(pattern, re.IGNORECASE),
        words,
        re.compile(section, re.IGNORECASE) if section else None,
    )
    for pattern, words, section in (
        (OVERVIEW, "summary: my current role, employer and years of experience", ""),
        (
            r"\bweakness|\bimprove on\b|\byou (?:\w+ )?struggle|\bneed to work on\b",
            "professional development: working on, learning, improving",
            r"development|improv|growth|working on|weakness",
        ),
        (SALARY, "salary range, band, pay and bonus", ""),
        (
            r"\buniversit|\bcollege|\bdegree|\bstud(?:y|ied)\b|(?<!our )(?<!this )\bschool|"
            r"\btraining\b|\btrain\b|"
            r"\beducation|\bqualifications?\b",
            "education: degree, university",
            r"education|qualification|training|certification",
        ),
        (
            r"\bspeak\b|\bfluent|\bnative\b|\bhow good is your\b",
            "languages: native, fluent, intermediate",
            r"\blanguages?\b",
        ),
        (
            EMPLOYER + r"|\bour team\b",
            "about us: the company, what it does, its customers",
            r"\babout\b|who we are|\bcompany\b",
        ),
        (QUESTIONS_FOR_US, "the role: responsibilities, the team", ""),
        (FUTURE, "the role: lead, own, responsibilities", ""),
        (r"\bproud|\bachievement|\baccomplish", "led, built, introduced, launched: the result", ""),
        (
            r"\bdisagree|\bconflict|\bpush(?:ed)? back",
            "disagreed, pushed back; we compared and agreed",
            "",
        ),
        (
            r"\bhow (?:big|large) is (?:your|the) (?:current )?team\b|"
            r"\bsize of (?:your|the) team\b|\bhow many (?:people|staff|direct reports|reports)\b",
            "lead a team, department of, people reporting to me",
            "",
        ),
    )
)
"""Common kinds of interview question: the words of the sections that answer them, and the
headings of those sections where documents give them one ("Professional development:",
"Education:", "Languages:", "About us:"). A piece under such a heading answers the question
first: MiniLM puts a role's bullet that shares a word ("students who struggle", "agree ...
with my line manager") nearer than the section itself."""
SECTION_FIRST = 0.5
"""Taken off the distance of a piece under the heading the question's kind asks for: ahead of
any other (distances between pieces differ by less)."""


def grounding_pieces(question: str) -> int:
    """How many of the nearest pieces an answer to `question` must name something of
    (agent.copilot.answer_guard): the nearest alone where retrieval puts what answers it
    first: the section of a question of a common kind (`INTENTS`: "What is your biggest
    weakness?" and "Professional development: ..."), the candidate's own piece for why they
    want the job (`MOTIVATION`; the job's piece alone is the job described back). An answer
    that names the candidate's title and skills to "What is your biggest weakness?" says
    nothing of what was asked."""
    if MOTIVATION.search(question) or any(pattern.search(question) for pattern, _, _ in INTENTS):
        return 1
    return GROUNDING_PIECES


FIGURE = r"\bhow (?:much|many|long|large|big)\b|\bbudget\b"
"""A question whose answer is a figure: the guard wants one of the retrieved pieces' numbers."""
PAY_FIGURE = 1000.0
"""The least number that is an amount of pay, what a question about pay wants named."""


def figure_asked(question: str) -> float | None:
    """The least size of the figure that `question` asks for (agent.copilot.answer_guard's
    `Grounding.figure_from`): an amount of pay for a question about pay, any number for "How
    long did that take?"; None when it asks for none."""
    if re.search(SALARY, question, re.IGNORECASE):
        return PAY_FIGURE
    return 0.0 if re.search(FIGURE, question, re.IGNORECASE) else None


def general_pieces(every: list[Any], question: str) -> frozenset[int]:
    """The chunk ids of the resume's pieces about the candidate in general, before the first
    role (its opening line and summary), unless `question` asks for an overview: an answer
    that names only what they hold ("I have six years in B2B software marketing") says
    nothing particular to any other question."""
    if re.search(OVERVIEW, question, re.IGNORECASE):
        return frozenset()
    resume = sorted((p for p in every if not is_job_piece(p)), key=lambda p: int(p.chunk_id))
    general = []
    for piece in resume:
        if _ROLE.match(piece.text):
            break
        general.append(int(piece.chunk_id))
    if len(general) == len(resume):  # no roles: where the general part ends is unknown
        return frozenset()
    return frozenset(general)


def job_opening(every: list[Any], question: str) -> frozenset[int]:
    """The chunk id of the job description's opening piece (its title, place, contract and
    pay), unless `question` asks about pay: it says nothing of what the job or the employer
    is, and MiniLM puts it near any question that names the employer."""
    if re.search(SALARY, question, re.IGNORECASE):
        return frozenset()
    job = [int(p.chunk_id) for p in every if is_job_piece(p)]
    return frozenset({min(job)}) if job else frozenset()


def other_kinds_sections(every: list[Any], question: str) -> frozenset[int]:
    """The chunk ids of the pieces under the heading of a common question kind's section that
    `question` is not of ("Professional development: ..." for "How do you work with the sales
    team?"): the small model echoes them to any question, and they answer only their own."""
    asked = [s for pattern, _, s in INTENTS if s is not None and pattern.search(question)]
    return frozenset(
        int(p.chunk_id)
        for p in every
        if (heading := p.text.partition(":")[0])
        and any(s.search(heading) for _, _, s in INTENTS if s is not None)
        and not any(s.search(heading) for s in asked)
    )


_REFERS_BACK = re.compile(
    r"\b(?:that|it|this|there|those|these|they|them)\b|"
    r"\bthe (?:outcome|result|impact)\b|\bwhat happened\b|\bin the end\b",
    re.IGNORECASE,
)
FOLLOW_UP_MAX_WORDS = 9
"""A question this short that refers to something ("How long did that take?") is a follow-up."""


_RELATIVE_THAT = re.compile(
    r"(\b(?:a|an|the|some|any|every)\s+(?:[\w-]+\s+){0,2}?[\w-]+\s+)that\b", re.IGNORECASE
)
"""A "that" after a noun opens a clause about it ("a campaign that created pipeline"): it
refers to nothing said before."""


def is_follow_up(question: str) -> bool:
    own = _RELATIVE_THAT.sub(r"\1", question)
    return len(question.split()) <= FOLLOW_UP_MAX_WORDS and bool(_REFERS_BACK.search(own))


def search_text(question: str, previous: str = "", previous_answer: str = "") -> str:
    """What the index is searched with for `question`: the question, the words of its kind's
    sections, and, for a follow-up, the `previous` question it refers to and the
    `previous_answer` shown to it ("How much time did that save?" is about the handover sheet
    that answer named, which the question before may not)."""
    parts = [question]
    parts += [words for pattern, words, _ in INTENTS if pattern.search(question)]
    if is_follow_up(question):
        parts[:0] = [text for text in (previous, previous_answer) if text]
    return " ".join(parts)


JOB_QUESTION = re.compile(
    "|".join(
        (
            SALARY,
            EMPLOYER,
            QUESTIONS_FOR_US,
            r"\bfive years",
            r"\bwhy (?:do you want|this role|are you interested)",
        )
    ),
    re.IGNORECASE,
)
"""Questions the job description answers better than the resume."""
MOTIVATION = re.compile(
    r"\bwhy (?:do you want|would you like|are you (?:interested|applying)|this role|us\b)|"
    r"\bwhat (?:attracts|draws|interests) you\b",
    re.IGNORECASE,
)
"""Why the candidate wants the job: answered by what they did that leads to it (the resume)
and what the job is (the job description), so the nearest piece of each comes first."""
JOB_LEADS: tuple[tuple[re.Pattern[str], JobLead], ...] = (
    (MOTIVATION, JobLead("What draws me to this role:", "I'm also drawn to:")),
    *(
        (re.compile(pattern, re.IGNORECASE), lead)
        for pattern, lead in (
            (
                QUESTIONS_FOR_US,
                JobLead(
                    "I'd like to ask about this part of the role:", "I'd also like to ask about:"
                ),
            ),
            (
                FUTURE,
                JobLead(
                    "In a few years I'd like to be doing what this role asks:",
                    "I would also like to:",
                ),
            ),
            (SALARY, JobLead("I'd expect what the job description offers:", alone=True)),
            (EMPLOYER, JobLead("What I know about you:", alone=True)),
        )
    ),
)
"""How an answer built from the pieces brings in the job description's, by the question's
kind: "I read in the job description: Build and lead a team ..." answers neither "Do you
have any questions for us?" nor "Where do you see yourself in five years?"."""


def job_lead(question: str) -> JobLead:
    """How the job description's pieces are brought into an answer to `question`."""
    return next((lead for pattern, lead in JOB_LEADS if pattern.search(question)), JobLead())


OTHER_SOURCE_PENALTY = 0.3
"""Added to the distance of a piece from the document the question is not about: MiniLM puts
the job description's short lines ("Nice to have: A mentorship qualification.") near almost
any question, above the resume bullet that answers it."""


OTHER_KIND_PENALTY = 0.1
"""Added to the distance of a piece under another kind's section heading ("Working on: ..."
to "How big is the team you run now?"): it answers only its own kind, but less than the other
source's penalty, since a misheard question ("What will your manager say you need to wear
con?") may not show its kind. 0.1 kept the most good answers over the recorded runs of
docs/bench/ (0.05-0.2 tried: docs/benchmarks.md)."""

SHARED_WORD_BONUS = 0.12
MAX_SHARED_WORDS = 3
"""Each word (of four letters or more, not a function word) that a piece shares with what it is
searched with brings it this much nearer, up to `MAX_SHARED_WORDS`: MiniLM misses some exact
matches ("How do you support newly qualified nurses?" and "Precepted eleven newly qualified
nurses"). 0.12 found the most expected facts on the three document sets' questions (the
values tried: docs/benchmarks.md)."""
_FUNCTION_WORDS = frozenset(
    """
    about after also been before being could does doing from have here into just like more
    most much over same should some such than that their them then there these they this those
    through under very were what when where which while will with would your yours yourself
    tell time ever
""".split()
)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[^\W\d_]{4,}", text.lower()) if w not in _FUNCTION_WORDS}


_ROLE = re.compile(r"^(?P<role>[^:]+?\(\s*\d{4}[^)]*\))\s*:")
"""A resume piece's experience heading: "Northwind Bank — Senior Backend Engineer (2021–…):"."""


def resume_outline(resume: list[Any]) -> Piece | None:
    """The candidate's roles, one after the other, as a piece of their own ("Experience:
    Northwind Bank — Senior Backend Engineer (2021–present); Tidewater Games — ..."): what
    "Walk me through your resume" asks for, which no single piece holds. None without roles."""
    ordered = sorted(resume, key=lambda p: int(p.chunk_id))
    roles = dict.fromkeys(m.group("role") for p in ordered if (m := _ROLE.match(p.text)))
    if not roles:
        return None
    return Piece(OUTLINE_ID, "resume", "Experience: " + "; ".join(roles) + ".", 0.0)


OUTLINE_ID = -1
"""The chunk id of `resume_outline`'s piece, which no document chunk has."""


def is_job_piece(piece: Any) -> bool:
    return piece.source in ("job_description", "job")


async def relevant_pieces(
    index: Any, question: str, previous: str = "", k: int = 3, *, previous_answer: str = ""
) -> list[Any]:
    """The `k` pieces of `index` (a ContextIndex or what has its async search) that answer
    `question` best, nearest first: resume pieces first unless the question is about the job
    or the company, the nearest of both first for why the candidate wants the job;
    `previous` and `previous_answer` are the exchange before, for a follow-up."""
    every = await index.pieces_async()
    if not every or k <= 0:
        return []
    text = search_text(question, previous, previous_answer)
    ranked = await index.search_async(text, len(every))
    about_job = bool(JOB_QUESTION.search(question))
    asked = _words(text)
    sections = [section for pattern, _, section in INTENTS if section and pattern.search(question)]
    # Below the others, the resume's opening and summary, which ground only an overview (the
    # guard's rule; why the candidate wants the job may start from them), the job's opening
    # line unless pay is asked, and a little below, the sections of other kinds of question.
    general = frozenset() if MOTIVATION.search(question) else general_pieces(every, question)
    aside = general | job_opening(every, question)
    other_kinds = other_kinds_sections(every, question)

    def distance(piece: Any) -> float:
        shared = len(asked & _words(piece.text))
        heading = piece.text.partition(":")[0]
        return (
            piece.distance
            - SHARED_WORD_BONUS * min(shared, MAX_SHARED_WORDS)
            + (0.0 if is_job_piece(piece) == about_job else OTHER_SOURCE_PENALTY)
            - (SECTION_FIRST if any(s.search(heading) for s in sections) else 0.0)
            + (OTHER_SOURCE_PENALTY if int(piece.chunk_id) in aside else 0.0)
            + (OTHER_KIND_PENALTY if int(piece.chunk_id) in other_kinds else 0.0)
        )

    ordered = sorted(ranked, key=distance)
    if re.search(OVERVIEW, question, re.IGNORECASE):
        mine = [p for p in ordered if not is_job_piece(p)]
        opening = min(mine, key=lambda p: int(p.chunk_id), default=None)
        first = [p for p in (opening, resume_outline(mine)) if p is not None]
        ordered = first + [p for p in ordered if p is not opening]
    elif MOTIVATION.search(question):
        own = next((p for p in ordered if not is_job_piece(p)), None)
        job = next((p for p in ordered if is_job_piece(p)), None)
        first = [p for p in (own, job) if p is not None]
        ordered = first + [p for p in ordered if all(p is not f for f in first)]
    return ordered[:k]
