"""What the copilot's answers are made of, on the sample backend documents and the real MiniLM
index: the pieces retrieved for a question (agent.copilot.context.retrieval) are in its prompt,
and an answer the guard refuses (agent.copilot.answer_guard) is replaced on the candidate's
screen by one made of those pieces."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agent.copilot.answer_guard import (
    Grounding,
    answer_problems,
    fallback_answer,
    first_person,
    grounded_in,
    vocabulary,
    voice_problems,
)
from agent.copilot.context.index import ContextIndex, Piece
from agent.copilot.context.retrieval import (
    PAY_FIGURE,
    figure_asked,
    general_pieces,
    grounding_pieces,
    is_follow_up,
    job_lead,
    other_kinds_sections,
    relevant_pieces,
    search_text,
)
from agent.copilot.prompts import COPILOT_SYSTEM_PROMPT
from tests.test_copilot_engine import RecordingLLM, ScriptedSTT, run_copilot

DATA = Path(__file__).resolve().parent.parent / "bench" / "copilot_data"
ANSWER = "I led the checkout rewrite at Northwind Bank."


def documents_index(folder: Path) -> Iterator[ContextIndex]:
    """The real MiniLM index of a document set's resume and job description."""
    from agent.adapters.embedder import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    embedder.load()
    ix = ContextIndex(embedder)
    for name in ("resume", "job_description"):
        ix.add_document(name, (folder / f"{name}.md").read_text(encoding="utf-8"))
    yield ix
    ix.close()


@pytest.fixture(scope="module")
def index():
    yield from documents_index(DATA)


class EmptyLLM:
    """TEST DOUBLE: an LLM whose every reply is a stream without text."""

    async def stream(self, messages: object) -> AsyncIterator[str]:
        for text in ():
            yield text


class IndexNow:
    """TEST DOUBLE: the real index, searched on the caller's thread (the engine's tests run in
    virtual time, which cannot wait on the index's worker thread)."""

    def __init__(self, index: ContextIndex) -> None:
        self.index = index
        self.questions: list[str] = []

    async def search_async(self, question: str, k: int = 3) -> list[Piece]:
        self.questions.append(question)
        return self.index.search(question, k)

    async def pieces_async(self) -> list[Piece]:
        return self.index.pieces()


@pytest.mark.parametrize(
    ("question", "bullet"),
    [
        ("What is your biggest weakness?", "public speaking"),
        ("Where did you go to university?", "Technical University of Munich"),
        ("How did you make the checkout service faster?", "Redis read-through cache"),
        ("Tell me about a time you had an outage in production.", "full disk"),
        ("Have you ever mentored junior engineers?", "four junior engineers"),
        ("What are your salary expectations?", "€95,000"),
    ],
)
def test_the_prompt_holds_the_pieces_retrieved_for_the_question(index, question, bullet) -> None:
    context = IndexNow(index)
    relevant = asyncio.run(relevant_pieces(context, question))
    assert len(relevant) == 3
    assert any(bullet in p.text for p in relevant), [p.text for p in relevant]

    llm = RecordingLLM([ANSWER])
    run_copilot([("speech", 1.0)], ScriptedSTT([(1.0, question)]), llm, context=context)
    [[system, user]] = llm.requests
    assert system == {"role": "system", "content": COPILOT_SYSTEM_PROMPT}
    prompt = user["content"]
    assert all(p.text in prompt for p in relevant)
    # the line of company context, then the job description's head; the question last
    assert "The job I am interviewing for: Staff Engineer, Payments Platform — Lumen Pay\n" in (
        prompt
    )
    assert prompt.endswith("\n\nInterviewer: " + question)
    # the resume's other bullets stay out: a small model reads three, not all
    ids = {p.chunk_id for p in relevant}
    others = [p for p in index.pieces() if p.source == "resume" and p.chunk_id not in ids]
    assert others and not any(p.text in prompt for p in others)


def test_a_follow_up_is_searched_with_the_question_before_it(index) -> None:
    assert is_follow_up("And what did that do to the p99 latency?")
    assert not is_follow_up("Where did you go to university, and what did you study?")
    assert search_text(
        "How many players did it serve?", "What did you build at Tidewater?"
    ).startswith("What did you build at Tidewater?")
    context = IndexNow(index)
    [piece] = asyncio.run(
        relevant_pieces(
            context, "How many players did it serve?", "What did you build at Tidewater Games?", 1
        )
    )
    assert "2 million daily players" in piece.text


@pytest.mark.parametrize(
    "bad",
    [
        "I can. Please provide me with the resume.",
        "I am a backend engineer at Google with fifteen years of Java.",
        "I am a good listener and I like to help people.",
        "I made the service faster by working closely with my team.",  # nothing of the bullet
    ],
)
def test_an_answer_the_guard_refuses_is_replaced_by_the_retrieved_pieces(index, bad) -> None:
    question = "How did you make the checkout service faster?"
    context = IndexNow(index)
    llm = RecordingLLM([bad])
    run = run_copilot([("speech", 1.0)], ScriptedSTT([(1.0, question)]), llm, context=context)

    [(first, _), (replacement, asked)] = run.sink.opened()
    assert run.sink.text(first) == bad and run.sink.status(first) == "replaced"
    assert asked == question and run.sink.status(replacement) == "complete"
    shown = run.sink.text(replacement)
    assert shown.startswith("At Northwind Bank, I led the rewrite of the payments checkout")
    [record] = run.engine.answers
    assert (record.text, record.llm_text, record.replacement_id) == (shown, bad, replacement)
    assert record.problems
    vocab = vocabulary([p.text for p in index.pieces()] + [question])
    assert answer_problems(shown, vocab, Grounding(record.relevant)) == []


def test_an_answer_the_guard_accepts_stays(index) -> None:
    context = IndexNow(index)
    llm = RecordingLLM([ANSWER])
    run = run_copilot(
        [("speech", 1.0)],
        ScriptedSTT([(1.0, "What did you do at Northwind?")]),
        llm,
        context=context,
    )
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid) == ANSWER and run.sink.status(aid) == "complete"
    assert run.engine.answers[0].replacement_id is None


def test_pieces_said_in_the_first_person(index) -> None:
    resume = [p for p in index.pieces() if p.source == "resume"]
    pieces = {p.text.partition(":")[0]: p for p in resume}
    first = min(p.chunk_id for p in resume)
    said = {
        heading: first_person(p, first_of_resume=p.chunk_id == first)
        for heading, p in pieces.items()
    }
    assert said["Education"] == (
        "My education: Master of Science in Computer Science, Technical University of Munich, 2017."
    )
    assert said["Dana Whitfield — Senior Backend Engineer"].startswith(
        "I'm Dana Whitfield — Senior Backend Engineer. Berlin, Germany."
    )
    northwind = [first_person(p) for p in resume if p.text.startswith("Northwind")]
    assert northwind[0].startswith("At Northwind Bank, I led the rewrite")
    assert all(not voice_problems(s) for s in [*said.values(), *northwind])
    # a job description's "You will ..." is never said as the candidate's
    job = Piece(99, "job_description", "About the role: You will lead three teams.", 0.0)
    assert fallback_answer([job], vocabulary([job.text])) == ""


def test_an_empty_answer_with_warm_documents_fails_and_does_not_wait_for_a_token(index) -> None:
    context = IndexNow(index)
    llm = EmptyLLM()
    run = run_copilot(
        [("speech", 1.0)],
        ScriptedSTT([(1.0, "What did you do at Northwind?")]),
        llm,
        context=context,
        warm=True,
    )
    [(aid, _)] = run.sink.opened()
    assert run.sink.status(aid) == "failed"
    assert context.questions == []  # the guard's search waited for a first token that never came


def test_the_warm_up_tells_every_piece_sent_though_the_prompt_holds_the_job_descriptions_head() -> (
    None
):
    """A client waits for the warm count to reach the pieces it sent (voxroom.copilot
    .warm_pieces); the prompt holds the job description's first ~500 characters only."""
    from tests.test_copilot_engine import FixedContext, Piece, _warmed_run

    job = [Piece(i, "job_description", f"Duty {i}: " + "x" * 200) for i in range(10, 16)]
    context = FixedContext(
        [Piece(1, "resume", "Mentored four engineers; agreed a prototype."), *job]
    )
    llm, told = _warmed_run(context)
    assert told == [{"pieces": 7, "documents_fit": True}] * 2
    asked = llm.requests[-1][-1]["content"]
    assert "Duty 10" in asked and "Duty 11" in asked and "Duty 12" not in asked


class AnswersByQuestion:
    """TEST DOUBLE: an LLM that answers the question its prompt ends with from a script, and
    records its prompts."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.prompts: list[str] = []

    async def stream(self, messages: list[dict]) -> AsyncIterator[str]:
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        asked = prompt.rpartition("Interviewer: ")[2]
        for word in self.answers[asked].split(" "):
            yield word + " "


def test_a_follow_up_sees_the_previous_question_and_the_answer_shown_to_it(index) -> None:
    from tests.test_copilot_engine import ScriptedSTT as Script

    asked = "What did you build at Tidewater Games?"
    follow_up = "How many players did it serve?"
    answered = "I built the matchmaking service in Go at Tidewater Games."

    class ByLength(Script):  # the first utterance is 1 s long, the follow-up 2 s
        async def decode(self, voiced_s: float) -> str:
            return asked if voiced_s < 1.5 else follow_up

    context = IndexNow(index)
    llm = AnswersByQuestion({asked: answered, follow_up: "I served 2 million daily players."})
    run = run_copilot(
        [("speech", 1.0), ("silence", 3.0), ("speech", 2.0)], ByLength([]), llm, context=context
    )

    first, second = run.engine.answers
    assert (first.question, first.text.strip(), second.question) == (asked, answered, follow_up)
    # the prompt holds the exchange before, then the follow-up
    assert llm.prompts[-1].endswith(
        f"\n\nInterviewer: {asked}\nMe: {answered}\nInterviewer: {follow_up}"
    )
    assert "\nMe: " not in llm.prompts[0]
    # and it was searched with them: its pieces are those of the exchange
    assert context.questions[-1].startswith(f"{asked} {answered}")
    assert "2 million daily players" in second.relevant[0].text


def test_an_answer_is_grounded_by_what_it_names_of_a_piece_beyond_the_question(index) -> None:
    skills = next(p for p in index.pieces() if p.text.startswith("Skills"))
    asked = "Which tools do you use to monitor your services?"
    assert grounded_in("I use Prometheus.", [skills], asked)  # a name of the piece: enough
    assert not grounded_in("I use good tools to monitor my services.", [skills], asked)
    tidewater = next(p for p in index.pieces() if "matchmaking" in p.text)
    said = "I built the matchmaking service in Go for 2 million daily players."
    assert grounded_in(said, [tidewater], "What did you build at Tidewater Games?")
    # the employer and title of the heading are not what was done there
    assert not grounded_in("I was a Backend Engineer at Tidewater Games.", [tidewater], "")
    # a follow-up must add to the exchange it follows
    assert not grounded_in(
        "I built the matchmaking service.",
        [tidewater],
        f"What did you build at Tidewater Games? {said} What was it like?",
    )


def test_questions_of_a_common_kind_are_answered_from_their_own_section_first(index) -> None:
    context = IndexNow(index)

    def nearest(question: str) -> str:
        return asyncio.run(relevant_pieces(context, question))[0].text

    assert nearest("Tell me about yourself.").startswith("Dana Whitfield — Senior Backend")
    opening, outline, _ = asyncio.run(relevant_pieces(context, "Walk me through your resume."))
    assert opening.text.startswith("Dana Whitfield")
    # the roles one after the other, which no single piece holds
    assert outline.text == (
        "Experience: Northwind Bank — Senior Backend Engineer (2021–present); "
        "Tidewater Games — Backend Engineer (2017–2021)."
    )
    assert first_person(outline).startswith("My experience: Northwind Bank")
    # why the candidate wants the job: their own nearest piece, then the job's
    first, second, _ = asyncio.run(relevant_pieces(context, "Why do you want to work here?"))
    assert (first.source, second.source) == ("resume", "job_description")
    assert grounding_pieces("What is your biggest weakness?") == 1
    assert grounding_pieces("Why do you want to work here?") == 1
    assert grounding_pieces("Where do you see yourself in five years?") == 1
    assert grounding_pieces("How did you make the checkout service faster?") == 3


def test_the_resumes_opening_and_summary_ground_only_an_overview(index) -> None:
    every = index.pieces()
    general = general_pieces(every, "What experience do you have with Kubernetes?")
    texts = [p.text for p in every if p.chunk_id in general]
    assert [t.partition(":")[0] for t in texts] == [
        "Dana Whitfield — Senior Backend Engineer",
        "Summary",
    ]
    assert general_pieces(every, "Tell me about yourself.") == frozenset()
    # "eight years of backend development in Go and Python" is the opening's, not an answer
    asked = "What experience do you have with Kubernetes?"
    answer = "I have eight years of backend development in Go and Python."
    vocab = vocabulary([p.text for p in every] + [asked])
    pieces = [p for p in every if p.chunk_id in general]
    assert answer_problems(answer, vocab, Grounding(pieces, asked)) == []
    assert answer_problems(answer, vocab, Grounding(pieces, asked, general=general)) == [
        "not grounded in the retrieved pieces"
    ]


@pytest.fixture(scope="module")
def teacher_index():
    yield from documents_index(DATA / "teacher")


@pytest.mark.parametrize(
    ("question", "heading"),
    [
        # the kind's own section, though a role's bullet shares a word with the question
        ("What is your biggest weakness?", "Professional development"),
        ("Where did you train as a teacher?", "Education"),
        ("What languages do you speak?", "Languages"),
        ("What do you know about our school?", "About us"),
    ],
)
def test_a_question_of_a_common_kind_finds_its_section_by_its_heading(
    teacher_index, question, heading
) -> None:
    [first, *_] = asyncio.run(relevant_pieces(IndexNow(teacher_index), question))
    assert first.text.startswith(f"{heading}:"), first.text


def test_words_of_a_kind_said_of_someone_else_do_not_make_the_question_that_kind(
    teacher_index,
) -> None:
    context = IndexNow(teacher_index)
    # students who struggle are not the candidate's weakness; "our school" is the employer
    pieces = asyncio.run(relevant_pieces(context, "What do you do for students who struggle?"))
    assert not any(p.text.startswith("Professional development") for p in pieces)
    assert any("maths clinic" in p.text for p in pieces)
    first, second, _ = asyncio.run(
        relevant_pieces(context, "Why do you want to work at our school?")
    )
    assert first.source == "resume" and not first.text.startswith("Education")
    assert second.text.startswith("About us:")
    assert grounding_pieces("What do you do for students who struggle?") == 3
    # a team's size is a kind of its own: the candidate's department, not the job's
    [team, *_] = asyncio.run(relevant_pieces(context, "How big is your current team?"))
    assert "department of seven" in team.text


def test_the_outcome_asked_after_a_story_is_a_follow_up(teacher_index) -> None:
    assert is_follow_up("What was the outcome?") and is_follow_up("What happened in the end?")
    # a "that" opening a clause about a noun refers to nothing before
    assert not is_follow_up("Tell me about a campaign that created pipeline.")
    assert not is_follow_up("Tell me about a time that you failed.")
    assert is_follow_up("Was that the project that failed?")
    [piece, *_] = asyncio.run(
        relevant_pieces(
            IndexNow(teacher_index),
            "What was the outcome?",
            "Tell me about a time you disagreed with a senior colleague.",
        )
    )
    assert "kept setting" in piece.text


ROLE = Piece(20, "job_description", "The role: Mentor engineers and run design reviews.", 0.0)
OWN = Piece(
    21, "job_description", "The role: Own the architecture of the settlement services.", 0.0
)
PAY = Piece(22, "job_description", "Berlin · Salary €95,000–€115,000 plus equity", 0.0)
SKILLS = Piece(3, "resume", "Skills: Go, Python, PostgreSQL.", 0.0)


@pytest.mark.parametrize(
    ("question", "pieces", "said"),
    [
        (
            "Do you have any questions for us?",
            [ROLE, OWN],
            "I'd like to ask about this part of the role: Mentor engineers and run design "
            "reviews. I'd also like to ask about: Own the architecture of the settlement "
            "services.",
        ),
        (
            "Where do you see yourself in five years?",
            [OWN, ROLE],
            "In a few years I'd like to be doing what this role asks: Own the architecture of "
            "the settlement services. I would also like to: Mentor engineers and run design "
            "reviews.",
        ),
        # the pay answers alone: the requirements after it are not the candidate's figure
        (
            "What are your salary expectations?",
            [PAY, ROLE, SKILLS],
            "I'd expect what the job description offers: Berlin · Salary €95,000–€115,000 plus "
            "equity.",
        ),
        # "our team" is no question about the employer: the job's words as read there
        (
            "How would you fit into our team?",
            [ROLE, OWN],
            "I read in the job description: Mentor engineers and run design reviews. I also "
            "read: Own the architecture of the settlement services.",
        ),
        # another kind: the job's words are what the candidate read there
        (
            "Which tools do you use?",
            [SKILLS, ROLE, OWN],
            "My skills: Go, Python, PostgreSQL. I read in the job description: Mentor "
            "engineers and run design reviews. I also read: Own the architecture of the "
            "settlement services.",
        ),
    ],
)
def test_an_answer_made_of_the_pieces_brings_in_the_job_as_the_question_asks(
    question: str, pieces: list[Piece], said: str
) -> None:
    vocab = vocabulary([p.text for p in pieces] + [question])
    answer = fallback_answer(pieces, vocab, max_words=60, job_lead=job_lead(question))
    assert answer == said
    assert voice_problems(answer) == []


def test_another_kinds_section_grounds_no_answer_to_a_question_of_this_kind(teacher_index) -> None:
    every = teacher_index.pieces()
    asked = "How have you improved exam results?"
    others = other_kinds_sections(every, asked)
    headings = {p.text.partition(":")[0] for p in every if p.chunk_id in others}
    assert headings == {"Education", "Professional development", "Languages", "About us"}
    own = other_kinds_sections(every, "What is your biggest weakness?")
    assert not any(
        p.text.startswith("Professional development") for p in every if p.chunk_id in own
    )
    # the small model's echo of the weakness piece, asked about exam results
    answer = "I used to take on every extra duty; I now agree my commitments each term."
    nearest = asyncio.run(relevant_pieces(IndexNow(teacher_index), asked))
    pieces = nearest[:2] + [p for p in every if p.text.startswith("Professional development")]
    vocab = vocabulary([p.text for p in every] + [asked])
    assert answer_problems(answer, vocab, Grounding(pieces, asked)) == []
    assert answer_problems(answer, vocab, Grounding(pieces, asked, general=others)) == [
        "not grounded in the retrieved pieces"
    ]


TEAM = Piece(
    4,
    "resume",
    "Ardcarrig Dairies — Financial Controller (2021–present): Lead a "
    "finance team of five across two sites.",
    0.0,
)
EMPLOYER = Piece(30, "job_description", "About us: We employ 420 people at two sites.", 0.0)


def test_a_figure_of_the_documents_that_no_retrieved_piece_holds_is_refused() -> None:
    asked = "How many people report to you at the moment?"
    vocab = vocabulary([TEAM.text, EMPLOYER.text, asked])
    grounding = Grounding([TEAM], asked, nearest=1)
    # true of the employer, said of the candidate's team; both figures are in the documents
    assert answer_problems("I have 420 employees at two sites.", vocab, grounding) == [
        "420 from elsewhere"
    ]
    assert answer_problems("I lead a finance team of five at two sites.", vocab, grounding) == []


NURSE_PAY = Piece(
    40,
    "job_description",
    "Charge Nurse (Band 6) — Pennine Heart Centre: Manchester · Full-time, 37.5 hours a week · "
    "Salary £37,338–£44,962 (Band 6)",
    0.0,
)


@pytest.mark.parametrize(
    ("question", "least"),
    [
        ("What are your salary expectations?", PAY_FIGURE),
        ("What kind of package are you looking for?", PAY_FIGURE),
        ("How long did that take?", 0.0),
        ("How large a budget have you managed?", 0.0),
        ("Tell me about yourself.", None),
        ("Which software do you use in your lessons?", None),
    ],
)
def test_a_question_may_ask_for_a_figure(question: str, least: float | None) -> None:
    assert figure_asked(question) == least


def test_an_answer_about_pay_names_the_pay() -> None:
    asked = "What are your salary expectations?"
    vocab = vocabulary([NURSE_PAY.text, TEAM.text, asked])
    grounding = Grounding([NURSE_PAY], asked, nearest=1, figure_from=figure_asked(asked))
    # the hours are a figure of the piece, not the pay
    assert answer_problems("I'd expect full-time, 37.5 hours a week.", vocab, grounding) == [
        "names none of the figures asked for"
    ]
    assert answer_problems("I'd expect £37,338 to £44,962 at Band 6.", vocab, grounding) == []
    # a piece with no figure of that size asks for none
    no_pay = Grounding([TEAM], asked, nearest=1, figure_from=PAY_FIGURE)
    assert answer_problems("I lead a finance team of five.", vocab, no_pay) == []


def test_a_follow_up_asking_again_for_a_figure_its_exchange_named_is_answered_by_it() -> None:
    players = Piece(
        7,
        "resume",
        "Tidewater Games — Backend Engineer (2017–2021): Built the matchmaking service in Go "
        "for 2 million daily players.",
        0.0,
    )
    teams = Piece(
        8, "resume", "Northwind Bank — Staff Engineer (2021–present): Led three teams.", 0.0
    )
    asked = "How many players did it serve?"
    exchange = "What did you build at Tidewater Games? A service for 2 million daily players."
    again = Grounding([players, teams], f"{exchange} {asked}", figure_from=figure_asked(asked))
    vocab = vocabulary([players.text, teams.text, exchange, asked])
    answer = "I built the matchmaking service for 2 million daily players."
    assert answer_problems(answer, vocab, again) == []


def test_a_piece_that_does_not_fit_whole_is_cut_when_enough_room_is_left() -> None:
    school = Piece(
        50,
        "job_description",
        "About us: Harrowgate Park School is a comprehensive "
        "school for 1,200 students aged 11 to 18, rated Good in 2023.",
        0.0,
    )
    club = Piece(
        6,
        "resume",
        "Castleford Academy — Mathematics Teacher (2016–2020): Started "
        "the school's first coding club, in Scratch and Python, for Year 8.",
        0.0,
    )
    asked = "Why do you want to work at our school?"
    vocab = vocabulary([school.text, club.text, asked])
    lead = job_lead(asked)
    answer = fallback_answer([club, school], vocab, max_words=30, job_lead=lead)
    assert answer == (
        "At Castleford Academy, I started the school's first coding club, in Scratch and "
        "Python, for Year 8. What draws me to this role: Harrowgate Park School is a "
        "comprehensive school…"
    )
    # too little room left for a part of the next piece that says anything: none of it
    assert fallback_answer([club, school], vocab, max_words=24, job_lead=lead) == (
        "At Castleford Academy, I started the school's first coding club, in Scratch and "
        "Python, for Year 8."
    )


@pytest.fixture(scope="module")
def warehouse_index():
    yield from documents_index(DATA / "warehouse")


def test_a_resume_with_headings_of_its_own_is_said_in_the_first_person(warehouse_index) -> None:
    said = {first_person(p) for p in warehouse_index.pieces()}
    # the title before the employer ("Team Leader, Veldhaven Logistics (2014–2020)")
    assert any(s.startswith("At Veldhaven Logistics, I trained 40 new starters") for s in said)
    assert any(s.startswith("At Kestrel Fulfilment, I re-slotted") for s in said)
    # a heading that says what the candidate is doing
    assert "I'm working on: Delegating: I used to cover every absent team leader myself; " in (
        " ".join(said)
    )
    assert all(voice_problems(s) == [] for s in said if not s.startswith("I read"))
    training = Piece(9, "resume", "Training: Basic life support (2024).", 0.0)
    assert first_person(training) == "My training: Basic life support (2024)."  # a noun


def test_the_jobs_opening_line_and_other_kinds_sections_rank_below(warehouse_index) -> None:
    context = IndexNow(warehouse_index)
    _, job, *_ = asyncio.run(relevant_pieces(context, "Why are you interested in Brightwater?"))
    assert job.text.startswith("Who we are:")  # not the title, place and pay
    [pay, *_] = asyncio.run(relevant_pieces(context, "What salary are you looking for?"))
    assert "€68,000–€76,000" in pay.text
    team = asyncio.run(relevant_pieces(context, "How big is the team you run now?"))
    assert not any(p.text.startswith("Working on") for p in team)
    assert any("85 pickers" in p.text for p in team)
    assert job_lead("What questions do you have for me?") == job_lead(
        "Do you have any questions for us?"
    )
