"""The copilot's context: document parsing and chunking, the bundled MiniLM embedder in numpy,
and the sqlite-vec index with its question cache. The model and the extension are real."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.copilot.context.index import (
    MAX_DOCUMENT_BYTES,
    ContextError,
    ContextIndex,
    chunk_document,
    document_text,
    normalize_question,
)

DATA = Path(__file__).resolve().parent.parent / "bench" / "copilot_data"


@pytest.fixture(scope="module")
def embedder():
    from agent.adapters.embedder import MiniLMEmbedder

    model = MiniLMEmbedder()
    model.load()
    return model


@pytest.fixture
def index(embedder):
    ix = ContextIndex(embedder)
    ix.add_document("resume", (DATA / "resume.md").read_text(encoding="utf-8"))
    ix.add_document("job", (DATA / "job_description.md").read_text(encoding="utf-8"))
    yield ix
    ix.close()


# ---- documents ----------------------------------------------------------------------------


def test_chunks_are_paragraphs_and_list_items_under_their_heading() -> None:
    text = (
        "# Jo Doe\n\nBerlin.\n\n## Experience\n\n- Led the payments\n  rewrite.\n"
        "- Mentored four engineers.\n\n1. First\n2) Second\n"
    )
    assert chunk_document(text) == [
        "Jo Doe: Berlin.",
        "Experience: Led the payments rewrite.",
        "Experience: Mentored four engineers.",
        "Experience: First",
        "Experience: Second",
    ]


def test_long_paragraphs_are_cut_at_words_within_the_limit() -> None:
    sentence = "This sentence has exactly eight words in it. "
    chunks = chunk_document(sentence * 40, max_chars=200)
    assert len(chunks) > 5
    assert all(len(c) <= 200 for c in chunks)
    assert " ".join(chunks).split() == (sentence * 40).split()


def test_text_documents_are_utf8_and_size_limited() -> None:
    assert document_text("Kubernetes — Go\r\n".encode()) == "Kubernetes — Go\n"
    with pytest.raises(ContextError, match="limit"):
        document_text(b"x" * (MAX_DOCUMENT_BYTES + 1))
    with pytest.raises(ContextError, match="neither"):
        document_text(b"\xff\xfe\x00binary")


def _pdf(text: str) -> bytes:
    """A minimal one-page PDF showing `text` in Helvetica, with a correct xref table."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def test_pdf_documents_give_their_text() -> None:
    assert "Led the Kubernetes migration" in document_text(_pdf("Led the Kubernetes migration"))


def test_a_broken_pdf_is_refused_not_raised_through() -> None:
    with pytest.raises(ContextError, match="PDF"):
        document_text(b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >> endobj\n%%EOF")


# ---- the embedder and the index ----------------------------------------------------------


@pytest.mark.slow
def test_the_numpy_embedder_matches_sentence_transformers(embedder) -> None:
    # The similarities sentence-transformers' documentation prints for all-MiniLM-L6-v2.
    v = embedder.embed(
        ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    )
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    sims = v @ v.T
    assert sims[0, 1] == pytest.approx(0.6660, abs=5e-4)
    assert sims[0, 2] == pytest.approx(0.1046, abs=5e-4)
    assert sims[1, 2] == pytest.approx(0.1411, abs=5e-4)
    # Batching and padding do not change a text's embedding.
    alone = embedder.embed(["He drove to the stadium."])
    assert np.allclose(alone[0], v[2], atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("question", "fact"),
    [
        ("Tell me about a time you disagreed with your manager.", "Disagreed with my manager"),
        ("What languages do you speak?", "German (native)"),
        ("Where did you study?", "Technical University of Munich"),
        ("Have you ever had an outage in production?", "twelve-hour outage"),
    ],
)
def test_a_question_about_a_resume_fact_retrieves_that_fact_first(
    index: ContextIndex, question: str, fact: str
) -> None:
    pieces = index.search(question, k=3)
    assert len(pieces) == 3
    assert fact in pieces[0].text, [p.text for p in pieces]
    assert pieces[0].source == "resume"
    assert [p.distance for p in pieces] == sorted(p.distance for p in pieces)


@pytest.mark.slow
def test_every_piece_comes_in_document_order(index: ContextIndex) -> None:
    pieces = index.pieces()
    assert [p.chunk_id for p in pieces] == sorted(p.chunk_id for p in pieces)
    assert len(pieces) == sum(index.sources().values())
    assert pieces[0].source == "resume" and pieces[-1].source == "job"


@pytest.mark.slow
def test_a_new_version_of_a_document_replaces_the_old(index: ContextIndex) -> None:
    before = index.sources()
    assert before["resume"] > 5 and before["job"] > 3
    index.add_document("resume", "## Skills\n\nCOBOL and Fortran on mainframes.\n")
    assert index.sources() == {"resume": 1, "job": before["job"]}
    [top] = index.search("Which programming languages do you know?", k=1)
    assert "COBOL" in top.text


@pytest.mark.slow
async def test_question_embeddings_are_cached_by_normalized_text(embedder) -> None:
    ix = ContextIndex(embedder, cache_size=2)
    await ix.add_document_async("resume", (DATA / "resume.md").read_text(encoding="utf-8"))
    first = await ix.search_async("Where did you study?")
    again = await ix.search_async("  where did you STUDY ")
    assert first == again
    assert (ix.cache_misses, ix.cache_hits) == (1, 1)
    assert normalize_question("  where did you STUDY ") == "where did you study"
    await ix.search_async("What languages do you speak?")
    await ix.search_async("Have you mentored anyone?")  # evicts the least recently used
    await ix.search_async("Where did you study?")
    assert (ix.cache_misses, ix.cache_hits) == (4, 1)
    assert await ix.search_async("?!") == []
    ix.close()
