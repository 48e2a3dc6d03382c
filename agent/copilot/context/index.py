"""The candidate's resume and the job description, as a small local search index for the copilot.

Documents (plain text, markdown or PDF; size-limited) are cut into chunks of a few lines, each
under the heading it belongs to, embedded with all-MiniLM-L6-v2 (agent.adapters.embedder) and
stored in SQLite with the `sqlite-vec` extension. A question is embedded once per normalized
text (an LRU cache: the speculative and the final question are usually the same words) and
the nearest few chunks go into the answer's prompt.

All model and database work runs on one worker thread (`InferencePool`), so the event loop
never blocks and the SQLite connection is used by one thread at a time.
"""

from __future__ import annotations

import io
import re
from collections import OrderedDict
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from agent.inference_pool import InferencePool
from state_machine.similarity import normalize_words

MAX_DOCUMENT_BYTES = 200_000  # one upload or file, as received (PDF or text)
MAX_TEXT_CHARS = 60_000  # text kept from one document (a long resume is ~15 000)
MAX_PDF_PAGES = 20
CHUNK_CHARS = 400
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*\S)\s*$")
_LIST_ITEM = re.compile(r"^(?:[-*+•]|\d{1,3}[.)])\s+")


class ContextError(ValueError):
    """A document was refused: too large, not text or PDF, unreadable."""


@dataclass(frozen=True)
class Piece:
    chunk_id: int
    source: str  # the document's name, e.g. "resume"
    text: str
    distance: float  # L2 between unit vectors: 0 same meaning, ~1.4 unrelated


# ---- documents ---------------------------------------------------------------------------


def document_text(data: bytes) -> str:
    """The text of an uploaded document: PDF (by its signature) or UTF-8 text/markdown."""
    if len(data) > MAX_DOCUMENT_BYTES:
        raise ContextError(f"document is {len(data)} bytes; the limit is {MAX_DOCUMENT_BYTES}")
    if data.lstrip()[:5] == b"%PDF-":
        return pdf_text(data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ContextError("document is neither UTF-8 text nor PDF") from e
    return _clean(text)


def pdf_text(data: bytes) -> str:
    """The text of a PDF's first pages. pypdf is pure Python (no native parser to exploit)
    and bounds its own stream decompression; the input size, page count and text length are
    bounded here."""
    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError
    except ImportError as e:
        raise ContextError("PDF documents need pypdf (pip install pypdf)") from e
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            raise ContextError("the PDF is encrypted")
        parts: list[str] = []
        size = 0
        for page in reader.pages[:MAX_PDF_PAGES]:
            text = page.extract_text() or ""
            parts.append(text)
            size += len(text)
            if size >= MAX_TEXT_CHARS:
                break
    except ContextError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, RecursionError, OSError) as e:
        raise ContextError(f"cannot read the PDF: {type(e).__name__}: {e}") from e
    return _clean("\n".join(parts))


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\x00", "")
    return text[:MAX_TEXT_CHARS]


def chunk_document(text: str, *, max_chars: int = CHUNK_CHARS) -> list[str]:
    """One chunk per paragraph or list item (longer ones cut to `max_chars`), prefixed with
    its markdown heading ("Experience: ..."), so that each says one thing and what it is
    about. Wrapped lines of a paragraph or item are joined."""
    chunks: list[str] = []
    heading = ""
    lines: list[str] = []

    def flush() -> None:
        if lines:
            for part in _split_long(" ".join(lines), max_chars):
                chunks.append(f"{heading}: {part}" if heading else part)
            lines.clear()

    for raw in text.split("\n"):
        line = " ".join(raw.split())
        if m := _HEADING.match(raw):
            flush()
            heading = m.group(1).strip("# ")
        elif not line:
            flush()
        else:
            if _LIST_ITEM.match(line):
                flush()
                line = _LIST_ITEM.sub("", line)
            lines.append(line)
    flush()
    return chunks


def _split_long(line: str, max_chars: int) -> list[str]:
    """A line longer than `max_chars` in word-aligned parts, preferably ending at a sentence
    end once past half the size."""
    if len(line) <= max_chars:
        return [line]
    parts: list[str] = []
    current = ""
    for word in line.split(" "):
        if current and len(current) + 1 + len(word) > max_chars:
            parts.append(current)
            current = ""
        current = f"{current} {word}" if current else word
        if current.endswith((".", "!", "?", ";")) and len(current) > max_chars // 2:
            parts.append(current)
            current = ""
    if current:
        parts.append(current)
    return parts


def normalize_question(text: str) -> str:
    """The cache key of a question: lower case words, no punctuation."""
    return " ".join(normalize_words(text))


# ---- the index ---------------------------------------------------------------------------


def _sqlite() -> ModuleType:
    """A sqlite3 module that can load extensions: the standard one where Python was built
    with that (many builds, pyenv's and python.org's macOS one among them, are not), else
    sqlean-py, a drop-in build of the same module that can."""
    import sqlite3

    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        import sqlean
    except ImportError as e:
        raise ContextError(
            "this Python's sqlite3 cannot load sqlite-vec; pip install sqlean-py"
        ) from e
    return sqlean


class ContextIndex:
    """Chunks of the session's documents with their embeddings, searched by a question.

    `embedder` has `embed(list[str]) -> (n, dims) unit float32` (agent.adapters.embedder).
    The sync methods block (the bench and tests call them directly); the async ones run them on
    the index's worker thread.
    """

    def __init__(self, embedder: Any, *, dims: int = 384, cache_size: int = 256) -> None:
        import sqlite_vec

        self._embedder = embedder
        self._dims = dims
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self.cache_hits = 0
        self.cache_misses = 0
        self._pool = InferencePool("context")
        db = _sqlite().connect(":memory:", check_same_thread=False)
        db.enable_load_extension(True)
        sqlite_vec.load(db)
        db.enable_load_extension(False)
        db.execute(
            "create table chunks (id integer primary key, source text not null, text text not null)"
        )
        db.execute(f"create virtual table chunk_vectors using vec0(embedding float[{dims}])")
        self._db = db

    # ---- sync core ----------------------------------------------------------------------

    def add_document(self, source: str, text: str) -> int:
        """Index `text` as document `source`, replacing an earlier one of that name; returns
        the number of chunks."""
        chunks = chunk_document(text)
        vectors = self._embedder.embed(chunks) if chunks else np.zeros((0, self._dims))
        with self._db:
            old = [
                row[0]
                for row in self._db.execute("select id from chunks where source = ?", (source,))
            ]
            for chunk_id in old:
                self._db.execute("delete from chunk_vectors where rowid = ?", (chunk_id,))
            self._db.execute("delete from chunks where source = ?", (source,))
            for chunk, vector in zip(chunks, vectors, strict=True):
                cur = self._db.execute(
                    "insert into chunks (source, text) values (?, ?)", (source, chunk)
                )
                self._db.execute(
                    "insert into chunk_vectors (rowid, embedding) values (?, ?)",
                    (cur.lastrowid, np.asarray(vector, np.float32).tobytes()),
                )
        return len(chunks)

    def search(self, question: str, k: int = 3) -> list[Piece]:
        """The `k` chunks nearest to `question`, nearest first."""
        if not normalize_question(question):
            return []
        vector = self.question_vector(question)
        rows = self._db.execute(
            "select v.rowid, v.distance, c.source, c.text from chunk_vectors v "
            "join chunks c on c.id = v.rowid where v.embedding match ? and k = ? "
            "order by v.distance",
            (vector.tobytes(), k),
        ).fetchall()
        return [Piece(int(r[0]), r[2], r[3], float(r[1])) for r in rows]

    def pieces(self) -> list[Piece]:
        """Every chunk, in document order."""
        rows = self._db.execute("select id, source, text from chunks order by id")
        return [Piece(int(i), source, text, 0.0) for i, source, text in rows]

    def question_vector(self, question: str) -> np.ndarray:
        key = normalize_question(question)
        vector = self._cache.get(key)
        if vector is not None:
            self._cache.move_to_end(key)
            self.cache_hits += 1
            return vector
        self.cache_misses += 1
        vector = np.asarray(self._embedder.embed([key])[0], np.float32)
        self._cache[key] = vector
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return vector

    def sources(self) -> dict[str, int]:
        """Chunks per document."""
        rows = self._db.execute("select source, count(*) from chunks group by source")
        return {source: int(n) for source, n in rows}

    # ---- async -------------------------------------------------------------------------

    async def add_document_async(self, source: str, text: str) -> int:
        return await self._pool.run(lambda: self.add_document(source, text))

    async def search_async(self, question: str, k: int = 3) -> list[Piece]:
        return await self._pool.run(lambda: self.search(question, k))

    async def pieces_async(self) -> list[Piece]:
        return await self._pool.run(self.pieces)

    def close(self) -> None:
        self._db.close()
